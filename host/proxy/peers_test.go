package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/host/peers"
)

// peerEcho is what the fake peer saw of a forwarded request.
type peerEcho struct {
	Model, Auth, Forwarded, Priority, Client string
	Body                                     string
}

// fakePeer is a peer on loopback: its /api/models says m and a are ready
// (a Loadout peer), and every other request is echoed back as JSON.
func fakePeer(t *testing.T) (*httptest.Server, *peers.Set) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/models" {
			fmt.Fprint(w, `{"models":[{"model":"m","state":"ready"},{"model":"a","state":"ready"}]}`)
			return
		}
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		var body struct{ Model string }
		_ = json.Unmarshal(b, &body)
		_ = json.NewEncoder(w).Encode(peerEcho{Model: body.Model, Auth: r.Header.Get("Authorization"), Forwarded: r.Header.Get(headerForwarded),
			Priority: r.Header.Get(headerPriority), Client: r.Header.Get(headerClient), Body: string(b)})
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	set, _ := startPeers(t, peers.Peer{ID: "p", URL: u, APIKey: "sk-p", Models: []string{"m", "a"}, Interval: time.Hour, Timeout: time.Second}, nil)
	return srv, set
}

// startPeers starts a Set of the one peer p, its clock now (nil: the
// wall clock), stopped when t ends, and returns it once p's first check
// found it up, with the channel of p's later changes of health.
func startPeers(t *testing.T, p peers.Peer, now func() time.Time) (*peers.Set, <-chan peers.Status) {
	t.Helper()
	changes := make(chan peers.Status, 16)
	set, err := peers.New(peers.Config{
		Peers:    []peers.Peer{p},
		Logger:   quietLogger(),
		OnChange: func(st peers.Status) { changes <- st },
		Now:      now,
	})
	if err != nil {
		t.Fatal(err)
	}
	set.Start(context.Background())
	t.Cleanup(set.Stop)
	awaitPeer(t, changes, peers.Up)
	return set, changes
}

// A peer's model is forwarded with the model renamed to the peer's id,
// the client's API key replaced by the peer's, Loadout's priority and
// client as headers, and the forwarded mark.
func TestPeers_ForwardRewrites(t *testing.T) {
	_, set := fakePeer(t)
	e := newEnv(t, envOpts{peers: set, apiKeys: []string{"client-key"}})
	resp, b := e.do(request{path: "/v1/chat/completions", headers: map[string]string{"Authorization": "Bearer client-key"},
		body: `{"model":"p/m","x_priority":7,"x_client_id":"bob","messages":[]}`})
	var got peerEcho
	if err := json.Unmarshal(b, &got); resp.StatusCode != 200 || err != nil {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	want := peerEcho{Model: "m", Auth: "Bearer sk-p", Forwarded: "1", Priority: "7", Client: "bob"}
	got.Body = ""
	if got != want {
		t.Fatalf("the peer saw %+v, want %+v", got, want)
	}
	line := e.logs.requestLine(t, resp.Header.Get(requestIDHeader))
	if line.attrs["model"] != "p/m" {
		t.Errorf("logged model %q, want the full name", line.attrs["model"])
	}

	// Listed by full name, as llama-swap lists them, with the state the
	// peer reported (the fake peer's models are ready).
	_, b = e.do(request{method: http.MethodGet, path: "/v1/models", headers: map[string]string{"Authorization": "Bearer client-key"}})
	if !strings.Contains(string(b), `{"id":"p/m","object":"model","created":`) || !strings.Contains(string(b), `"name":"p: m","meta":{"llamaswap":{"peerID":"p","type":"peer"}},"status":{"value":"loaded"}}`) {
		t.Errorf("/v1/models: %s", b)
	}
	// Retrieved by either name (GET /v1/models/{model}); a local model of
	// the same plain name is the local one, as requests are.
	for name, want := range map[string]string{
		"p/m": `{"id":"p/m","object":"model"`,
		"m":   `{"id":"m","object":"model"`,
		"a":   `"id":"a","object":"model"`,
	} {
		resp, b := e.do(request{method: http.MethodGet, path: "/v1/models/" + name, headers: map[string]string{"Authorization": "Bearer client-key"}})
		peer := strings.Contains(string(b), `"peerID":"p"`)
		if resp.StatusCode != 200 || !strings.Contains(string(b), want) || peer != (name != "a") {
			t.Errorf("GET /v1/models/%s: %d %s", name, resp.StatusCode, b)
		}
	}
	_, b = e.do(request{method: http.MethodGet, path: "/api/peers", headers: map[string]string{"Authorization": "Bearer client-key"}})
	if !strings.Contains(string(b), `"peer":"p"`) || !strings.Contains(string(b), `"state":"up"`) {
		t.Errorf("/api/peers: %s", b)
	}
}

// A plain name a local model and a peer share: the peer's is ready, the
// local one is not loaded, so the peer serves it and nothing loads here;
// a request a peer forwarded is served locally whatever the peer's state.
func TestPeers_LocalAndPeerShareAName(t *testing.T) {
	_, set := fakePeer(t)
	e := newEnv(t, envOpts{peers: set})
	resp, b := e.do(request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`})
	var got peerEcho
	if err := json.Unmarshal(b, &got); resp.StatusCode != 200 || err != nil || got.Forwarded != "1" {
		t.Fatalf("a: %d %s", resp.StatusCode, b)
	}
	if st := e.status("a"); st.State != "stopped" {
		t.Fatalf("the local a is %s: it was loaded though the peer had it ready", st.State)
	}
	ec := e.echoOf(request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`, headers: map[string]string{headerForwarded: "1"}})
	if ec.Server != "a" || ec.Headers[headerForwarded] != "" {
		t.Fatalf("a forwarded request: served by %+v; want the local model, without the mark", ec)
	}
}

// A peer's filters (llama-swap's peers filters:) are applied to what is
// forwarded to it: stripped fields gone, set fields set, the model the
// peer's id.
func TestPeers_FiltersApplied(t *testing.T) {
	srv, _ := fakePeer(t)
	u, _ := url.Parse(srv.URL)
	changes := make(chan peers.Status, 4)
	set, err := peers.New(peers.Config{
		Peers: []peers.Peer{{ID: "p", URL: u, Models: []string{"m"}, Interval: time.Hour, Timeout: time.Second,
			Filters: config.Filters{StripParams: []string{"temperature"},
				SetParams: []config.Param{{Key: "provider", Value: json.RawMessage(`{"zdr":true}`)}}}}},
		Logger:   quietLogger(),
		OnChange: func(st peers.Status) { changes <- st },
	})
	if err != nil {
		t.Fatal(err)
	}
	set.Start(context.Background())
	t.Cleanup(set.Stop)
	<-changes
	e := newEnv(t, envOpts{peers: set})
	resp, b := e.do(request{path: "/v1/chat/completions", body: `{"model":"p/m","temperature":0.5,"messages":[]}`})
	var got peerEcho
	if err := json.Unmarshal(b, &got); resp.StatusCode != 200 || err != nil {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal([]byte(got.Body), &body); err != nil {
		t.Fatal(err)
	}
	if _, ok := body["temperature"]; ok || string(body["provider"]) != `{"zdr":true}` || string(body["model"]) != `"m"` {
		t.Fatalf("the peer saw %s", got.Body)
	}
}
