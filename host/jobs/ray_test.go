package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// rayAddress is the dashboard of the Ray head .ci/run starts
// (LOADOUT_RAY_ADDRESS). Without one the Ray tests skip, unless
// LOADOUT_REQUIRE_RAY=1 (as in CI) makes that a failure.
func rayAddress(t *testing.T) string {
	addr := os.Getenv("LOADOUT_RAY_ADDRESS")
	if addr == "" {
		if os.Getenv("LOADOUT_REQUIRE_RAY") == "1" {
			t.Fatal("LOADOUT_REQUIRE_RAY=1 but LOADOUT_RAY_ADDRESS is not set: .ci/run starts a Ray head and sets it")
		}
		t.Skip("no Ray head: set LOADOUT_RAY_ADDRESS=http://127.0.0.1:8265 (see .ci/run)")
	}
	return addr
}

// rayRig is a runner (in this process) with the Ray executor on the test
// head and fast polls.
func rayRig(t *testing.T) (*Runner, *RayExecutor, string) {
	addr := rayAddress(t)
	dir := t.TempDir()
	store := testStore(t, dir)
	ex := NewRayExecutor(RayConfig{Client: &RayClient{Address: addr}})
	r, err := NewRunner(Config{Store: store, Executors: map[string]Executor{ExecutorRay: ex},
		PollInterval: 200 * time.Millisecond, RetryBackoff: 500 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	start(t, r)
	return r, ex, dir
}

// rayGate is a Ray job (shell only: it starts in about a second) that runs
// until its file exists; the cleanup creates it, so no job outlives a test.
func rayGate(t *testing.T, dir, name string, gpus int) string {
	path := filepath.Join(dir, name)
	t.Cleanup(func() { _ = os.WriteFile(path, nil, 0o644) })
	return fmt.Sprintf("executor: ray\ngpus_per_node: %[1]d\ncommand: 'while [ ! -e %[2]s ] && [ -d %[3]s ]; do sleep 0.1; done; echo released'\n", gpus, path, dir)
}

// countGPUs is the job's own count, as verl makes it at start-up.
const countGPUs = `python3 -c "import ray; ray.init(); n = int(sum(v.get('GPU', 0) for v in ray._private.state.available_resources_per_node().values())); print('AVAILABLE_GPUS', n)"`

// awaitAllFree polls the cluster until Loadout sees every GPU free: Ray's
// resource report lags a job's end by a few seconds, and there is no event
// to await for it.
func awaitAllFree(t *testing.T, ex *RayExecutor) Capacity {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := ex.Capacity(context.Background(), Spec{})
		if err == nil && len(c.Total) > 0 && sum(c.Free) == sum(c.Total) && sum(c.Total) > 0 {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Ray cluster's GPUs never all came free: %+v %v", c, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// Loadout and the job count the cluster's available GPUs alike: the job
// prints verl's count and it is Loadout's.
func TestRay_JobSucceedsAndCountsGPUsAsLoadoutDoes(t *testing.T) {
	r, ex, _ := rayRig(t)
	c := awaitAllFree(t, ex)
	task, err := r.Submit(context.Background(), []byte("executor: ray\nworkload: count\ngpus_per_node: 1\ncommand: "+strconv.Quote(countGPUs)+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	done := wait(t, r, task.ID, StateSucceeded, StateFailed)
	logs, _ := r.Logs(context.Background(), task.ID)
	if done.State != StateSucceeded {
		t.Fatalf("got %s (%s)\n%s", done.State, done.Error, logs)
	}
	want := fmt.Sprintf("AVAILABLE_GPUS %d", sum(c.Free))
	if !strings.Contains(logs, want) {
		t.Fatalf("Loadout counted %v free GPUs per node; the job printed:\n%s", c.Free, logs)
	}
	if done.LatestAttempt.SubmissionID != task.ID+"--a01" || done.LatestAttempt.Status != StatusSucceeded {
		t.Fatalf("attempt %+v", done.LatestAttempt)
	}
}

func TestRay_UserErrorStaysFailedWithOneAttempt(t *testing.T) {
	r, _, _ := rayRig(t)
	task, err := r.Submit(context.Background(), []byte("executor: ray\ngpus_per_node: 1\ncommand: echo broken; exit 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	done := wait(t, r, task.ID, StateSucceeded, StateFailed)
	if done.State != StateFailed || done.Attempts != 1 || done.LatestAttempt.FailureKind != FailureUserError {
		t.Fatalf("got %s after %d attempts (%+v), want FAILED once, USER_ERROR", done.State, done.Attempts, done.LatestAttempt)
	}
}

// A job whose own check finds too few GPUs (verl's ValueError) while
// another tenant holds them is retried by itself once they free.
func TestRay_InsufficientGPUsRetriedOnceFreed(t *testing.T) {
	r, ex, dir := rayRig(t)
	total := sum(awaitAllFree(t, ex).Total)
	// Another tenant, straight to Ray: an actor holding all GPUs but one.
	release := filepath.Join(dir, "release")
	t.Cleanup(func() { _ = os.WriteFile(release, nil, 0o644) })
	holder := fmt.Sprintf(`python3 -c "
import os, time, ray
ray.init()
@ray.remote(num_gpus=%d)
class Hold:
    def wait(self):
        while not os.path.exists('%s'): time.sleep(0.1)
h = Hold.remote()
ray.get(h.__ray_ready__.remote())
print('HOLD' + 'ING', flush=True)
ray.get(h.wait.remote())
"`, total-1, release)
	hid := "holder-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if _, err := ex.cfg.Client.Submit(context.Background(), RaySubmitRequest{Entrypoint: holder, SubmissionID: hid}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ex.cfg.Client.Stop(context.Background(), hid) })
	deadline := time.Now().Add(60 * time.Second)
	for { // Ray's logs are the only sign the actor holds the GPUs (they echo the entry point: hence 'HOLD' + 'ING')
		logs, _ := ex.cfg.Client.Logs(context.Background(), hid)
		if strings.Contains(logs, "HOLDING") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the holder never held the GPUs:\n%s", logs)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The job asks Loadout for 1 GPU (free) but, like a verl job sized
	// for the whole cluster, checks for all of them at start-up.
	job := fmt.Sprintf(`python3 -c "
import ray
ray.init()
n = int(sum(v.get('GPU', 0) for v in ray._private.state.available_resources_per_node().values()))
if n < %[1]d: raise ValueError(f'Total available GPUs {n} is less than total desired GPUs %[1]d')
print('TRAINED on', n)
"`, total)
	task, err := r.Submit(context.Background(), []byte("executor: ray\nworkload: grpo\ngpus_per_node: 1\ncommand: "+strconv.Quote(job)+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	retrying := wait(t, r, task.ID, StatePendingResources, StateSucceeded, StateFailed)
	if retrying.State != StatePendingResources || retrying.LatestAttempt.FailureKind != FailureInsufficientResources {
		t.Fatalf("after the first attempt: %s, %+v (%s); want PENDING_RESOURCES after INSUFFICIENT_RESOURCES", retrying.State, retrying.LatestAttempt, retrying.Error)
	}
	_ = os.WriteFile(release, nil, 0o644)
	done := wait(t, r, task.ID, StateSucceeded, StateFailed)
	if done.State != StateSucceeded || done.Attempts < 2 {
		t.Fatalf("got %s after %d attempts (%s), want SUCCEEDED after a retry", done.State, done.Attempts, done.Error)
	}
}

func TestRay_CancelRunningStopsTheRayJob(t *testing.T) {
	r, ex, dir := rayRig(t)
	task, err := r.Submit(context.Background(), []byte(rayGate(t, dir, "never", 1)))
	if err != nil {
		t.Fatal(err)
	}
	running := wait(t, r, task.ID, StateRunning)
	if err := r.Cancel(context.Background(), task.ID); err != nil {
		t.Fatal(err)
	}
	done := wait(t, r, task.ID, StateCanceled, StateFailed)
	j, err := ex.cfg.Client.Job(context.Background(), running.LatestAttempt.SubmissionID)
	if done.State != StateCanceled || err != nil || j.Status != StatusStopped {
		t.Fatalf("task %s, Ray job %+v (%v): want CANCELED and STOPPED", done.State, j, err)
	}
}

// A burst larger than the cluster waits in PENDING_RESOURCES, never FAILED.
func TestRay_BurstLargerThanClusterWaits(t *testing.T) {
	r, ex, dir := rayRig(t)
	total := sum(awaitAllFree(t, ex).Total)
	var ids []string
	for i := range 3 { // 3 × total/2 GPUs: two run, one waits
		task, err := r.Submit(context.Background(), []byte(rayGate(t, dir, fmt.Sprint("g", i), total/2)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, task.ID)
	}
	wait(t, r, ids[0], StateRunning)
	wait(t, r, ids[1], StateRunning)
	w := wait(t, r, ids[2], StatePendingResources)
	if !strings.Contains(w.Error, "waiting for") {
		t.Fatalf("pending reason %q", w.Error)
	}
	_ = os.WriteFile(filepath.Join(dir, "g0"), nil, 0o644)
	wait(t, r, ids[0], StateSucceeded)
	wait(t, r, ids[2], StateRunning)
	for _, f := range []string{"g1", "g2"} {
		_ = os.WriteFile(filepath.Join(dir, f), nil, 0o644)
	}
	for _, id := range ids[1:] {
		if done := wait(t, r, id, StateSucceeded, StateFailed); done.State != StateSucceeded || done.Attempts != 1 {
			t.Fatalf("%s: %s after %d attempts", id, done.State, done.Attempts)
		}
	}
}

// kill -9 of the process running the queue while a Ray job runs: the next
// one resumes tracking it by its submission id, and submits nothing twice.
func TestRay_KillNineResumesTracking(t *testing.T) {
	addr := rayAddress(t)
	dir := t.TempDir()
	child := exec.Command(os.Args[0], "-test.run=^TestHelperRunner$")
	child.Env = append(os.Environ(), "LOADOUT_JOBS_HELPER_DIR="+dir, "LOADOUT_RAY_ADDRESS="+addr)
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	r := newRunner(t, dir, newLedger(1), nil)
	task := submitTo(t, r, rayGate(t, dir, "gate", 1))
	awaitDB(t, r.Store(), task.ID, StateRunning)
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()

	r = newRunner(t, dir, newLedger(1), nil)
	start(t, r)
	<-r.Resumed()
	_ = os.WriteFile(filepath.Join(dir, "gate"), nil, 0o644)
	done := wait(t, r, task.ID, StateSucceeded, StateFailed)
	if done.State != StateSucceeded || done.Attempts != 1 {
		t.Fatalf("resumed: %s after %d attempts (%s)", done.State, done.Attempts, done.Error)
	}
	var he *RayHTTPError
	if _, err := (&RayClient{Address: addr}).Job(context.Background(), task.ID+"--a02"); !errors.As(err, &he) || he.Status != 404 {
		t.Fatalf("a second submission exists: %v", err)
	}
}

// Ray down at submit time: the task is taken, waits, and says why. Needs
// no Ray head: nothing listens on the address.
func TestRay_DownAtSubmitTasksWait(t *testing.T) {
	dir := t.TempDir()
	store, err := OpenStore(filepath.Join(dir, "jobs.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ex := NewRayExecutor(RayConfig{Client: &RayClient{Address: "http://127.0.0.1:1"}})
	r, err := NewRunner(Config{Store: store, Executors: map[string]Executor{ExecutorRay: ex},
		PollInterval: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	task, err := r.Submit(context.Background(), []byte("executor: ray\ngpus_per_node: 8\ncommand: train\n"))
	if err != nil {
		t.Fatalf("submit while Ray is down: %v", err)
	}
	if task.State != StateQueued || !strings.Contains(task.Error, "ray executor") {
		t.Fatalf("task %s (%q): want it queued, saying why it waits", task.State, task.Error)
	}
	start(t, r)
	w := waitUntil(t, r, task.ID, "waited saying Ray is unreachable", func(w *Task) bool {
		return w.State == StatePendingResources && strings.Contains(w.Error, "ray executor: ray dashboard unreachable")
	})
	if w.Attempts != 0 {
		t.Fatalf("waiting task: %q, %d attempts", w.Error, w.Attempts)
	}
}

// Ray's dashboard answers a submission with HTTP 500 "No available agent to
// submit job, please try again later" while its job agent is still
// starting (seen on a fresh, loaded machine). That is Ray not ready, not a
// failed job: the attempt records the answer, the task waits and retries,
// and the next attempt runs. A real head cannot be made to give this
// answer on demand, so this dashboard is an HTTP stand-in at the lowest
// seam: the Jobs REST API and /api/cluster_status, on loopback.
func TestRay_NotReadyAnswerIsRetriedNotFailed(t *testing.T) {
	var mu sync.Mutex
	submits := 0
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/cluster_status", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `{"data":{"clusterStatus":{"loadMetricsReport":{"usageByNode":{"n1":{"GPU":[0,4]}}}}}}`)
	})
	mux.HandleFunc("POST /api/jobs/", func(w http.ResponseWriter, r *http.Request) {
		var req RaySubmitRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		submits++
		first := submits == 1
		mu.Unlock()
		if first {
			http.Error(w, "No available agent to submit job, please try again later.", http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, `{"submission_id":%q}`, req.SubmissionID)
	})
	mux.HandleFunc("GET /api/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"submission_id":%q,"status":"SUCCEEDED","driver_exit_code":0}`, r.PathValue("id"))
	})
	dash := httptest.NewServer(mux)
	defer dash.Close()

	store, err := OpenStore(filepath.Join(t.TempDir(), "jobs.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ex := NewRayExecutor(RayConfig{Client: &RayClient{Address: dash.URL}})
	r, err := NewRunner(Config{Store: store, Executors: map[string]Executor{ExecutorRay: ex},
		PollInterval: 50 * time.Millisecond, RetryBackoff: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	task, err := r.Submit(context.Background(), []byte("executor: ray\ngpus_per_node: 2\ncommand: train\n"))
	if err != nil {
		t.Fatal(err)
	}
	start(t, r)
	done := wait(t, r, task.ID, StateSucceeded, StateFailed)
	attempts, err := store.Attempts(context.Background(), task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if done.State != StateSucceeded || len(attempts) != 2 {
		t.Fatalf("task %s with %d attempts (%s), want SUCCEEDED on the second", done.State, len(attempts), done.Error)
	}
	first := attempts[0]
	if first.FailureKind != FailureUnknown || !strings.Contains(first.Message, "No available agent") {
		t.Fatalf("first attempt: %s %q, want UNKNOWN with Ray's answer", first.FailureKind, first.Message)
	}
	events, err := store.Events(context.Background(), task.ID)
	if err != nil {
		t.Fatal(err)
	}
	retried := false
	for _, e := range events {
		retried = retried || (e.Kind == "retry" && strings.Contains(e.Message, "cannot take it now"))
	}
	if !retried {
		t.Fatalf("no retry event saying Ray could not take the job: %+v", events)
	}
}

// A Ray job's output past the answers' usual bound (8 MiB; Ray's logs API
// answers the whole output in one JSON string) is read whole: it failed
// to decode, the job's logs unreadable.
func TestRay_LogsPast8MiBWhole(t *testing.T) {
	r, _, _ := rayRig(t)
	// 9 MiB: 9,216 lines of 1,023 x's and a newline.
	task, err := r.Submit(context.Background(), []byte("executor: ray\ngpus_per_node: 0\ncommand: python3 -c \"import sys; sys.stdout.write(('x' * 1023 + '\\\\n') * 9216)\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if done := wait(t, r, task.ID, StateSucceeded, StateFailed); done.State != StateSucceeded {
		t.Fatalf("got %s (%s)", done.State, done.Error)
	}
	var logs strings.Builder
	for from := int64(0); ; {
		c, err := r.LogsFrom(context.Background(), task.ID, "", from)
		if err != nil {
			t.Fatal(err)
		}
		logs.WriteString(c.Text)
		if from = c.Start + int64(len(c.Text)); from >= c.Size {
			break
		}
	}
	if want := strings.Repeat(strings.Repeat("x", 1023)+"\n", 9216); !strings.Contains(logs.String(), want) {
		t.Fatalf("the logs hold %d bytes, not the job's 9 MiB of output", logs.Len())
	}
}
