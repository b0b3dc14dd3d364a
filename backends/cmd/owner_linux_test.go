package cmdbackend

import (
	"maps"
	"net"
	"os"
	"testing"

	"github.com/prometheus/procfs"
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
