// Package proctest holds test helpers for real processes, and files, that
// tests of several packages share (host/backend's hung plugins,
// backends/sim's hung servers, a model file whose read hangs, a log sink
// read while written). Linux only: it reads /proc.
package proctest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Stop sends SIGSTOP to pid and returns once every thread of it is
// stopped (AwaitStopped); at the end of t the process gets SIGCONT, so
// nothing a test stopped stays stopped. A failed kill fails t.
func Stop(t testing.TB, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %d: %v", pid, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	AwaitStopped(t, pid)
}

// AwaitStopped waits until every thread of pid is stopped (state T or t
// in /proc/PID/task/*/stat), failing t after 10 s: SIGSTOP is delivered
// asynchronously, and a thread still running could answer a call.
func AwaitStopped(t testing.TB, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
		stopped := len(tasks) > 0
		for _, f := range tasks {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			// pid (comm) state ...; comm may hold spaces and parentheses.
			if f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:])); len(f) == 0 || f[0] != "T" && f[0] != "t" {
				stopped = false
			}
		}
		if stopped {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d did not stop", pid)
		}
		time.Sleep(time.Millisecond)
	}
}

// StalledFile is the path of a file named name, in a directory of t's,
// whose open hangs as a stalled disk or network share's would: a FIFO no
// one writes. At the end of t a writer opens and closes it, so a read a
// test abandoned ends. Where FIFOs cannot be made, t is skipped.
func StalledFile(t testing.TB, name string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skip("no FIFOs here:", err)
	}
	t.Cleanup(func() {
		if w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
	})
	return path
}

// LockedBuffer is a log sink (an io.Writer for slog's handlers) that the
// goroutines of the code under test may write while the test reads it.
type LockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

// Write appends p; it never fails.
func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything written so far.
func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
