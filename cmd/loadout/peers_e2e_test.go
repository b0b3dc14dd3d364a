package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// peerView is GET /api/peers.
type peerView struct {
	Peers []struct {
		Peer    string `json:"peer"`
		State   string `json:"state"`
		Error   string `json:"error"`
		Loadout bool   `json:"loadout"`
		Models  []struct {
			Model    string `json:"model"`
			State    string `json:"state"`
			InFlight int    `json:"in_flight"`
		} `json:"models"`
	} `json:"peers"`
}

func (s *server) peers() peerView {
	s.t.Helper()
	_, body := s.get("/api/peers")
	var v peerView
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		s.t.Fatalf("/api/peers: %v: %s", err, body)
	}
	return v
}

// peerModelState is peer's model's state as s last saw it ("" unknown).
func (s *server) peerModelState(peer, model string) string {
	st, _ := s.peerModel(peer, model)
	return st
}

// peerModel is peer's model's state and requests in flight as s last saw
// them.
func (s *server) peerModel(peer, model string) (state string, inFlight int) {
	for _, p := range s.peers().Peers {
		for _, m := range p.Models {
			if p.Peer == peer && m.Model == model {
				return m.State, m.InFlight
			}
		}
	}
	return "", 0
}

// readyIdle reports whether s last saw peer's model ready with nothing in
// flight.
func (s *server) readyIdle(peer, model string) bool {
	st, n := s.peerModel(peer, model)
	return st == "ready" && n == 0
}

// modelState is a model's state in s's own /api/models.
func (s *server) modelState(model string) (state string, inFlight int) {
	s.t.Helper()
	_, body := s.get("/api/models")
	var v struct {
		Models []struct {
			Model    string `json:"model"`
			State    string `json:"state"`
			InFlight int    `json:"in_flight"`
		} `json:"models"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		s.t.Fatalf("/api/models: %v: %s", err, body)
	}
	for _, m := range v.Models {
		if m.Model == model {
			return m.State, m.InFlight
		}
	}
	return "", 0
}

// peerConfig is a configuration of sim models (tokens at 50/s, so a
// stream of 40 tokens lasts most of a second) and peers, each
// "id=url:model,model", polled every 300 ms.
func peerConfig(t *testing.T, models []string, peers ...string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("healthCheckTimeout: 30\nstartPort: ${env.LOADOUT_E2E_START_PORT}\n")
	if len(models) > 0 {
		b.WriteString("models:\n")
	}
	for _, m := range models {
		fmt.Fprintf(&b, "  %s: {backend: sim, options: {load_time: 50ms, tokens_per_second: 50, max_batch: 8}}\n", m)
	}
	if len(peers) > 0 {
		b.WriteString("peers:\n")
		for _, p := range peers {
			id, rest, _ := strings.Cut(p, "=")
			i := strings.LastIndex(rest, ":")
			fmt.Fprintf(&b, "  %s: {proxy: %q, models: [%s], health: {interval: 300ms, timeout: 250ms}}\n", id, rest[:i], rest[i+1:])
		}
	}
	return writeConfig(t, t.TempDir(), b.String())
}

// Two real servers: A forwards to its peer B. B's models are listed in
// A's /v1/models and served through A by full and plain name, streaming
// included. B killed mid-stream: the stream ends with an error event
// naming the peer, A marks B down (one failed request checks it at
// once), and later requests fail fast with a 503 naming it; B restarted
// on the same address is marked up and serves again.
func TestPeers_TwoServersKillAndReturn(t *testing.T) {
	b := startServer(t, peerConfig(t, []string{"m", "bonly"}))
	a := startServer(t, peerConfig(t, []string{"alocal"}, "b="+b.base+":m,bonly"))
	evs := readSSE(t, t.Context(), a.base+"/api/events", "")

	_, list := a.get("/v1/models")
	for _, want := range []string{`"id":"alocal"`, `"id":"b/bonly"`, `"id":"b/m"`, `"name":"b: m"`, `"peerID":"b"`} {
		if !strings.Contains(list, want) {
			t.Fatalf("/v1/models lacks %s: %s", want, list)
		}
	}
	a.mustChat("b/m")
	a.mustChat("bonly") // the plain name: one peer serves it
	if st, _ := b.modelState("bonly"); st != "ready" {
		t.Fatalf("bonly on b is %q after a request through a", st)
	}
	if st, _ := a.modelState("alocal"); st != "stopped" {
		t.Fatalf("a's own model is %q: a served the peer's request itself?", st)
	}
	// /v1/models gives a peer's model the state the peer reported (it
	// always said unloaded).
	eventually(t, "b/bonly listed as loaded by a", func() bool {
		var list struct {
			Data []struct {
				ID     string
				Status struct{ Value string }
			}
		}
		_, body := a.get("/v1/models")
		_ = json.Unmarshal([]byte(body), &list)
		for _, m := range list.Data {
			if m.ID == "b/bonly" {
				return m.Status.Value == "loaded"
			}
		}
		return false
	})

	// A stream through the peer arrives token by token.
	st := a.openStream(t.Context(), "b/m", 5)
	st.until(`"content"`)
	if done, errEv, tail := st.rest(); !done || errEv {
		t.Fatalf("stream through the peer: done=%t error=%t\n%s", done, errEv, tail)
	}

	// B dies mid-stream.
	st = a.openStream(t.Context(), "m", 40)
	st.until(`"content"`)
	killed := time.Now()
	if err := b.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	done, errEv, tail := st.rest()
	if done || !errEv || !strings.Contains(tail, "peer b (") {
		t.Fatalf("a stream cut by the peer's death: done=%t error=%t, want an error event naming peer b\n%s", done, errEv, tail)
	}
	awaitEvent(t, evs, "peer", func(d string) bool { return strings.Contains(d, `"state":"down"`) })
	t.Logf("peer marked down %s after it was killed", time.Since(killed).Round(time.Millisecond))
	for _, model := range []string{"b/m", "m"} {
		start := time.Now()
		code, body := a.post("/v1/chat/completions", chat(model, false))
		if took := time.Since(start); code != 503 || !strings.Contains(body, "peer_unavailable") || !strings.Contains(body, "peer b ("+b.base) || took > 5*time.Second {
			t.Fatalf("%s while b is down: %d in %s: %s", model, code, took, body)
		}
	}
	a.mustChat("alocal") // a's own models are not affected

	// B comes back where it was.
	b2 := startServer(t, peerConfig(t, []string{"m", "bonly"}), "--listen", strings.TrimPrefix(b.base, "http://"))
	awaitEvent(t, evs, "peer", func(d string) bool { return strings.Contains(d, `"state":"up"`) })
	a.mustChat("b/m")
	if st, _ := b2.modelState("m"); st != "ready" {
		t.Fatalf("m on the restarted b is %q", st)
	}
}

// A gateway with no model of its own: one endpoint in front of two boxes.
// Its configuration has only peers:; it lists their models, forwards a
// stream to the box that serves the model, and answers an unknown model
// with a 404 as any box does.
func TestPeers_GatewayWithNoModelOfItsOwn(t *testing.T) {
	b := startServer(t, peerConfig(t, []string{"mb"}))
	c := startServer(t, peerConfig(t, []string{"mc"}))
	gw := startServer(t, peerConfig(t, nil, "b="+b.base+":mb", "c="+c.base+":mc"))

	_, list := gw.get("/v1/models")
	for _, want := range []string{`"id":"b/mb"`, `"id":"c/mc"`} {
		if !strings.Contains(list, want) {
			t.Fatalf("the gateway's /v1/models lacks %s: %s", want, list)
		}
	}
	gw.mustChat("mb")
	st := gw.openStream(t.Context(), "c/mc", 5)
	st.until(`"content"`)
	if done, errEv, tail := st.rest(); !done || errEv {
		t.Fatalf("stream through the gateway: done=%t error=%t\n%s", done, errEv, tail)
	}
	if st, _ := b.modelState("mb"); st != "ready" {
		t.Fatalf("mb on b is %q after a request through the gateway", st)
	}
	if st, _ := c.modelState("mc"); st != "ready" {
		t.Fatalf("mc on c is %q after a stream through the gateway", st)
	}
	if code, body := gw.post("/v1/chat/completions", chat("nowhere", false)); code != 404 {
		t.Fatalf("an unknown model through the gateway: %d %s", code, body)
	}
}

// A reload applies a change of peers:. The gateway starts with peer b;
// while a stream runs through b, the configuration swaps b for c: the
// stream finishes on b, b's models leave /v1/models, c's join and serve,
// and /api/peers shows c alone.
func TestPeers_ReloadAppliesPeerChanges(t *testing.T) {
	b := startServer(t, peerConfig(t, []string{"mb"}))
	c := startServer(t, peerConfig(t, []string{"mc"}))
	cfgPath := peerConfig(t, nil, "b="+b.base+":mb")
	gw := startServer(t, cfgPath)
	gw.mustChat("mb")
	st := gw.openStream(t.Context(), "mb", 40)
	st.until(`"content"`)

	next, err := os.ReadFile(peerConfig(t, nil, "c="+c.base+":mc"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, next, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, body := gw.post("/api/policies/reload", ""); code != 200 || !strings.Contains(body, `"peers"`) {
		t.Fatalf("reload: %d %s", code, body)
	}
	if done, errEv, tail := st.rest(); !done || errEv {
		t.Fatalf("the stream forwarded before the reload: done=%t error=%t\n%s", done, errEv, tail)
	}
	_, list := gw.get("/v1/models")
	if strings.Contains(list, `"b/mb"`) || !strings.Contains(list, `"c/mc"`) {
		t.Fatalf("/v1/models after the reload: %s", list)
	}
	gw.mustChat("mc")
	if code, body := gw.post("/v1/chat/completions", chat("mb", false)); code != 404 {
		t.Fatalf("the removed peer's model: %d %s", code, body)
	}
	if pv := gw.peers(); len(pv.Peers) != 1 || pv.Peers[0].Peer != "c" {
		t.Fatalf("/api/peers after the reload: %+v", pv)
	}
	// A reload that changes no peer leaves their health as it is (every
	// reload restarted every peer's: a peer down for its failures was up
	// again, its cool-down forgotten).
	if code, body := gw.post("/api/policies/reload", ""); code != 200 || strings.Contains(body, `"peers"`) {
		t.Fatalf("a reload with no change: %d %s, want no peers changed", code, body)
	}
}

// Three real servers: A serves m itself and has two peers, B and C, that
// serve m too. A request for plain m goes to a server whose m is ready
// rather than load A's own; between two ready peers, to the one with the
// fewer requests in flight; a full name to that peer only.
func TestPeers_ThreeServersReadyAndFewestInFlight(t *testing.T) {
	b := startServer(t, peerConfig(t, []string{"m"}))
	c := startServer(t, peerConfig(t, []string{"m"}))
	a := startServer(t, peerConfig(t, []string{"m"}, "b="+b.base+":m", "c="+c.base+":m"))

	b.mustChat("m") // loaded on b only
	eventually(t, "a to see m ready on b", func() bool { return a.peerModelState("b", "m") == "ready" })
	a.mustChat("m")
	if st, _ := a.modelState("m"); st != "stopped" {
		t.Fatalf("a loaded its own m (%s) while b had it ready", st)
	}

	c.mustChat("m")
	// What a saw of the loads is at most one check old: wait until it saw
	// both idle.
	eventually(t, "a to see m ready and idle on b and c", func() bool { return a.readyIdle("b", "m") && a.readyIdle("c", "m") })
	first := a.openStream(t.Context(), "m", 40)
	first.until(`"content"`)
	second := a.openStream(t.Context(), "m", 40)
	second.until(`"content"`)
	_, onB := b.modelState("m")
	_, onC := c.modelState("m")
	if onB != 1 || onC != 1 {
		_, pv := a.get("/api/peers")
		t.Fatalf("two streams for m through a: %d in flight on b, %d on c; want one each\n%s", onB, onC, pv)
	}
	third := a.openStream(t.Context(), "c/m", 40) // a full name: c, whatever the load
	third.until(`"content"`)
	if _, onC = c.modelState("m"); onC != 2 {
		t.Fatalf("c/m: %d in flight on c, want 2", onC)
	}
	for _, st := range []*stream{first, second, third} {
		if done, errEv, tail := st.rest(); !done || errEv {
			t.Fatalf("stream: done=%t error=%t\n%s", done, errEv, tail)
		}
	}
}

// A peer that answers its health check but garbage to a request: a 502
// naming the peer. A request a peer forwarded is never forwarded again.
func TestPeers_GarbageAndNoLoops(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	junk := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/models" {
			fmt.Fprint(w, `{"models":[{"model":"m","state":"ready"}]}`)
			return
		}
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		_, _ = buf.WriteString("SPDY/9 garbage\r\n\r\n")
		_ = buf.Flush()
		conn.Close()
	})}
	go func() { _ = junk.Serve(ln) }()
	t.Cleanup(func() { junk.Close() })

	a := startServer(t, peerConfig(t, []string{"alocal"}, "junk=http://"+ln.Addr().String()+":m"))
	eventually(t, "a to see junk up", func() bool { return a.peerModelState("junk", "m") == "ready" })
	code, body := a.post("/v1/chat/completions", chat("junk/m", false))
	if code != 502 || !strings.Contains(body, "peer_error") || !strings.Contains(body, "peer junk (http://"+ln.Addr().String()) {
		t.Fatalf("a peer answering garbage: %d %s", code, body)
	}

	req, _ := http.NewRequest(http.MethodPost, a.base+"/v1/chat/completions", strings.NewReader(chat("m", false)))
	req.Header.Set("X-Loadout-Forwarded", "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, _ := bufio.NewReader(resp.Body).ReadString(0)
	if resp.StatusCode != 404 || !strings.Contains(line, "not forwarded again") {
		t.Fatalf("a forwarded request for a peer's model: %d %s", resp.StatusCode, line)
	}
}

// A peer that does not answer at start is a warning, not a failed start.
func TestPeers_DownAtStartIsAWarning(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	a := startServer(t, peerConfig(t, []string{"alocal"}, "gone=http://"+addr+":m"))
	eventually(t, "the peer to be marked down", func() bool { return strings.Contains(a.log(), "peer down") })
	code, body := a.post("/v1/chat/completions", chat("m", false))
	if code != 503 || !strings.Contains(body, "peer gone (http://"+addr) || !strings.Contains(body, "connection refused") {
		t.Fatalf("a request for a peer down since start: %d %s", code, body)
	}
}
