package jobs

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/host/gpu"
)

// withResidency swaps r's local executor for one on ledger l whose models
// are described by res (test models: pinned, persistent by name).
func withResidency(t *testing.T, r *Runner, dir string, l *gpu.Ledger, res map[string]Residency) {
	t.Helper()
	local, err := NewLocalExecutor(LocalConfig{Ledger: l, Dir: filepath.Join(dir, "logs"), Notify: r.Wake,
		Logger: slog.New(slog.DiscardHandler), Residency: func(m string) Residency { return res[m] }})
	if err != nil {
		t.Fatal(err)
	}
	r.cfg.Executors[ExecutorLocal] = local
}

// A job that needs no GPU competes with no GPU job: it runs while GPU
// jobs ahead of it wait, whether it sits in the first page of the queue
// or past pages of held-back GPU jobs (issue 25).
func TestRunner_NoGPUJobNeverWaitsBehindGPUJobs(t *testing.T) {
	page := admitPage
	admitPage = 2
	t.Cleanup(func() { admitPage = page })
	dir := t.TempDir()
	r := newRunner(t, dir, newLedger(1), nil)
	start(t, r)
	busy := submitTo(t, r, gate(dir, "busy"))
	wait(t, r, busy.ID, StateRunning)
	held := []*Task{submitTo(t, r, "command: exit 0\n")}
	early := submitTo(t, r, "command: exit 0\ngpus_per_node: 0\n")
	for range 3 {
		held = append(held, submitTo(t, r, "command: exit 0\n"))
	}
	late := submitTo(t, r, "command: exit 0\ngpus_per_node: 0\n")
	wait(t, r, early.ID, StateSucceeded)
	wait(t, r, late.ID, StateSucceeded)
	if st, _ := r.Store().Get(context.Background(), busy.ID); st.State != StateRunning {
		t.Fatalf("the GPU job holding the only GPU is %s", st.State)
	}
	for _, task := range held {
		if st, _ := r.Store().Get(context.Background(), task.ID); st.State.active() || st.State.Terminal() {
			t.Fatalf("GPU job %s is %s while the only GPU is held", task.ID, st.State)
		}
	}
	_ = os.WriteFile(filepath.Join(dir, "busy"), nil, 0o644)
	for _, task := range held {
		wait(t, r, task.ID, StateSucceeded)
	}
}

// A waiting job's reason names what holds the GPUs it waits for: models
// by id, a pinned one said so, other jobs by id.
func TestRunner_PendingReasonNamesTheHolders(t *testing.T) {
	dir := t.TempDir()
	l := newLedger(2)
	r := newRunner(t, dir, l, nil)
	withResidency(t, r, dir, l, map[string]Residency{"pinned-model": {Pinned: true}})
	start(t, r)
	if err := l.Acquire("pinned-model", map[int]uint64{0: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	busy := submitTo(t, r, gate(dir, "busy"))
	wait(t, r, busy.ID, StateRunning)
	second := submitTo(t, r, "command: exit 0\n")
	w := wait(t, r, second.ID, StatePendingResources)
	want := "held by GPU 0: model pinned-model (pinned); GPU 1: job " + busy.ID
	if !strings.Contains(w.Error, want) {
		t.Fatalf("pending reason %q, want it to contain %q", w.Error, want)
	}
	_ = os.WriteFile(filepath.Join(dir, "busy"), nil, 0o644)
	wait(t, r, second.ID, StateSucceeded)
}

// Submit warns, in its answer, when pinned models (and persistent ones
// without a TTL, for a job that may not evict) hold so many GPUs that the
// job cannot be placed; not when it can be, nor for a persistent model
// with a TTL.
func TestSubmit_WarnsWhenPinnedOrPersistentModelsMakeItUnplaceable(t *testing.T) {
	res := map[string]Residency{
		"p": {Pinned: true}, "q": {Persistent: true}, "ttl": {Persistent: true, TTL: 300e9},
	}
	for _, tt := range []struct {
		name   string
		models map[string]int // model → the device it holds
		spec   string
		warn   []string // what the warning names; nil: no warning
	}{
		{"pinned and persistent hold both", map[string]int{"p": 0, "q": 1}, "gpus_per_node: 1\n", []string{"model p (pinned)", "model q (persistent)", "2 of the box's 2"}},
		{"pinned holds one of two, job needs two", map[string]int{"p": 0}, "gpus_per_node: 2\n", []string{"model p (pinned)", "1 of the box's 2"}},
		{"pinned holds one of two, job needs one", map[string]int{"p": 0, "other": 1}, "gpus_per_node: 1\n", nil},
		{"persistent with a ttl leaves on its own", map[string]int{"ttl": 0, "q": 1}, "gpus_per_node: 2\n", []string{"model q (persistent)", "1 of the box's 2"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			l := newLedger(2)
			r := newRunner(t, dir, l, nil)
			withResidency(t, r, dir, l, res)
			for m, d := range tt.models {
				if err := l.Acquire(m, map[int]uint64{d: 1 << 30}); err != nil {
					t.Fatal(err)
				}
			}
			task := submitTo(t, r, "command: exit 0\n"+tt.spec)
			if tt.warn == nil {
				if len(task.Warnings) != 0 {
					t.Fatalf("warnings %q, want none", task.Warnings)
				}
				return
			}
			if len(task.Warnings) != 1 {
				t.Fatalf("warnings %q, want one", task.Warnings)
			}
			for _, w := range tt.warn {
				if !strings.Contains(task.Warnings[0], w) {
					t.Errorf("warning %q does not name %q", task.Warnings[0], w)
				}
			}
			if strings.Contains(task.Warnings[0], "ttl") {
				t.Errorf("warning %q names the model with a TTL", task.Warnings[0])
			}
		})
	}
}

// A task held back because the most tasks run (MaxRunning) says so in
// its error, as every waiting task says what it waits for.
func TestRunner_HeldBackByMaxRunningSaysSo(t *testing.T) {
	dir := t.TempDir()
	r := newRunner(t, dir, newLedger(2), nil, func(c *Config) { c.MaxRunning = 1 })
	start(t, r)
	busy := submitTo(t, r, gate(dir, "busy"))
	wait(t, r, busy.ID, StateRunning)
	held := submitTo(t, r, "command: exit 0\n")
	w := waitUntil(t, r, held.ID, "said it waits for a slot", func(w *Task) bool { return w.Error != "" })
	if w.State != StatePendingResources || !strings.Contains(w.Error, "max running jobs 1") || !strings.Contains(w.Error, "--max-running-jobs") {
		t.Fatalf("held-back task %s: %q", w.State, w.Error)
	}
	_ = os.WriteFile(filepath.Join(dir, "busy"), nil, 0o644)
	if done := wait(t, r, held.ID, StateSucceeded, StateFailed); done.State != StateSucceeded || done.Error != "" {
		t.Fatalf("task %s (%q)", done.State, done.Error)
	}
}
