package main

import (
	"errors"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// `loadout jobs` against a server that accepts the connection and never
// answers (issue 27, "Hung, not dead"): it gives up after --timeout,
// prints one line saying so and exits non-zero.
func TestJobsCLI_HangingServerTimesOut(t *testing.T) {
	ln := silentListener(t)
	for _, args := range [][]string{{"list"}, {"get", "x-20260101-000000-abcd"}, {"logs", "x-20260101-000000-abcd"}} {
		cmd := exec.Command(loadoutBin, append([]string{"jobs", "--server", "http://" + ln.Addr().String(), "--token", "t", "--timeout", "300ms"}, args...)...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() == 0 {
			t.Fatalf("jobs %v: %v, want a non-zero exit\n%s", args, err, out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) != 1 || !strings.Contains(lines[0], "no answer within 300ms") {
			t.Fatalf("jobs %v printed %q, want one line saying no answer came", args, out)
		}
	}
}

// silentListener is a loopback listener that accepts connections and
// never answers on them (a server that hangs); its connections are closed
// when the test ends.
func silentListener(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-accepted
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln
}
