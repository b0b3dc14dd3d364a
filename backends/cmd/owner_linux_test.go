package cmdbackend

import (
	"errors"
	"maps"
	"net"
	"os"
	"os/exec"
	"testing"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// BenchmarkForeignListener is the ownership check a ready answer costs
// when the server itself listens (the common case): a loopback listener
// held by this process, checked as if it led the server's group.
//
//	go test ./backends/cmd -run '^$' -bench ForeignListener
func BenchmarkForeignListener(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	pgid := os.Getpid()
	for b.Loop() {
		if err := foreignListener(pgid, "127.0.0.1", port); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDiagListenInodes_SameAsProcNetTCP: the listeners sock_diag names
// for a port are those /proc/net/tcp{,6} lists, the test's own among
// them, on IPv4 and on a dual-stack wildcard.
func TestDiagListenInodes_SameAsProcNetTCP(t *testing.T) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		t.Skip("no /proc:", err)
	}
	for _, addr := range []string{"127.0.0.1:0", "[::]:0"} {
		t.Run(addr, func(t *testing.T) {
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				t.Skip(err)
			}
			defer ln.Close()
			port := ln.Addr().(*net.TCPAddr).Port
			ip := net.IPv4(127, 0, 0, 1)
			got, err := diagListenInodes(ip, port)
			if err != nil {
				t.Skip("no sock_diag here:", err)
			}
			want := listenInodes(fs, ip, port)
			if len(want) != 1 || !maps.Equal(got, want) {
				t.Fatalf("sock_diag: %v, /proc/net/tcp: %v, want the one listener", got, want)
			}
			self, err := fs.Self()
			if err != nil {
				t.Fatal(err)
			}
			if !holds(self, got) {
				t.Errorf("the listener %v is not this process's", got)
			}
		})
	}
}

// TestForeignListener_ServerGone: when the server's own process has
// exited — reaped, or a zombie its watcher has not reaped yet — the
// listener that answered its check cannot be its: errServerGone, whatever
// holds the port (here this test process, older than the server). Before,
// the check could not tell and let the answer stand, and a server that
// exited while starting was taken as ready in the moment before its
// watcher saw the exit (TestBackend_Readiness_ExitedServerFailsWhateverAnswers
// failed that way in CI).
func TestForeignListener_ServerGone(t *testing.T) {
	if _, err := procfs.NewDefaultFS(); err != nil {
		t.Skip("no /proc:", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port

	zombie := exec.Command("true")
	if err := zombie.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait for its exit without reaping it (WNOWAIT): a zombie.
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, zombie.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
	if err := foreignListener(zombie.Process.Pid, "127.0.0.1", port); !errors.Is(err, errServerGone) {
		t.Errorf("a zombie server: %v, want errServerGone", err)
	}
	_ = zombie.Wait() // reaped: its /proc entry is gone
	if err := foreignListener(zombie.Process.Pid, "127.0.0.1", port); !errors.Is(err, errServerGone) {
		t.Errorf("a reaped server: %v, want errServerGone", err)
	}
}
