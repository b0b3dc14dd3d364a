package jobs

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// tmpfsDir mounts a small real filesystem (tmpfs, 4 MiB) for the test and
// unmounts it at the end; it skips where mounting is not allowed.
func tmpfsDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (needs root): %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
	return dir
}

// fill writes to path until the filesystem is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return
		}
	}
}

// A full disk under the jobs database (a real tmpfs, filled): a queued
// task's visible error says its change could not be saved and names the
// file; a submission's error names the file; once space is back, the
// change is written and the note goes.
func TestStore_FullDiskShowsOnTheWaitingTask(t *testing.T) {
	dir := tmpfsDir(t)
	ledger := newLedger(1)
	if _, err := ledger.AcquireDevices("someone-else", []int{0}); err != nil {
		t.Fatal(err)
	}
	r := newRunner(t, dir, ledger, nil) // its store's Close runs before the unmount
	path := filepath.Join(dir, "jobs.db")
	task, err := r.Submit(context.Background(), []byte("command: train\ngpus_per_node: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(dir, "filler")
	fill(t, filler)
	if _, err := r.Submit(context.Background(), []byte("command: train\n")); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("submit on a full disk: %v, want an error naming %s", err, path)
	}
	start(t, r)
	w := waitUntil(t, r, task.ID, "said its change was not saved", func(w *Task) bool {
		return strings.Contains(w.Error, "could not be saved")
	})
	if !strings.Contains(w.Error, path) || !strings.Contains(w.Error, "full") || !strings.Contains(w.Error, "PENDING_RESOURCES") {
		t.Fatalf("the waiting task's error %q: want it to name the change, the file and the full disk", w.Error)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	r.Wake()
	waitUntil(t, r, task.ID, "was saved once space came back", func(w *Task) bool {
		return w.State == StatePendingResources && strings.HasPrefix(w.Error, "waiting for")
	})
}
