package jobs

import (
	"context"
	"slices"
	"sync"
	"testing"
)

// recorder collects what Config.OnTransition receives.
type recorder struct {
	mu  sync.Mutex
	trs []Transition
}

func (r *recorder) add(tr Transition) {
	r.mu.Lock()
	r.trs = append(r.trs, tr)
	r.mu.Unlock()
}

func (r *recorder) of(id string) []Transition {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Transition
	for _, tr := range r.trs {
		if tr.TaskID == id {
			out = append(out, tr)
		}
	}
	return out
}

func TestRunner_OnTransitionSeesEveryStateChange(t *testing.T) {
	dir := t.TempDir()
	r := newRunner(t, dir, newLedger(1), nil)
	rec := &recorder{}
	r.cfg.OnTransition = rec.add
	start(t, r)
	task, err := r.Submit(context.Background(), []byte("workload: sft\ncommand: echo hi\ngpus_per_node: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	wait(t, r, task.ID, StateSucceeded)
	trs := rec.of(task.ID)
	var states []State
	for _, tr := range trs {
		states = append(states, tr.State)
		if tr.Workload != "sft" {
			t.Errorf("%+v: want workload sft", tr)
		}
	}
	want := []State{StateQueued, StateSubmitting, StateRunning, StateSucceeded}
	if !slices.Equal(states, want) {
		t.Fatalf("transitions %v, want %v", states, want)
	}
	if trs[0].Attempt != 0 || trs[1].Attempt != 1 || trs[3].Attempt != 1 || trs[3].From != StateRunning {
		t.Fatalf("attempts and from: %+v", trs)
	}
}

func TestStore_CountByState(t *testing.T) {
	g := newRig(t, 1, nil)
	a := g.submit(t, "command: echo a\n")
	wait(t, g.runner, a.ID, StateSucceeded)
	b := g.submit(t, "command: sleep 30\n")
	wait(t, g.runner, b.ID, StateRunning)
	counts, err := g.runner.Store().CountByState(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if counts[StateSucceeded] != 1 || counts[StateRunning] != 1 || len(counts) != 2 {
		t.Fatalf("counts %v, want one SUCCEEDED and one RUNNING", counts)
	}
	if err := g.runner.Cancel(context.Background(), b.ID); err != nil {
		t.Fatal(err)
	}
	wait(t, g.runner, b.ID, StateCanceled)
}
