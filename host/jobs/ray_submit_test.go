package jobs

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// A submission or a stop that reaches a real Ray head but whose answer
// never comes back, or that does not reach it at all. A real head cannot
// be made to lose an answer on demand, so a reverse proxy in front of it,
// on loopback, does: hook sees every request first and may forward it
// itself, answer it, or hang.

// rayHook handles a request to the proxy in front of the head (forward
// sends it on); it reports whether it answered: false lets the proxy
// forward it as usual.
type rayHook func(w http.ResponseWriter, r *http.Request, forward func(http.ResponseWriter, *http.Request)) bool

// rayProxy is a reverse proxy to the Ray head at addr, on 127.0.0.1, whose
// requests hook sees first.
func rayProxy(t *testing.T, addr string, hook rayHook) string {
	t.Helper()
	u, err := url.Parse(addr)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hook(w, r, rp.ServeHTTP) {
			rp.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// rayProxyRig is a runner with the Ray executor on the head at addr
// through a proxy whose requests hook sees first; each call to the
// dashboard is bounded by 2 s.
func rayProxyRig(t *testing.T, addr string, hook rayHook) (*Runner, *RayClient, string) {
	t.Helper()
	dir := t.TempDir()
	store := testStore(t, dir)
	ex := NewRayExecutor(RayConfig{Client: &RayClient{Address: rayProxy(t, addr, hook), Timeout: 2 * time.Second},
		RefreshInterval: 200 * time.Millisecond})
	r, err := NewRunner(Config{Store: store, Executors: map[string]Executor{ExecutorRay: ex},
		PollInterval: 200 * time.Millisecond, RetryBackoff: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	start(t, r)
	return r, &RayClient{Address: addr}, dir
}

// isSubmit reports whether r is a submission (POST /api/jobs/).
func isSubmit(r *http.Request) bool { return r.Method == http.MethodPost && r.URL.Path == "/api/jobs/" }

// hangAfterForwarding forwards the first submission to the head, so Ray
// takes it, and then answers nothing until the client gives up; it closes
// forwarded once Ray has answered it.
func hangAfterForwarding(forwarded chan struct{}) rayHook {
	var once sync.Once
	return func(w http.ResponseWriter, r *http.Request, forward func(http.ResponseWriter, *http.Request)) bool {
		first := false
		if isSubmit(r) {
			once.Do(func() { first = true })
		}
		if !first {
			return false
		}
		rec := httptest.NewRecorder()
		forward(rec, r.WithContext(context.Background()))
		close(forwarded)
		<-r.Context().Done() // the answer is lost
		return true
	}
}

// rayStatus waits until Ray's job id is in one of states (Ray tells no
// one: its status is polled) and returns it.
func rayStatus(t *testing.T, c *RayClient, id string, states ...string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		j, err := c.Job(context.Background(), id)
		for _, s := range states {
			if err == nil && j.Status == s {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("ray job %s: %+v (%v), want %v", id, j, err, states)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// rayAbsent fails the test if Ray has a job id.
func rayAbsent(t *testing.T, c *RayClient, id string) {
	t.Helper()
	var he *RayHTTPError
	if _, err := c.Job(context.Background(), id); !errors.As(err, &he) || he.Status != http.StatusNotFound {
		t.Fatalf("ray has %s (%v): it was submitted, want no such job", id, err)
	}
}

// A submission Ray took but whose answer was lost (no answer within the
// client's timeout) is looked up and adopted, never submitted again under
// a new submission id: the job runs once, as --a01.
func TestRay_SubmissionWithoutAnswerIsAdoptedNotResubmitted(t *testing.T) {
	addr := rayAddress(t)
	forwarded := make(chan struct{})
	r, ray, dir := rayProxyRig(t, addr, hangAfterForwarding(forwarded))
	task := submitTo(t, r, rayGate(t, dir, "gate", 1))
	<-forwarded
	waitUntil(t, r, task.ID, "said its submission may have been taken", func(w *Task) bool {
		return w.State == StateSubmitting && strings.Contains(w.Error, "may have been taken")
	})
	running := wait(t, r, task.ID, StateRunning, StateSucceeded, StateFailed, StateCanceled)
	if running.State != StateRunning || running.Attempts != 1 || running.LatestAttempt.SubmissionID != task.ID+"--a01" {
		t.Fatalf("task %s after %d attempts (%+v, %s): want RUNNING as --a01", running.State, running.Attempts, running.LatestAttempt, running.Error)
	}
	rayAbsent(t, ray, task.ID+"--a02")
	closeGate(t, dir, "gate")
	if done := wait(t, r, task.ID, StateSucceeded, StateFailed); done.State != StateSucceeded || done.Attempts != 1 {
		t.Fatalf("task %s after %d attempts (%s)", done.State, done.Attempts, done.Error)
	}
}

// A cancel while the submission's answer is outstanding, and the answer
// is lost though Ray took the job: the task is CANCELED with no new
// attempt, and the job Ray took is stopped.
func TestRay_CancelWhileSubmittingStopsWhatRayTook(t *testing.T) {
	addr := rayAddress(t)
	forwarded := make(chan struct{})
	r, ray, dir := rayProxyRig(t, addr, hangAfterForwarding(forwarded))
	task := submitTo(t, r, rayGate(t, dir, "gate", 1))
	<-forwarded
	if err := r.Cancel(context.Background(), task.ID); err != nil {
		t.Fatal(err)
	}
	done := wait(t, r, task.ID, StateCanceled, StateSucceeded, StateFailed)
	if done.State != StateCanceled || done.Attempts != 1 {
		t.Fatalf("task %s after %d attempts (%s): want CANCELED after 1", done.State, done.Attempts, done.Error)
	}
	rayStatus(t, ray, task.ID+"--a01", StatusStopped)
	rayAbsent(t, ray, task.ID+"--a02")
}

// A cancel while the submission is outstanding, and Ray then refuses it
// (HTTP 503: not taken): the task is CANCELED at once, with no new
// attempt, where it used to be retried and submitted again.
func TestRay_CancelWhileSubmittingThenRefusedIsCanceled(t *testing.T) {
	addr := rayAddress(t)
	arrived, canceled := make(chan struct{}), make(chan struct{})
	var once sync.Once
	r, ray, dir := rayProxyRig(t, addr, func(w http.ResponseWriter, r *http.Request, _ func(http.ResponseWriter, *http.Request)) bool {
		first := false
		if isSubmit(r) {
			once.Do(func() { first = true })
		}
		if !first {
			return false
		}
		close(arrived)
		<-canceled
		http.Error(w, "No available agent to submit job, please try again later.", http.StatusServiceUnavailable)
		return true
	})
	task := submitTo(t, r, rayGate(t, dir, "gate", 1))
	<-arrived
	if err := r.Cancel(context.Background(), task.ID); err != nil {
		t.Fatal(err)
	}
	close(canceled)
	done := wait(t, r, task.ID, StateCanceled, StateSucceeded, StateFailed)
	if done.State != StateCanceled || done.Attempts != 1 {
		t.Fatalf("task %s after %d attempts (%s): want CANCELED after 1", done.State, done.Attempts, done.Error)
	}
	rayAbsent(t, ray, task.ID+"--a02")
	rayAbsent(t, ray, task.ID+"--a01")
}

// A cancel whose stop call does not reach Ray (the dashboard unreachable
// at that moment: the connection drops) is asked again at the next status
// syncs: the job is stopped and the task CANCELED, not left to run to its
// end.
func TestRay_FailedStopIsRetriedUntilCanceled(t *testing.T) {
	addr := rayAddress(t)
	var mu sync.Mutex
	dropped := 0
	r, ray, dir := rayProxyRig(t, addr, func(w http.ResponseWriter, r *http.Request, _ func(http.ResponseWriter, *http.Request)) bool {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/stop") {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		if dropped > 0 {
			return false
		}
		dropped++
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
		return true
	})
	task := submitTo(t, r, rayGate(t, dir, "gate", 1))
	wait(t, r, task.ID, StateRunning)
	if err := r.Cancel(context.Background(), task.ID); err != nil {
		t.Fatal(err)
	}
	done := wait(t, r, task.ID, StateCanceled, StateSucceeded, StateFailed)
	if done.State != StateCanceled {
		t.Fatalf("task %s (%s): want CANCELED", done.State, done.Error)
	}
	mu.Lock()
	n := dropped
	mu.Unlock()
	if n != 1 {
		t.Fatalf("%d stop calls dropped, want the first", n)
	}
	rayStatus(t, ray, done.LatestAttempt.SubmissionID, StatusStopped)
}

// closeGate opens a rayGate (its file exists).
func closeGate(t *testing.T, dir, name string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}
