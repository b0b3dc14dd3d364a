package cmdbackend

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// The kernel's sock_diag ABI (linux/inet_diag.h): a request
// (inet_diag_req_v2) and, per socket, an answer (inet_diag_msg), each
// after a netlink header.
const (
	diagReqLen   = 56 // inet_diag_req_v2: family, protocol, ext, pad, states, inet_diag_sockid (48)
	diagMsgLen   = 72 // inet_diag_msg, up to and with idiag_inode
	diagSport    = 4  // offset of id.idiag_sport (big endian) in inet_diag_msg
	diagSrc      = 8  // offset of id.idiag_src (16 bytes)
	diagInode    = 68 // offset of idiag_inode
	reqStatesOff = 4  // offset of idiag_states in the request
	reqSportOff  = 8  // offset of id.idiag_sport in the request
)

// diagListenInodes returns the inodes of the TCP listeners on port that
// accept connections to ip (acceptsFor), asked of the kernel through
// NETLINK_SOCK_DIAG for listeners only, filtered by port in the kernel:
// it walks the listening table alone, where reading /proc/net/tcp walks
// every socket of the machine (14 ms on the development machine, most
// of a cold start's overhead; BenchmarkForeignListener). Inodes are
// spelled as /proc/PID/fd links name sockets ("socket:[123]"). Errors:
// the netlink socket cannot be opened or answers an error (a sandbox
// without sock_diag); the caller then reads /proc/net/tcp.
func diagListenInodes(ip net.IP, port int) (map[string]bool, error) {
	inodes := map[string]bool{}
	for _, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		if err := diagDump(family, port, func(local net.IP, inode uint32) {
			if acceptsFor(local, ip) {
				inodes["socket:["+strconv.FormatUint(uint64(inode), 10)+"]"] = true
			}
		}); err != nil {
			return nil, err
		}
	}
	return inodes, nil
}

// diagDump asks for family's TCP listeners on port and calls found with
// each one's local address and inode.
func diagDump(family uint8, port int, found func(local net.IP, inode uint32)) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return fmt.Errorf("sock_diag: %w", err)
	}
	defer unix.Close(fd)
	req := make([]byte, unix.NLMSG_HDRLEN+diagReqLen)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	ne.PutUint32(req[8:], 1) // sequence number
	body := req[unix.NLMSG_HDRLEN:]
	body[0], body[1] = family, unix.IPPROTO_TCP
	ne.PutUint32(body[reqStatesOff:], 1<<tcpListen)
	binary.BigEndian.PutUint16(body[reqSportOff:], uint16(port))
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("sock_diag: %w", err)
	}
	buf := make([]byte, 32<<10)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return fmt.Errorf("sock_diag: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return fmt.Errorf("sock_diag: %w", err)
		}
		for _, m := range msgs {
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return nil
			case unix.NLMSG_ERROR:
				if len(m.Data) >= 4 {
					if errno := int32(ne.Uint32(m.Data)); errno != 0 {
						return fmt.Errorf("sock_diag: %w", unix.Errno(-errno))
					}
				}
				return errors.New("sock_diag: error answer")
			case unix.SOCK_DIAG_BY_FAMILY:
				d := m.Data
				if len(d) < diagMsgLen || int(binary.BigEndian.Uint16(d[diagSport:])) != port {
					continue
				}
				local := d[diagSrc : diagSrc+16]
				if d[0] == unix.AF_INET {
					local = local[:4]
				}
				found(net.IP(bytes.Clone(local)), ne.Uint32(d[diagInode:]))
			}
		}
	}
}
