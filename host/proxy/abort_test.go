package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestAbort_EndsRequestsInFlight: past the shutdown deadline, Abort ends
// every request with an error its client can read: 503 JSON for a request
// whose headers are not out, a last SSE error event (and no [DONE]) for a
// stream, whether the upstream's or a loading-state one still queued.
func TestAbort_EndsRequestsInFlight(t *testing.T) {
	e := newEnv(t, envOpts{loadingState: true})

	// In flight at its upstream, no headers yet.
	held := make(chan *http.Response, 1)
	go func() {
		held <- e.send(request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`,
			headers: map[string]string{"X-Test-Mode": "hold", requestIDHeader: "held"}})
	}()
	e.world.waitHolding(t, "a")

	// The upstream's stream, under way.
	stream := e.send(request{path: "/v1/chat/completions", body: `{"model":"d","stream":true,"messages":[]}`,
		headers: map[string]string{"X-Test-Mode": "gated", requestIDHeader: "stream"}})
	defer stream.Body.Close()
	streamSSE := newSSEReader(t, stream)
	for ev := streamSSE.expectEvent("chat.completion.chunk"); !strings.Contains(ev, `"content":"tok1"`); {
		ev = streamSSE.expectEvent("chat.completion.chunk") // d's loading progress first
	}

	// A loading-state stream queued behind busy a (b would evict it).
	queued := e.send(request{path: "/v1/chat/completions", body: `{"model":"b","stream":true,"messages":[]}`,
		headers: map[string]string{requestIDHeader: "queued"}})
	defer queued.Body.Close()
	queuedSSE := newSSEReader(t, queued)
	queuedSSE.expectEvent("queued: position 1")

	if n := e.srv.Abort("the shutdown timeout ran out"); n != 3 {
		t.Errorf("Abort ended %d requests, want 3", n)
	}

	for name, sse := range map[string]*sseReader{"stream": streamSSE, "queued": queuedSSE} {
		ev, ok := sse.next()
		if !ok {
			t.Fatalf("%s: the stream ended without an error event", name)
		}
		oe := openAIError(t, []byte(ev))
		if oe.Code != "unavailable" || oe.Type != "server_error" || !strings.Contains(oe.Message, "shutting down: the shutdown timeout ran out") {
			t.Errorf("%s: error event %+v", name, oe)
		}
		sse.expectEnd() // no [DONE] after an error
	}

	resp := <-held
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("held request: reading the body: %v", err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("held request: status %d Retry-After %q, want 503 with Retry-After: 1: %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	if oe := openAIError(t, b); oe.Code != "unavailable" || !strings.Contains(oe.Message, "shutting down") {
		t.Errorf("held request: error %+v", oe)
	}

	for _, id := range []string{"held", "stream", "queued"} {
		if line := e.logs.requestLine(t, id); line.attrs["status"] != "503" {
			t.Errorf("request %s logged as %+v, want status 503", id, line)
		}
	}
	// Every grant was released: the router can stop the models.
	for _, st := range e.router.Models() {
		if st.InFlight != 0 || st.Queued != 0 || st.Loading != 0 {
			t.Errorf("after Abort: %+v", st)
		}
	}

	// A request that arrives afterwards is ended at once.
	resp, b = e.do(request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`})
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("request after Abort: status %d, want 503: %s", resp.StatusCode, b)
	}
}
