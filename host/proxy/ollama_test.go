package proxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/router"
)

// An Ollama chat becomes the OpenAI-compatible body a model server takes:
// images as data URLs, tool calls with ids and their arguments as JSON
// text, tool results answering the calls in order, sampling options by
// their OpenAI names (num_predict as max_tokens, load-time ones dropped),
// format as response_format, and a stream asking for its usage.
func TestOllama_ChatBody(t *testing.T) {
	var req ollamaRequest
	if err := json.Unmarshal([]byte(`{
		"model": "m",
		"messages": [
			{"role": "user", "content": "what is this?", "images": ["/9j/4AAQ"]},
			{"role": "assistant", "content": "", "tool_calls": [
				{"function": {"name": "weather", "arguments": {"city": "Oslo"}}},
				{"function": {"name": "time", "arguments": {}}}]},
			{"role": "tool", "content": "cold", "tool_name": "weather"},
			{"role": "tool", "content": "noon", "tool_name": "time"}
		],
		"tools": [{"type": "function", "function": {"name": "weather"}}],
		"options": {"temperature": 0.2, "num_predict": 16, "num_ctx": 8192, "stop": ["\n"]},
		"format": {"type": "object"}
	}`), &req); err != nil {
		t.Fatal(err)
	}
	b, err := req.chatBody(ollamaChat, true)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Messages []struct {
			Role      string
			Content   json.RawMessage
			ToolCalls []struct {
				ID, Type string
				Function struct{ Name, Arguments string }
			} `json:"tool_calls"`
			ToolCallID string `json:"tool_call_id"`
		}
		Tools          []any
		Temperature    float64
		MaxTokens      int  `json:"max_tokens"`
		NumCtx         *int `json:"num_ctx"`
		Stop           []string
		Stream         bool
		StreamOptions  map[string]bool `json:"stream_options"`
		ResponseFormat struct {
			Type       string
			JSONSchema struct{ Schema map[string]any } `json:"json_schema"`
		} `json:"response_format"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got.Messages[0].Content), `"url":"data:image/jpeg;base64,/9j/4AAQ"`) {
		t.Errorf("image: %s", got.Messages[0].Content)
	}
	calls := got.Messages[1].ToolCalls
	if len(calls) != 2 || calls[0].ID != "call_0" || calls[0].Function.Arguments != `{"city": "Oslo"}` || calls[1].ID != "call_1" {
		t.Errorf("tool calls: %+v", calls)
	}
	if got.Messages[2].ToolCallID != "call_0" || got.Messages[3].ToolCallID != "call_1" {
		t.Errorf("tool results answer %q and %q", got.Messages[2].ToolCallID, got.Messages[3].ToolCallID)
	}
	if len(got.Tools) != 1 || got.Temperature != 0.2 || got.MaxTokens != 16 || got.NumCtx != nil || len(got.Stop) != 1 {
		t.Errorf("options: %s", b)
	}
	if !got.Stream || !got.StreamOptions["include_usage"] {
		t.Errorf("stream: %s", b)
	}
	if got.ResponseFormat.Type != "json_schema" || got.ResponseFormat.JSONSchema.Schema["type"] != "object" {
		t.Errorf("format: %s", b)
	}

	req.Format = json.RawMessage(`"yaml"`)
	if _, err := req.chatBody(ollamaChat, false); err == nil || !strings.Contains(err.Error(), "format") {
		t.Errorf("an unknown format: %v", err)
	}
	req.Format = nil

	// A generate of images alone (no prompt) asks about the images.
	gen := ollamaRequest{Model: "m", Images: []string{"iVBORw0KGgo"}}
	if b, err := gen.chatBody(ollamaGenerate, false); err != nil || !strings.Contains(string(b), `"text":""`) || !strings.Contains(string(b), "data:image/png;base64,iVBORw0KGgo") {
		t.Errorf("images without a prompt: %v %s", err, b)
	}

	// think: on and off through the chat template, or an effort.
	for think, want := range map[string]string{
		`false`:  `"chat_template_kwargs":{"enable_thinking":false}`,
		`true`:   `"chat_template_kwargs":{"enable_thinking":true}`,
		`"high"`: `"reasoning_effort":"high"`,
	} {
		req.Think = json.RawMessage(think)
		b, err := req.chatBody(ollamaChat, false)
		if err != nil || !strings.Contains(string(b), want) {
			t.Errorf("think %s: %v %s", think, err, b)
		}
	}
	for _, think := range []string{`"max"`, `3`} {
		req.Think = json.RawMessage(think)
		if _, err := req.chatBody(ollamaChat, false); err == nil || !strings.Contains(err.Error(), "think") {
			t.Errorf("think %s: %v", think, err)
		}
	}
}

// keep_alive reads as Ollama's: seconds or a duration, negative to keep
// the model, 0 to unload it; as a request's TTL, negative is never and 0
// the least.
func TestOllama_KeepAlive(t *testing.T) {
	for raw, want := range map[string]string{
		``: "unset", `null`: "unset", `300`: "5m0s", `"5m"`: "5m0s", `"-1"`: "-1s", `-1`: "-1s", `"0"`: "0s", `0`: "0s", `"1.5"`: "1.5s",
	} {
		d, set, err := keepAlive(json.RawMessage(raw))
		got := "unset"
		if set {
			got = d.String()
		}
		if err != nil || got != want {
			t.Errorf("keep_alive %s: %s, %v; want %s", raw, got, err, want)
		}
	}
	for _, raw := range []string{`"soon"`, `true`, `[1]`} {
		if _, _, err := keepAlive(json.RawMessage(raw)); err == nil || !strings.Contains(err.Error(), "keep_alive") {
			t.Errorf("keep_alive %s: %v", raw, err)
		}
	}
	if routerTTL(0, false) != nil || *routerTTL(-time.Second, true) != 0 || *routerTTL(0, true) != time.Nanosecond || *routerTTL(time.Minute, true) != time.Minute {
		t.Error("routerTTL")
	}
}

// feed writes a model server's answer through an ollamaWriter as the
// pipeline would (headers, then the body in pieces that cut lines), and
// returns what the client got.
func feed(t *testing.T, kind int, stream bool, status int, contentType string, pieces ...string) *httptest.ResponseRecorder {
	t.Helper()
	return feedLimited(t, maxOllamaHeld, kind, stream, status, contentType, pieces...)
}

// feedLimited is feed with the translation holding at most limit bytes.
func feedLimited(t *testing.T, limit, kind int, stream bool, status int, contentType string, pieces ...string) *httptest.ResponseRecorder {
	t.Helper()
	return feedTop(t, limit, 0, kind, stream, status, contentType, pieces...)
}

// feedTop is feedLimited for a request that asked for top alternatives
// of each token's logprobs.
func feedTop(t *testing.T, limit, top, kind int, stream bool, status int, contentType string, pieces ...string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	o := &ollamaWriter{w: rec, kind: kind, stream: stream, model: "m:latest", start: time.Now(), tools: map[int]*ollamaToolCall{}, limit: limit, topLogprobs: top}
	o.Header().Set("Content-Type", contentType)
	o.Header().Set("Content-Length", "999")
	o.WriteHeader(status)
	for _, p := range pieces {
		if _, err := o.Write([]byte(p)); err != nil {
			t.Fatal(err)
		}
		o.Flush()
	}
	o.finish()
	return rec
}

// lines decodes an NDJSON body.
func lines(t *testing.T, body string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(body), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// A streamed chat becomes NDJSON: a line per piece of text or thinking,
// tool calls gathered from their pieces into the last line with their
// arguments as objects, and the counts the usage chunk gave.
func TestOllamaWriter_StreamWithToolCalls(t *testing.T) {
	rec := feed(t, ollamaChat, true, 200, "text/event-stream",
		`data: {"choices":[{"delta":{"reasoning_content":"hm"}}]}`+"\n\n",
		`data: {"choices":[{"delta":{"content":"Let me look"}}]}`+"\n\ndata: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"weather\",\"arguments\":\"{\\\"ci",
		`ty\": \"Oslo\"}"}}]}}]}`+"\n\n",
		`data: {"choices":[{"delta":{},"finish_reason":"tool_calls"}]}`+"\n\n",
		`data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}`+"\n\n",
		"data: [DONE]\n\n")
	if ct := rec.Header().Get("Content-Type"); ct != "application/x-ndjson" || rec.Header().Get("Content-Length") != "" {
		t.Errorf("headers: %v", rec.Header())
	}
	got := lines(t, rec.Body.String())
	if len(got) != 3 {
		t.Fatalf("%d lines: %s", len(got), rec.Body)
	}
	msg := func(i int) map[string]any { return got[i]["message"].(map[string]any) }
	if msg(0)["thinking"] != "hm" || msg(1)["content"] != "Let me look" || got[1]["done"] != false || got[1]["model"] != "m:latest" {
		t.Errorf("pieces: %v %v", got[0], got[1])
	}
	last := got[2]
	calls, _ := msg(2)["tool_calls"].([]any)
	if last["done"] != true || last["done_reason"] != "stop" || last["prompt_eval_count"] != 7.0 || last["eval_count"] != 3.0 || len(calls) != 1 {
		t.Fatalf("last line: %v", last)
	}
	fn := calls[0].(map[string]any)["function"].(map[string]any)
	if fn["name"] != "weather" || fn["arguments"].(map[string]any)["city"] != "Oslo" {
		t.Errorf("tool call: %v", fn)
	}
}

// An answer that was not streamed becomes one object; an error, with its
// status kept, becomes {"error": MESSAGE} whatever shape it came in; an
// error event mid-stream becomes an error line.
func TestOllamaWriter_WholeAnswersAndErrors(t *testing.T) {
	rec := feed(t, ollamaGenerate, false, 200, "application/json",
		`{"choices":[{"message":{"content":"hi there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":2,"completion_tokens":2}}`)
	got := lines(t, rec.Body.String())
	if len(got) != 1 || got[0]["response"] != "hi there" || got[0]["done"] != true || got[0]["eval_count"] != 2.0 {
		t.Errorf("generate: %s", rec.Body)
	}
	if rec.Header().Get("Content-Length") == "999" {
		t.Errorf("the model server's length was kept: %v", rec.Header())
	}

	rec = feed(t, ollamaEmbed, false, 200, "application/json", `{"data":[{"embedding":[0.5,1]},{"embedding":[2,3]}],"usage":{"prompt_tokens":4}}`)
	if got := lines(t, rec.Body.String()); got[0]["embeddings"] == nil || len(got[0]["embeddings"].([]any)) != 2 || got[0]["prompt_eval_count"] != 4.0 {
		t.Errorf("embed: %s", rec.Body)
	}

	for _, body := range []string{
		`{"error":{"message":"context too long","type":"invalid_request_error"}}`, // OpenAI's, llama-server's
		`{"error":"context too long"}`,                                            // Ollama's
	} {
		rec = feed(t, ollamaChat, true, 400, "application/json", body)
		if rec.Code != 400 || strings.TrimSpace(rec.Body.String()) != `{"error":"context too long"}` {
			t.Errorf("error %s: %d %s", body, rec.Code, rec.Body)
		}
	}

	rec = feed(t, ollamaChat, true, 200, "text/event-stream",
		`data: {"choices":[{"delta":{"content":"a"}}]}`+"\n\n",
		`data: {"error":{"message":"upstream failed mid-stream"}}`+"\n\n")
	got = lines(t, rec.Body.String())
	if len(got) != 2 || got[1]["error"] != "upstream failed mid-stream" {
		t.Errorf("mid-stream error: %s", rec.Body)
	}
}

// What the translation must hold is bounded: an answer not streamed
// past the limit is a 502, a stream's line past it an error line; the
// lines before it were sent.
func TestOllamaWriter_HoldsABoundedAnswer(t *testing.T) {
	big := `{"choices":[{"message":{"content":"` + strings.Repeat("x", 100) + `"}}]}`
	rec := feedLimited(t, 64, ollamaChat, false, 200, "application/json", big[:50], big[50:])
	var e struct{ Error string }
	if json.Unmarshal(rec.Body.Bytes(), &e); rec.Code != http.StatusBadGateway || !strings.Contains(e.Error, "too large") {
		t.Errorf("a whole answer past the limit: %d %s", rec.Code, rec.Body)
	}
	rec = feedLimited(t, 64, ollamaChat, true, 200, "text/event-stream",
		`data: {"choices":[{"delta":{"content":"a"}}]}`+"\n\n", "data: "+strings.Repeat("y", 100))
	got := lines(t, rec.Body.String())
	if len(got) != 2 || got[0]["message"].(map[string]any)["content"] != "a" || !strings.Contains(fmt.Sprint(got[1]["error"]), "too large") {
		t.Errorf("a stream's line past the limit: %s", rec.Body)
	}
}

// /api/ps says when a model leaves as Ollama does: an idle model's
// expiry, a model in use its TTL from now, one without a TTL about 292
// years from now — never a time already past, which Ollama's clients
// show as "Stopping...".
func TestOllama_Expiry(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	idle := now.Add(90 * time.Second)
	for _, tt := range []struct {
		name string
		st   router.ModelStatus
		want time.Time
	}{
		{"idle with a TTL", router.ModelStatus{ExpiresAt: idle, TTL: 5 * time.Minute}, idle},
		{"in use with a TTL", router.ModelStatus{InFlight: 2, TTL: 5 * time.Minute}, now.Add(5 * time.Minute)},
		{"no TTL", router.ModelStatus{}, now.Add(time.Duration(math.MaxInt64))},
	} {
		got := ollamaExpiry(tt.st, now)
		if !got.Equal(tt.want) || !got.After(now) {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
	if y := ollamaExpiry(router.ModelStatus{}, now).Year(); y < 2300 {
		t.Errorf("no TTL: expires in %d, want Ollama's keep_alive -1 (about 292 years on)", y)
	}
}

// Through the proxy: Ollama's errors have its shape and status, and a
// chat that names a model the box lacks loads nothing.
func TestOllama_Errors(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, tt := range []struct {
		rq     request
		status int
		msg    string
	}{
		{request{path: "/api/chat", body: `{"model":"nope","messages":[{"role":"user","content":"hi"}]}`}, 404, `model "nope" not found`},
		{request{path: "/api/chat", body: `{"messages":[]}`}, 400, "names no model"},
		{request{path: "/api/generate", body: `{"model":`}, 400, "not an Ollama request"},
		{request{path: "/api/chat", body: `{"model":"a","messages":[{"role":"user","content":"x"}],"format":"xml"}`}, 400, "format"},
		{request{path: "/api/generate", body: `{"model":"a","prompt":"x","keep_alive":"soon"}`}, 400, "keep_alive"},
		{request{path: "/api/chat", body: `{"model":"a","messages":[{"role":"user","content":"x"}],"think":"max"}`}, 400, "think"},
		{request{path: "/api/show", body: `{"model":"nope"}`}, 404, "not found"},
		{request{path: "/api/pull", body: `{"model":"nope"}`}, 404, "pulls nothing"},
		{request{path: "/api/delete", body: `{"model":"a"}`}, 501, "not supported"},
	} {
		resp, b := e.do(tt.rq)
		var body struct{ Error string }
		if err := json.Unmarshal(b, &body); err != nil || resp.StatusCode != tt.status || !strings.Contains(body.Error, tt.msg) {
			t.Errorf("%s %s: %d %s, want %d and an error with %q", tt.rq.path, tt.rq.body, resp.StatusCode, b, tt.status, tt.msg)
		}
	}
	e.world.expectNone(t)
	if resp, b := e.do(request{method: http.MethodGet, path: "/api/tags"}); resp.StatusCode != 200 || !strings.Contains(string(b), `"model":"a"`) {
		t.Errorf("tags: %d %s", resp.StatusCode, b)
	}
}

// discardWriter is an http.ResponseWriter that keeps nothing.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(int)             {}
func (d *discardWriter) Flush()                      {}

// BenchmarkOllamaWriter_StreamChunk is the cost of translating one
// streamed chat chunk (a token) from SSE to Ollama's NDJSON line.
func BenchmarkOllamaWriter_StreamChunk(b *testing.B) {
	chunk := []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" token"},"finish_reason":null}]}` + "\n\n")
	w := &discardWriter{h: http.Header{"Content-Type": {"text/event-stream"}}}
	o := &ollamaWriter{w: w, kind: ollamaChat, stream: true, model: "m", start: time.Now(), tools: map[int]*ollamaToolCall{}}
	o.WriteHeader(http.StatusOK)
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := o.Write(chunk); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzOllamaWriter: whatever a model server answers, in whatever pieces,
// the translation does not panic and the client gets Ollama's shape —
// every line of the body one JSON object, an error status's body
// {"error": …}.
func FuzzOllamaWriter(f *testing.F) {
	f.Add(uint8(ollamaChat), true, true, uint16(7), []byte(`data: {"choices":[{"delta":{"content":"hi","tool_calls":[{"index":3,"function":{"name":"f","arguments":"{\"a\""}}]}}]}`+"\n\ndata: [DONE]\n\n"))
	f.Add(uint8(ollamaGenerate), false, true, uint16(3), []byte(`{"choices":[{"text":"x","finish_reason":"length"}],"usage":{"prompt_tokens":1}}`))
	f.Add(uint8(ollamaEmbed), false, true, uint16(0), []byte(`{"data":[{"embedding":[1]},{}]}`))
	f.Add(uint8(ollamaEmbeddings), false, false, uint16(5), []byte(`{"error":{"message":"no"}}`))
	f.Add(uint8(ollamaChat), true, true, uint16(9), []byte("data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":-1}]}}]}\ndata: {\"error\":\"x\"}\n"))
	f.Fuzz(func(t *testing.T, kind uint8, stream, ok bool, cut uint16, body []byte) {
		status, ct := http.StatusOK, "application/json"
		if !ok {
			status = http.StatusBadRequest
		}
		if stream {
			ct = "text/event-stream"
		}
		rec := httptest.NewRecorder()
		o := &ollamaWriter{w: rec, kind: int(kind % 4), stream: stream, model: "m", start: time.Now(), tools: map[int]*ollamaToolCall{}, limit: 1 << 12}
		o.Header().Set("Content-Type", ct)
		o.WriteHeader(status)
		at := min(int(cut), len(body))
		_, _ = o.Write(body[:at])
		_, _ = o.Write(body[at:])
		o.finish()
		out := strings.TrimSpace(rec.Body.String())
		if out == "" {
			return // a stream that said nothing: nothing to end
		}
		for _, l := range strings.Split(out, "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("line %q is not a JSON object: %v", l, err)
			}
		}
		if rec.Code != http.StatusOK {
			var e struct{ Error string }
			if json.Unmarshal([]byte(out), &e); e.Error == "" {
				t.Fatalf("status %d without Ollama's error: %s", rec.Code, out)
			}
		}
	})
}

// Through the proxy: the final line's durations are what happened, as
// Ollama's clients work out tokens per second from them — the load the
// request waited for, the model server's time to its first token and
// from there to its last; a model already loaded has no load.
func TestOllama_Durations(t *testing.T) {
	e := newEnv(t, envOpts{})
	chat := request{path: "/api/chat", body: `{"model":"a","messages":[{"role":"user","content":"hi"}]}`,
		headers: map[string]string{"X-Test-Mode": "gated"}}
	// ask sends chat and returns its final line, the model server's
	// second and third chunks sent once the client has the first.
	ask := func(started func()) map[string]any {
		resp := make(chan *http.Response, 1)
		go func() { resp <- e.send(chat) }()
		started()
		r := <-resp
		defer r.Body.Close()
		br := bufio.NewReader(r.Body)
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatalf("first line: %v", err)
		}
		e.world.stepOne(t)
		e.world.stepOne(t)
		rest, _ := io.ReadAll(br)
		got := lines(t, string(rest))
		return got[len(got)-1]
	}
	ns := func(m map[string]any, key string) time.Duration {
		v, _ := m[key].(float64)
		return time.Duration(v)
	}
	open := e.world.gate("a")
	cold := ask(func() {
		e.world.expect(t, "start a") // the request waits on a's load
		open()
	})
	load, prompt, eval, total := ns(cold, "load_duration"), ns(cold, "prompt_eval_duration"), ns(cold, "eval_duration"), ns(cold, "total_duration")
	if cold["done"] != true || load <= 0 || prompt <= 0 || eval <= 0 || load+prompt+eval > total {
		t.Fatalf("a cold load's final line: %v; want load, prompt and eval durations above 0, together within the total", cold)
	}

	warm := ask(func() {})
	if ns(warm, "load_duration") != 0 || ns(warm, "eval_duration") <= 0 {
		t.Errorf("a loaded model's final line: %v; want no load, an eval duration", warm)
	}
}

// llama-server's own timings, where its answer carries them, are the
// durations; an answer sent whole, whose first token is not seen, gives
// its whole time to eval_duration and none to the prompt (left out, as
// Ollama leaves out a 0, so no client divides by it).
func TestOllamaWriter_Durations(t *testing.T) {
	sent := time.Now().Add(-3 * time.Second)
	ex := &exchange{loadWait: 2 * time.Second, usage: &usage{sent: sent, first: sent.Add(time.Second), last: sent.Add(1500 * time.Millisecond)}}
	run := func(stream bool, ctype string, pieces ...string) map[string]any {
		rec := httptest.NewRecorder()
		o := &ollamaWriter{w: rec, kind: ollamaChat, stream: stream, model: "m", start: sent.Add(-2 * time.Second), ex: ex, tools: map[int]*ollamaToolCall{}, limit: 1 << 20}
		o.Header().Set("Content-Type", ctype)
		o.WriteHeader(200)
		for _, p := range pieces {
			_, _ = o.Write([]byte(p))
		}
		o.finish()
		got := lines(t, rec.Body.String())
		return got[len(got)-1]
	}
	ex.usage.stream = true
	got := run(true, "text/event-stream",
		`data: {"choices":[{"delta":{"content":"a"},"finish_reason":"stop"}],"timings":{"prompt_n":5,"prompt_ms":12.5,"predicted_n":1,"predicted_ms":40}}`+"\n\ndata: [DONE]\n\n")
	if got["load_duration"] != 2e9 || got["prompt_eval_duration"] != 12.5e6 || got["eval_duration"] != 40e6 {
		t.Errorf("llama-server's timings: %v", got)
	}
	got = run(true, "text/event-stream", `data: {"choices":[{"delta":{"content":"a"},"finish_reason":"stop"}]}`+"\n\ndata: [DONE]\n\n")
	if got["prompt_eval_duration"] != 1e9 || got["eval_duration"] != 0.5e9 {
		t.Errorf("a stream without timings: %v; want the first token's time and the rest", got)
	}
	ex.usage.stream = false
	got = run(false, "application/json", `{"choices":[{"message":{"content":"a"},"finish_reason":"stop"}]}`)
	if _, ok := got["prompt_eval_duration"]; ok || got["eval_duration"] != 1.5e9 {
		t.Errorf("a whole answer without timings: %v; want its whole time as eval_duration, no prompt_eval_duration", got)
	}
}

// What Loadout read of a model's file (ModelEntry.Details) is Ollama's
// details in /api/tags, /api/show and /api/ps, and /api/show's
// model_info under Ollama's keys; a model with no file read has empty
// details, as before.
func TestOllama_DetailsFromTheModelFile(t *testing.T) {
	e := newEnv(t, envOpts{edit: func(m *ModelEntry) {
		if m.ID == "a" {
			m.Details = ModelDetails{Format: "gguf", Family: "qwen2", Parameters: 7_615_616_512, Quantization: "Q4_K_M", ContextLength: 32768, EmbeddingLength: 3584}
		}
	}})
	want := ollamaDetails{Format: "gguf", Family: "qwen2", Families: []string{"qwen2"}, ParameterSize: "7.6B", QuantizationLevel: "Q4_K_M"}
	var tags struct {
		Models []struct {
			Name    string
			Details ollamaDetails
		}
	}
	if _, b := e.do(request{method: http.MethodGet, path: "/api/tags"}); json.Unmarshal(b, &tags) != nil {
		t.Fatalf("tags: %s", b)
	}
	for _, m := range tags.Models {
		switch {
		case m.Name == "a" && !reflect.DeepEqual(m.Details, want):
			t.Errorf("tags a: %+v, want %+v", m.Details, want)
		case m.Name == "d" && !reflect.DeepEqual(m.Details, ollamaDetails{}):
			t.Errorf("tags d (no file read): %+v, want empty details", m.Details)
		}
	}
	var show struct {
		Details   ollamaDetails
		ModelInfo map[string]any `json:"model_info"`
	}
	if _, b := e.do(request{path: "/api/show", body: `{"model":"a"}`}); json.Unmarshal(b, &show) != nil ||
		!reflect.DeepEqual(show.Details, want) || show.ModelInfo["general.architecture"] != "qwen2" ||
		show.ModelInfo["general.parameter_count"] != 7_615_616_512.0 || show.ModelInfo["qwen2.context_length"] != 32768.0 ||
		show.ModelInfo["qwen2.embedding_length"] != 3584.0 {
		t.Errorf("show a: %s", b)
	}
	e.do(request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`}) // loads a
	var ps struct {
		Models []struct {
			Name    string
			Details ollamaDetails
		}
	}
	if _, b := e.do(request{method: http.MethodGet, path: "/api/ps"}); json.Unmarshal(b, &ps) != nil || len(ps.Models) != 1 || !reflect.DeepEqual(ps.Models[0].Details, want) {
		t.Errorf("ps: %s", b)
	}
	// Capabilities: the configuration's (a: none declared) with the
	// file's; an embedding model completes nothing.
	for _, tc := range []struct {
		details ModelDetails
		tools   bool
		want    []string
	}{
		{ModelDetails{}, false, []string{"completion"}},
		{ModelDetails{}, true, []string{"completion", "tools"}},
		{ModelDetails{Tools: true, Thinking: true, Insert: true}, false, []string{"completion", "tools", "thinking", "insert"}},
		{ModelDetails{Embedding: true}, false, []string{"embedding"}},
		{ModelDetails{Vision: true}, false, []string{"completion", "vision"}},
	} {
		e := newEnv(t, envOpts{edit: func(m *ModelEntry) {
			if m.ID == "a" {
				m.Details, m.Capabilities.Tools = tc.details, tc.tools
			}
		}})
		var show struct{ Capabilities []string }
		if _, b := e.do(request{path: "/api/show", body: `{"model":"a"}`}); json.Unmarshal(b, &show) != nil || !slices.Equal(show.Capabilities, tc.want) {
			t.Errorf("details %+v, tools declared %v: capabilities %s, want %v", tc.details, tc.tools, b, tc.want)
		}
	}
	for n, s := range map[uint64]string{7_615_616_512: "7.6B", 494_032_768: "494.03M", 184_640: "184.64K", 12: "12"} {
		if got := ollamaParameters(n); got != s {
			t.Errorf("ollamaParameters(%d) = %q, want %q", n, got, s)
		}
	}
}

// An embed with nothing to embed is Ollama's way to load a model, as a
// chat with nothing to say is: the model loads (with the request's
// keep_alive) and the answer is no embeddings, as Ollama's EmbedHandler
// and EmbeddingsHandler give — never a model server's 400 for an empty
// input, nor one of the proxy's own.
func TestOllama_EmbedWithNothingToEmbedLoadsTheModel(t *testing.T) {
	e := newEnv(t, envOpts{})
	for i, tt := range []struct{ body, model string }{
		{`{"model":"a"}`, "a"},
		{`{"model":"a","input":[]}`, "a"},
		{`{"model":"a","input":""}`, "a"},
		{`{"model":"a:latest","input":null,"keep_alive":"10m"}`, "a:latest"},
	} {
		resp, b := e.do(request{path: "/api/embed", body: tt.body})
		var got map[string]any
		if err := json.Unmarshal(b, &got); err != nil || resp.StatusCode != 200 || !reflect.DeepEqual(got["embeddings"], []any{}) || got["model"] != tt.model {
			t.Fatalf("/api/embed %s: %d %s, want 200, model %q and no embeddings", tt.body, resp.StatusCode, b, tt.model)
		}
		if i == 0 {
			e.world.expect(t, "start a")
		}
		rq := e.rec.lastRequest(t)
		if rq.Model != "a" {
			t.Errorf("/api/embed %s asked the router for %+v", tt.body, rq)
		}
		if strings.Contains(tt.body, "keep_alive") && (rq.TTL == nil || *rq.TTL != 10*time.Minute) {
			t.Errorf("keep_alive 10m asked for %+v", rq)
		}
	}
	resp, b := e.do(request{path: "/api/embeddings", body: `{"model":"a"}`})
	if resp.StatusCode != 200 || strings.TrimSpace(string(b)) != `{"embedding":[]}` {
		t.Errorf("/api/embeddings with no prompt: %d %s", resp.StatusCode, b)
	}
	if resp, b := e.do(request{path: "/api/embed", body: `{"model":"nope","input":[]}`}); resp.StatusCode != 404 {
		t.Errorf("an unknown model: %d %s", resp.StatusCode, b)
	}
	e.world.expectNone(t)
}

// A generate's suffix (fill-in-the-middle) has no faithful OpenAI form
// the model servers honour: it is refused, before anything loads, with
// where llama-server's /infill is, rather than dropped.
func TestOllama_GenerateSuffixIsRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, body := range []string{
		`{"model":"a","prompt":"def add(a, b):","suffix":"\n\nprint(add(1, 2))"}`,
		`{"model":"a:latest","prompt":"x = ","suffix":"\n","raw":true,"stream":false}`,
		`{"model":"a","suffix":"}"}`,
	} {
		resp, b := e.do(request{path: "/api/generate", body: body})
		var got struct{ Error string }
		if err := json.Unmarshal(b, &got); err != nil || resp.StatusCode != http.StatusBadRequest ||
			!strings.Contains(got.Error, "suffix (fill-in-the-middle)") || !strings.Contains(got.Error, "/upstream/a/infill") {
			t.Errorf("%s: %d %s, want 400 in Ollama's shape naming /upstream/a/infill", body, resp.StatusCode, b)
		}
	}
	e.world.expectNone(t)
	// An empty suffix is none.
	if resp, b := e.do(request{path: "/api/generate", body: `{"model":"a","prompt":"hi","suffix":"","stream":false}`}); resp.StatusCode != 200 {
		t.Errorf("an empty suffix: %d %s", resp.StatusCode, b)
	}
}

// A stream the model server ends cleanly but without finishing it (no
// finish_reason, no [DONE]) ends with an error line, so the client
// cannot take the cut answer for a whole one; the request is logged as
// failed.
func TestOllama_StreamEndedWithoutFinishing(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, rq := range []request{
		{path: "/api/chat", body: `{"model":"a","messages":[{"role":"user","content":"hi"}]}`},
		{path: "/api/generate", body: `{"model":"a","prompt":"hi"}`},
	} {
		rq.headers = map[string]string{"X-Test-Mode": "cut"}
		resp, b := e.do(rq)
		got := lines(t, string(b))
		if resp.StatusCode != 200 || len(got) != 3 || got[1]["done"] != false {
			t.Fatalf("%s: %d %s, want two pieces and an error line", rq.path, resp.StatusCode, b)
		}
		if msg, _ := got[2]["error"].(string); !strings.Contains(msg, "ended the stream without finishing") || got[2]["done"] != nil {
			t.Errorf("%s: last line %v, want Ollama's error line", rq.path, got[2])
		}
		if line := e.logs.requestLine(t, resp.Header.Get(requestIDHeader)); line.attrs["status"] != "502" {
			t.Errorf("%s logged %v, want a 502", rq.path, line.attrs)
		}
	}
}

// Ollama's logprobs and top_logprobs reach the model server as OpenAI's
// (a chat's; a raw generate's completions count) and its answer's come
// back in Ollama's shape, on each streamed line and on a whole answer; an
// embed's dimensions reach it too. All three were dropped: the client
// got no logprobs, and vectors of the model's full size.
func TestOllama_LogprobsAndDimensions(t *testing.T) {
	var req ollamaRequest
	if err := json.Unmarshal([]byte(`{"model":"m","prompt":"hi","logprobs":true,"top_logprobs":2,"dimensions":8,"input":"x"}`), &req); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		body func() ([]byte, error)
		want string
	}{
		{"chat", func() ([]byte, error) { return req.chatBody(ollamaGenerate, false) }, `"logprobs":true`},
		{"chat's alternatives", func() ([]byte, error) { return req.chatBody(ollamaGenerate, false) }, `"top_logprobs":2`},
		{"raw generate", func() ([]byte, error) { return req.completionsBody(false) }, `"logprobs":2`},
		{"embed", func() ([]byte, error) { return req.embeddingsBody(ollamaEmbed) }, `"dimensions":8`},
	} {
		b, err := tc.body()
		if err != nil || !strings.Contains(string(b), tc.want) {
			t.Errorf("%s: body %s (%v), want %s", tc.name, b, err, tc.want)
		}
	}

	// The server's alternatives are cut to those asked for: llama-server
	// lists 20 when none were, a completion at least one.
	chatLP := `{"content":[{"token":"Hi","logprob":-0.1,"bytes":[72,105],"top_logprobs":[{"token":"Hi","logprob":-0.1},{"token":"Yo","logprob":-2.5},{"token":"Ho","logprob":-3}]}]}`
	for top, want := range []int{0, 1, 2} {
		rec := feedTop(t, maxOllamaHeld, top, ollamaChat, true, 200, "text/event-stream",
			`data: {"choices":[{"delta":{"content":"Hi"},"logprobs":`+chatLP+`}]}`+"\n\n", "data: [DONE]\n\n")
		got := lines(t, rec.Body.String())
		lp, _ := got[0]["logprobs"].([]any)
		if len(lp) != 1 || lp[0].(map[string]any)["token"] != "Hi" {
			t.Fatalf("streamed chat line: %v", got[0])
		}
		if alts, _ := lp[0].(map[string]any)["top_logprobs"].([]any); len(alts) != want {
			t.Errorf("top_logprobs %d: %d alternatives (%v), want %d", top, len(alts), alts, want)
		}
	}
	for _, tc := range []struct{ asked, want int }{{-1, 0}, {0, 0}, {5, 5}, {1000, 20}} {
		if got := (&ollamaRequest{TopLogprobs: tc.asked}).topLogprobs(); got != tc.want {
			t.Errorf("top_logprobs %d is %d, want %d (0 to 20, Ollama's and OpenAI's cap)", tc.asked, got, tc.want)
		}
	}
	rec := feedTop(t, maxOllamaHeld, 2, ollamaGenerate, false, 200, "application/json",
		`{"choices":[{"text":"Hi","logprobs":{"tokens":["Hi"],"token_logprobs":[-0.1],"top_logprobs":[{"Yo":-2.5,"Hi":-0.1}]}}]}`)
	got := lines(t, rec.Body.String())
	lp, _ := got[0]["logprobs"].([]any)
	if len(lp) != 1 {
		t.Fatalf("whole raw generate: %v", got[0])
	}
	top := lp[0].(map[string]any)["top_logprobs"].([]any)
	if lp[0].(map[string]any)["logprob"] != -0.1 || len(top) != 2 || top[0].(map[string]any)["token"] != "Hi" {
		t.Errorf("whole raw generate's logprobs: %v (alternatives most likely first)", lp)
	}
}
