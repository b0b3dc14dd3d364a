package jobs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/loadout-dev/loadout/host/gpu"
)

// planEvictor is an Evictor whose plan is the test's: it evicts the
// pretend model "m" (a lease in the ledger) for the devices it names, the
// way the router does — the job's lease in the same step as m's ends.
type planEvictor struct {
	ledger  *gpu.Ledger
	mu      sync.Mutex
	devices []int    // the plan; nil: no room
	asked   []string // "plan GPUS PRIO" and "evict ID GPUS PRIO"
}

func (e *planEvictor) plan(call string) []int {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.asked = append(e.asked, call)
	return e.devices
}

func (e *planEvictor) set(devices []int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.devices, e.asked = devices, nil
}

func (e *planEvictor) calls() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.asked)
}

func (e *planEvictor) PlanJob(gpus, priority int) ([]int, error) {
	if d := e.plan(fmt.Sprintf("plan %d %d", gpus, priority)); d != nil {
		return d, nil
	}
	return nil, errors.New("the swapper keeps its models")
}

func (e *planEvictor) EvictForJob(ctx context.Context, id string, gpus, priority int) ([]int, []string, error) {
	d := e.plan(fmt.Sprintf("evict %s %d %d", id, gpus, priority))
	if d == nil {
		return nil, nil, errors.New("the swapper keeps its models")
	}
	if _, err := e.ledger.AcquireDevices(id, d, "m"); err != nil {
		return nil, nil, err
	}
	return d, []string{"m"}, nil
}

// A local job that may evict idle models and needs more GPUs than are free
// is admitted on the Evictor's plan and runs on the devices it leased
// (whose lease it then releases); without evict_idle_models, or when the
// Evictor finds no room, it waits in PENDING_RESOURCES.
func TestLocal_EvictingJobRunsWhereTheEvictorPlanned(t *testing.T) {
	dir := t.TempDir()
	ledger := newLedger(2)
	if err := ledger.Acquire("m", map[int]uint64{1: 4 << 30}); err != nil {
		t.Fatal(err)
	}
	ev := &planEvictor{ledger: ledger}
	r := newRunner(t, dir, ledger, ev)
	start(t, r)
	submit := func(spec string) *Task {
		t.Helper()
		task, err := r.Submit(context.Background(), []byte(spec))
		if err != nil {
			t.Fatal(err)
		}
		return task
	}

	keeps := submit(gate(dir, "keeps") + "gpus_per_node: 2\nevict_idle_models: true\npriority: 3\n")
	w := wait(t, r, keeps.ID, StatePendingResources)
	if !strings.Contains(w.Error, "free GPUs per node: [1]; the swapper keeps its models") {
		t.Fatalf("pending reason %q: want the one free GPU and the Evictor's reason", w.Error)
	}
	if err := r.Cancel(context.Background(), keeps.ID); err != nil {
		t.Fatal(err)
	}
	wait(t, r, keeps.ID, StateCanceled)

	ev.set([]int{0, 1})
	task := submit("command: echo visible=$CUDA_VISIBLE_DEVICES\ngpus_per_node: 2\nevict_idle_models: true\npriority: 3\n")
	done := wait(t, r, task.ID, StateSucceeded, StateFailed)
	if done.State != StateSucceeded || !slices.Equal(done.LatestAttempt.Devices, []int{0, 1}) {
		t.Fatalf("got %s on %v (%s), want SUCCEEDED on the planned GPUs 0,1", done.State, done.LatestAttempt.Devices, done.Error)
	}
	if logs, _ := r.Logs(context.Background(), task.ID); !strings.Contains(logs, "visible=0,1") {
		t.Fatalf("logs %q", logs)
	}
	if _, held := ledger.Lease(task.ID); held {
		t.Fatal("the job's lease outlived it")
	}
	if _, held := ledger.Lease("m"); held {
		t.Fatal("the evicted model still holds its lease")
	}
	if asked := ev.calls(); !slices.Contains(asked, "plan 2 3") || !slices.Contains(asked, "evict "+task.ID+" 2 3") {
		t.Fatalf("the Evictor was asked %q; want a plan and an eviction for 2 GPUs at priority 3", asked)
	}

	// Without evict_idle_models the Evictor is not asked.
	if err := ledger.Acquire("m", map[int]uint64{1: 4 << 30}); err != nil {
		t.Fatal(err)
	}
	ev.set([]int{0, 1})
	polite := submit(gate(dir, "polite") + "gpus_per_node: 2\n")
	wait(t, r, polite.ID, StatePendingResources)
	if asked := ev.calls(); len(asked) != 0 {
		t.Fatalf("a job that may not evict asked the Evictor: %q", asked)
	}
	_ = os.WriteFile(filepath.Join(dir, "polite"), nil, 0o644)
}
