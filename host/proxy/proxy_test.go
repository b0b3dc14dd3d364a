package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/router"
	"github.com/loadout-dev/loadout/sdk"
)

// multipartBody builds a form with the given fields and one file.
func multipartBody(t testing.TB, fields [][2]string) (body, contentType string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, f := range fields {
		if err := mw.WriteField(f[0], f[1]); err != nil {
			t.Fatal(err)
		}
	}
	fw, err := mw.CreateFormFile("file", "hello.wav")
	if err != nil {
		t.Fatal(err)
	}
	fw.Write([]byte("RIFF\x00\x01fake-audio"))
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.String(), mw.FormDataContentType()
}

// formFields parses a multipart body the upstream received.
func formFields(t testing.TB, ec echo) map[string]string {
	t.Helper()
	_, params, err := mime.ParseMediaType(ec.ContentType)
	if err != nil {
		t.Fatalf("upstream content type %q: %v", ec.ContentType, err)
	}
	mr := multipart.NewReader(strings.NewReader(ec.Body), params["boundary"])
	out := map[string]string{}
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("upstream form: %v", err)
		}
		b, _ := io.ReadAll(p)
		out[p.FormName()] = string(b)
	}
}

func TestInference_ModelSource(t *testing.T) {
	e := newEnv(t, envOpts{})
	form, formType := multipartBody(t, [][2]string{{"model", "first"}, {"language", "en"}})
	formB, formBType := multipartBody(t, [][2]string{{"language", "en"}, {"model", "b"}})
	tests := []struct {
		name       string
		rq         request
		wantServer string
		check      func(t *testing.T, ec echo)
	}{
		{
			name:       "JSON body, bytes kept",
			rq:         request{path: "/v1/chat/completions", body: `{"model": "a",  "messages": [{"role":"user","content":"hi"}], "temperature": 0.70}`},
			wantServer: "a",
			check: func(t *testing.T, ec echo) {
				if want := `{"model": "a",  "messages": [{"role":"user","content":"hi"}], "temperature": 0.70}`; ec.Body != want {
					t.Errorf("upstream body %q, want the client's bytes %q", ec.Body, want)
				}
			},
		},
		{
			name:       "alias in JSON",
			rq:         request{path: "/v1/completions", body: `{"model":"alpha","prompt":"x"}`},
			wantServer: "a",
			check: func(t *testing.T, ec echo) {
				if ec.Body != `{"model":"alpha","prompt":"x"}` {
					t.Errorf("upstream body %q changed without useModelName", ec.Body)
				}
			},
		},
		{
			name:       "multipart form field",
			rq:         request{path: "/v1/audio/transcriptions", body: form, ctype: formType},
			wantServer: "a",
			check: func(t *testing.T, ec echo) {
				if ec.Body != form {
					t.Errorf("upstream form changed without need:\n%q\nwant\n%q", ec.Body, form)
				}
			},
		},
		{
			name:       "query parameter",
			rq:         request{path: "/v1/embeddings?model=a", body: `{"input":"x"}`},
			wantServer: "a",
			check: func(t *testing.T, ec echo) {
				if ec.Query != "model=a" || ec.Body != `{"input":"x"}` {
					t.Errorf("upstream query %q body %q", ec.Query, ec.Body)
				}
			},
		},
		{
			name:       "unlisted model by alias, id with a slash",
			rq:         request{path: "/v1/embeddings", body: `{"model":"c","input":"x"}`},
			wantServer: "org/c",
		},
		{
			name:       "useModelName rewrites JSON",
			rq:         request{path: "/v1/chat/completions", body: "{\n  \"messages\": [],\n  \"model\": \"b\",\n  \"n\": 1e0\n}"},
			wantServer: "b",
			check: func(t *testing.T, ec echo) {
				if want := "{\n  \"messages\": [],\n  \"model\": \"b-upstream\",\n  \"n\": 1e0\n}"; ec.Body != want {
					t.Errorf("upstream body %q, want %q", ec.Body, want)
				}
				if ec.Length != int64(len(ec.Body)) {
					t.Errorf("upstream Content-Length %d for a %d-byte body", ec.Length, len(ec.Body))
				}
			},
		},
		{
			name:       "useModelName rewrites the form",
			rq:         request{path: "/v1/audio/transcriptions", body: formB, ctype: formBType},
			wantServer: "b",
			check: func(t *testing.T, ec echo) {
				f := formFields(t, ec)
				if f["model"] != "b-upstream" || f["language"] != "en" || f["file"] != "RIFF\x00\x01fake-audio" {
					t.Errorf("upstream form %q", f)
				}
				if ec.Length != int64(len(ec.Body)) {
					t.Errorf("upstream Content-Length %d for a %d-byte body", ec.Length, len(ec.Body))
				}
			},
		},
		{
			name:       "useModelName rewrites the query",
			rq:         request{path: "/v1/audio/speech?model=b&voice=x", body: `{"input":"hello"}`},
			wantServer: "b",
			check: func(t *testing.T, ec echo) {
				if ec.Query != "model=b-upstream&voice=x" {
					t.Errorf("upstream query %q", ec.Query)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ec := e.echoOf(tt.rq)
			if ec.Server != tt.wantServer {
				t.Fatalf("served by %q, want %q", ec.Server, tt.wantServer)
			}
			if path, _, _ := strings.Cut(tt.rq.path, "?"); ec.Path != path {
				t.Errorf("upstream path %q, want %q", ec.Path, path)
			}
			if tt.check != nil {
				tt.check(t, ec)
			}
		})
	}
}

func TestInference_EveryEndpoint(t *testing.T) {
	e := newEnv(t, envOpts{})
	for path, fields := range map[string]string{
		"/v1/chat/completions":   `"messages":[{"role":"user","content":"hi"}]`,
		"/v1/completions":        `"prompt":"hi"`,
		"/v1/embeddings":         `"input":"hi"`,
		"/v1/responses":          `"input":"hi"`,
		"/v1/rerank":             `"query":"q","documents":["d"]`,
		"/rerank":                `"query":"q","documents":["d"]`,
		"/v1/reranking":          `"query":"q","documents":["d"]`,
		"/reranking":             `"query":"q","documents":["d"]`,
		"/v1/audio/speech":       `"input":"hi"`,
		"/v1/images/generations": `"prompt":"hi"`,
	} {
		ec := e.echoOf(request{path: path, body: `{"model":"org/c",` + fields + `}`})
		if ec.Path != path || ec.Method != http.MethodPost {
			t.Errorf("%s reached the upstream as %s %s", path, ec.Method, ec.Path)
		}
	}
}

func TestInference_ExtensionFields(t *testing.T) {
	e := newEnv(t, envOpts{})
	tests := []struct {
		name       string
		rq         request
		wantBody   string // what the upstream gets; "" for a form
		wantPrio   int32
		wantClient string
	}{
		{
			name:       "body fields stripped, the rest kept",
			rq:         request{body: `{"x_priority": 7, "model":"a", "x_client_id":"alice","messages":[{"role":"user","x_priority":1}]}`},
			wantBody:   `{ "model":"a","messages":[{"role":"user","x_priority":1}]}`,
			wantPrio:   7,
			wantClient: "alice",
		},
		{
			name:       "last member stripped",
			rq:         request{body: "{\"model\":\"a\",\"messages\":[],\n \"x_client_id\": \"bob\"\n}"},
			wantBody:   "{\"model\":\"a\",\"messages\":[]\n}",
			wantClient: "bob",
		},
		{
			name:       "headers, stripped",
			rq:         request{body: `{"model":"a","messages":[]}`, headers: map[string]string{headerPriority: "-3", headerClient: "carol"}},
			wantBody:   `{"model":"a","messages":[]}`,
			wantPrio:   -3,
			wantClient: "carol",
		},
		{
			name:       "body wins over headers",
			rq:         request{body: `{"model":"a","messages":[],"x_priority":5}`, headers: map[string]string{headerPriority: "1", headerClient: "dave"}},
			wantBody:   `{"model":"a","messages":[]}`,
			wantPrio:   5,
			wantClient: "dave",
		},
		{
			name:       "with useModelName",
			rq:         request{body: `{"x_client_id":"erin","model":"b","messages":[]}`},
			wantBody:   `{"model":"b-upstream","messages":[]}`,
			wantClient: "erin",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.rq.path = "/v1/chat/completions"
			ec := e.echoOf(tt.rq)
			if ec.Body != tt.wantBody {
				t.Errorf("upstream body %q, want %q", ec.Body, tt.wantBody)
			}
			if ec.Length != int64(len(ec.Body)) {
				t.Errorf("upstream Content-Length %d for a %d-byte body", ec.Length, len(ec.Body))
			}
			if _, ok := ec.Headers[headerPriority]; ok {
				t.Errorf("upstream saw %s", headerPriority)
			}
			if _, ok := ec.Headers[headerClient]; ok {
				t.Errorf("upstream saw %s", headerClient)
			}
			req := e.rec.lastRequest(t)
			if req.Priority != tt.wantPrio || req.Client != tt.wantClient {
				t.Errorf("router request priority %d client %q, want %d %q", req.Priority, req.Client, tt.wantPrio, tt.wantClient)
			}
		})
	}
	t.Run("form fields stripped", func(t *testing.T) {
		body, ctype := multipartBody(t, [][2]string{{"model", "a"}, {fieldPriority, "4"}, {fieldClientID, "frank"}})
		ec := e.echoOf(request{path: "/v1/audio/transcriptions", body: body, ctype: ctype})
		f := formFields(t, ec)
		if _, ok := f[fieldPriority]; ok {
			t.Errorf("upstream form has %s: %q", fieldPriority, f)
		}
		if _, ok := f[fieldClientID]; ok {
			t.Errorf("upstream form has %s: %q", fieldClientID, f)
		}
		if f["model"] != "a" || f["file"] == "" {
			t.Errorf("upstream form %q", f)
		}
		if req := e.rec.lastRequest(t); req.Priority != 4 || req.Client != "frank" {
			t.Errorf("router request %+v", req)
		}
	})
}

func TestInference_RequestID(t *testing.T) {
	e := newEnv(t, envOpts{})
	resp, b := e.do(request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`, headers: map[string]string{requestIDHeader: "req-42"}})
	var ec echo
	json.Unmarshal(b, &ec)
	if got := resp.Header.Get(requestIDHeader); got != "req-42" || ec.Headers[requestIDHeader] != "req-42" {
		t.Errorf("request id echoed %q, upstream saw %q; want req-42 both", got, ec.Headers[requestIDHeader])
	}
	if vals := resp.Header.Values(requestIDHeader); len(vals) != 1 {
		t.Errorf("X-Request-Id sent %d times: %q", len(vals), vals)
	}
	e.logs.requestLine(t, "req-42")

	resp, _ = e.do(request{method: http.MethodGet, path: "/health", headers: map[string]string{requestIDHeader: "bad id with spaces"}})
	if got := resp.Header.Get(requestIDHeader); got == "" || strings.Contains(got, " ") {
		t.Errorf("generated request id %q", got)
	}
}

func TestStreaming_ChunkByChunk(t *testing.T) {
	for _, loading := range []bool{false, true} {
		t.Run(fmt.Sprintf("loadingState=%v", loading), func(t *testing.T) {
			e := newEnv(t, envOpts{loadingState: loading})
			// The model is loaded first so the stream starts without
			// progress chunks.
			e.echoOf(request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`})
			resp := e.send(request{path: "/v1/chat/completions", body: `{"model":"a","stream":true,"messages":[]}`,
				headers: map[string]string{"X-Test-Mode": "gated"}})
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !isEventStream(resp.Header.Get("Content-Type")) {
				t.Fatalf("status %d content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			// nginx in front does not buffer it (llama-swap sets it on every stream).
			if got := resp.Header.Get("X-Accel-Buffering"); got != "no" {
				t.Errorf("X-Accel-Buffering %q, want no", got)
			}
			sse := newSSEReader(t, resp)
			// The upstream sends tok2 only after the step below: reading
			// tok1 first proves the proxy does not buffer.
			sse.expectEvent(`"content":"tok1"`)
			e.world.stepOne(t)
			sse.expectEvent(`"content":"tok2"`)
			e.world.stepOne(t)
			sse.expectEvent(`"content":"tok3"`)
			sse.expectEvent("[DONE]")
			sse.expectEnd()
		})
	}
}

func TestStreaming_BackendDiesMidStream(t *testing.T) {
	for _, loading := range []bool{false, true} {
		t.Run(fmt.Sprintf("loadingState=%v", loading), func(t *testing.T) {
			e := newEnv(t, envOpts{loadingState: loading})
			resp := e.send(request{path: "/v1/chat/completions", body: `{"model":"a","stream":true,"messages":[]}`,
				headers: map[string]string{"X-Test-Mode": "die", requestIDHeader: "dies"}})
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			sse := newSSEReader(t, resp)
			for {
				ev, ok := sse.next()
				if !ok {
					t.Fatal("stream ended without an error event")
				}
				if strings.Contains(ev, "reasoning_content") { // the load's progress
					continue
				}
				if !strings.Contains(ev, "tok1") {
					t.Fatalf("first event %q, want tok1", ev)
				}
				break
			}
			ev, ok := sse.next()
			if !ok {
				t.Fatal("stream ended without an error event")
			}
			oe := openAIError(t, []byte(ev))
			if oe.Code != "upstream_error" || !strings.Contains(oe.Message, "mid-stream") {
				t.Errorf("error event %+v", oe)
			}
			sse.expectEnd()
			line := e.logs.requestLine(t, "dies")
			if line.attrs["status"] != "502" || line.level != slog.LevelWarn {
				t.Errorf("log line %+v, want a warning with status 502", line)
			}
			// The grant was released: nothing in flight.
			if st := e.status("a"); st.InFlight != 0 {
				t.Errorf("a has %d in flight after the stream died", st.InFlight)
			}
		})
	}
}

// A client that closes its connection after data: [DONE], before the
// upstream ends the response, had the whole answer: it counts as a
// success, not as a client that went away.
func TestStreaming_ClientClosesAfterDone(t *testing.T) {
	e := newEnv(t, envOpts{})
	resp := e.send(request{path: "/v1/chat/completions", body: `{"model":"a","stream":true,"messages":[]}`,
		headers: map[string]string{"X-Test-Mode": "linger", requestIDHeader: "closer"}})
	sse := newSSEReader(t, resp)
	for _, want := range []string{`"content":"tok1"`, `"content":"tok2"`, `"content":"tok3"`, "[DONE]"} {
		sse.expectEvent(want)
	}
	resp.Body.Close()
	line := e.logs.requestLine(t, "closer")
	if line.attrs["status"] != "200" {
		t.Errorf("log line %+v, want status 200", line)
	}
}

func TestStreaming_BackendDiesMidBody(t *testing.T) {
	e := newEnv(t, envOpts{})
	resp := e.send(request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`,
		headers: map[string]string{"X-Test-Mode": "diejson", requestIDHeader: "dies-json"}})
	_, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || err == nil {
		t.Fatalf("status %d, read error %v; want 200 and a truncated body", resp.StatusCode, err)
	}
	line := e.logs.requestLine(t, "dies-json")
	if line.attrs["status"] != "502" || line.level != slog.LevelWarn || !strings.Contains(line.attrs["err"], "upstream failed") {
		t.Errorf("log line %+v, want a warning with status 502", line)
	}
	if st := e.status("a"); st.InFlight != 0 {
		t.Errorf("a has %d in flight after the upstream died", st.InFlight)
	}
}

func TestCORS_Preflight(t *testing.T) {
	e := newEnv(t, envOpts{apiKeys: []string{"k"}})
	resp, _ := e.do(request{method: http.MethodOptions, path: "/v1/chat/completions",
		headers: map[string]string{"Origin": "http://ui.local", "Access-Control-Request-Headers": "content-type, authorization"}})
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "*" ||
		resp.Header.Get("Access-Control-Allow-Headers") != "content-type, authorization" {
		t.Errorf("preflight: %d %v", resp.StatusCode, resp.Header)
	}
}

func TestErrors_Status(t *testing.T) {
	e := newEnv(t, envOpts{})
	tests := []struct {
		name     string
		rq       request
		status   int
		code     string
		contains string
	}{
		{"malformed JSON", request{path: "/v1/chat/completions", body: `{"model": "a",}`}, 400, "invalid_json", "byte offset 15"},
		{"body not an object", request{path: "/v1/chat/completions", body: `[1,2]`}, 400, "invalid_json", "JSON object"},
		{"missing model", request{path: "/v1/chat/completions", body: `{"messages":[]}`}, 400, "missing_model", `"model"`},
		{"model not a string", request{path: "/v1/chat/completions", body: `{"model":7}`}, 400, "invalid_model", "string"},
		{"bad x_priority", request{path: "/v1/chat/completions", body: `{"model":"a","x_priority":"high"}`}, 400, "invalid_priority", "x_priority"},
		{"bad priority header", request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`, headers: map[string]string{headerPriority: "urgent"}}, 400, "invalid_priority", headerPriority},
		{"unknown model", request{path: "/v1/chat/completions", body: `{"model":"nope","messages":[]}`}, 404, "model_not_found", "known models: a, b, broken, d, dead"},
		{"unknown endpoint", request{path: "/v1/nothing", body: `{}`}, 404, "unknown_endpoint", "/v1/nothing"},
		{"wrong method", request{method: http.MethodGet, path: "/v1/chat/completions"}, 405, "method_not_allowed", "GET"},
		{"model fails to load", request{path: "/v1/chat/completions", body: `{"model":"broken","messages":[]}`}, 502, "model_load_failed", "CUDA out of memory"},
		{"upstream refuses", request{path: "/v1/chat/completions", body: `{"model":"dead","messages":[]}`}, 502, "upstream_error", "upstream request failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := strings.ReplaceAll(tt.name, " ", "-")
			tt.rq.headers = maps.Clone(tt.rq.headers)
			if tt.rq.headers == nil {
				tt.rq.headers = map[string]string{}
			}
			tt.rq.headers[requestIDHeader] = id
			resp, b := e.do(tt.rq)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, b)
			}
			// The client's own mistakes are logged at info, what the box
			// failed to do at warn.
			msg, level := "request refused", slog.LevelInfo
			if tt.status >= 500 {
				msg, level = "request failed", slog.LevelWarn
			}
			if line := e.logs.requestLine(t, id); line.msg != msg || line.level != level {
				t.Errorf("logged %q at %v, want %q at %v", line.msg, line.level, msg, level)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("content type %q", ct)
			}
			oe := openAIError(t, b)
			if oe.Code != tt.code || !strings.Contains(oe.Message, tt.contains) {
				t.Errorf("error %+v, want code %q and a message containing %q", oe, tt.code, tt.contains)
			}
			if oe.Type != errorType(tt.status) {
				t.Errorf("type %q, want %q", oe.Type, errorType(tt.status))
			}
			if strings.Contains(oe.Message, "org/c") {
				t.Errorf("message names an unlisted model: %q", oe.Message)
			}
		})
	}
	// Nothing those requests did left anything in flight or waiting.
	for _, st := range e.router.Models() {
		if st.InFlight != 0 || st.Queued != 0 || st.Loading != 0 {
			t.Errorf("after the errors: %+v", st)
		}
	}
}

func TestErrors_PolicyCodes(t *testing.T) {
	codes := map[string]sdk.ErrorCode{
		"m-notfound": sdk.CodeModelNotFound, "m-queue": sdk.CodeQueueFull, "m-limit": sdk.CodeConcurrencyLimit,
		"m-unavail": sdk.CodeUnavailable, "m-swap": sdk.CodeSwapFailed, "m-timeout": sdk.CodeTimeout,
		"m-large": sdk.CodeTooLarge, "m-internal": sdk.CodeInternal,
	}
	e := newEnv(t, envOpts{errors: codes})
	tests := []struct {
		model  string
		status int
		code   string
	}{
		{"m-notfound", 404, "model_not_found"},
		{"m-queue", 429, "queue_full"},
		{"m-limit", 429, "concurrency_limit"},
		{"m-unavail", 503, "unavailable"},
		{"m-swap", 502, "model_load_failed"},
		{"m-timeout", 504, "timeout"},
		{"m-large", 507, "model_too_large"},
		{"m-internal", 500, "internal_error"},
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			resp, b := e.do(request{path: "/v1/chat/completions", body: fmt.Sprintf(`{"model":%q,"messages":[]}`, tt.model),
				headers: map[string]string{requestIDHeader: "id-" + tt.model}})
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, b)
			}
			oe := openAIError(t, b)
			if oe.Code != tt.code || oe.Type != errorType(tt.status) || !strings.Contains(oe.Message, "test policy refuses") {
				t.Errorf("error %+v, want code %s", oe, tt.code)
			}
			if retry := resp.Header.Get("Retry-After"); (tt.status == 429 || tt.status == 503) != (retry == "1") {
				t.Errorf("Retry-After %q for %d", retry, tt.status)
			}
			line := e.logs.requestLine(t, "id-"+tt.model)
			level := slog.LevelWarn // what the box could not do
			if tt.status == http.StatusNotFound {
				level = slog.LevelInfo // the client asked for what is not there
			}
			if line.level != level || line.attrs["model"] != tt.model || line.attrs["status"] != fmt.Sprint(tt.status) ||
				line.attrs["duration"] == "" || !strings.Contains(line.attrs["err"], "test policy refuses") {
				t.Errorf("log line %+v", line)
			}
		})
	}
}

func TestErrors_ShuttingDown(t *testing.T) {
	e := newEnv(t, envOpts{})
	if err := e.router.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	resp, b := e.do(request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`})
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503: %s", resp.StatusCode, b)
	}
	if oe := openAIError(t, b); oe.Code != "unavailable" || !strings.Contains(oe.Message, "shutting down") {
		t.Errorf("error %+v", oe)
	}
}

func TestAuth_APIKeys(t *testing.T) {
	e := newEnv(t, envOpts{apiKeys: []string{"key-one", "key-two"}})
	tests := []struct {
		name    string
		rq      request
		status  int
		errCode string
	}{
		{"no key", request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`}, 401, "missing_api_key"},
		{"wrong key", request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`, headers: map[string]string{"Authorization": "Bearer key-three"}}, 401, "invalid_api_key"},
		{"prefix of a key", request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`, headers: map[string]string{"Authorization": "Bearer key-"}}, 401, "invalid_api_key"},
		{"not bearer", request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`, headers: map[string]string{"Authorization": "Basic a2V5LW9uZQ=="}}, 401, "invalid_api_key"},
		{"bearer", request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`, headers: map[string]string{"Authorization": "Bearer key-two"}}, 200, ""},
		{"x-api-key", request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`, headers: map[string]string{"X-Api-Key": "key-one"}}, 200, ""},
		{"health is open", request{method: http.MethodGet, path: "/health"}, 200, ""},
		{"wol-health is open", request{method: http.MethodGet, path: "/wol-health"}, 200, ""},
		{"upstream's page is open: the UI", request{method: http.MethodGet, path: "/upstream"}, 302, ""},
		{"models list", request{method: http.MethodGet, path: "/v1/models"}, 401, "missing_api_key"},
		{"metrics", request{method: http.MethodGet, path: "/metrics"}, 401, "missing_api_key"},
		{"unload", request{method: http.MethodGet, path: "/unload"}, 401, "missing_api_key"},
		{"upstream", request{method: http.MethodGet, path: "/upstream/a/x"}, 401, "missing_api_key"},
		{"unknown endpoint", request{method: http.MethodGet, path: "/nothing"}, 401, "missing_api_key"},
		// What the web UI reads: its files are public, its data is not.
		{"events, no key", request{method: http.MethodGet, path: "/api/events"}, 401, "missing_api_key"},
		{"events, wrong key", request{method: http.MethodGet, path: "/api/events", headers: map[string]string{"Authorization": "Bearer nope"}}, 401, "invalid_api_key"},
		{"events history, wrong key", request{method: http.MethodGet, path: "/api/events/history?type=swap_start", headers: map[string]string{"Authorization": "Bearer nope"}}, 401, "invalid_api_key"},
		{"summary, no key", request{method: http.MethodGet, path: "/api/summary"}, 401, "missing_api_key"},
		{"log stream, no key", request{method: http.MethodGet, path: "/logs/stream"}, 401, "missing_api_key"},
		{"log stream, wrong key", request{method: http.MethodGet, path: "/logs/stream/a", headers: map[string]string{"Authorization": "Bearer nope"}}, 401, "invalid_api_key"},
		{"summary", request{method: http.MethodGet, path: "/api/summary", headers: map[string]string{"Authorization": "Bearer key-one"}}, 200, ""},
		{"favicon is open", request{method: http.MethodGet, path: "/favicon.ico"}, 200, ""},
		{"ui is open", request{method: http.MethodGet, path: "/ui/"}, 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := strings.ReplaceAll(tt.name, " ", "-")
			tt.rq.headers = maps.Clone(tt.rq.headers)
			if tt.rq.headers == nil {
				tt.rq.headers = map[string]string{}
			}
			tt.rq.headers[requestIDHeader] = id
			resp, b := e.do(tt.rq)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, b)
			}
			if tt.status == 401 {
				if line := e.logs.requestLine(t, id); line.msg != "request refused" || line.level != slog.LevelInfo {
					t.Errorf("a missing or wrong key logged %q at %v, want request refused at INFO", line.msg, line.level)
				}
				if oe := openAIError(t, b); oe.Code != tt.errCode || oe.Type != "authentication_error" {
					t.Errorf("error %+v", oe)
				}
				if resp.Header.Get("WWW-Authenticate") == "" {
					t.Error("401 without WWW-Authenticate")
				}
				return
			}
			if tt.status == http.StatusFound && resp.Header.Get("Location") != "/ui/" {
				t.Errorf("redirected to %q, want /ui/", resp.Header.Get("Location"))
			}
			if strings.HasPrefix(tt.rq.path, "/v1/") {
				var ec echo
				json.Unmarshal(b, &ec)
				// Sent on as the client sent it (llama-swap's).
				if ec.Headers["Authorization"] != tt.rq.headers["Authorization"] || ec.Headers["X-Api-Key"] != tt.rq.headers["X-Api-Key"] {
					t.Errorf("the upstream was sent %q, want the client's credentials as sent", ec.Headers)
				}
			}
		})
	}
}

func TestBodyLimit_TooLarge(t *testing.T) {
	e := newEnv(t, envOpts{maxBody: 1024})
	big := `{"model":"a","input":"` + strings.Repeat("x", 2048) + `"}`
	t.Run("content length", func(t *testing.T) {
		resp, b := e.do(request{path: "/v1/embeddings", body: big})
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		if oe := openAIError(t, b); oe.Code != "request_too_large" || !strings.Contains(oe.Message, "1024") {
			t.Errorf("error %+v", oe)
		}
	})
	t.Run("chunked", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, e.ts.URL+"/v1/embeddings", io.MultiReader(strings.NewReader(big)))
		req.Header.Set("Content-Type", "application/json")
		req.ContentLength = -1
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		openAIError(t, b)
	})
	t.Run("upstream path", func(t *testing.T) {
		resp, b := e.do(request{path: "/upstream/a/v1/embeddings", body: big})
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
	})
	t.Run("under the limit", func(t *testing.T) {
		e.echoOf(request{path: "/v1/embeddings", body: `{"model":"a","input":"small"}`})
	})
}

func TestModelsList_Scenario(t *testing.T) {
	tests := []struct {
		name    string
		aliases bool
		want    []string
	}{
		{"ids only", false, []string{"a", "b", "broken", "d", "dead"}},
		{"with aliases", true, []string{"a", "alpha", "b", "broken", "d", "dead", "first"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, envOpts{aliasesInList: tt.aliases})
			resp, b := e.do(request{method: http.MethodGet, path: "/v1/models"})
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			var list struct {
				Object string           `json:"object"`
				Data   []map[string]any `json:"data"`
			}
			if err := json.Unmarshal(b, &list); err != nil || list.Object != "list" {
				t.Fatalf("not an OpenAI list: %s", b)
			}
			var ids []string
			for _, m := range list.Data {
				ids = append(ids, m["id"].(string))
				if m["object"] != "model" || m["owned_by"] != "loadout" || m["created"].(float64) <= 0 {
					t.Errorf("entry %v", m)
				}
				if m["id"] == "a" || m["id"] == "alpha" {
					if m["name"] != "Model A" || m["description"] != "the first model" {
						t.Errorf("entry %v lacks a's name and description", m)
					}
				}
				if m["id"] == "b" {
					if _, ok := m["name"]; ok {
						t.Errorf("entry %v has an empty name", m)
					}
				}
			}
			if !slices.Equal(ids, tt.want) {
				t.Errorf("ids %q, want %q", ids, tt.want)
			}
		})
	}
}

// TestModelsGet_Scenario: GET /v1/models/{model}, OpenAI's retrieve,
// answers what the list says of a listed id, answers for the names a
// request may use that the list leaves out, and 404s any other.
func TestModelsGet_Scenario(t *testing.T) {
	e := newEnv(t, envOpts{})
	get := func(name string) (int, map[string]any, []byte) {
		t.Helper()
		resp, b := e.do(request{method: http.MethodGet, path: "/v1/models/" + name})
		var m map[string]any
		if resp.StatusCode == http.StatusOK {
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatalf("GET /v1/models/%s: %v: %s", name, err, b)
			}
		}
		return resp.StatusCode, m, b
	}
	_, lb := e.do(request{method: http.MethodGet, path: "/v1/models"})
	var list struct {
		Data []json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(lb, &list); err != nil || len(list.Data) == 0 {
		t.Fatalf("/v1/models: %s", lb)
	}
	var listed map[string]any
	if err := json.Unmarshal(list.Data[0], &listed); err != nil {
		t.Fatal(err)
	}
	code, got, b := get(listed["id"].(string))
	if code != http.StatusOK || !reflect.DeepEqual(got, listed) {
		t.Errorf("GET /v1/models/%s: %d %s, want the list's entry %s", listed["id"], code, b, list.Data[0])
	}
	// An alias the list leaves out (aliases are not listed by default),
	// and an unlisted model by its id with a slash and by its alias.
	for _, tt := range []struct{ name, typ, of string }{
		{"first", "alias", "a"},
		{"org/c", "model", ""},
		{"c", "alias", "org/c"},
	} {
		code, got, b := get(tt.name)
		if code != http.StatusOK {
			t.Errorf("GET /v1/models/%s: %d %s", tt.name, code, b)
			continue
		}
		meta, _ := got["meta"].(map[string]any)["llamaswap"].(map[string]any)
		if got["id"] != tt.name || got["object"] != "model" || meta["type"] != tt.typ || (tt.of != "" && meta["modelID"] != tt.of) {
			t.Errorf("GET /v1/models/%s: %s, want id %q, type %q of %q", tt.name, b, tt.name, tt.typ, tt.of)
		}
	}
	// The status follows the model's.
	e.echoOf(request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`})
	if _, got, b := get("alpha"); got["status"].(map[string]any)["value"] != "loaded" {
		t.Errorf("GET /v1/models/alpha after a request to a: %s, want status loaded", b)
	}
	code, _, b = get("nope")
	if code != http.StatusNotFound || openAIError(t, b).Code != "model_not_found" {
		t.Errorf("GET /v1/models/nope: %d %s, want 404 model_not_found", code, b)
	}
}

func TestOps_Running(t *testing.T) {
	e := newEnv(t, envOpts{edit: func(m *ModelEntry) {
		if m.ID == "a" {
			m.Cmd, m.TTL = "llama-server --port 5800", 90*time.Second
		}
	}})
	running := func() []map[string]any {
		t.Helper()
		resp, b := e.do(request{method: http.MethodGet, path: "/running"})
		var out struct {
			Running []map[string]any `json:"running"`
		}
		if resp.StatusCode != 200 || json.Unmarshal(b, &out) != nil || out.Running == nil {
			t.Fatalf("/running: %d %s", resp.StatusCode, b)
		}
		return out.Running
	}
	if r := running(); len(r) != 0 {
		t.Fatalf("running before any request: %v", r)
	}
	e.echoOf(request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`})
	r := running()
	if len(r) != 1 || r[0]["model"] != "a" || r[0]["state"] != "ready" || !strings.HasPrefix(r[0]["proxy"].(string), "http://127.0.0.1:") {
		t.Fatalf("running: %v", r)
	}
	// llama-swap's cmd and ttl (seconds).
	if r[0]["cmd"] != "llama-server --port 5800" || r[0]["ttl"] != float64(90) {
		t.Errorf("running: cmd %v ttl %v, want the configured command and 90", r[0]["cmd"], r[0]["ttl"])
	}
	// Every field of llama-swap's entry is there, empty or not.
	for _, k := range []string{"model", "state", "cmd", "proxy", "ttl", "name", "description"} {
		if _, ok := r[0][k]; !ok {
			t.Errorf("running: no %q in %v", k, r[0])
		}
	}
}

func TestOps_Unload(t *testing.T) {
	tests := []struct {
		name     string
		rq       request
		unloaded []string // models expected stopped
		kept     []string // models expected still ready
		status   int
	}{
		{"GET /unload", request{method: http.MethodGet, path: "/unload"}, []string{"a", "org/c"}, nil, 200},
		{"POST /unload", request{method: http.MethodPost, path: "/unload"}, []string{"a", "org/c"}, nil, 200},
		{"POST /api/models/unload", request{method: http.MethodPost, path: "/api/models/unload"}, []string{"a", "org/c"}, nil, 200},
		{"by id", request{method: http.MethodPost, path: "/api/models/unload/a"}, []string{"a"}, []string{"org/c"}, 200},
		{"by alias", request{method: http.MethodPost, path: "/api/models/unload/alpha"}, []string{"a"}, []string{"org/c"}, 200},
		{"id with a slash", request{method: http.MethodPost, path: "/api/models/unload/org/c"}, []string{"org/c"}, []string{"a"}, 200},
		{"unknown", request{method: http.MethodPost, path: "/api/models/unload/nope"}, nil, []string{"a", "org/c"}, 404},
		{"a bare force", request{method: http.MethodPost, path: "/api/models/unload/a?force"}, []string{"a"}, []string{"org/c"}, 200},
		// force=yes was read as false: it waited for what it meant to cut.
		{"force=yes", request{method: http.MethodPost, path: "/api/models/unload/a?force=yes"}, nil, []string{"a", "org/c"}, 400},
		{"force twice", request{method: http.MethodPost, path: "/unload?force=true&force=false"}, nil, []string{"a", "org/c"}, 400},
		{"HEAD /unload does nothing", request{method: http.MethodHead, path: "/unload"}, nil, []string{"a", "org/c"}, 405},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, envOpts{})
			e.echoOf(request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`})
			e.echoOf(request{path: "/v1/embeddings", body: `{"model":"org/c","input":"x"}`})
			resp, b := e.do(tt.rq)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, b)
			}
			// llama-swap's answers: JSON from the API's unload of every
			// model, OK from the rest.
			want := "OK"
			if tt.rq.path == "/api/models/unload" {
				want = `{"msg":"ok"}`
			}
			if tt.status == 200 && strings.TrimSpace(string(b)) != want {
				t.Errorf("body %q, want %s", b, want)
			}
			if tt.status != 200 && tt.rq.method != http.MethodHead {
				openAIError(t, b)
			}
			for _, m := range tt.unloaded {
				if st := e.status(m); st.State != "stopped" {
					t.Errorf("%s is %s after the unload", m, st.State)
				}
			}
			for _, m := range tt.kept {
				if st := e.status(m); st.State != "ready" {
					t.Errorf("%s is %s; the unload should have left it", m, st.State)
				}
			}
		})
	}
}

func TestOps_Upstream(t *testing.T) {
	e := newEnv(t, envOpts{})
	t.Run("GET with a path and query", func(t *testing.T) {
		ec := e.echoOf(request{method: http.MethodGet, path: "/upstream/a/props/x?verbose=1"})
		if ec.Server != "a" || ec.Method != http.MethodGet || ec.Path != "/props/x" || ec.Query != "verbose=1" {
			t.Errorf("upstream saw %+v", ec)
		}
	})
	t.Run("POST body passes untouched", func(t *testing.T) {
		body := `{"model":"whatever","x_priority":3}`
		ec := e.echoOf(request{path: "/upstream/alpha/completion", body: body, headers: map[string]string{headerPriority: "9"}})
		if ec.Server != "a" || ec.Path != "/completion" || ec.Body != body {
			t.Errorf("upstream saw %+v", ec)
		}
		if _, ok := ec.Headers[headerPriority]; ok {
			t.Error("upstream saw the priority header")
		}
		if req := e.rec.lastRequest(t); req.Priority != 9 || req.Model != "a" {
			t.Errorf("router request %+v", req)
		}
	})
	t.Run("model id with a slash", func(t *testing.T) {
		ec := e.echoOf(request{method: http.MethodPut, path: "/upstream/org/c/v1/things", body: "x"})
		if ec.Server != "org/c" || ec.Method != http.MethodPut || ec.Path != "/v1/things" {
			t.Errorf("upstream saw %+v", ec)
		}
	})
	t.Run("loads a stopped model", func(t *testing.T) {
		// b evicts a (one exclusive group) and comes up for the request.
		ec := e.echoOf(request{method: http.MethodGet, path: "/upstream/b/health"})
		if ec.Server != "b" {
			t.Errorf("served by %s", ec.Server)
		}
	})
	t.Run("redirect to the trailing slash", func(t *testing.T) {
		resp, _ := e.do(request{method: http.MethodGet, path: "/upstream/a?x=1"})
		if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/upstream/a/?x=1" {
			t.Errorf("status %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
		}
		resp, _ = e.do(request{method: http.MethodPost, path: "/upstream/a", body: "{}"})
		if resp.StatusCode != http.StatusPermanentRedirect {
			t.Errorf("POST: status %d, want 308", resp.StatusCode)
		}
	})
	t.Run("protocol upgrade", func(t *testing.T) {
		conn, err := net.Dial("tcp", e.ts.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprint(conn, "GET /upstream/a/ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\nX-Test-Mode: upgrade\r\n\r\n")
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade: %v %v", resp, err)
		}
		if st := e.status("a"); st.InFlight != 1 {
			t.Errorf("a has %d in flight during the upgraded connection, want 1", st.InFlight)
		}
		fmt.Fprint(conn, "ping\n")
		if line, err := br.ReadString('\n'); err != nil || line != "echo ping\n" {
			t.Errorf("echo: %q %v", line, err)
		}
	})
	t.Run("unknown model", func(t *testing.T) {
		resp, b := e.do(request{method: http.MethodGet, path: "/upstream/nope/x"})
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		openAIError(t, b)
	})
}

func TestAPI_Models(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.echoOf(request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`})
	resp, b := e.do(request{method: http.MethodGet, path: "/api/models"})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var out struct {
		Models []struct {
			Model    string   `json:"model"`
			State    string   `json:"state"`
			InFlight int      `json:"in_flight"`
			Upstream string   `json:"upstream"`
			Name     string   `json:"name"`
			Aliases  []string `json:"aliases"`
			Backend  string   `json:"backend"`
			Unlisted bool     `json:"unlisted"`
			UseName  string   `json:"use_model_name"`
		} `json:"models"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	if len(out.Models) != len(testCatalog) {
		t.Fatalf("%d models, want %d: %s", len(out.Models), len(testCatalog), b)
	}
	for _, m := range out.Models {
		switch m.Model {
		case "a":
			if m.State != "ready" || m.Upstream == "" || m.Name != "Model A" || !slices.Equal(m.Aliases, []string{"alpha", "first"}) || m.Backend != "sim" {
				t.Errorf("a: %+v", m)
			}
		case "b":
			if m.State != "stopped" || m.UseName != "b-upstream" {
				t.Errorf("b: %+v", m)
			}
		case "org/c":
			if !m.Unlisted || m.Backend != "cmd" {
				t.Errorf("org/c: %+v", m)
			}
		}
	}
}

func TestAPI_Policies(t *testing.T) {
	e := newEnv(t, envOpts{policyStatus: func() []PolicyInfo {
		return []PolicyInfo{{Role: "scheduler", Name: "builtin:fifo", Healthy: true, Instantiations: 1}}
	}})
	resp, b := e.do(request{method: http.MethodGet, path: "/api/policies"})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var out struct {
		Policies []struct {
			Role     string                `json:"role"`
			Name     string                `json:"name"`
			Healthy  *bool                 `json:"healthy"`
			Counters router.PolicyCounters `json:"counters"`
		} `json:"policies"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Policies) != 2 || out.Policies[0].Role != "scheduler" || out.Policies[0].Name != "builtin:fifo" ||
		out.Policies[0].Healthy == nil || !*out.Policies[0].Healthy || out.Policies[1].Role != "swapper" || out.Policies[1].Healthy != nil {
		t.Errorf("policies: %s", b)
	}
}

func TestMetrics_Exposed(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.echoOf(request{path: "/v1/chat/completions", body: `{"model":"alpha","messages":[]}`})
	e.do(request{path: "/v1/chat/completions", body: `{"model":"client-invented-name","messages":[]}`})
	e.do(request{path: "/v1/chat/completions", body: `{"model":"broken","messages":[]}`})
	resp, b := e.do(request{method: http.MethodGet, path: "/metrics"})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	text := string(b)
	for _, want := range []string{
		`loadout_requests_total{code="200",model="a"} 1`,
		`loadout_unrouted_requests_total{code="404"} 1`,
		`loadout_requests_total{code="502",model="broken"} 1`,
		`loadout_request_duration_seconds_count{model="a"} 1`,
		`loadout_queue_wait_seconds_count{model="a"} 1`,
		`loadout_in_flight_requests{model="a"} 0`,
		`go_goroutines`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(text, "client-invented-name") || strings.Contains(text, `model="unknown"`) {
		t.Error("/metrics has a label value a client made up")
	}
}

func TestLoadingState_Scenario(t *testing.T) {
	t.Run("loading, then the stream", func(t *testing.T) {
		e := newEnv(t, envOpts{loadingState: true})
		open := e.world.gate("a")
		resp := e.send(request{path: "/v1/chat/completions", body: `{"model":"alpha","stream":true,"messages":[]}`})
		defer resp.Body.Close()
		if resp.StatusCode != 200 || !isEventStream(resp.Header.Get("Content-Type")) {
			t.Fatalf("status %d content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		sse := newSSEReader(t, resp)
		ev := sse.expectEvent(`"reasoning_content":"loading model a…\n"`)
		var c chunk
		if err := json.Unmarshal([]byte(ev), &c); err != nil || c.Object != "chat.completion.chunk" || c.Model != "alpha" || c.Choices[0].Delta.Role != "assistant" {
			t.Errorf("progress chunk %s", ev)
		}
		open()
		sse.expectEvent(`"content":"tok1"`)
		sse.expectEvent(`"content":"tok2"`)
		sse.expectEvent(`"content":"tok3"`)
		sse.expectEvent("[DONE]")
		sse.expectEnd()
	})
	t.Run("queued, loading, then the stream", func(t *testing.T) {
		e := newEnv(t, envOpts{loadingState: true})
		held := make(chan int)
		go func() {
			resp, _ := e.do(request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`, headers: map[string]string{"X-Test-Mode": "hold"}})
			held <- resp.StatusCode
		}()
		e.world.waitHolding(t, "a")
		open := e.world.gate("b")
		resp := e.send(request{path: "/v1/chat/completions", body: `{"model":"b","stream":true,"messages":[]}`})
		defer resp.Body.Close()
		sse := newSSEReader(t, resp)
		sse.expectEvent(`"reasoning_content":"queued: position 1\n"`)
		e.world.releaseOne(t) // a goes idle: b may evict it and load
		if code := <-held; code != 200 {
			t.Fatalf("held request: %d", code)
		}
		sse.expectEvent(`"reasoning_content":"loading model b…\n"`)
		open()
		sse.expectEvent(`"content":"tok1"`)
		sse.expectEvent(`"content":"tok2"`)
		sse.expectEvent(`"content":"tok3"`)
		sse.expectEvent("[DONE]")
		sse.expectEnd()
	})
	t.Run("load fails", func(t *testing.T) {
		e := newEnv(t, envOpts{loadingState: true})
		open := e.world.gate("broken")
		resp := e.send(request{path: "/v1/chat/completions", body: `{"model":"broken","stream":true,"messages":[]}`, headers: map[string]string{requestIDHeader: "lf"}})
		defer resp.Body.Close()
		sse := newSSEReader(t, resp)
		sse.expectEvent("loading model broken")
		open()
		ev, _ := sse.next()
		if oe := openAIError(t, []byte(ev)); oe.Code != "model_load_failed" {
			t.Errorf("error event %+v", oe)
		}
		sse.expectEnd()
		if line := e.logs.requestLine(t, "lf"); line.attrs["status"] != "502" {
			t.Errorf("log line %+v, want status 502", line)
		}
	})
	t.Run("upstream answers an error", func(t *testing.T) {
		e := newEnv(t, envOpts{loadingState: true})
		open := e.world.gate("a")
		resp := e.send(request{path: "/v1/chat/completions", body: `{"model":"a","stream":true,"messages":[]}`,
			headers: map[string]string{"X-Test-Mode": "status", "X-Test-Status": "400"}})
		defer resp.Body.Close()
		sse := newSSEReader(t, resp)
		sse.expectEvent("loading model a")
		open()
		ev, _ := sse.next()
		if oe := openAIError(t, []byte(ev)); oe.Code != "upstream_error" || !strings.Contains(oe.Message, "upstream says no") {
			t.Errorf("error event %+v", oe)
		}
		sse.expectEnd()
	})
	t.Run("upstream answers JSON", func(t *testing.T) {
		e := newEnv(t, envOpts{loadingState: true})
		open := e.world.gate("a")
		// A hold request is answered with JSON even though it asked for a
		// stream.
		resp := e.send(request{path: "/v1/chat/completions", body: `{"model":"a","stream":true,"messages":[]}`, headers: map[string]string{"X-Test-Mode": "hold"}})
		defer resp.Body.Close()
		sse := newSSEReader(t, resp)
		sse.expectEvent("loading model a")
		open()
		e.world.waitHolding(t, "a")
		e.world.releaseOne(t)
		ev := sse.expectEvent(`"object":"chat.completion"`)
		if strings.Contains(ev, "\n") {
			t.Errorf("JSON answer spans lines in one event: %q", ev)
		}
		sse.expectEvent("[DONE]")
		sse.expectEnd()
	})
	t.Run("non-streaming requests never get it", func(t *testing.T) {
		e := newEnv(t, envOpts{loadingState: true})
		open := e.world.gate("a")
		got := make(chan *http.Response, 1)
		go func() { got <- e.send(request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`}) }()
		e.world.expect(t, "start a")
		select {
		case resp := <-got:
			resp.Body.Close()
			t.Fatalf("response (%d) before the model loaded", resp.StatusCode)
		default:
		}
		open()
		resp := <-got
		defer resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("status %d content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	})
}

func TestDisconnect_WhileQueued(t *testing.T) {
	for _, streaming := range []bool{false, true} {
		t.Run(fmt.Sprintf("streaming=%v", streaming), func(t *testing.T) {
			e := newEnv(t, envOpts{loadingState: true})
			held := make(chan int)
			go func() {
				resp, _ := e.do(request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`, headers: map[string]string{"X-Test-Mode": "hold"}})
				held <- resp.StatusCode
			}()
			e.world.waitHolding(t, "a")
			e.world.expect(t, "start a")

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			body := `{"model":"b","messages":[]}`
			if streaming {
				body = `{"model":"b","stream":true,"messages":[]}`
			}
			var wg sync.WaitGroup
			progress := make(chan router.Progress, 16)
			if !streaming {
				e.rec.reportProgress(progress)
			}
			if streaming {
				resp := e.send(request{path: "/v1/chat/completions", body: body, ctx: ctx, headers: map[string]string{requestIDHeader: "leaver"}})
				defer resp.Body.Close()
				newSSEReader(t, resp).expectEvent("queued: position 1")
			} else {
				wg.Go(func() {
					req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.ts.URL+"/v1/chat/completions", strings.NewReader(body))
					req.Header.Set(requestIDHeader, "leaver")
					if resp, err := e.client.Do(req); err == nil {
						resp.Body.Close()
						t.Errorf("the queued request got a response: %d", resp.StatusCode)
					}
				})
				if p := <-progress; p.Position != 1 {
					t.Fatalf("progress %+v, want queued at 1", p)
				}
			}
			cancel()
			wg.Wait()
			line := e.logs.requestLine(t, "leaver")
			if line.attrs["status"] != "499" || line.msg != "client went away" {
				t.Errorf("log line %+v", line)
			}
			// The router forgot the caller: nothing queued, nothing loading,
			// b never started, a still serving the held request.
			if st := e.status("b"); st.Queued != 0 || st.Loading != 0 || st.State != "stopped" || st.InFlight != 0 {
				t.Errorf("b after the disconnect: %+v", st)
			}
			if st := e.status("a"); st.InFlight != 1 {
				t.Errorf("a after the disconnect: %+v", st)
			}
			e.world.releaseOne(t)
			if code := <-held; code != 200 {
				t.Errorf("held request: %d", code)
			}
			if st := e.status("a"); st.InFlight != 0 || st.State != "ready" {
				t.Errorf("a after its request: %+v", st)
			}
			e.world.expectNone(t) // no swap for the caller that left
		})
	}
}

func TestProxy_ConcurrentRequests(t *testing.T) {
	e := newEnv(t, envOpts{loadingState: true})
	var wg sync.WaitGroup
	// 16 requests over 3 models: fewer than fifo's default concurrency
	// limit of 10 each, so all of them are served.
	for i := range 16 {
		wg.Go(func() {
			model := []string{"a", "org/c", "alpha", "b"}[i%4]
			stream := i%3 == 0
			resp, b := e.do(request{path: "/v1/chat/completions",
				body: fmt.Sprintf(`{"model":%q,"stream":%v,"x_client_id":"c%d","messages":[]}`, model, stream, i%5)})
			if resp.StatusCode != 200 {
				t.Errorf("%s: %d %s", model, resp.StatusCode, b)
			}
		})
	}
	wg.Wait()
	for _, st := range e.router.Models() {
		if st.InFlight != 0 || st.Queued != 0 || st.Loading != 0 {
			t.Errorf("after all requests: %+v", st)
		}
	}
}

func TestNew_Validation(t *testing.T) {
	rr := &recordingRouter{}
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no router", Config{Models: testCatalog}, "router"},
		{"empty id", Config{Router: rr, Models: []ModelEntry{{ID: ""}}}, "model id is empty"},
		{"duplicate id", Config{Router: rr, Models: []ModelEntry{{ID: "a"}, {ID: "a"}}}, `"a"`},
		{"alias is an id", Config{Router: rr, Models: []ModelEntry{{ID: "a"}, {ID: "b", Aliases: []string{"a"}}}}, `alias of model "b" "a" is also model id`},
		{"negative limit", Config{Router: rr, Models: testCatalog, MaxBodyBytes: -1}, "negative"},
		{"empty key", Config{Router: rr, Models: testCatalog, APIKeys: []string{""}}, "empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
	// No model of its own is fine: a box that only forwards to peers.
	if _, err := New(Config{Router: rr}); err != nil {
		t.Errorf("an empty catalog: %v", err)
	}
}
