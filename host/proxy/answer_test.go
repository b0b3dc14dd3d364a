package proxy

import (
	"errors"
	"github.com/loadout-dev/loadout/host/config"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/peers"
)

// What a peer's 200 must be, by endpoint and "stream"; the bytes read to
// tell are given back in front of the rest.
func TestCheckAnswer_Kinds(t *testing.T) {
	for _, tc := range []struct {
		path, ctype, body string
		stream            bool
		bad               string // "" when it is an answer
	}{
		{"/v1/chat/completions", "application/json; charset=utf-8", "\n  {\"choices\":[]}", false, ""},
		{"/v1/chat/completions", "text/event-stream", ": ping\n\ndata: {}\n\n", true, ""},
		{"/v1/chat/completions", "text/event-stream", "data: {}\n\n", true, ""},
		{"/v1/completions", "text/event-stream", "event: x\ndata: {}\n\n", true, ""},
		{"/v1/embeddings", "application/json", "{}", true, ""},  // embeddings do not stream
		{"/v1/audio/speech", "audio/mpeg", "ID3...", false, ""}, // not checked
		{"/v1/chat/completions", "", "{}", false, `Content-Type ""`},
		{"/v1/chat/completions", "application/json", "", false, "an empty body"},
		{"/v1/chat/completions", "application/json", "[1]", false, `a body that starts "[1]"`},
		{"/v1/chat/completions", "text/event-stream", "hello there", true, `a body that starts "hello there" where /v1/chat/completions returns an SSE stream`},
		{"/v1/rerank", "text/html", "<html>", false, `Content-Type "text/html" where /v1/rerank returns a JSON object`},
	} {
		resp := &http.Response{Header: http.Header{"Content-Type": {tc.ctype}}, Body: io.NopCloser(strings.NewReader(tc.body))}
		if tc.ctype == "" {
			resp.Header.Del("Content-Type")
		}
		err := checkAnswer(resp, tc.path, tc.stream)
		var bad *badAnswerError
		switch {
		case tc.bad == "" && err != nil:
			t.Errorf("%s %q: %v", tc.path, tc.body, err)
		case tc.bad != "" && (!errors.As(err, &bad) || !strings.Contains(err.Error(), tc.bad)):
			t.Errorf("%s %q: %v, want a bad answer saying %q", tc.path, tc.body, err, tc.bad)
		case tc.bad == "":
			if b, _ := io.ReadAll(resp.Body); string(b) != tc.body {
				t.Errorf("%s: the body reads %q after the check, want %q", tc.path, b, tc.body)
			}
		}
	}
}

// A peer's proxy has a transport of its own with the peer's timeouts
// (llama-swap's; 0 disables); a local server's keeps the shared one, and
// no transport bounds the answer's start (guardUpstream does, per request).
func TestPeerTransport_Timeouts(t *testing.T) {
	tr := newTransport(config.Timeouts{Connect: 5 * time.Second, TLSHandshake: 3 * time.Second, IdleConn: 7 * time.Second})
	if tr.TLSHandshakeTimeout != 3*time.Second || tr.IdleConnTimeout != 7*time.Second || tr.ResponseHeaderTimeout != 0 || tr.Proxy != nil {
		t.Fatalf("peer transport: %+v", tr)
	}
	off := newTransport(config.Timeouts{})
	if off.TLSHandshakeTimeout != 0 || off.IdleConnTimeout != 0 {
		t.Fatalf("zero timeouts are not off: %+v", off)
	}
	s := &Server{log: quietLogger()}
	u := newUpstreams(s)
	target, _ := url.Parse("http://127.0.0.1:1")
	set, err := peers.New(peers.Config{Peers: []peers.Peer{{ID: "p", URL: target, Models: []string{"m"}, Interval: time.Hour, Timeout: time.Second,
		Timeouts: config.Timeouts{IdleConn: 7 * time.Second, ResponseHeader: time.Minute}}}})
	if err != nil {
		t.Fatal(err)
	}
	to := set.Lookup("p/m")[0].Timeouts()
	local, peer := u.proxy(target, nil), u.proxy(target, &to)
	if local.Transport == peer.Transport || peer.Transport.(*http.Transport).IdleConnTimeout != 7*time.Second ||
		peer.Transport.(*http.Transport).ResponseHeaderTimeout != 0 {
		t.Fatal("a peer shares the local servers' transport, lacks its timeouts, or bounds the answer in the transport")
	}
	if u.proxy(target, &to) != peer {
		t.Fatal("a peer's proxy is not cached")
	}
}
