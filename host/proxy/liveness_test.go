package proxy

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A stream that stops producing after it began (the server stopped, or
// wedged) is ended after StreamIdle with an error event, counted 502, and
// its server is reported hung: the run loop kills it and fails the model.
func TestLiveness_StalledStreamEndsAndItsServerIsFailed(t *testing.T) {
	e := newEnv(t, envOpts{streamIdle: 200 * time.Millisecond})
	resp := e.send(request{path: "/v1/chat/completions", body: `{"model":"a","stream":true,"messages":[]}`,
		headers: map[string]string{"X-Test-Mode": "gated", requestIDHeader: "stalls"}}) // never stepped: tok1, then nothing
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	sse := newSSEReader(t, resp)
	sse.expectEvent(`"content":"tok1"`)
	ev, ok := sse.next()
	if !ok {
		t.Fatal("stream ended without an error event")
	}
	oe := openAIError(t, []byte(ev))
	if oe.Code != "upstream_error" || !strings.Contains(oe.Message, "no bytes from the upstream for 200ms") {
		t.Fatalf("error event %+v", oe)
	}
	sse.expectEnd()
	if line := e.logs.requestLine(t, "stalls"); line.attrs["status"] != "502" {
		t.Errorf("log line %+v, want status 502", line)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := e.status("a")
		if st.State == "failed" && strings.HasPrefix(st.LastError, "hung: no bytes") && st.InFlight == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a is %s (%q, %d in flight); want failed as hung", st.State, st.LastError, st.InFlight)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A client that stops reading a response (a stopped process) does not
// hold its model busy: the write that waits on it fails at its deadline
// (StreamIdle), the request ends as a client gone (499, saying why) and
// its upstream request with it; the model is not taken as hung (the
// upstream was not idle, the client was) and serves the next request.
func TestLiveness_ClientThatStopsReadingIsCut(t *testing.T) {
	const idle = 300 * time.Millisecond
	e := newEnv(t, envOpts{streamIdle: idle})
	conn, err := net.Dial("tcp", e.ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(4 << 10)
	body := `{"model":"a","stream":true,"messages":[]}`
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: loadout\r\nContent-Type: application/json\r\n"+
		"X-Test-Mode: flood\r\n%s: stuck\r\nContent-Length: %d\r\n\r\n%s", requestIDHeader, len(body), body)
	// It reads nothing from here on.
	line := e.logs.requestLine(t, "stuck")
	if line.attrs["status"] != "499" || !strings.Contains(line.attrs["err"], "the client read nothing for 300ms") {
		t.Fatalf("log line %+v; want 499, the client read nothing", line)
	}
	deadline := time.Now().Add(10 * time.Second)
	for st := e.status("a"); st.InFlight != 0 || st.State != "ready"; st = e.status("a") {
		if time.Now().After(deadline) {
			t.Fatalf("a is %s (%q) with %d in flight; want ready and idle", st.State, st.LastError, st.InFlight)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if resp, b := e.do(request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`}); resp.StatusCode != http.StatusOK {
		t.Fatalf("the next request: %d %s", resp.StatusCode, b)
	}
}

// The idle clock starts with the body's first byte: a server that takes
// longer than StreamIdle to answer at all (a long prefill) is not cut.
func TestLiveness_SlowFirstByteIsNotAStall(t *testing.T) {
	e := newEnv(t, envOpts{streamIdle: 50 * time.Millisecond})
	done := make(chan *http.Response, 1)
	go func() {
		done <- e.send(request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`,
			headers: map[string]string{"X-Test-Mode": "hold"}})
	}()
	<-e.world.holding
	time.Sleep(200 * time.Millisecond) // four idle limits before the first byte
	e.world.release <- struct{}{}
	resp := <-done
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d for a slow but working server", resp.StatusCode)
	}
	if st := e.status("a"); st.State != "ready" {
		t.Fatalf("a is %s after a slow answer", st.State)
	}
}
