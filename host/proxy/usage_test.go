package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

func TestUsageMeter_ReadsUsage(t *testing.T) {
	for _, tc := range []struct {
		name, contentType, body string
		prompt, completion      int64
		firstToken              bool
	}{
		{"json chat", "application/json", `{"choices":[{"message":{"content":"a b c"}}],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}`, 7, 3, true},
		{"json embeddings", "application/json; charset=utf-8", `{"data":[],"usage":{"prompt_tokens":4,"total_tokens":4}}`, 4, 0, true},
		{"json without usage", "application/json", `{"choices":[]}`, 0, 0, true},
		{"stream with final usage chunk", "text/event-stream",
			"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n" +
				"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n" +
				"data: {\"choices\":[{\"delta\":{\"content\": \" there\"}}]}\n\n" +
				"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}\n\n" +
				"data: [DONE]\n\n", 5, 2, true},
		{"stream without usage counts chunks", "text/event-stream",
			"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\r\n\r\n" +
				"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\r\n\r\n" +
				"data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"b\"}}]}\r\n\r\n" +
				"data: {\"choices\":[{\"text\":\"c\"}]}\r\n\r\n" +
				"data: [DONE]", 0, 3, true},
		{"responses api stream", "text/event-stream",
			"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"x\"}\n\n" +
				"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\n", 9, 1, true},
		{"audio passes unexamined", "audio/mpeg", "\xff\xfb binary", 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := &usage{sent: time.Now()}
			// One byte a read: lines and bodies arrive split anywhere.
			m := newUsageMeter(io.NopCloser(iotest.OneByteReader(strings.NewReader(tc.body))), u, tc.contentType)
			if b, err := io.ReadAll(m); err != nil || string(b) != tc.body {
				t.Fatalf("body changed: %q, %v", b, err)
			}
			_ = m.Close()
			if u.prompt != tc.prompt || u.completion != tc.completion {
				t.Errorf("prompt, completion = %d, %d; want %d, %d", u.prompt, u.completion, tc.prompt, tc.completion)
			}
			if _, ok := u.upstreamTTFT(); ok != tc.firstToken {
				t.Errorf("first token seen = %t, want %t", ok, tc.firstToken)
			}
		})
	}
}

// A body cut short still settles what it saw: its chunks so far.
func TestUsageMeter_ClosedEarlyCountsChunksSoFar(t *testing.T) {
	u := &usage{sent: time.Now()}
	body := "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\ndata: {\"cho"
	m := newUsageMeter(io.NopCloser(strings.NewReader(body)), u, "text/event-stream")
	buf := make([]byte, len(body)-3)
	if _, err := io.ReadFull(m, buf); err != nil {
		t.Fatal(err)
	}
	_ = m.Close()
	if u.completion != 2 {
		t.Fatalf("completion = %d, want 2", u.completion)
	}
}

func TestHasText(t *testing.T) {
	for in, want := range map[string]bool{
		`{"content":"x"}`:               true,
		`{"content": "x"}`:              true,
		`{"content":""}`:                false,
		`{"content":null}`:              false,
		`{"role":"a","content":"",}`:    false,
		`{"x":"content","content":"y"}`: true,
	} {
		if got := hasText([]byte(in), `"content"`); got != want {
			t.Errorf("hasText(%s) = %t, want %t", in, got, want)
		}
	}
}

func FuzzUsageMeter(f *testing.F) {
	f.Add("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":{\"prompt_tokens\":1}}\n\n", true)
	f.Add(`{"usage":{"completion_tokens":3}}`, false)
	f.Fuzz(func(t *testing.T, body string, sse bool) {
		ct := "application/json"
		if sse {
			ct = "text/event-stream"
		}
		u := &usage{sent: time.Now()}
		m := newUsageMeter(io.NopCloser(strings.NewReader(body)), u, ct)
		b, err := io.ReadAll(m)
		if err != nil || string(b) != body {
			t.Fatalf("body changed")
		}
		_ = m.Close()
		if u.completion < 0 && !u.reported {
			t.Fatalf("negative count %d", u.completion)
		}
	})
}

// An error a model server reports inside its stream (under the 200 it
// sent) is read from the event: OpenAI's error object with an HTTP code,
// a bare error text, the Responses API's error event; content that only
// mentions "error" is not one.
func TestUsageMeter_ReadsAStreamsErrorEvent(t *testing.T) {
	for _, tc := range []struct {
		name, event, err string
		status           int
	}{
		{"llama-server", `{"error":{"code":500,"message":"context shift is disabled","type":"server_error"}}`, "context shift is disabled", 500},
		{"vLLM", `{"error": {"object":"error","message":"too long","type":"BadRequestError","code":400}}`, "too long", 400},
		{"code not a status", `{"error":{"message":"boom","code":"overloaded"}}`, "boom", 0},
		{"error text", `{"error":"out of memory"}`, "out of memory", 0},
		{"responses api", `{"type":"error","code":"server_error","message":"failed","sequence_number":3}`, "failed", 0},
		{"content mentioning error", `{"choices":[{"delta":{"content":"\"error\": none"}}]}`, "", 0},
		{"error null", `{"error":null,"choices":[]}`, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := &usage{sent: time.Now()}
			body := "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: " + tc.event + "\n\n"
			m := newUsageMeter(io.NopCloser(iotest.OneByteReader(strings.NewReader(body))), u, "text/event-stream")
			if _, err := io.ReadAll(m); err != nil {
				t.Fatal(err)
			}
			if u.streamErr != tc.err || u.streamStatus != tc.status {
				t.Errorf("stream error %q, status %d; want %q, %d", u.streamErr, u.streamStatus, tc.err, tc.status)
			}
		})
	}
}

// A stream its model server ended with an error event is a failed
// request in the request's summary (activity log, events), metrics and
// log line, at the event's code, though the client was sent a 200: it
// was counted as a success.
func TestProxy_StreamErrorEventIsAFailure(t *testing.T) {
	summaries := make(chan RequestSummary, 1)
	e := newEnv(t, envOpts{onRequest: func(s RequestSummary) { summaries <- s }})
	resp, body := e.do(request{path: "/v1/chat/completions", body: `{"model":"a","stream":true,"messages":[]}`,
		headers: map[string]string{"X-Test-Mode": "errorevent"}})
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "context shift is disabled") {
		t.Fatalf("the client got %d %q; want the 200 stream with the server's error event", resp.StatusCode, body)
	}
	s := <-summaries
	if s.Status != 500 || !strings.Contains(s.Error, "context shift is disabled") {
		t.Errorf("summary: status %d, error %q; want 500 and the server's error", s.Status, s.Error)
	}
}

// A model endpoint's request reaches the model server without the
// client's Accept-Encoding, so the answer comes plain and its usage is
// read: a server that gzips when asked (the OpenAI SDK asks) answered
// compressed, and the request counted no tokens.
func TestProxy_ModelEndpointsAskForAPlainAnswer(t *testing.T) {
	summaries := make(chan RequestSummary, 1)
	e := newEnv(t, envOpts{onRequest: func(s RequestSummary) { summaries <- s }})
	ec := e.echoOf(request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`, headers: map[string]string{"Accept-Encoding": "gzip, deflate"}})
	if got := ec.Headers["Accept-Encoding"]; got != "" {
		t.Errorf("the model server was sent Accept-Encoding %q, want none", got)
	}
	<-summaries
	// /upstream passes the client's request on as it is.
	if ec := e.echoOf(request{path: "/upstream/a/v1/chat/completions", body: `{}`, headers: map[string]string{"Accept-Encoding": "gzip"}}); ec.Headers["Accept-Encoding"] != "gzip" {
		t.Errorf("through /upstream the model server was sent Accept-Encoding %q, want the client's", ec.Headers["Accept-Encoding"])
	}
}
