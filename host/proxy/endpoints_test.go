package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/host/router"
)

// TestInference_LlamaSwapEndpoints: every model endpoint a llama-swap
// client calls reaches the named model's server at the same path and
// method, its model read from the JSON body, the multipart form or the
// query string.
func TestInference_LlamaSwapEndpoints(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, path := range []string{
		"/v1/messages", "/v1/messages/count_tokens", "/v1/audio/voices",
		"/sdapi/v1/txt2img", "/sdapi/v1/img2img", "/completion", "/infill",
	} {
		body := `{"model":"org/c","prompt":"p"}`
		if strings.HasPrefix(path, "/v1/messages") {
			body = `{"model":"org/c","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
		}
		ec := e.echoOf(request{path: path, body: body})
		if ec.Path != path || ec.Method != http.MethodPost || ec.Server != "org/c" {
			t.Errorf("POST %s reached %s as %s %s", path, ec.Server, ec.Method, ec.Path)
		}
	}
	form, ct := multipartBody(t, [][2]string{{"model", "c"}, {"prompt", "a cat"}})
	ec := e.echoOf(request{path: "/v1/images/edits", body: form, ctype: ct})
	if ec.Path != "/v1/images/edits" || ec.Server != "org/c" || !strings.Contains(ec.Body, "a cat") {
		t.Errorf("POST /v1/images/edits (multipart) reached %s as %s %s", ec.Server, ec.Method, ec.Path)
	}
	for _, path := range []string{"/v1/audio/voices", "/sdapi/v1/loras", "/props"} {
		ec := e.echoOf(request{method: http.MethodGet, path: path + "?model=c"})
		if ec.Path != path || ec.Method != http.MethodGet || ec.Server != "org/c" || ec.Query != "model=c" {
			t.Errorf("GET %s?model=c reached %s as %s %s?%s", path, ec.Server, ec.Method, ec.Path, ec.Query)
		}
	}
}

// anthropicError checks that b is the Messages API's error body and
// returns its error object.
func anthropicError(t testing.TB, b []byte) anthropicErrorObject {
	t.Helper()
	var eb struct {
		Type  string                `json:"type"`
		Error *anthropicErrorObject `json:"error"`
	}
	if err := json.Unmarshal(b, &eb); err != nil || eb.Type != "error" || eb.Error == nil || eb.Error.Message == "" || eb.Error.Type == "" {
		t.Fatalf("not an Anthropic error body: %s", b)
	}
	return *eb.Error
}

// TestMessages_MalformedBody: a Messages API request with a malformed body
// is a 400 in Anthropic's error shape, and its model is not loaded.
func TestMessages_MalformedBody(t *testing.T) {
	e := newEnv(t, envOpts{})
	for name, body := range map[string]string{
		"not JSON":          `{"model":"a",`,
		"not an object":     `["a"]`,
		"model not string":  `{"model":7,"messages":[]}`,
		"no model":          `{"messages":[]}`,
		"no messages":       `{"model":"a","max_tokens":8}`,
		"messages a string": `{"model":"a","messages":"hi"}`,
	} {
		for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens"} {
			resp, b := e.do(request{path: path, body: body})
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("%s, %s: status %d, want 400: %s", path, name, resp.StatusCode, b)
				continue
			}
			if ae := anthropicError(t, b); ae.Type != "invalid_request_error" {
				t.Errorf("%s, %s: error type %q, want invalid_request_error", path, name, ae.Type)
			}
		}
	}
	if st := e.status("a"); st.State != "stopped" || st.Loading != 0 {
		t.Errorf("a after malformed requests: %+v", st)
	}
	e.world.expectNone(t)

	// Other errors on the Messages API keep its shape: an unknown model.
	resp, b := e.do(request{path: "/v1/messages", body: `{"model":"nope","messages":[]}`})
	if ae := anthropicError(t, b); resp.StatusCode != http.StatusNotFound || ae.Type != "not_found_error" {
		t.Errorf("unknown model: status %d, %+v", resp.StatusCode, ae)
	}
	// And the OpenAI endpoints keep theirs.
	_, b = e.do(request{path: "/v1/chat/completions", body: `{"model":"a",`})
	openAIError(t, b)
}

// TestMessages_ErrorMidStream: a Messages API stream whose model server
// dies mid-stream ends with the Messages API's error event.
func TestMessages_ErrorMidStream(t *testing.T) {
	e := newEnv(t, envOpts{})
	resp := e.send(request{path: "/v1/messages", body: `{"model":"d","stream":true,"messages":[]}`,
		headers: map[string]string{"X-Test-Mode": "die"}})
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	i := strings.LastIndex(string(b), "event: error\ndata: ")
	if i < 0 {
		t.Fatalf("no Anthropic error event at the stream's end: %s", b)
	}
	ev := strings.TrimSpace(strings.TrimPrefix(string(b[i:]), "event: error\ndata: "))
	if ae := anthropicError(t, []byte(ev)); ae.Type != "api_error" {
		t.Errorf("error event %+v, want api_error", ae)
	}
}

// TestInflightCancel_QueuedAndInFlight: POST /api/inflight/{id}/cancel ends
// the request with that id: a queued one leaves the queue without loading
// its model, one at its upstream ends; both clients read a 499
// request_cancelled. An unknown id is a 404.
func TestInflightCancel_QueuedAndInFlight(t *testing.T) {
	e := newEnv(t, envOpts{})
	held := make(chan *http.Response, 1)
	go func() {
		held <- e.send(request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`,
			headers: map[string]string{"X-Test-Mode": "hold", requestIDHeader: "held"}})
	}()
	e.world.waitHolding(t, "a")
	e.world.expect(t, "start a")

	progress := make(chan router.Progress, 16)
	e.rec.reportProgress(progress)
	queued := make(chan *http.Response, 1)
	go func() {
		queued <- e.send(request{path: "/v1/chat/completions", body: `{"model":"b","messages":[]}`,
			headers: map[string]string{requestIDHeader: "queued"}})
	}()
	if p := <-progress; p.Position != 1 {
		t.Fatalf("progress %+v, want queued at 1", p)
	}

	for _, id := range []string{"queued", "held"} {
		resp, b := e.do(request{path: "/api/inflight/" + id + "/cancel"})
		if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(b)) != `{"msg":"ok","cancelled":1}` {
			t.Errorf("cancel %s: %d %s", id, resp.StatusCode, b)
		}
		r := <-map[string]chan *http.Response{"queued": queued, "held": held}[id]
		b, _ = io.ReadAll(r.Body)
		r.Body.Close()
		if oe := openAIError(t, b); r.StatusCode != statusCancelled || oe.Code != "request_cancelled" {
			t.Errorf("%s: status %d, %+v", id, r.StatusCode, oe)
		}
		if line := e.logs.requestLine(t, id); line.attrs["status"] != "499" || line.msg != "request failed" {
			t.Errorf("%s logged as %+v", id, line)
		}
	}
	if st := e.status("b"); st.State != "stopped" || st.Queued != 0 || st.Loading != 0 {
		t.Errorf("b after its request was cancelled: %+v", st)
	}
	if st := e.status("a"); st.InFlight != 0 {
		t.Errorf("a after its request was cancelled: %+v", st)
	}
	e.world.expectNone(t) // b never started

	resp, b := e.do(request{path: "/api/inflight/nope/cancel"})
	if oe := openAIError(t, b); resp.StatusCode != http.StatusNotFound || oe.Code != "request_not_found" {
		t.Errorf("unknown id: %d %+v", resp.StatusCode, oe)
	}
}

// TestAPIVersion_Build: GET /api/version reports the build in llama-swap's
// shape.
func TestAPIVersion_Build(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.srv.cfg.Build = BuildInfo{Version: "v1.2.3", Commit: "abc", Date: "2026-01-02T03:04:05Z"}
	resp, b := e.do(request{method: http.MethodGet, path: "/api/version"})
	want := `{"version":"v1.2.3","commit":"abc","build_date":"2026-01-02T03:04:05Z"}`
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(b)) != want {
		t.Errorf("GET /api/version: %d %s, want %s", resp.StatusCode, b, want)
	}
}
