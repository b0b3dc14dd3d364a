package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestE2E_ShutdownTimeoutEndsRequests is issue 9 item 2.5: SIGTERM with a
// short --shutdown-timeout while a stream and a non-streaming request run
// longer than it. At the deadline the stream gets an OpenAI-shaped error
// event and ends (no [DONE]), the non-streaming request a 503 with an
// OpenAI-shaped body, and loadout exits 0 within the timeout plus one
// second (the promise of serve's help), its model servers gone.
func TestE2E_ShutdownTimeoutEndsRequests(t *testing.T) {
	const timeout = 2 * time.Second
	s := startServer(t, "../../testdata/e2e/sim.yaml", "--shutdown-timeout", timeout.String())
	s.mustChat("a") // loaded: a generates 50 tokens/s, 4 requests at once
	pid := onePid(t, "a")

	// 1000 tokens each: 20 s, far past the timeout.
	stream, err := http.Post(s.base+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"a","stream":true,"max_tokens":1000,"messages":[{"role":"user","content":"long"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	events := bufio.NewReader(stream.Body)
	if first := nextData(t, events); !strings.Contains(first, "chat.completion.chunk") {
		t.Fatalf("first event %q", first)
	}

	plain := s.postAsync("/v1/chat/completions", `{"model":"a","max_tokens":1000,"messages":[{"role":"user","content":"long"}]}`)
	eventually(t, "both requests to be in flight", func() bool { return inFlight(t, s, "a") == 2 })

	sent := time.Now()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-s.exit:
		took := time.Since(sent)
		t.Logf("loadout exited %v after SIGTERM", took)
		if err != nil {
			t.Errorf("loadout exited with %v after SIGTERM, want status 0", err)
		}
		if limit := timeout + time.Second; took > limit {
			t.Errorf("loadout exited %v after SIGTERM, want within %v (the timeout plus one second)", took, limit)
		}
	case <-time.After(timeout + 20*time.Second):
		t.Fatal("loadout did not exit after SIGTERM")
	}

	// The stream: more chunks perhaps, then the error event, then its end.
	var last string
	for {
		ev, ok := readData(t, events)
		if !ok {
			break
		}
		if ev == "[DONE]" {
			t.Fatal("the stream ended with [DONE]; want an error event and no [DONE]")
		}
		last = ev
	}
	wantShutdownError(t, "the stream's last event", last)

	a := <-plain
	if a.err != nil || a.code != http.StatusServiceUnavailable {
		t.Fatalf("the non-streaming request: %d %q %v, want 503", a.code, a.body, a.err)
	}
	wantShutdownError(t, "the non-streaming request's body", a.body)

	if alive(pid) {
		t.Errorf("a's model server %d outlived loadout", pid)
	}
}

// A second signal during a shutdown that waits for a long request (an
// operator pressing Ctrl-C again) ends it now: the stream gets the error
// event saying why, and loadout exits without waiting out its timeout.
func TestE2E_SecondSignalEndsTheShutdownsWait(t *testing.T) {
	s := startServer(t, "../../testdata/e2e/sim.yaml", "--shutdown-timeout", "10m")
	s.mustChat("a")
	stream, err := http.Post(s.base+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"a","stream":true,"max_tokens":100000,"messages":[{"role":"user","content":"long"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	events := bufio.NewReader(stream.Body)
	nextData(t, events)
	if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the shutdown to begin", func() bool { return strings.Contains(s.log(), "shutting down") })
	if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-s.exit:
		if err != nil {
			t.Errorf("loadout exited with %v after a second SIGINT, want status 0", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("loadout waits out its 10m shutdown timeout after a second SIGINT")
	}
	var last string
	for {
		ev, ok := readData(t, events)
		if !ok {
			break
		}
		last = ev
	}
	if !strings.Contains(last, "a second signal asked to stop now") {
		t.Errorf("the stream's last event %q; want the shutdown's error saying a second signal ended it", last)
	}
}

// TestE2E_ConcurrencyLimitQueuesUnderLoad is issue 9 item 2.6: many
// concurrent requests over three models that exclude each other, each with
// a concurrencyLimit of 2. Requests over a limit wait in the queue; with
// the queue (1024) never full, none gets 429.
func TestE2E_ConcurrencyLimitQueuesUnderLoad(t *testing.T) {
	s := startServer(t, "../../testdata/e2e/limit.yaml")
	const perModel = 30
	var wg sync.WaitGroup
	results := make(chan string, 3*perModel)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 3 * perModel}}
	defer client.CloseIdleConnections()
	for i := range 3 * perModel {
		model := []string{"x", "y", "z"}[i%3]
		wg.Go(func() {
			resp, err := client.Post(s.base+"/v1/chat/completions", "application/json", strings.NewReader(chat(model, false)))
			if err != nil {
				results <- fmt.Sprintf("%s: %v", model, err)
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				results <- fmt.Sprintf("%s: %d %s", model, resp.StatusCode, b)
			}
		})
	}
	wg.Wait()
	close(results)
	failed := 0
	for r := range results {
		failed++
		if failed <= 5 {
			t.Errorf("request for %s", r)
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d requests failed, want none", failed, 3*perModel)
	}
	s.stop()
}

// readData returns the data of the next SSE event, or false at the end of
// the stream (a cut connection is the end too; the caller checks what the
// last event was).
func readData(t *testing.T, r *bufio.Reader) (string, bool) {
	t.Helper()
	for {
		line, err := r.ReadString('\n')
		if strings.HasPrefix(line, "data: ") {
			return strings.TrimSpace(strings.TrimPrefix(line, "data: ")), true
		}
		if err != nil {
			if err != io.EOF {
				t.Errorf("reading the stream: %v (an error event should end it cleanly)", err)
			}
			return "", false
		}
	}
}

func nextData(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	ev, ok := readData(t, r)
	if !ok {
		t.Fatal("the stream ended early")
	}
	return ev
}

// wantShutdownError checks that s is an OpenAI-shaped error saying loadout
// is shutting down.
func wantShutdownError(t *testing.T, what, s string) {
	t.Helper()
	var e struct {
		Error *struct {
			Message, Type, Code string
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(s), &e); err != nil || e.Error == nil {
		t.Fatalf("%s is not an OpenAI-shaped error: %q", what, s)
	}
	if e.Error.Type != "server_error" || e.Error.Code != "unavailable" || !strings.Contains(e.Error.Message, "shutting down") {
		t.Errorf("%s: %+v, want a server_error \"unavailable\" saying loadout is shutting down", what, *e.Error)
	}
}

// inFlight returns the requests in flight on model, from /api/models.
func inFlight(t *testing.T, s *server, model string) int {
	t.Helper()
	_, body := s.get("/api/models")
	var out struct {
		Models []struct {
			Model    string `json:"model"`
			InFlight int    `json:"in_flight"`
		} `json:"models"`
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatalf("/api/models: %v: %s", err, body)
	}
	for _, m := range out.Models {
		if m.Model == model {
			return m.InFlight
		}
	}
	t.Fatalf("/api/models lacks %s: %s", model, body)
	return 0
}
