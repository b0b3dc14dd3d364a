package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/internal/proctest"
)

// One job queue runs on a database at a time: a second Loadout on the
// same database (another address, the same --db or default place) would
// start, resume and poll the first's jobs on a ledger that knows none of
// its models. With --db it is an error; on the default database the second
// serves models with its job queue off, saying why; the database is free
// again once the first queue stops.
func TestJobs_OneQueueADatabase(t *testing.T) {
	var logged proctest.LockedBuffer // the runners' goroutines write it too
	log := slog.New(slog.NewTextHandler(&logged, nil))
	start := func(db string) (bool, func(), error) {
		r, stop, err := startJobs(t.Context(), jobsOptions{db: db}, nil, nil, nil, log, nil)
		return r != nil, stop, err
	}

	db := filepath.Join(t.TempDir(), "jobs.db")
	on, stop, err := start(db)
	if err != nil || !on {
		t.Fatalf("the first queue on %s: on=%v, %v", db, on, err)
	}
	if _, _, err := start(db); err == nil || !strings.Contains(err.Error(), "in use by another Loadout") {
		t.Errorf("a second queue on the same --db: %v, want an error saying another Loadout's queue runs there", err)
	}
	stop()
	on, stop, err = start(db)
	if err != nil || !on {
		t.Fatalf("a queue on %s after the first stopped: on=%v, %v", db, on, err)
	}
	stop()

	// A lock that cannot be taken (here its path is a directory) does not
	// keep the queue from running; the log says it is unguarded.
	unlockable := filepath.Join(t.TempDir(), "jobs.db")
	if err := os.Mkdir(unlockable+".lock", 0o755); err != nil {
		t.Fatal(err)
	}
	on, stop, err = start(unlockable)
	if err != nil || !on {
		t.Errorf("a queue whose lock cannot be taken: on=%v, %v; want it running", on, err)
	} else {
		stop()
	}
	if !strings.Contains(logged.String(), "lock not taken") {
		t.Errorf("the log says nothing of the lock not taken:\n%s", logged.String())
	}

	t.Setenv("XDG_DATA_HOME", t.TempDir()) // the default database's place
	on, stop, err = start("")
	if err != nil || !on {
		t.Fatalf("the first queue on the default database: on=%v, %v", on, err)
	}
	defer stop()
	on, stop2, err := start("")
	if err != nil || on {
		t.Errorf("a second queue on the default database: on=%v, %v; want it off and no error (models still served)", on, err)
	}
	stop2()
	if !strings.Contains(logged.String(), "job queue disabled") || !strings.Contains(logged.String(), "in use by another Loadout") {
		t.Errorf("the log says nothing of the queue left off:\n%s", logged.String())
	}
}
