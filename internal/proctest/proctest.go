// Package proctest holds test helpers for real processes that tests of
// several packages share (host/backend's hung plugins, backends/sim's hung
// servers). Linux only: it reads /proc.
package proctest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
