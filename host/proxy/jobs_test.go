package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
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
	return serveJobs(t, runner), store
}

// serveJobs serves runner as the jobs API, with job token "tok", until
// the test ends.
func serveJobs(t *testing.T, runner *jobs.Runner) *httptest.Server {
	t.Helper()
	srv, err := New(Config{Router: &recordingRouter{}, Jobs: runner, JobToken: "tok", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return ts
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

// A damaged page in the jobs database: the API's error names the file.
// The database is a real SQLite file with a page overwritten.
func TestJobsAPI_DamagedDatabaseNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "jobs.db")
	ts, store := jobsServer(t, dir)
	for range 20 {
		code, _ := jobsCall(t, ts, http.MethodPost, "/api/jobs", "gpus_per_node: 0\ncommand: echo "+strings.Repeat("x", 2000)+"\n")
		if code != http.StatusCreated {
			t.Fatalf("submit: %d", code)
		}
	}
	ts.Close()
	all, err := store.List(context.Background())
	if err != nil || len(all) == 0 {
		t.Fatalf("list: %v", err)
	}
	id := all[len(all)-1].ID
	if err := store.Close(); err != nil { // checkpoints the WAL into the file
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Page 2 is the root of the tasks table (the first created).
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xa5}, 4096), 4096); err != nil {
		t.Fatal(err)
	}
	f.Close()
	ts, _ = jobsServer(t, dir)
	for _, p := range []string{"/api/jobs", "/api/jobs/" + id} {
		code, msg := jobsCall(t, ts, http.MethodGet, p, "")
		if code != http.StatusInternalServerError || !strings.Contains(msg, path) {
			t.Fatalf("GET %s: %d %q, want a 500 naming %s", p, code, msg, path)
		}
	}
}
