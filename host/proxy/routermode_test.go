package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// llamaServerError checks that b is llama-server's error body and returns
// its error object.
func llamaServerError(t testing.TB, b []byte) llamaServerErrorObject {
	t.Helper()
	var eb struct {
		Error *llamaServerErrorObject `json:"error"`
	}
	if err := json.Unmarshal(b, &eb); err != nil || eb.Error == nil || eb.Error.Message == "" || eb.Error.Type == "" || eb.Error.Code == 0 {
		t.Fatalf("not a llama-server error body: %s", b)
	}
	return *eb.Error
}

// TestRouterMode_LoadUnloadList: llama-server's router-mode API over
// Loadout's models: GET /models with each model's status, POST
// /models/load and /models/unload with llama-server's answers, and its
// errors for a model already running, not running, or unknown.
func TestRouterMode_LoadUnloadList(t *testing.T) {
	e := newEnv(t, envOpts{})
	statusOf := func(id string) string {
		t.Helper()
		resp, b := e.do(request{method: http.MethodGet, path: "/models"})
		var list struct {
			Object string `json:"object"`
			Data   []struct {
				ID     string `json:"id"`
				Object string `json:"object"`
				Status struct {
					Value string `json:"value"`
				} `json:"status"`
			} `json:"data"`
		}
		if err := json.Unmarshal(b, &list); resp.StatusCode != 200 || err != nil || list.Object != "list" {
			t.Fatalf("GET /models: %d %s", resp.StatusCode, b)
		}
		for _, m := range list.Data {
			if m.ID == id && m.Object == "model" {
				return m.Status.Value
			}
		}
		t.Fatalf("GET /models: no %s in %s", id, b)
		return ""
	}
	ok := func(path, body string) {
		t.Helper()
		resp, b := e.do(request{path: path, body: body})
		if resp.StatusCode != 200 || strings.TrimSpace(string(b)) != `{"success":true}` {
			t.Fatalf("POST %s %s: %d %s", path, body, resp.StatusCode, b)
		}
	}
	fails := func(path, body string, status int, typ, msg string) {
		t.Helper()
		resp, b := e.do(request{path: path, body: body})
		le := llamaServerError(t, b)
		if resp.StatusCode != status || le.Code != status || le.Type != typ || !strings.Contains(le.Message, msg) {
			t.Errorf("POST %s %s: %d %+v, want %d %s %q", path, body, resp.StatusCode, le, status, typ, msg)
		}
	}

	if st := statusOf("a"); st != "unloaded" {
		t.Fatalf("a before the load: %s", st)
	}
	ok("/models/load", `{"model":"a"}`)
	e.world.expect(t, "start a")
	if st := statusOf("a"); st != "loaded" {
		t.Fatalf("a after the load: %s", st)
	}
	fails("/models/load", `{"model":"a"}`, 400, "invalid_request_error", "model is already running")
	fails("/models/load", `{"model":"nope"}`, 404, "not_found_error", "is not found")
	fails("/models/unload", `{"model":"nope"}`, 400, "invalid_request_error", "is not found")
	fails("/models/unload", `{"model":"b"}`, 400, "invalid_request_error", "model is not running")
	fails("/models/load", `{"model":`, 400, "invalid_request_error", "JSON")
	ok("/models/unload", `{"model":"a"}`)
	e.world.expect(t, "stop a")
	if st := statusOf("a"); st != "unloaded" {
		t.Fatalf("a after the unload: %s", st)
	}
}

// TestRouterMode_ModelsSSE: GET /models/sse sends llama-server's
// status_change events as a model loads and unloads, one per change of
// status value: a request served by a loaded model (counts that change,
// a status that does not) sends nothing.
func TestRouterMode_ModelsSSE(t *testing.T) {
	e := newEnv(t, envOpts{events: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := e.send(request{method: http.MethodGet, path: "/models/sse", ctx: ctx})
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("GET /models/sse: %d %s", resp.StatusCode, ct)
	}
	got := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				got <- data
			}
		}
		close(got)
	}()
	// next reads the next event and checks its model, event and data's
	// status and exit code (what llama-server's clients switch on).
	next := func(want string) {
		t.Helper()
		select {
		case data := <-got:
			var ev struct {
				Model, Event string
				Data         struct {
					Status   string
					ExitCode *int `json:"exit_code"`
					Info     *struct{ ID string }
				}
			}
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				t.Fatalf("event %s: %v", data, err)
			}
			sig := ev.Model + " " + ev.Event + " " + ev.Data.Status
			if ev.Data.ExitCode != nil {
				sig += fmt.Sprintf(" exit %d", *ev.Data.ExitCode)
			}
			if ev.Data.Info != nil {
				sig += " info " + ev.Data.Info.ID
			}
			if sig != want {
				t.Fatalf("event %s, want %s", data, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no event; want %s", want)
		}
	}
	if r, b := e.do(request{path: "/models/load", body: `{"model":"a"}`}); r.StatusCode != 200 {
		t.Fatalf("load: %d %s", r.StatusCode, b)
	}
	e.world.expect(t, "start a")
	next("a model_status loading")
	next("a status_change loading")
	next("a status_change loaded info a")
	e.echoOf(request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`})
	if r, b := e.do(request{path: "/models/unload", body: `{"model":"a"}`}); r.StatusCode != 200 {
		t.Fatalf("unload: %d %s", r.StatusCode, b)
	}
	e.world.expect(t, "stop a")
	next("a status_change unloaded exit 0")
}
