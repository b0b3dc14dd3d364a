package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/loadout-dev/loadout/internal/proctest"
)

// Two Loadouts given one --record-trace file (on two addresses, so the
// address does not refuse the second): the second is refused before it
// truncates what the first recorded, and may record there once the first
// has closed it. A file that is not a regular one (a FIFO) is not locked,
// and opening it to lock it does not block.
func TestRecordTrace_OneLoadoutAFile(t *testing.T) {
	var logged proctest.LockedBuffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	path := filepath.Join(t.TempDir(), "traffic.csv")

	first, err := openTraceRecorder(path, log)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.f.WriteString("0,small,10,5\n"); err != nil {
		t.Fatal(err)
	}
	recorded, err := os.ReadFile(path)
	if err != nil || !strings.HasSuffix(string(recorded), "0,small,10,5\n") {
		t.Fatalf("the first recorder's file: %q, %v", recorded, err)
	}
	if _, err := openTraceRecorder(path, log); err == nil || !strings.Contains(err.Error(), "another Loadout is recording") {
		t.Errorf("a second recorder on the same file: %v, want an error saying another Loadout records there", err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != string(recorded) {
		t.Errorf("the first recorder's file after a second was refused: %q, %v; want %q, untouched", b, err, recorded)
	}
	first.close(log)

	second, err := openTraceRecorder(path, log)
	if err != nil {
		t.Fatalf("a recorder on the file after the first closed it: %v", err)
	}
	second.close(log)

	// A file that cannot be created is one error, from opening it; the
	// lock adds no warning of its own.
	missing := filepath.Join(t.TempDir(), "no", "such", "traffic.csv")
	if _, err := openTraceRecorder(missing, log); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("a recorder in a missing directory: %v, want the open's error", err)
	}
	if strings.Contains(logged.String(), "lock not taken") {
		t.Errorf("a recorder in a missing directory warned of its lock:\n%s", logged.String())
	}

	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	if lock, err := lockTrace(fifo, log); err != nil {
		t.Errorf("lockTrace on a FIFO: %v, want no error", err)
	} else if lock.Locked() {
		t.Error("lockTrace on a FIFO locked it; want it not locked (opening a FIFO could block)")
	}
}
