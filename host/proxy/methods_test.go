package proxy

import (
	"io"
	"net/http"
	"testing"
)

// HEAD is GET without the body (RFC 9110 §9.3.2) wherever GET is taken:
// the status and headers GET gives, no body, and nothing served twice
// (Ollama's clients probe HEAD /api/version).
func TestMethods_HeadWhereverGet(t *testing.T) {
	e := newEnv(t, envOpts{keepLogs: true, events: true})
	for _, path := range []string{
		"/v1/models", "/v1/models/a", "/running", "/api/version", "/api/ps", "/api/tags", "/metrics", "/logs",
		"/logs/a", "/api/models", "/api/events/history?type=swap_start", "/models",
	} {
		get, _ := e.do(request{method: http.MethodGet, path: path})
		head, b := e.do(request{method: http.MethodHead, path: path})
		if head.StatusCode != get.StatusCode || get.StatusCode != http.StatusOK || len(b) != 0 {
			t.Errorf("HEAD %s: %d with %d bytes; GET %d", path, head.StatusCode, len(b), get.StatusCode)
		}
		if h, g := head.Header.Get("Content-Type"), get.Header.Get("Content-Type"); h != g {
			t.Errorf("HEAD %s: Content-Type %q, GET's %q", path, h, g)
		}
	}
	e.world.expectNone(t)
}

// A HEAD on an endpoint that streams for as long as its client stays
// (the event streams, the log streams) ends with its headers: the
// handler returns (do waits for the request's log line), it does not
// stream into a response nobody reads.
func TestMethods_HeadOnAStreamEnds(t *testing.T) {
	e := newEnv(t, envOpts{keepLogs: true, events: true})
	for _, tt := range []struct{ path, ctype string }{
		{"/api/events", "text/event-stream"},
		{"/api/events?replay=1", "text/event-stream"},
		{"/models/sse", "text/event-stream"},
		{"/logs/stream", "text/plain; charset=utf-8"},
		{"/logs/stream/a", "text/plain; charset=utf-8"},
	} {
		resp, b := e.do(request{method: http.MethodHead, path: tt.path})
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != tt.ctype || len(b) != 0 {
			t.Errorf("HEAD %s: %d %v %q", tt.path, resp.StatusCode, resp.Header, b)
		}
		if line := e.logs.requestLine(t, resp.Header.Get(requestIDHeader)); line.attrs["method"] != http.MethodHead || line.attrs["status"] != "200" {
			t.Errorf("HEAD %s logged as %v", tt.path, line.attrs)
		}
	}
	// The GET streams as before.
	resp := e.send(request{method: http.MethodGet, path: "/api/events?replay=1"})
	defer resp.Body.Close()
	buf := make([]byte, 1)
	if _, err := io.ReadFull(resp.Body, buf); err != nil || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Errorf("GET /api/events: %v %v", err, resp.Header)
	}
}

// Every 405 says what the path takes (RFC 9110 §15.5.6: Allow), from
// the routes themselves: HEAD wherever GET is, OPTIONS everywhere (the
// preflight answers it on every path).
func TestMethods_405HasAllow(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, tt := range []struct{ method, path, allow string }{
		{http.MethodPost, "/v1/models", "GET, HEAD, OPTIONS"},
		{http.MethodDelete, "/v1/models/a", "GET, HEAD, OPTIONS"},
		{http.MethodGet, "/v1/chat/completions", "POST, OPTIONS"},
		{http.MethodHead, "/v1/chat/completions", "POST, OPTIONS"},
		{http.MethodGet, "/api/chat", "POST, OPTIONS"},
		{http.MethodPut, "/unload", "GET, POST, OPTIONS"},
		// GET /unload acts (llama-swap's): a HEAD, which monitors and link
		// checkers send as safe, is not served by it (it unloaded every
		// model).
		{http.MethodHead, "/unload", "GET, POST, OPTIONS"},
		{http.MethodGet, "/api/delete", "POST, DELETE, OPTIONS"},
		{http.MethodPost, "/health", "GET, HEAD, OPTIONS"},
	} {
		resp, b := e.do(request{method: tt.method, path: tt.path})
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != tt.allow {
			t.Errorf("%s %s: %d, Allow %q; want 405, Allow %q (%s)", tt.method, tt.path, resp.StatusCode, resp.Header.Get("Allow"), tt.allow, b)
		}
	}
}
