package cmdbackend

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"

	"github.com/prometheus/procfs"
)

// errServerGone is foreignListener's answer when the server's own
// process has exited (reaped, or a zombie not reaped yet): whatever
// answered its check is not it. waitReady polls on and reports the exit
// once the process's watcher has seen it; before, a server that exited
// while another answered on its port could be taken as ready in the
// moment between its exit and the watcher's (a test saw it in CI).
var errServerGone = errors.New("the model server's process has exited")

// gone reports whether err, from reading a process's /proc entry, says
// the process no longer exists.
func gone(err error) bool { return errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) }

// tcpListen is the st value of a listening socket in /proc/net/tcp{,6}.
const tcpListen = 0x0A

// foreignListener returns an error when the loopback port that answered the
// server's check endpoint is held only by processes that are outside the
// server's process group and older than the server: another server was
// listening there before this one started, so its answer says nothing about
// this model. It returns errServerGone when the server's own process has
// exited. It returns nil when a process of the group holds the port, when
// every holder is newer than the server (a helper the server started, such as
// docker-proxy, runs in another group), or when it cannot tell: host is not a
// loopback address, /proc or the holders' file descriptors are unreadable.
func foreignListener(pgid int, host string, port int) error {
	ip := loopbackIP(host)
	if ip == nil || port <= 0 {
		return nil
	}
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return nil
	}
	inodes, err := diagListenInodes(ip, port)
	if err != nil {
		inodes = listenInodes(fs, ip, port)
	}
	if len(inodes) == 0 {
		return nil
	}
	leader, err := fs.Proc(pgid)
	if gone(err) {
		return errServerGone
	}
	if err != nil {
		return nil
	}
	if holds(leader, inodes) {
		// The server itself listens: the common case, without reading
		// every process's status.
		return nil
	}
	ls, err := leader.Stat()
	if gone(err) || err == nil && ls.State == "Z" {
		return errServerGone // reaped between the two reads, or not yet reaped
	}
	if err != nil {
		return nil
	}
	procs, err := fs.AllProcs()
	if err != nil {
		return nil
	}
	// The rest of the group first (a server run by a shell), then the
	// older processes.
	var older []procfs.Proc
	for _, pr := range procs {
		st, err := pr.Stat()
		if err != nil {
			continue
		}
		switch {
		case st.PGRP == pgid:
			if holds(pr, inodes) {
				return nil
			}
		case st.Starttime < ls.Starttime:
			older = append(older, pr)
		}
	}
	for _, pr := range older {
		if holds(pr, inodes) {
			name, _ := pr.Comm()
			return fmt.Errorf("port %d is held by pid %d (%s), which was listening before the model server started: another server answers there", port, pr.PID, name)
		}
	}
	return nil
}

// loopbackIP returns the address a loopback host names (127.0.0.1 for
// "localhost"), or nil for any other host.
func loopbackIP(host string) net.IP {
	if host == "localhost" {
		return net.IPv4(127, 0, 0, 1)
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return nil
	}
	return ip
}

// acceptsFor reports whether a listener bound to local accepts
// connections to the loopback address ip: local is ip itself, another
// loopback address of its family, or every address.
func acceptsFor(local, ip net.IP) bool {
	return local.IsUnspecified() || local.Equal(ip) || local.IsLoopback() && (local.To4() == nil) == (ip.To4() == nil)
}

// listenInodes returns the socket inodes of the TCP listeners that accept
// connections to ip:port (acceptsFor), read from /proc/net/tcp{,6}: the
// fallback where sock_diag cannot be asked (diagListenInodes).
func listenInodes(fs procfs.FS, ip net.IP, port int) map[string]bool {
	inodes := map[string]bool{}
	// procfs deprecates reading /proc/net/tcp{,6} for netlink's sock_diag,
	// which scales better with many sockets; one read per readiness check
	// is cheap, and this keeps the check free of a netlink dependency.
	//lint:ignore SA1019 see above
	for _, read := range []func() (procfs.NetTCP, error){fs.NetTCP, fs.NetTCP6} {
		lines, err := read()
		if err != nil {
			continue
		}
		for _, l := range lines {
			if l.St != tcpListen || l.LocalPort != uint64(port) {
				continue
			}
			if acceptsFor(l.LocalAddr, ip) {
				inodes["socket:["+strconv.FormatUint(l.Inode, 10)+"]"] = true
			}
		}
	}
	return inodes
}

// holds reports whether pr has one of the sockets open; false when its file
// descriptors cannot be read (another user's process, or it has exited).
func holds(pr procfs.Proc, sockets map[string]bool) bool {
	targets, err := pr.FileDescriptorTargets()
	if err != nil {
		return false
	}
	for _, t := range targets {
		if sockets[t] {
			return true
		}
	}
	return false
}
