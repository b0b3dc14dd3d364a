package proxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/jobs"
)

// runJobsServer serves the jobs API over a running runner with the local
// executor and, when ray is not empty, a Ray executor on that dashboard.
func runJobsServer(t *testing.T, ray string) (*httptest.Server, *jobs.Runner) {
	t.Helper()
	dir := t.TempDir()
	store, err := jobs.OpenStore(filepath.Join(dir, "jobs.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	var r *jobs.Runner
	local, err := jobs.NewLocalExecutor(jobs.LocalConfig{Dir: filepath.Join(dir, "logs"), Notify: func() { r.Wake() },
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	execs := map[string]jobs.Executor{jobs.ExecutorLocal: local}
	if ray != "" {
		execs[jobs.ExecutorRay] = jobs.NewRayExecutor(jobs.RayConfig{Client: &jobs.RayClient{Address: ray, Timeout: time.Second},
			RefreshInterval: 50 * time.Millisecond})
	}
	r, err = jobs.NewRunner(jobs.Config{Store: store, Executors: execs, PollInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return serveJobs(t, r), r
}

// submitAndWait submits spec and waits until its task is in state.
func submitAndWait(t *testing.T, r *jobs.Runner, spec string, state jobs.State) *jobs.Task {
	t.Helper()
	task, err := r.Submit(context.Background(), []byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got, err := r.Wait(ctx, task.ID, state)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// getLogs is GET path with the job token: status, headers, body.
func getLogs(t *testing.T, ts *httptest.Server, path string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, ts.URL+path, nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// A Ray job's logs while its dashboard is unreachable: a gateway error
// (502), not a 404 saying there are no logs; a task never submitted has
// none (404 no_logs).
func TestJobsAPI_LogsOfAnUnreachableDashboardIs502(t *testing.T) {
	// A stand-in dashboard that takes the job and reports it running,
	// then goes away.
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/cluster_status", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `{"data":{"clusterStatus":{"loadMetricsReport":{"usageByNode":{"n1":{"GPU":[0,1]}}}}}}`)
	})
	mux.HandleFunc("POST /api/jobs/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"submission_id":"x"}`)
	})
	mux.HandleFunc("GET /api/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"submission_id":%q,"status":"RUNNING"}`, r.PathValue("id"))
	})
	dash := httptest.NewServer(mux)
	defer dash.Close()
	ts, r := runJobsServer(t, dash.URL)
	task := submitAndWait(t, r, "executor: ray\ncommand: train\n", jobs.StateRunning)
	never := submitAndWait(t, r, "executor: ray\ncommand: train\ngpus_per_node: 1\n", jobs.StatePendingResources)
	dash.Close()
	code, _, body := getLogs(t, ts, "/api/jobs/"+task.ID+"/logs")
	if code != http.StatusBadGateway && code != http.StatusServiceUnavailable && code != http.StatusGatewayTimeout || !strings.Contains(body, "unreachable") {
		t.Fatalf("logs while the dashboard is down: %d %s, want 502/503/504 saying it is unreachable", code, body)
	}
	if code, _, body := getLogs(t, ts, "/api/jobs/"+never.ID+"/logs"); code != http.StatusNotFound || !strings.Contains(body, "no_logs") {
		t.Fatalf("logs of a task never submitted: %d %s, want 404 no_logs", code, body)
	}
}

// An output over jobs.MaxLogChunk: the plain answer is its end and says
// how many bytes it leaves out; ?from=BYTE answers from that byte of the
// whole output.
func TestJobsAPI_LogsPastTheChunkSayWhatIsLeftOut(t *testing.T) {
	ts, r := runJobsServer(t, "")
	// 5 MiB of numbered lines: "%07d\n", 8 bytes each.
	const lines = 5 << 20 / 8
	task := submitAndWait(t, r, fmt.Sprintf("command: 'i=0; while [ $i -lt %d ]; do printf \"%%07d\\n\" $i; i=$((i+1)); done'\ngpus_per_node: 0\n", lines), jobs.StateSucceeded)
	size := int64(lines * 8)
	code, h, body := getLogs(t, ts, "/api/jobs/"+task.ID+"/logs")
	omitted := size - jobs.MaxLogChunk
	if code != 200 || int64(len(body)) != jobs.MaxLogChunk || h.Get("X-Loadout-Log-Omitted") != strconv.FormatInt(omitted, 10) ||
		h.Get("X-Loadout-Log-Size") != strconv.FormatInt(size, 10) {
		t.Fatalf("plain answer: %d, %d bytes, headers %v: want its last %d bytes, saying %d were left out", code, len(body), h, jobs.MaxLogChunk, omitted)
	}
	from := int64(4<<20 + 8*3)
	code, h, body = getLogs(t, ts, fmt.Sprintf("/api/jobs/%s/logs?from=%d&attempt=%s", task.ID, from, task.LatestAttempt.SubmissionID))
	if code != 200 || !strings.HasPrefix(body, fmt.Sprintf("%07d\n", from/8)) || int64(len(body)) != size-from || h.Get("X-Loadout-Log-Start") != strconv.FormatInt(from, 10) {
		t.Fatalf("from %d: %d, %d bytes starting %q, headers %v", from, code, len(body), body[:min(len(body), 16)], h)
	}
	if code, _, _ := getLogs(t, ts, "/api/jobs/"+task.ID+"/logs?from=-1"); code != http.StatusBadRequest {
		t.Fatalf("from=-1: %d, want 400", code)
	}
}
