package jobs

import (
	"context"
	_ "embed"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/loadout-dev/loadout/host/statedb"
)

//go:embed testdata/store-before-job-column.sql
var storeBeforeJobColumn string

// A database written before tasks.job existed opens, gains the column, and
// its tasks read as before (their spec parsed from the raw text), beside
// tasks inserted afterwards; List and Get give each its latest attempt.
func TestStore_OpensDatabaseBeforeJobColumn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jobs.db")
	db, err := statedb.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(storeBeforeJobColumn); err != nil {
		t.Fatal(err)
	}
	db.Close()

	store, err := OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()
	const oldID = "sft-20260301-142501-9f2c"
	old, err := store.Get(ctx, oldID)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ParseSpec([]byte(old.SpecRaw))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(old.Spec, want) || old.Name != "sft-old" || old.Priority != 2 || old.State != StateFailed {
		t.Fatalf("old task read as %+v (spec %+v), want its stored spec parsed: %+v", old, old.Spec, want)
	}
	if old.Attempts != 2 || old.LatestAttempt == nil || old.LatestAttempt.SubmissionID != oldID+"--a02" ||
		!slices.Equal(old.LatestAttempt.Devices, []int{0, 1}) || old.LatestAttempt.FailureKind != FailureUserError {
		t.Fatalf("old task's attempts: %d, latest %+v; want 2, the second on [0 1]", old.Attempts, old.LatestAttempt)
	}

	raw := "workload: grpo\ncommand: python train.py\ngpus_per_node: 2\nenv: {A: b}\nruntime_env: {working_dir: ., env_vars: {X: y}}\npriority: 5\n"
	spec, err := ParseSpec([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Insert(ctx, &Task{ID: "grpo-20260302-000000-0001", Spec: spec, SpecRaw: raw, State: StateQueued}); err != nil {
		t.Fatal(err)
	}
	all, err := store.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].ID != "grpo-20260302-000000-0001" || all[1].ID != oldID {
		t.Fatalf("List gave %d tasks %v, want the new one (priority 5) before the old one", len(all), ids(all))
	}
	if !reflect.DeepEqual(all[0].Spec, spec) || all[0].Attempts != 0 || all[0].LatestAttempt != nil {
		t.Fatalf("new task read as spec %+v, %d attempts (%+v); want %+v and none", all[0].Spec, all[0].Attempts, all[0].LatestAttempt, spec)
	}
	if all[1].LatestAttempt == nil || all[1].LatestAttempt.No != 2 {
		t.Fatalf("List gave the old task latest attempt %+v, want its second", all[1].LatestAttempt)
	}
}

func ids(ts []*Task) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.ID)
	}
	return out
}

// ListAfter reads the queue a page at a time in List's order, and a task
// that changes state between two pages is neither skipped nor read twice.
func TestStore_ListAfterPagesTheQueue(t *testing.T) {
	store, err := OpenStore(filepath.Join(t.TempDir(), "jobs.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()
	for i := range 9 {
		raw := fmt.Sprintf("command: echo %d\npriority: %d\n", i, i%3)
		spec, err := ParseSpec([]byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Insert(ctx, &Task{ID: fmt.Sprintf("job-20260301-000000-%04x", i), Spec: spec, SpecRaw: raw, State: StateQueued}); err != nil {
			t.Fatal(err)
		}
	}
	all, err := store.List(ctx, StateQueued)
	if err != nil {
		t.Fatal(err)
	}
	var paged []*Task
	var after *Task
	for {
		page, err := store.ListAfter(ctx, after, 2, StateQueued)
		if err != nil {
			t.Fatal(err)
		}
		if after == nil { // the first page's first task leaves the queue meanwhile
			if err := store.Transition(ctx, page[0].ID, StateQueued, StateSubmitting, Change{}); err != nil {
				t.Fatal(err)
			}
		}
		paged = append(paged, page...)
		if len(page) < 2 {
			break
		}
		after = page[len(page)-1]
	}
	if !slices.Equal(ids(paged), ids(all)) {
		t.Fatalf("pages of 2 gave %v, want List's %v", ids(paged), ids(all))
	}
}
