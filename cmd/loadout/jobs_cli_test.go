package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// `loadout jobs` against a server that accepts the connection and never
// answers (issue 27, "Hung, not dead"): it gives up after --timeout,
// prints one line saying so and exits non-zero.
func TestJobsCLI_HangingServerTimesOut(t *testing.T) {
	ln := silentListener(t)
	for _, args := range [][]string{{"list"}, {"get", "x-20260101-000000-abcd"}, {"logs", "x-20260101-000000-abcd"}} {
		cmd := exec.Command(loadoutBin, append([]string{"jobs", "--server", "http://" + ln.Addr().String(), "--token", "t", "--timeout", "300ms"}, args...)...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() == 0 {
			t.Fatalf("jobs %v: %v, want a non-zero exit\n%s", args, err, out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) != 1 || !strings.Contains(lines[0], "no answer within 300ms") {
			t.Fatalf("jobs %v printed %q, want one line saying no answer came", args, out)
		}
	}
}

// silentListener is a loopback listener that accepts connections and
// never answers on them (a server that hangs); its connections are closed
// when the test ends.
func silentListener(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
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
		<-accepted
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln
}

// `loadout jobs submit` that sends the spec and gets no answer within
// --timeout says the job may have been queued all the same, and how to
// check, rather than only that no answer came.
func TestJobsCLI_SubmitWithoutAnswerMayHaveSubmitted(t *testing.T) {
	ln := silentListener(t)
	spec := filepath.Join(t.TempDir(), "job.yaml")
	if err := os.WriteFile(spec, []byte("command: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(loadoutBin, "jobs", "--server", "http://"+ln.Addr().String(), "--token", "t", "--timeout", "300ms", "submit", spec).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("submit: %v, want a non-zero exit\n%s", err, out)
	}
	if !strings.Contains(string(out), "no answer within 300ms") || !strings.Contains(string(out), "may have been submitted") ||
		!strings.Contains(string(out), "loadout jobs list") {
		t.Fatalf("submit printed %q, want it to say the job may have been submitted, and to check with `loadout jobs list`", out)
	}
}

// `loadout jobs list` prints a task's error on one line in its NOTE
// column: the first line of a multi-line one (a Ray failure's traceback).
// The server is a stand-in answering GET /api/jobs.
func TestJobsCLI_ListNoteIsTheErrorsFirstLine(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"jobs":[{"id":"grpo-20260101-000000-abcd","state":"FAILED","executor":"ray","job":{"nnodes":1,"gpus_per_node":1},"attempts":1,
			"error":"grpo-20260101-000000-abcd--a01: Job entrypoint command failed with exit code 1, last available logs:\nTraceback (most recent call last):\n  File \"x.py\", line 1\nValueError: boom (USER_ERROR)"}]}`)
	}))
	defer srv.Close()
	out, err := exec.Command(loadoutBin, "jobs", "--server", srv.URL, "--token", "t", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("list: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "Job entrypoint command failed with exit code 1") || strings.Contains(string(out), "Traceback") {
		t.Fatalf("list printed:\n%s\nwant a header and one line, the error's first", out)
	}
}
