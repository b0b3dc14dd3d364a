package proxy

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/host/jobs"
)

// jobsServer serves the jobs API over a runner (not run: submissions only
// queue) on a real SQLite file in dir, with job token "tok".
func jobsServer(t *testing.T, dir string) (*httptest.Server, *jobs.Store) {
	t.Helper()
	store, err := jobs.OpenStore(filepath.Join(dir, "jobs.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	local, err := jobs.NewLocalExecutor(jobs.LocalConfig{Dir: filepath.Join(dir, "logs"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	runner, err := jobs.NewRunner(jobs.Config{Store: store, Executors: map[string]jobs.Executor{jobs.ExecutorLocal: local},
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Router: &recordingRouter{}, Jobs: runner, JobToken: "tok", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return ts, store
}

// jobsCall sends one jobs API request with the token and returns the
// status and the error message (empty on success).
func jobsCall(t *testing.T, ts *httptest.Server, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &e)
	return resp.StatusCode, e.Error.Message
}

// A body that is no job spec is the client's mistake: 400 saying what is
// wrong, never a 500.
func TestJobsAPI_MalformedSpecIs400(t *testing.T) {
	ts, _ := jobsServer(t, t.TempDir())
	for _, tc := range []struct{ name, body, want string }{
		{"empty", "", "empty"},
		{"a JSON array", `[{"command":"x"}]`, "got a list"},
		{"binary", "\x00\x01\x02\xff\xfe\x00", "not valid YAML or JSON"},
		{"bad YAML", "command: x\ngpus_per_node: 1\n  bad: : :\n", "line 3"},
		{"a fraction of a GPU", `{"command":"x","gpus_per_node":0.5}`, "gpus_per_node: want an integer, got 0.5"},
		{"1.9 GPUs", "command: x\ngpus_per_node: 1.9\n", "gpus_per_node: want an integer, got 1.9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, msg := jobsCall(t, ts, http.MethodPost, "/api/jobs", tc.body)
			if code != http.StatusBadRequest || !strings.Contains(msg, tc.want) {
				t.Fatalf("got %d %q, want 400 saying %q", code, msg, tc.want)
			}
		})
	}
}
