package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Issue 27, "Hung, not dead": a Ray dashboard that accepts connections and
// never answers, or answers some calls and hangs on others. A real Ray
// head cannot be made to hang on demand, so these dashboards are stand-ins
// at the lowest seam for a hang: a loopback listener, or an HTTP server
// speaking Ray's Jobs REST API and /api/cluster_status.

// hangingListener accepts connections on 127.0.0.1 and never answers; the
// cleanup closes it and every connection it took.
func hangingListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return "http://" + ln.Addr().String()
}

// hangRig is a runner with the local executor on a 2-GPU ledger and the
// Ray executor on ray.
func hangRig(t *testing.T, ray *RayExecutor) *Runner {
	t.Helper()
	dir := t.TempDir()
	store := testStore(t, dir)
	var r *Runner
	local, err := NewLocalExecutor(LocalConfig{Ledger: newLedger(2), Dir: filepath.Join(dir, "logs"),
		StopGrace: time.Second, Notify: func() { r.Wake() }, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	r, err = NewRunner(Config{Store: store, Executors: map[string]Executor{ExecutorLocal: local, ExecutorRay: ray},
		PollInterval: 50 * time.Millisecond, RetryBackoff: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	start(t, r)
	return r
}

// submitWithin submits spec and fails the test if the answer has not come
// within a generous bound (a hang detector, not a speed assertion).
func submitWithin(t *testing.T, r *Runner, spec string) *Task {
	t.Helper()
	type result struct {
		t   *Task
		err error
	}
	ch := make(chan result, 1)
	go func() {
		task, err := r.Submit(context.Background(), []byte(spec))
		ch <- result{task, err}
	}()
	select {
	case res := <-ch:
		if res.err != nil {
			t.Fatalf("submit: %v", res.err)
		}
		return res.t
	case <-time.After(10 * time.Second):
		t.Fatal("submit has not answered in 10 s: it waits on the Ray dashboard")
		return nil
	}
}

// A dashboard that accepts connections and never answers: the submit API
// answers at once (the task waits, saying why) and a local job with free
// GPUs runs meanwhile.
func TestRay_HangingDashboard_SubmitAnswersAndLocalJobRuns(t *testing.T) {
	ray := NewRayExecutor(RayConfig{Client: &RayClient{Address: hangingListener(t)}})
	r := hangRig(t, ray)
	rt := submitWithin(t, r, "executor: ray\ngpus_per_node: 1\ncommand: train\n")
	// QUEUED as submitted, or PENDING_RESOURCES when the runner has
	// looked at it already (it may, before Submit reads it back).
	if rt.State != StateQueued && rt.State != StatePendingResources || rt.Error == "" {
		t.Fatalf("ray task %s (%q): want QUEUED or PENDING_RESOURCES, saying why it waits", rt.State, rt.Error)
	}
	lt := submitWithin(t, r, "command: echo ok\ngpus_per_node: 1\n")
	if done := wait(t, r, lt.ID, StateSucceeded, StateFailed); done.State != StateSucceeded {
		t.Fatalf("local job %s (%s)", done.State, done.Error)
	}
	if w := wait(t, r, rt.ID, StatePendingResources); !strings.Contains(w.Error, "ray executor") || w.Attempts != 0 {
		t.Fatalf("ray task waits with %q after %d attempts", w.Error, w.Attempts)
	}
}

// A dashboard that reports GPUs but hangs on the submission itself: the
// Ray task stays SUBMITTING while a local job runs.
func TestRay_HangingSubmission_LocalJobRuns(t *testing.T) {
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/cluster_status", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `{"data":{"clusterStatus":{"loadMetricsReport":{"usageByNode":{"n1":{"GPU":[0,4]}}}}}}`)
	})
	var submits atomic.Int32
	mux.HandleFunc("POST /api/jobs/", func(w http.ResponseWriter, r *http.Request) {
		submits.Add(1)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	dash := httptest.NewServer(mux)
	t.Cleanup(dash.Close)
	t.Cleanup(func() { close(release) }) // runs before dash.Close
	ray := NewRayExecutor(RayConfig{Client: &RayClient{Address: dash.URL}})
	r := hangRig(t, ray)
	rt := submitWithin(t, r, "executor: ray\ngpus_per_node: 1\ncommand: train\n")
	wait(t, r, rt.ID, StateSubmitting)
	lt := submitWithin(t, r, "command: echo ok\ngpus_per_node: 1\n")
	if done := wait(t, r, lt.ID, StateSucceeded, StateFailed); done.State != StateSucceeded {
		t.Fatalf("local job %s (%s)", done.State, done.Error)
	}
	if got, _ := r.Store().Get(context.Background(), rt.ID); got.State != StateSubmitting || submits.Load() != 1 {
		t.Fatalf("ray task %s after %d submissions: want SUBMITTING, submitted once", got.State, submits.Load())
	}
}

// Every call to the dashboard is bounded: one that never answers is
// unreachable after the client's Timeout.
func TestRayClient_HangingDashboard_CallIsBounded(t *testing.T) {
	c := &RayClient{Address: hangingListener(t), Timeout: 100 * time.Millisecond}
	_, err := c.Job(context.Background(), "x--a01")
	var ue *RayUnreachableError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "no answer within 100ms") {
		t.Fatalf("got %v, want a RayUnreachableError saying no answer came", err)
	}
}

// waitUntil waits until task id satisfies ok (as each change of the queue
// is committed), at most 20 s, and returns it.
func waitUntil(t *testing.T, r *Runner, id string, what string, ok func(*Task) bool) *Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		r.mu.Lock()
		ch := r.changed
		r.mu.Unlock()
		task, err := r.Store().Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if ok(task) {
			return task
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("task %s never %s: %s (%q)", id, what, task.State, task.Error)
		}
	}
}

// fakeRay is a Ray dashboard stand-in whose nodes the test sets; jobs
// submitted to it succeed at once.
type fakeRay struct {
	mu    sync.Mutex
	nodes string // usageByNode's JSON
}

func (f *fakeRay) setNodes(s string) { f.mu.Lock(); f.nodes = s; f.mu.Unlock() }

func (f *fakeRay) serve(t *testing.T) string {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/cluster_status", func(w http.ResponseWriter, _ *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		fmt.Fprintf(w, `{"data":{"clusterStatus":{"loadMetricsReport":{"usageByNode":%s}}}}`, f.nodes)
	})
	mux.HandleFunc("POST /api/jobs/", func(w http.ResponseWriter, r *http.Request) {
		var req RaySubmitRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, `{"submission_id":%q}`, req.SubmissionID)
	})
	mux.HandleFunc("GET /api/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"submission_id":%q,"status":"SUCCEEDED","driver_exit_code":0}`, r.PathValue("id"))
	})
	dash := httptest.NewServer(mux)
	t.Cleanup(dash.Close)
	return dash.URL
}

// A Ray cluster with no node with GPUs reporting yet (a head started with
// --num-gpus=0, an autoscaling cluster at zero workers): a GPU job waits
// for nodes instead of being refused; once nodes report it runs, and a gang
// that can never fit on them fails then, saying so.
func TestRay_NoNodesYet_TaskWaitsForNodes(t *testing.T) {
	f := &fakeRay{nodes: `{"head":{"CPU":[0,8]}}`}
	ray := NewRayExecutor(RayConfig{Client: &RayClient{Address: f.serve(t)}, RefreshInterval: 50 * time.Millisecond})
	r := hangRig(t, ray)
	fits := submitWithin(t, r, "executor: ray\ngpus_per_node: 2\ncommand: train\n")
	never := submitWithin(t, r, "executor: ray\ngpus_per_node: 8\ncommand: train\n")
	waitUntil(t, r, fits.ID, "waited for nodes", func(w *Task) bool {
		return w.State == StatePendingResources && strings.Contains(w.Error, "no Ray node with GPUs has reported yet") &&
			strings.Contains(w.Error, "waiting for nodes")
	})
	f.setNodes(`{"head":{"CPU":[0,8]},"w1":{"GPU":[0,4]}}`)
	if done := wait(t, r, fits.ID, StateSucceeded, StateFailed); done.State != StateSucceeded {
		t.Fatalf("the job that fits: %s (%s)", done.State, done.Error)
	}
	if done := wait(t, r, never.ID, StateSucceeded, StateFailed); done.State != StateFailed || !strings.Contains(done.Error, "could never run") || done.Attempts != 0 {
		t.Fatalf("the gang that can never fit: %s after %d attempts (%s)", done.State, done.Attempts, done.Error)
	}
}
