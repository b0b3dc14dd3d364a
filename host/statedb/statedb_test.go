package statedb

import (
	"path/filepath"
	"testing"
)

func TestDefaultPath_XDGDataHome(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_DATA_HOME", dir)
	got, err := DefaultPath()
	if err != nil || got != filepath.Join(dir, "loadout", "jobs.db") {
		t.Fatalf("DefaultPath() = %q, %v; want %s/loadout/jobs.db", got, err, dir)
	}
}

func TestDefaultPath_Home(t *testing.T) {
	home := t.TempDir()
	t.Setenv("XDG_DATA_HOME", "")
	t.Setenv("HOME", home)
	got, err := DefaultPath()
	if err != nil || got != filepath.Join(home, ".local", "share", "loadout", "jobs.db") {
		t.Fatalf("DefaultPath() = %q, %v", got, err)
	}
}

// Open makes the directory, and the file is in WAL mode: two handles on
// it (the job queue's and the activity log's) read and write together.
func TestOpen_MakesTheDirectoryInWALMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deep", "er", "state.db")
	a, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var mode string
	if err := a.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode %q, %v; want wal", mode, err)
	}
	if _, err := a.Exec(`CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	var x int
	if err := b.QueryRow(`SELECT x FROM t`).Scan(&x); err != nil || x != 1 {
		t.Fatalf("the second handle reads %d, %v", x, err)
	}
}

func TestOpen_UnwritableDirectory(t *testing.T) {
	if _, err := Open("/proc/loadout-cannot/state.db"); err == nil {
		t.Fatal("Open under /proc succeeded")
	}
}
