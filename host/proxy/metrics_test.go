package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/loadout-dev/loadout/host/peers"
)

// metricFamily returns the family name from reg, or nil.
func metricFamily(t *testing.T, reg prometheus.Gatherer, name string) *dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf
		}
	}
	return nil
}

// sample returns the series of family name whose labels include want
// (label → value), or nil.
func sample(t *testing.T, reg prometheus.Gatherer, name string, want map[string]string) *dto.Metric {
	t.Helper()
	mf := metricFamily(t, reg, name)
	if mf == nil {
		return nil
	}
next:
	for _, m := range mf.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		return m
	}
	return nil
}

// histogram returns a histogram series' count and sum (seconds), failing
// the test when it is not exposed.
func histogram(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) (uint64, float64) {
	t.Helper()
	m := sample(t, reg, name, labels)
	if m == nil || m.GetHistogram() == nil {
		t.Fatalf("%s%v is not exposed", name, labels)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// The TTFT a client sees counts from the request's arrival, so it holds
// the wait for a cold load; the upstream TTFT counts from the grant, so
// it does not. arrival → first token ≥ queue wait + grant → first token.
// The request's summary (events, activity log) has the same TTFT.
func TestMetrics_TTFTFromArrivalAndFromGrant(t *testing.T) {
	summaries := make(chan RequestSummary, 1)
	e := newEnv(t, envOpts{onRequest: func(s RequestSummary) { summaries <- s }})
	open := e.world.gate("a")
	done := make(chan echo, 1)
	go func() { done <- e.echoOf(request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`}) }()
	e.world.expect(t, "start a") // the request waits on a's load
	open()
	<-done
	reg := e.srv.Registry()
	a := map[string]string{"model": "a"}
	n, ttft := histogram(t, reg, "loadout_time_to_first_token_seconds", a)
	un, upstream := histogram(t, reg, "loadout_upstream_time_to_first_token_seconds", a)
	_, wait := histogram(t, reg, "loadout_queue_wait_seconds", a)
	if n != 1 || un != 1 {
		t.Fatalf("TTFT counts %d (arrival), %d (upstream); want 1 each", n, un)
	}
	if wait <= 0 || ttft < wait+upstream {
		t.Errorf("TTFT from arrival %gs, queue wait %gs, upstream TTFT %gs: want arrival ≥ wait + upstream, wait > 0", ttft, wait, upstream)
	}
	if s := <-summaries; s.TTFT != ttft {
		t.Errorf("the request's summary (activity log, events) has TTFT %gs, the metric %gs: one definition", s.TTFT, ttft)
	}
}

// loadout_in_flight_requests counts a granted request while it is
// proxied (Prometheus's naming rules: the unit is the suffix); the old
// unitless name is gone.
func TestMetrics_InFlightRequests(t *testing.T) {
	e := newEnv(t, envOpts{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.do(request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`, headers: map[string]string{"X-Test-Mode": "hold"}})
	}()
	e.world.waitHolding(t, "a")
	reg := e.srv.Registry()
	m := sample(t, reg, "loadout_in_flight_requests", map[string]string{"model": "a"})
	if m == nil || m.GetGauge().GetValue() != 1 {
		t.Errorf("loadout_in_flight_requests{model=a} while a request is held: %v, want 1", m)
	}
	if metricFamily(t, reg, "loadout_in_flight") != nil {
		t.Error("the unitless loadout_in_flight is still exposed")
	}
	e.world.releaseOne(t)
	<-done
	if v := sample(t, reg, "loadout_in_flight_requests", map[string]string{"model": "a"}).GetGauge().GetValue(); v != 0 {
		t.Errorf("loadout_in_flight_requests{model=a} after the request: %g, want 0", v)
	}
}

// loadout_peer_up follows the peer's health from host/peers: no sample
// before its first check, 1 while up, 0 once a forwarded request failed
// and its check found it down. loadout_peer_request_duration_seconds
// counts forwarded requests by peer and status.
func TestMetrics_PeerUpAndLatency(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/models" {
			w.Write([]byte(`{"models":[{"model":"m","state":"ready"}]}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":1,"completion_tokens":1}}`))
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	changes := make(chan peers.Status, 4)
	set, err := peers.New(peers.Config{
		Peers:    []peers.Peer{{ID: "p", URL: u, Models: []string{"m"}, Interval: time.Hour, Timeout: 5 * time.Second}},
		Logger:   quietLogger(),
		OnChange: func(st peers.Status) { changes <- st },
	})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOpts{peers: set})
	reg := e.srv.Registry()
	if m := sample(t, reg, "loadout_peer_up", map[string]string{"peer": "p"}); m != nil {
		t.Errorf("loadout_peer_up before the first check: %v, want no sample", m)
	}
	set.Start(context.Background())
	t.Cleanup(set.Stop)
	if st := <-changes; st.State != peers.Up {
		t.Fatalf("the peer is %s: %s", st.State, st.Error)
	}
	if v := sample(t, reg, "loadout_peer_up", map[string]string{"peer": "p"}).GetGauge().GetValue(); v != 1 {
		t.Errorf("loadout_peer_up{peer=p} while up: %g, want 1", v)
	}
	if resp, b := e.do(request{path: "/v1/chat/completions", body: `{"model":"p/m","messages":[]}`}); resp.StatusCode != 200 {
		t.Fatalf("forwarded: %d %s", resp.StatusCode, b)
	}
	if n, _ := histogram(t, reg, "loadout_peer_request_duration_seconds", map[string]string{"peer": "p", "code": "200"}); n != 1 {
		t.Errorf("peer request durations {peer=p,code=200}: %d, want 1", n)
	}

	srv.Close() // the peer dies: the next forwarded request fails and has it checked
	if resp, b := e.do(request{path: "/v1/chat/completions", body: `{"model":"p/m","messages":[]}`}); resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("forwarded to a dead peer: %d %s", resp.StatusCode, b)
	}
	if st := <-changes; st.State != peers.Down {
		t.Fatalf("after a failed request the peer is %s", st.State)
	}
	if v := sample(t, reg, "loadout_peer_up", map[string]string{"peer": "p"}).GetGauge().GetValue(); v != 0 {
		t.Errorf("loadout_peer_up{peer=p} while down: %g, want 0", v)
	}
	if n, _ := histogram(t, reg, "loadout_peer_request_duration_seconds", map[string]string{"peer": "p", "code": "502"}); n != 1 {
		t.Errorf("peer request durations {peer=p,code=502}: %d, want 1", n)
	}
	if !strings.HasPrefix(metricFamily(t, reg, "loadout_peer_up").GetHelp(), "1 while") {
		t.Error("loadout_peer_up has no help")
	}
}
