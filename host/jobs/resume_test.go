package jobs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A cancel saved before a restart is carried out by the restarted
// Loadout: the job ignores SIGTERM, the first run's SIGKILL never came
// (it stopped first), and the next run signals it again and kills it
// after its grace.
func TestRunner_RestartCarriesOutASavedCancel(t *testing.T) {
	dir := t.TempDir()
	// The job says its pid, once it ignores SIGTERM, through a FIFO:
	// reading it waits for the job.
	fifo := filepath.Join(dir, "job.pid")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	first := newRunner(t, dir, newLedger(1), nil)
	// The first run's stop would kill only after an hour: it ends first.
	first.cfg.Executors[ExecutorLocal].(*LocalExecutor).cfg.StopGrace = time.Hour
	stop := start(t, first)
	task := submitTo(t, first, fmt.Sprintf("command: 'trap \"echo got TERM\" TERM; echo $$ > %s; while [ -d %s ]; do sleep 0.05; done'\n", fifo, dir))
	b, err := os.ReadFile(fifo)
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	if _, err := fmt.Sscan(string(b), &pid); err != nil {
		t.Fatalf("the job wrote %q: %v", b, err)
	}
	wait(t, first, task.ID, StateRunning)
	if err := first.Cancel(context.Background(), task.ID); err != nil {
		t.Fatal(err)
	}
	stop() // loadout serve stopped; the job lives on, its cancel saved

	ledger := newLedger(1)
	second := newRunner(t, dir, ledger, nil)
	start(t, second)
	<-second.Resumed()
	done := wait(t, second, task.ID, StateCanceled, StateSucceeded, StateFailed)
	if done.State != StateCanceled {
		t.Fatalf("task %s (%s): want CANCELED", done.State, done.Error)
	}
	if alive(pid, 0) {
		t.Fatalf("the job's process %d lives on", pid)
	}
	if _, held := ledger.Lease(task.ID); held {
		t.Fatal("the canceled job's GPU lease is still held")
	}
}

// A running 2-GPU job resumed by a Loadout that now sees one GPU (GPU 1
// is gone) keeps its lease on GPU 0: a job waiting for a GPU is not given
// it.
func TestRunner_ResumeWithFewerGPUsKeepsTheOnesLeft(t *testing.T) {
	dir := t.TempDir()
	first := newRunner(t, dir, newLedger(2), nil)
	stop := start(t, first)
	running := submitTo(t, first, gate(dir, "running")+"gpus_per_node: 2\n")
	wait(t, first, running.ID, StateRunning)
	stop()

	ledger := newLedger(1)
	second := newRunner(t, dir, ledger, nil)
	start(t, second)
	<-second.Resumed()
	if lease, ok := ledger.Lease(running.ID); !ok || len(lease) != 1 {
		t.Fatalf("the resumed job holds %v (%v), want GPU 0", lease, ok)
	}
	next := submitTo(t, second, gate(dir, "next")+"gpus_per_node: 1\n")
	if w := wait(t, second, next.ID, StatePendingResources, StateRunning); w.State != StatePendingResources {
		t.Fatalf("a 1-GPU job %s beside the resumed job on the 1-GPU box: GPU 0 double-booked", w.State)
	}
	_ = os.WriteFile(filepath.Join(dir, "running"), nil, 0o644)
	wait(t, second, running.ID, StateSucceeded)
	wait(t, second, next.ID, StateRunning)
	_ = os.WriteFile(filepath.Join(dir, "next"), nil, 0o644)
	wait(t, second, next.ID, StateSucceeded)
}
