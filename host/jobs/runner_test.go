package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/gpu"
)

// rig is a runner over a real SQLite file, a declared 4-GPU ledger and the
// local executor running real processes.
type rig struct {
	dir    string
	ledger *gpu.Ledger
	runner *Runner
	stop   func()
}

func newLedger(n int) *gpu.Ledger {
	var devs []gpu.DeclaredDevice
	for i := range n {
		devs = append(devs, gpu.DeclaredDevice{Name: fmt.Sprintf("sim%d", i), Memory: 8 << 30})
	}
	return gpu.NewLedger(gpu.NewDeclared(devs), 0)
}

// testStore is a jobs database in dir, closed when the test ends.
func testStore(t testing.TB, dir string) *Store {
	t.Helper()
	store, err := OpenStore(filepath.Join(dir, "jobs.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}

// newRunner builds a runner polling every 100 ms with a 20 ms retry
// backoff; tune changes its Config before it is built.
func newRunner(t testing.TB, dir string, ledger *gpu.Ledger, ev Evictor, tune ...func(*Config)) *Runner {
	t.Helper()
	store := testStore(t, dir)
	var r *Runner
	local, err := NewLocalExecutor(LocalConfig{Ledger: ledger, Evictor: ev, Dir: filepath.Join(dir, "logs"),
		StopGrace: 2 * time.Second, Notify: func() { r.Wake() }, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	execs := map[string]Executor{ExecutorLocal: local}
	if addr := os.Getenv("LOADOUT_RAY_ADDRESS"); addr != "" {
		execs[ExecutorRay] = NewRayExecutor(RayConfig{Client: &RayClient{Address: addr}})
	}
	cfg := Config{Store: store, Executors: execs,
		PollInterval: 100 * time.Millisecond, RetryBackoff: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
	for _, f := range tune {
		f(&cfg)
	}
	r, err = NewRunner(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func start(t testing.TB, r *Runner) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

func newRig(t *testing.T, gpus int, ev Evictor) *rig {
	dir := t.TempDir()
	l := newLedger(gpus)
	r := newRunner(t, dir, l, ev)
	return &rig{dir: dir, ledger: l, runner: r, stop: start(t, r)}
}

func (g *rig) submit(t *testing.T, spec string) *Task {
	t.Helper()
	task, err := g.runner.Submit(context.Background(), []byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	return task
}

func wait(t *testing.T, r *Runner, id string, states ...State) *Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	task, err := r.Wait(ctx, id, states...)
	if err != nil {
		t.Fatalf("waiting for %s to be %v: %v", id, states, err)
	}
	return task
}

func TestRunner_LocalJobSucceedsOnLeasedDevices(t *testing.T) {
	g := newRig(t, 4, nil)
	task := g.submit(t, "workload: sft\ncommand: echo visible=$CUDA_VISIBLE_DEVICES order=$CUDA_DEVICE_ORDER $GREETING\ngpus_per_node: 2\nenv: {GREETING: hello}\n")
	if !regexpMatch(`sft-\d{8}-\d{6}-[0-9a-f]{4}`, task.ID) {
		t.Fatalf("task id %q is not <workload>-<yyyymmdd>-<hhmmss>-<4 hex>", task.ID)
	}
	done := wait(t, g.runner, task.ID, StateSucceeded, StateFailed)
	if done.State != StateSucceeded || done.Attempts != 1 || done.LatestAttempt.SubmissionID != task.ID+"--a01" {
		t.Fatalf("got %s with %d attempts (%+v), want SUCCEEDED after 1", done.State, done.Attempts, done.LatestAttempt)
	}
	logs, err := g.runner.Logs(context.Background(), task.ID)
	if err != nil || !strings.Contains(logs, "visible=0,1 order=PCI_BUS_ID hello") {
		t.Fatalf("logs %q (%v): want the job to see GPUs 0,1", logs, err)
	}
	if _, held := g.ledger.Lease(task.ID); held {
		t.Fatal("the job's lease outlived it")
	}
	evs, _ := g.runner.Store().Events(context.Background(), task.ID)
	var path []State
	for _, e := range evs {
		if e.To != "" && (len(path) == 0 || path[len(path)-1] != e.To) {
			path = append(path, e.To)
		}
	}
	want := []State{StateQueued, StateSubmitting, StateRunning, StateSucceeded}
	if !slices.Equal(path, want) {
		t.Fatalf("transitions %v, want %v", path, want)
	}
}

func TestRunner_UserErrorStaysFailedWithOneAttempt(t *testing.T) {
	g := newRig(t, 1, nil)
	task := g.submit(t, "command: echo boom; exit 3\n")
	done := wait(t, g.runner, task.ID, StateSucceeded, StateFailed)
	a := done.LatestAttempt
	if done.State != StateFailed || done.Attempts != 1 || a.FailureKind != FailureUserError || !strings.Contains(done.Error, "exit status 3") {
		t.Fatalf("got %s, %d attempts, %+v, error %q; want FAILED once with USER_ERROR", done.State, done.Attempts, a, done.Error)
	}
}

func TestRunner_InsufficientResourcesRetriedWithNewAttempt(t *testing.T) {
	g := newRig(t, 2, nil)
	marker := filepath.Join(g.dir, "marker")
	task := g.submit(t, fmt.Sprintf(`command: 'if [ -e %[1]s ]; then echo trained; else touch %[1]s; echo "ValueError: Total available GPUs 0 is less than total desired GPUs 8" >&2; exit 1; fi'
gpus_per_node: 2
`, marker))
	done := wait(t, g.runner, task.ID, StateSucceeded, StateFailed)
	if done.State != StateSucceeded || done.Attempts != 2 {
		t.Fatalf("got %s after %d attempts (%s), want SUCCEEDED after 2", done.State, done.Attempts, done.Error)
	}
	as, _ := g.runner.Store().Attempts(context.Background(), task.ID)
	if as[0].FailureKind != FailureInsufficientResources || as[1].SubmissionID != task.ID+"--a02" {
		t.Fatalf("attempts %+v %+v: want the first INSUFFICIENT_RESOURCES, the second --a02", as[0], as[1])
	}
}

// gate is a job command that runs until its file exists, or its directory
// is gone (a failed test's TempDir), so no job outlives a test.
func gate(dir, name string) string {
	return fmt.Sprintf("command: 'while [ ! -e %s ] && [ -d %s ]; do sleep 0.02; done; echo released'\n", filepath.Join(dir, name), dir)
}

// A gang waits in PENDING_RESOURCES, saying for what, behind the job that
// holds the GPUs, and no smaller job overtakes it; once the GPUs are free
// it runs, and its reason to wait is gone.
func TestRunner_GangWaitsInPendingResourcesThenRuns(t *testing.T) {
	g := newRig(t, 4, nil)
	big := g.submit(t, gate(g.dir, "big")+"gpus_per_node: 3\n")
	wait(t, g.runner, big.ID, StateRunning)
	second := g.submit(t, gate(g.dir, "second")+"gpus_per_node: 2\n")
	// A small job behind it must not overtake it (FIFO within a priority).
	small := g.submit(t, gate(g.dir, "small")+"gpus_per_node: 1\n")
	w := wait(t, g.runner, second.ID, StatePendingResources)
	if !strings.Contains(w.Error, "free GPUs per node: [1]") {
		t.Fatalf("pending reason %q: want the free count", w.Error)
	}
	if st, _ := g.runner.Store().Get(context.Background(), small.ID); st.State.active() {
		t.Fatalf("the 1-GPU job overtook the 2-GPU one: %s", st.State)
	}
	if err := os.WriteFile(filepath.Join(g.dir, "big"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wait(t, g.runner, big.ID, StateSucceeded)
	// Running, it waits for nothing: the reason it waited is gone (it
	// stayed in `jobs list`'s NOTE column for the whole run before).
	if w := wait(t, g.runner, second.ID, StateRunning); w.Error != "" {
		t.Fatalf("the running job still says %q", w.Error)
	}
	wait(t, g.runner, small.ID, StateRunning)
	for _, f := range []string{"second", "small"} {
		_ = os.WriteFile(filepath.Join(g.dir, f), nil, 0o644)
	}
	wait(t, g.runner, second.ID, StateSucceeded)
	wait(t, g.runner, small.ID, StateSucceeded)
}

// A queued job starts when the GPUs it waits for are freed — here by a
// model whose lease ends — not at the runner's next poll: with polling an
// hour apart, only the ledger's release can have woken it; then, when the
// job's own process exits, the next job starts the same way.
func TestRunner_FreedGPUsStartQueuedJobWithoutPoll(t *testing.T) {
	dir := t.TempDir()
	l := newLedger(2)
	r := newRunner(t, dir, l, nil, func(c *Config) { c.PollInterval = time.Hour })
	start(t, r)
	if err := l.Acquire("model", map[int]uint64{0: 1 << 30, 1: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	first, err := r.Submit(context.Background(), []byte(gate(dir, "first")+"gpus_per_node: 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := r.Submit(context.Background(), []byte(gate(dir, "second")+"gpus_per_node: 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	wait(t, r, first.ID, StatePendingResources)
	l.Release("model") // the model's server has exited
	wait(t, r, first.ID, StateRunning)
	// Still waiting: queued, or pending resources once admission has
	// looked at it (which may or may not have happened by now).
	if st, _ := r.Store().Get(context.Background(), second.ID); st.State != StatePendingResources && st.State != StateQueued {
		t.Fatalf("second job %s while the first holds both GPUs", st.State)
	}
	if err := os.WriteFile(filepath.Join(dir, "first"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wait(t, r, second.ID, StateRunning)
	_ = os.WriteFile(filepath.Join(dir, "second"), nil, 0o644)
	wait(t, r, second.ID, StateSucceeded)
}

// Admission reads the queue a page at a time: a task of another executor
// behind more than a page of tasks held back by a busy one is still
// admitted, and the held-back ones keep their order. A second box's local
// executor, named ray here, stands in for the other executor.
func TestRunner_AdmitsPastAPageOfHeldBackTasks(t *testing.T) {
	page := admitPage
	admitPage = 2
	t.Cleanup(func() { admitPage = page })
	dir := t.TempDir()
	r := newRunner(t, dir, newLedger(1), nil)
	other, err := NewLocalExecutor(LocalConfig{Ledger: newLedger(1), Dir: filepath.Join(dir, "other"),
		Notify: r.Wake, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	r.cfg.Executors[ExecutorRay] = other
	start(t, r)
	busy, err := r.Submit(context.Background(), []byte(gate(dir, "busy")))
	if err != nil {
		t.Fatal(err)
	}
	wait(t, r, busy.ID, StateRunning)
	var held []*Task
	for range 5 {
		task, err := r.Submit(context.Background(), []byte("command: exit 0\n"))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, task)
	}
	behind, err := r.Submit(context.Background(), []byte(gate(dir, "behind")+"executor: ray\n"))
	if err != nil {
		t.Fatal(err)
	}
	wait(t, r, behind.ID, StateRunning)
	if first := wait(t, r, held[0].ID, StatePendingResources); !strings.Contains(first.Error, "free GPUs per node: [0]") {
		t.Fatalf("first held-back task: %q", first.Error)
	}
	for _, f := range []string{"busy", "behind"} {
		_ = os.WriteFile(filepath.Join(dir, f), nil, 0o644)
	}
	for _, task := range held {
		wait(t, r, task.ID, StateSucceeded)
	}
	var prev time.Time
	for i, task := range held {
		as, _ := r.Store().Attempts(context.Background(), task.ID)
		if len(as) != 1 || as[0].StartedAt.Before(prev) {
			t.Fatalf("held-back task %d: attempts %+v, want one, started after the one before it (%s)", i, as, prev)
		}
		prev = as[0].StartedAt
	}
}

func TestSubmit_RefusesGangThatCanNeverFit(t *testing.T) {
	g := newRig(t, 4, nil)
	_, err := g.runner.Submit(context.Background(), []byte("command: x\ngpus_per_node: 5\n"))
	var re *RefusedError
	if !errors.As(err, &re) {
		t.Fatalf("got %v, want RefusedError", err)
	}
	if ts, _ := g.runner.Store().List(context.Background()); len(ts) != 0 {
		t.Fatalf("a refused task was stored: %+v", ts)
	}
}

func TestRunner_CancelRunningStopsProcessGroup(t *testing.T) {
	g := newRig(t, 2, nil)
	task := g.submit(t, "command: 'sleep 300 & wait'\ngpus_per_node: 1\n")
	running := wait(t, g.runner, task.ID, StateRunning)
	pid, _ := (&LocalExecutor{cfg: LocalConfig{Dir: filepath.Join(g.dir, "logs")}}).pid(running.LatestAttempt)
	if err := g.runner.Cancel(context.Background(), task.ID); err != nil {
		t.Fatal(err)
	}
	done := wait(t, g.runner, task.ID, StateCanceled, StateFailed)
	if done.State != StateCanceled {
		t.Fatalf("got %s (%s), want CANCELED", done.State, done.Error)
	}
	if groupAlive(pid) {
		t.Fatalf("process group %d still alive after cancel", pid)
	}
	if _, held := g.ledger.Lease(task.ID); held {
		t.Fatal("lease held after cancel")
	}
	if err := g.runner.Cancel(context.Background(), task.ID); !errors.Is(err, ErrConflict) {
		t.Fatalf("cancel of a canceled task: %v, want ErrConflict", err)
	}
}

// TestRunner_KillNineLosesNothing runs the runner in a child process, kills
// it with SIGKILL while a job runs and another waits, and resumes in this
// process on the same database.
func TestRunner_KillNineLosesNothing(t *testing.T) {
	dir := t.TempDir()
	child := exec.Command(os.Args[0], "-test.run=^TestHelperRunner$")
	child.Env = append(os.Environ(), "LOADOUT_JOBS_HELPER_DIR="+dir)
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()

	// This runner only submits until the child is gone: its Run is not
	// started yet.
	r := newRunner(t, dir, newLedger(2), nil)
	running := submitTo(t, r, gate(dir, "first")+"gpus_per_node: 2\n")
	queued := submitTo(t, r, gate(dir, "second")+"gpus_per_node: 1\n")
	awaitDB(t, r.Store(), running.ID, StateRunning)
	awaitDB(t, r.Store(), queued.ID, StatePendingResources)
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()

	ledger := newLedger(2)
	r = newRunner(t, dir, ledger, nil)
	start(t, r)
	<-r.Resumed()
	wait(t, r, running.ID, StateRunning)
	// Resumed: the job's devices are leased again, so the waiting job
	// still waits.
	if lease, ok := ledger.Lease(running.ID); !ok || len(lease) != 2 {
		t.Fatalf("resumed job holds %v, want both GPUs", lease)
	}
	_ = os.WriteFile(filepath.Join(dir, "first"), nil, 0o644)
	done := wait(t, r, running.ID, StateSucceeded, StateFailed)
	if done.State != StateSucceeded || done.Attempts != 1 {
		t.Fatalf("resumed job: %s after %d attempts (%s), want SUCCEEDED after 1", done.State, done.Attempts, done.Error)
	}
	wait(t, r, queued.ID, StateRunning)
	_ = os.WriteFile(filepath.Join(dir, "second"), nil, 0o644)
	wait(t, r, queued.ID, StateSucceeded)
}

func submitTo(t *testing.T, r *Runner, spec string) *Task {
	t.Helper()
	task, err := r.Submit(context.Background(), []byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	return task
}

// awaitDB polls the database another process writes: its changes are the
// only event this process can see.
func awaitDB(t *testing.T, s *Store, id string, want State) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		task, err := s.Get(context.Background(), id)
		if err == nil && task.State == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v (%v), want %s", id, task.State, err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHelperRunner is the child of TestRunner_KillNineLosesNothing.
func TestHelperRunner(t *testing.T) {
	dir := os.Getenv("LOADOUT_JOBS_HELPER_DIR")
	if dir == "" {
		t.Skip("helper process only")
	}
	r := newRunner(t, dir, newLedger(2), nil)
	r.cfg.PollInterval = 20 * time.Millisecond
	_ = r.Run(context.Background()) // until killed
}

func regexpMatch(re, s string) bool { return regexp.MustCompile("^" + re + "$").MatchString(s) }
