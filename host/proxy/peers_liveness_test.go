package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/host/peers"
)

// hungPeer is a peer on loopback whose /api/models always answers (its
// model m ready), as a box whose router lives while its inference hangs;
// its /v1/chat/completions does what the test sets.
type hungPeer struct {
	mu   sync.Mutex
	chat http.HandlerFunc
	quit chan struct{} // closed when the test ends: ends the requests' contexts
}

func (h *hungPeer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/api/models" {
		fmt.Fprint(w, `{"models":[{"model":"m","state":"ready"}]}`)
		return
	}
	h.mu.Lock()
	chat := h.chat
	h.mu.Unlock()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-h.quit:
			cancel()
		case <-ctx.Done():
		}
	}()
	chat(w, r.WithContext(ctx))
}

func (h *hungPeer) set(chat http.HandlerFunc) {
	h.mu.Lock()
	h.chat = chat
	h.mu.Unlock()
}

// answers is a peer's good chat completion.
func answers(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprint(w, `{"object":"chat.completion","choices":[]}`)
}

// The faults of issue 27 ("hung, not dead") on a peer whose /api/models
// answers: each forwarded request fails with a peer_error naming the peer
// and the limit, within the (short) limits configured; three in a row put
// the peer down, which /api/peers shows with why, and which its answering
// check does not lift; its requests then fail at once; after the
// cool-down one request is let through, and the peer, answering again,
// is back up.
func TestPeers_HungPeerGoesDownAndComesBack(t *testing.T) {
	const limit = 200 * time.Millisecond
	hang := func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }
	for _, tc := range []struct {
		name   string
		fault  http.HandlerFunc
		stream bool
		status int    // what the client gets
		want   string // in the error's message
	}{
		{name: "hangs before its headers", fault: hang, status: http.StatusGatewayTimeout,
			want: "no answer within 200ms (timeouts.responseHeader"},
		{name: "sends its headers, then hangs", stream: true, status: http.StatusGatewayTimeout,
			fault: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				w.WriteHeader(http.StatusOK)
				w.(http.Flusher).Flush()
				<-r.Context().Done()
			},
			want: "no answer within 200ms (timeouts.responseHeader"},
		{name: "one SSE event, then hangs", stream: true, status: http.StatusOK,
			fault: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprint(w, "data: {\"choices\":[]}\n\n")
				w.(http.Flusher).Flush()
				<-r.Context().Done()
			},
			want: "stalled mid-response: no bytes from the upstream for 200ms"},
		{name: "200 with an HTML page", status: http.StatusBadGateway,
			fault: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html")
				fmt.Fprint(w, "<html>502 Bad Gateway</html>")
			},
			want: `not an answer: answered 200 with Content-Type "text/html" where /v1/chat/completions returns a JSON object`},
		{name: "200 JSON that is not an object", status: http.StatusBadGateway,
			fault: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprint(w, "  oops")
			},
			want: `not an answer: answered 200 with a body that starts "oops" where /v1/chat/completions returns a JSON object`},
		{name: "200 JSON to a streaming request", stream: true, status: http.StatusBadGateway, fault: answers,
			want: `where /v1/chat/completions returns an SSE stream (text/event-stream)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hp := &hungPeer{chat: tc.fault, quit: make(chan struct{})}
			u := serveUntilQuit(t, hp, hp.quit)
			clock := &peerClock{now: time.Now()}
			set, changes := startPeers(t, peers.Peer{ID: "p", URL: u, Models: []string{"m"}, Interval: time.Hour, Timeout: 5 * time.Second,
				CoolDown: time.Minute, Timeouts: config.Timeouts{Connect: 5 * time.Second, ResponseHeader: limit}}, clock.Now)
			e := newEnv(t, envOpts{peers: set, streamIdle: limit})
			// A bound far above the limits, so that a request held by a
			// fault fails the test instead of hanging it.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			body := `{"model":"p/m","messages":[]}`
			if tc.stream {
				body = `{"model":"p/m","stream":true,"messages":[]}`
			}
			chat := request{path: "/v1/chat/completions", body: body, ctx: ctx}

			for i := range peers.DefaultFailures {
				resp, b := e.do(chat)
				msg := string(b)
				if resp.StatusCode == http.StatusOK { // the stream began: its error is its last event
					msg = string(b[strings.LastIndex(string(b), "data: ")+len("data: "):])
				}
				oe := openAIError(t, []byte(msg))
				if resp.StatusCode != tc.status || oe.Code != "peer_error" || !strings.Contains(oe.Message, "peer p (http://127.0.0.1:") ||
					!strings.Contains(oe.Message, tc.want) {
					t.Fatalf("request %d: %d %s; want %d, a peer_error naming the peer and %q", i+1, resp.StatusCode, b, tc.status, tc.want)
				}
			}
			st := awaitPeer(t, changes, peers.Down)
			if st.Failures != 3 || !strings.Contains(st.Error, "3 forwarded requests in a row failed, the last: ") || !strings.Contains(st.Error, tc.want) {
				t.Fatalf("down: %+v", st)
			}
			if got := peerState(t, e); got.State != peers.Down || got.Error != st.Error || got.RetryAt.IsZero() {
				t.Fatalf("/api/peers: %+v", got)
			}
			resp, b := e.do(chat)
			if oe := openAIError(t, b); resp.StatusCode != http.StatusServiceUnavailable || oe.Code != "peer_unavailable" ||
				!strings.Contains(oe.Message, "one request is let through to try it at") {
				t.Fatalf("while down: %d %s", resp.StatusCode, b)
			}

			// The cool-down passes and the peer answers again: the
			// request let through brings it back.
			hp.set(func(w http.ResponseWriter, r *http.Request) {
				if tc.stream {
					w.Header().Set("Content-Type", "text/event-stream")
					fmt.Fprint(w, "data: {\"choices\":[]}\n\ndata: [DONE]\n\n")
					return
				}
				answers(w, r)
			})
			clock.Add(time.Minute)
			if resp, b := e.do(chat); resp.StatusCode != http.StatusOK || strings.Contains(string(b), "error") {
				t.Fatalf("the trial: %d %s", resp.StatusCode, b)
			}
			awaitPeer(t, changes, peers.Up)
			if got := peerState(t, e); got.State != peers.Up || got.Failures != 0 || got.Error != "" {
				t.Fatalf("/api/peers after the trial: %+v", got)
			}
		})
	}
}

// peerClock is peers.Config.Now, moved by hand.
type peerClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *peerClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *peerClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// awaitPeer waits for the peer's next change of health and checks it is
// to state.
func awaitPeer(t *testing.T, changes <-chan peers.Status, state string) peers.Status {
	t.Helper()
	select {
	case st := <-changes:
		if st.State != state {
			t.Fatalf("the peer went %s (%s), want %s", st.State, st.Error, state)
		}
		return st
	case <-time.After(10 * time.Second):
		t.Fatalf("the peer did not go %s", state)
	}
	return peers.Status{}
}

// peerState is the one peer as GET /api/peers shows it.
func peerState(t *testing.T, e *env) peers.Status {
	t.Helper()
	_, b := e.do(request{method: http.MethodGet, path: "/api/peers"})
	var v struct{ Peers []peers.Status }
	if err := json.Unmarshal(b, &v); err != nil || len(v.Peers) != 1 {
		t.Fatalf("/api/peers: %v: %s", err, b)
	}
	return v.Peers[0]
}

// stoppedPeer is a peer on loopback that answers until a request for its
// model arrives, and from then on answers nothing at all, its checks
// included — a stopped process (SIGSTOP), a wedged box. The chat request
// that stops it first sends what send writes, if anything.
type stoppedPeer struct {
	mu      sync.Mutex
	stopped bool
	send    func(w http.ResponseWriter)
	quit    chan struct{} // closed when the test ends: ends the hung requests
}

func (p *stoppedPeer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	stopped := p.stopped
	if r.URL.Path != "/api/models" {
		p.stopped = true
	}
	p.mu.Unlock()
	switch {
	case r.URL.Path == "/api/models" && !stopped:
		fmt.Fprint(w, `{"models":[{"model":"m","state":"ready"}]}`)
		return
	case r.URL.Path != "/api/models" && p.send != nil:
		p.send(w)
		w.(http.Flusher).Flush()
	}
	select {
	case <-r.Context().Done():
	case <-p.quit:
	}
}

// A peer that stops answering everything while a request is in flight is
// found hung by its checks — Failures of them in a row with no answer
// within their timeout — and the request ends then with a peer_error
// that says so: before its answer began, and mid-stream (an SSE error
// event), not at the peer's responseHeader limit or the stream idle
// limit (a minute each here). The checks' timeout is a quarter second,
// so that a live peer on a machine busy with other tests is not found
// down before the request is sent.
func TestPeers_StoppedPeerEndsItsRequestsInFlight(t *testing.T) {
	for _, tc := range []struct {
		name   string
		send   func(w http.ResponseWriter)
		status int
	}{
		{name: "before its answer", status: http.StatusBadGateway},
		{name: "mid-stream", status: http.StatusOK, send: func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"choices\":[]}\n\n")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := &stoppedPeer{send: tc.send, quit: make(chan struct{})}
			u := serveUntilQuit(t, sp, sp.quit)
			set, _ := startPeers(t, peers.Peer{ID: "p", URL: u, Models: []string{"m"}, Interval: 50 * time.Millisecond, Timeout: 250 * time.Millisecond,
				Failures: 3, Timeouts: config.Timeouts{Connect: 5 * time.Second, ResponseHeader: time.Minute}}, nil)
			e := newEnv(t, envOpts{peers: set, streamIdle: time.Minute})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			resp, b := e.do(request{path: "/v1/chat/completions", body: `{"model":"p/m","stream":true,"messages":[]}`, ctx: ctx})
			msg := string(b)
			if resp.StatusCode == http.StatusOK { // the stream began: its error is its last event
				msg = msg[strings.LastIndex(msg, "data: ")+len("data: "):]
			}
			oe := openAIError(t, []byte(msg))
			if resp.StatusCode != tc.status || oe.Code != "peer_error" ||
				!strings.Contains(oe.Message, "peer p hung: its health check got no answer within 250ms 3 times in a row") {
				t.Fatalf("%d %s; want %d, a peer_error saying the peer hung", resp.StatusCode, b, tc.status)
			}
		})
	}
}

// serveUntilQuit serves h on loopback until the test ends, then closes
// quit first, so that handlers blocked on it return and the server can
// close, and returns the server's URL.
func serveUntilQuit(t *testing.T, h http.Handler, quit chan struct{}) *url.URL {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(quit) })
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
