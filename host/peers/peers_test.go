package peers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func newSet(t *testing.T, cfg Config) *Set {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func names(ts []*Target) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Name()
	}
	return out
}

// llama-swap's names: PEER/MODEL always, MODEL where no full name claims it.
func TestLookup_Names(t *testing.T) {
	u := mustURL(t, "http://h:1")
	s := newSet(t, Config{Peers: []Peer{
		{ID: "c", URL: u, Models: []string{"m", "x"}, Interval: time.Second, Timeout: time.Second},
		{ID: "b", URL: u, Models: []string{"m", "c/x", "qwen/qwen3", "m"}, Interval: time.Second, Timeout: time.Second},
	}})
	for name, want := range map[string][]string{
		"m":            {"b/m", "c/m"}, // two peers, in id order
		"b/m":          {"b/m"},
		"qwen/qwen3":   {"b/qwen/qwen3"},
		"b/qwen/qwen3": {"b/qwen/qwen3"},
		"c/x":          {"c/x"}, // a full name wins over b's plain model "c/x"
		"x":            {"c/x"},
		"nope":         {},
	} {
		if got := names(s.Lookup(name)); !slices.Equal(got, want) {
			t.Errorf("Lookup(%q) = %v, want %v", name, got, want)
		}
	}
	var all []string
	for _, n := range s.Names() {
		all = append(all, n.Name)
	}
	if !slices.Equal(all, []string{"b/c/x", "b/m", "b/qwen/qwen3", "c/m", "c/x"}) {
		t.Errorf("Names = %v", all)
	}
	if st := s.Statuses(); st[0].Peer != "b" || len(st[0].Models) != 3 || st[0].State != Unknown {
		t.Errorf("b's status lists %d models (m twice in its config), state %s", len(st[0].Models), st[0].State)
	}
}

// withState sets a peer's health and its models' states by hand.
func withState(s *Set, peer, health string, models map[string]modelState) {
	for _, p := range s.peers {
		if p.ID == peer {
			p.state.Store(&state{polled: health, loadout: models != nil, models: models, since: time.Now(), checked: time.Now(), ended: time.Now()})
		}
	}
}

// The package's rule: never a peer that is down; a ready model first; then
// the smallest load; ties to the local model, then peers in id order.
func TestChoose_Rule(t *testing.T) {
	u := mustURL(t, "http://h:1")
	mk := func() *Set {
		return newSet(t, Config{Peers: []Peer{
			{ID: "b", URL: u, Models: []string{"m"}, Interval: time.Second, Timeout: time.Second},
			{ID: "c", URL: u, Models: []string{"m"}, Interval: time.Second, Timeout: time.Second},
		}})
	}
	ready := func(n int) map[string]modelState { return map[string]modelState{"m": {state: "ready", inFlight: n}} }
	stopped := map[string]modelState{"m": {state: "stopped"}}
	for _, tc := range []struct {
		name  string
		b, c  string // health
		bm    map[string]modelState
		cm    map[string]modelState
		local *Local
		want  string // "" local, "!" a DownError
	}{
		{"unchecked peers: the first", Unknown, Unknown, nil, nil, nil, "b/m"},
		{"unchecked peers beside a local model: the local one", Unknown, Unknown, nil, nil, &Local{}, ""},
		{"a ready peer before a local model that must load", Up, Up, stopped, ready(3), &Local{}, "c/m"},
		{"a ready local model before a peer that must load", Up, Up, stopped, stopped, &Local{Ready: true, Load: 5}, ""},
		{"two ready peers: the fewest in flight", Up, Up, ready(2), ready(1), nil, "c/m"},
		{"a tie: the local model", Up, Up, ready(1), ready(1), &Local{Ready: true, Load: 1}, ""},
		{"a tie between peers: id order", Up, Up, ready(1), ready(1), nil, "b/m"},
		{"a peer down is never chosen", Down, Up, ready(0), ready(9), nil, "c/m"},
		{"queued counts as load", Up, Up, map[string]modelState{"m": {state: "ready", queued: 4}}, ready(2), nil, "c/m"},
		{"every peer down", Down, Down, nil, nil, nil, "!"},
		{"every peer down, but a local model", Down, Down, nil, nil, &Local{}, ""},
	} {
		s := mk()
		withState(s, "b", tc.b, tc.bm)
		withState(s, "c", tc.c, tc.cm)
		got, err := s.Choose(context.Background(), s.Lookup("m"), tc.local)
		var de *DownError
		switch {
		case tc.want == "!":
			if !errors.As(err, &de) || len(de.Peers) != 2 || !strings.Contains(err.Error(), "every peer that serves it is down") {
				t.Errorf("%s: Choose = %v, %v; want a DownError naming both", tc.name, got, err)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want == "" && got != nil:
			t.Errorf("%s: Choose = %s, want the local model", tc.name, got.Name())
		case tc.want != "" && (got == nil || got.Name() != tc.want):
			t.Errorf("%s: Choose = %v, want %s", tc.name, got, tc.want)
		}
	}
}

// twoReadyPeers is a Set of two peers, b and c, each up with model m
// ready and nothing in flight at its last check.
func twoReadyPeers(t *testing.T) *Set {
	t.Helper()
	u := mustURL(t, "http://h:1")
	s := newSet(t, Config{Peers: []Peer{
		{ID: "b", URL: u, Models: []string{"m"}, Interval: time.Second, Timeout: time.Second},
		{ID: "c", URL: u, Models: []string{"m"}, Interval: time.Second, Timeout: time.Second},
	}})
	ready := map[string]modelState{"m": {state: "ready"}}
	withState(s, "b", Up, ready)
	withState(s, "c", Up, ready)
	return s
}

// What this server sent a peer since its last check counts on top of
// what the peer reported then.
func TestChoose_CountsRequestsSentSinceTheCheck(t *testing.T) {
	s := twoReadyPeers(t)
	var picked []string
	var ends []func(bool)
	for range 4 {
		tg, err := s.Choose(context.Background(), s.Lookup("m"), nil)
		if err != nil {
			t.Fatal(err)
		}
		picked = append(picked, tg.Peer())
		ends = append(ends, tg.Begin())
	}
	if !slices.Equal(picked, []string{"b", "c", "b", "c"}) {
		t.Fatalf("four requests went to %v, want them spread", picked)
	}
	for _, end := range ends {
		end(true)
		end(true) // once only
	}
	if st := s.Statuses(); st[0].InFlight != 0 || st[1].InFlight != 0 {
		t.Fatalf("in flight after the ends: %+v", st)
	}
}

// A request forwarded just before a check can reach the peer after the
// check's answer: the report leaves it out, and so does the count since
// the check. The requests this server has in flight on a peer are a floor
// on its load, so the next request still goes to the other peer (found
// by TestPeers_ThreeServersReadyAndFewestInFlight, which lost this race
// on a loaded CI machine).
func TestChoose_InFlightHereIsAFloorOnTheLoad(t *testing.T) {
	s := twoReadyPeers(t)
	first, err := s.Choose(context.Background(), s.Lookup("m"), nil)
	if err != nil || first.Peer() != "b" {
		t.Fatalf("the first request: %v, want b", err)
	}
	end := first.Begin()
	defer end(true)
	// b's check begins now and its answer predates the request: in flight 0.
	first.atCheck.Store(first.inFlight.Load())
	withState(s, "b", Up, map[string]modelState{"m": {state: "ready", inFlight: 0}})
	second, err := s.Choose(context.Background(), s.Lookup("m"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if second.Peer() != "c" {
		t.Fatalf("with one request in flight on b and none on c the second went to %s, want c", second.Peer())
	}
}

func TestDownError_Message(t *testing.T) {
	since := time.Now().Add(-2 * time.Second)
	e := &DownError{Model: "b/m", Peers: []Status{{Peer: "b", URL: "http://10.0.0.2:8080", Since: since, Error: "GET /api/models: connection refused", IntervalS: 5}}}
	want := "model b/m: peer b (http://10.0.0.2:8080) is down since " + since.Format("15:04:05.000")
	if got := e.Error(); !strings.HasPrefix(got, want) || !strings.HasSuffix(got, "ago): GET /api/models: connection refused; checked every 5s") {
		t.Fatalf("DownError = %q", got)
	}
}

// fakePeer is a peer's HTTP side whose /api/models answer the test sets.
type fakePeer struct {
	mu      sync.Mutex
	handler http.HandlerFunc
	keys    []string // the Authorization headers seen
}

func (f *fakePeer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	h := f.handler
	f.keys = append(f.keys, r.Header.Get("Authorization"))
	f.mu.Unlock()
	h(w, r)
}

func (f *fakePeer) set(h http.HandlerFunc) {
	f.mu.Lock()
	f.handler = h
	f.mu.Unlock()
}

// Health checks against a real HTTP server on loopback: a Loadout (states
// known), another server (/v1/models only: up, states unknown), a peer
// that answers garbage or an error; each change reported once, and a
// forwarded request's failure checks at once. (A peer that is gone:
// cmd/loadout's end-to-end tests.)
func TestHealth_Transitions(t *testing.T) {
	f := &fakePeer{}
	f.set(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"models":[{"model":"m","state":"ready","in_flight":2,"queued":1}]}`)
	})
	srv := httptest.NewServer(f)
	defer srv.Close()
	changes := make(chan Status, 16)
	s := newSet(t, Config{
		Peers:    []Peer{{ID: "b", URL: mustURL(t, srv.URL), APIKey: "sk-b", Models: []string{"m"}, Interval: time.Hour, Timeout: time.Second}},
		OnChange: func(st Status) { changes <- st },
	})
	s.Start(context.Background())
	defer s.Stop()
	await := func(state string) Status {
		t.Helper()
		select {
		case st := <-changes:
			if st.State != state {
				t.Fatalf("peer went %s (%s), want %s", st.State, st.Error, state)
			}
			return st
		case <-time.After(10 * time.Second):
			t.Fatalf("no change to %s", state)
		}
		return Status{}
	}
	st := await(Up)
	if !st.Loadout || st.Models[0].State != "ready" || st.Models[0].InFlight != 2 || st.Models[0].Queued != 1 {
		t.Fatalf("a Loadout peer: %+v", st)
	}
	f.mu.Lock()
	if f.keys[0] != "Bearer sk-b" {
		t.Errorf("the check sent Authorization %q", f.keys[0])
	}
	f.mu.Unlock()
	tg := s.Lookup("m")[0]

	// Garbage: down, with the reason. The interval is an hour: the
	// failed request is what triggers the check.
	f.set(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "<html>oops") })
	tg.Failed(errors.New("reset"))
	if st := await(Down); !strings.Contains(st.Error, "not JSON") {
		t.Fatalf("garbage: %q", st.Error)
	}
	// Down: a failure report does not hammer it (its poller brings it back).
	tg.Failed(errors.New("reset"))

	// Another kind of server: no /api/models, but /v1/models.
	f.set(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			fmt.Fprint(w, `{"data":[]}`)
			return
		}
		http.NotFound(w, r)
	})
	for _, p := range s.peers {
		p.poke <- struct{}{}
	}
	if st := await(Up); st.Loadout || st.Models[0].State != "" {
		t.Fatalf("a peer without /api/models: %+v", st)
	}
	f.set(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no key", http.StatusUnauthorized) })
	tg.Failed(errors.New("reset"))
	if st := await(Down); !strings.Contains(st.Error, "401: check the peer's apiKey") {
		t.Fatalf("401: %q", st.Error)
	}
}

// A peer that hangs is down once the check's timeout passes.
func TestHealth_TimeoutBoundsTheCheck(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	defer srv.Close()
	defer close(release)
	changes := make(chan Status, 4)
	s := newSet(t, Config{
		Peers:    []Peer{{ID: "slow", URL: mustURL(t, srv.URL), Models: []string{"m"}, Interval: time.Hour, Timeout: 50 * time.Millisecond}},
		OnChange: func(st Status) { changes <- st },
	})
	start := time.Now()
	s.Start(context.Background())
	defer s.Stop()
	st := <-changes
	if st.State != Down || !strings.Contains(st.Error, "no answer within 50ms") || time.Since(start) > 5*time.Second {
		t.Fatalf("a hanging peer: %+v after %s", st, time.Since(start))
	}
}

// A peer found down by its check — started after this server, or
// restarted — serves the first request after it is back, not only after
// its next periodic check: a request that would fail has it checked again
// once its failed check ended RecheckAfter ago; before that, it fails at
// once without a check — also right after a check that took longer than
// RecheckAfter — and a peer whose check used its timeout is not checked
// on a request's behalf at all.
func TestChoose_RechecksAPeerDownByItsCheck(t *testing.T) {
	clock := &fakeClock{now: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
	f := &fakePeer{}
	f.set(func(w http.ResponseWriter, r *http.Request) {
		clock.Add(2 * RecheckAfter) // a check that takes its time, though well under its timeout
		http.Error(w, "starting", http.StatusServiceUnavailable)
	})
	srv := httptest.NewServer(f)
	defer srv.Close()
	changes := make(chan Status, 16)
	s := newSet(t, Config{
		Peers:    []Peer{{ID: "b", URL: mustURL(t, srv.URL), Models: []string{"m"}, Interval: time.Hour, Timeout: time.Minute}},
		OnChange: func(st Status) { changes <- st },
		Now:      clock.Now,
	})
	s.Start(context.Background())
	defer s.Stop()
	select {
	case st := <-changes:
		if st.State != Down {
			t.Fatalf("peer went %s, want down", st.State)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first check did not report")
	}
	checks := func() int {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.keys)
	}
	before := checks()
	clock.Add(RecheckAfter)
	var de *DownError
	if _, err := s.Choose(context.Background(), s.Lookup("m"), nil); !errors.As(err, &de) || checks() != before+1 {
		t.Fatalf("still down, the check %s old: Choose error %v after %d checks; want a DownError after one", RecheckAfter, err, checks()-before)
	}
	if _, err := s.Choose(context.Background(), s.Lookup("m"), nil); !errors.As(err, &de) || checks() != before+1 {
		t.Fatalf("just after a slow recheck: Choose error %v after %d checks; want a DownError and no new check", err, checks()-before)
	}
	f.set(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"models":[{"model":"m","state":"ready"}]}`)
	})
	before = checks()

	clock.Add(RecheckAfter / 2)
	if got, err := s.Choose(context.Background(), s.Lookup("m"), nil); !errors.As(err, &de) || checks() != before {
		t.Fatalf("a check %s old: Choose = %v, %v after %d checks; want a DownError and no check", RecheckAfter/2, got, err, checks()-before)
	}
	clock.Add(RecheckAfter / 2)
	if got, err := s.Choose(context.Background(), s.Lookup("m"), nil); err != nil || got == nil || got.Name() != "b/m" || checks() != before+1 {
		t.Fatalf("a check %s old, the peer back: Choose = %v, %v after %d checks; want b/m after one", RecheckAfter, got, err, checks()-before)
	}

	// A peer whose check used its timeout (it hangs) is left to its
	// poller: a recheck would hold the request a timeout for a 503.
	f.set(func(w http.ResponseWriter, r *http.Request) {
		clock.Add(time.Minute)
		http.Error(w, "hung", http.StatusServiceUnavailable)
	})
	s.peers[0].check(context.Background())
	before = checks()
	clock.Add(RecheckAfter)
	if _, err := s.Choose(context.Background(), s.Lookup("m"), nil); !errors.As(err, &de) || checks() != before {
		t.Fatalf("a peer whose check took its timeout: Choose error %v after %d checks; want a DownError and no check", err, checks()-before)
	}
}

// A hung peer's checks start an Interval apart even though each waits out
// its Timeout (here the two are equal): the next starts as the last times
// out, not an Interval after, so Failures timed-out checks take Failures
// × max(Interval, Timeout) (the run loop's rule for a local server).
func TestHealth_TimedOutChecksFollowEachOther(t *testing.T) {
	const every = 300 * time.Millisecond
	var mu sync.Mutex
	var starts []time.Time
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		<-release
	}))
	defer srv.Close()
	defer close(release)
	hung := make(chan struct{})
	s := newSet(t, Config{Peers: []Peer{{ID: "p", URL: mustURL(t, srv.URL), Models: []string{"m"}, Interval: every, Timeout: every, Failures: 4}}})
	s.Start(context.Background())
	defer s.Stop()
	context.AfterFunc(s.Lookup("m")[0].Hung(), func() { close(hung) })
	select {
	case <-hung:
	case <-time.After(20 * time.Second):
		t.Fatal("the peer was not found hung")
	}
	if st := s.Statuses()[0]; st.State != Down || !st.Hung {
		t.Errorf("a hung peer's status: state %s, hung %v; want down and hung", st.State, st.Hung)
	}
	mu.Lock()
	defer mu.Unlock()
	// Waiting an Interval after each timeout would make the gaps 2 ×
	// every. Their mean over the run is asserted, not each one: a check
	// that reaches the server late (a loaded machine) shortens the next
	// gap by what it lengthened its own.
	if len(starts) < 4 {
		t.Fatalf("%d checks reached the peer before it was found hung; want its 4", len(starts))
	}
	n := len(starts) - 1
	if mean := starts[n].Sub(starts[0]) / time.Duration(n); mean < every*3/4 || mean >= every*3/2 {
		t.Errorf("checks started %s apart on average (%d gaps); want %s, give or take scheduling", mean, n, every)
	}
}

// OnChange hears, besides up and down, a model of the peer changing state
// and the peer found hung or answering again — what a page showing the
// peers needs to stay true — but not a check that only moved the counts
// of requests in flight.
func TestHealth_ModelStatesAndHangsAreChanges(t *testing.T) {
	f := &fakePeer{}
	answer := func(state string, inFlight int) {
		f.set(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, `{"models":[{"model":"m","state":%q,"in_flight":%d}]}`, state, inFlight)
		})
	}
	answer("ready", 0)
	srv := httptest.NewServer(f)
	defer srv.Close()
	changes := make(chan Status, 16)
	s := newSet(t, Config{
		Peers:    []Peer{{ID: "b", URL: mustURL(t, srv.URL), Models: []string{"m"}, Interval: time.Hour, Timeout: 100 * time.Millisecond, Failures: 2}},
		OnChange: func(st Status) { changes <- st },
	})
	p := s.peers[0]
	ctx := context.Background()
	next := func(what string) Status {
		t.Helper()
		select {
		case st := <-changes:
			return st
		default:
			t.Fatalf("%s: no change reported", what)
		}
		return Status{}
	}
	none := func(what string) {
		t.Helper()
		select {
		case st := <-changes:
			t.Fatalf("%s: a change reported: %+v", what, st)
		default:
		}
	}
	p.check(ctx)
	if st := next("first check"); st.State != Up || st.Models[0].State != "ready" {
		t.Fatalf("first check: %+v", st)
	}
	answer("ready", 3)
	p.check(ctx)
	none("in flight 0 → 3")
	answer("stopped", 0)
	p.check(ctx)
	if st := next("ready → stopped"); st.State != Up || st.Models[0].State != "stopped" {
		t.Fatalf("ready → stopped: %+v", st)
	}

	release := make(chan struct{})
	defer close(release)
	f.set(func(w http.ResponseWriter, r *http.Request) { <-release })
	p.check(ctx)
	if st := next("first timed-out check"); st.State != Down || st.Hung {
		t.Fatalf("first timed-out check: %+v; want down, not hung", st)
	}
	p.check(ctx)
	if st := next("second timed-out check"); st.State != Down || !st.Hung {
		t.Fatalf("second timed-out check: %+v; want down and hung", st)
	}
	p.check(ctx)
	none("a third timed-out check")
	answer("ready", 0)
	p.check(ctx)
	if st := next("answering again"); st.State != Up || st.Hung {
		t.Fatalf("answering again: %+v; want up, not hung", st)
	}
}

// fakeClock is Config.Now that a test moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Passive health's rules (passive.go): Failures in a row bench a peer
// whose checks still answer; its checks do not lift that; after the
// cool-down one request is let through, and its failure benches it
// again, its success brings it back; a request begun before the bench
// does not.
func TestPassive_BenchCoolDownTrial(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"models":[{"model":"m","state":"ready"}]}`)
	}))
	defer srv.Close()
	clock := &fakeClock{now: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
	changes := make(chan Status, 16)
	s := newSet(t, Config{
		Peers:    []Peer{{ID: "b", URL: mustURL(t, srv.URL), Models: []string{"m"}, Interval: time.Hour, Timeout: time.Second, CoolDown: time.Minute}},
		OnChange: func(st Status) { changes <- st },
		Now:      clock.Now,
	})
	s.Start(context.Background())
	defer s.Stop()
	await := func(state string) Status {
		t.Helper()
		select {
		case st := <-changes:
			if st.State != state {
				t.Fatalf("peer went %s (%s), want %s", st.State, st.Error, state)
			}
			return st
		case <-time.After(10 * time.Second):
			t.Fatalf("no change to %s", state)
		}
		return Status{}
	}
	await(Up)
	tg := s.Lookup("m")[0]
	choose := func() (*Target, error) { return s.Choose(context.Background(), s.Lookup("m"), nil) }

	early := tg.Begin() // in flight across the bench
	for i := range DefaultFailures {
		if got, err := choose(); err != nil || got != tg {
			t.Fatalf("after %d failures: Choose = %v, %v; want the peer", i, got, err)
		}
		end := tg.Begin()
		tg.Failed(fmt.Errorf("no answer within 1s (%d)", i))
		end(false)
	}
	st := await(Down)
	if st.Failures != 3 || !strings.Contains(st.Error, "3 forwarded requests in a row failed, the last: no answer within 1s (2)") ||
		!st.RetryAt.Equal(clock.Now().Add(time.Minute)) {
		t.Fatalf("benched: %+v", st)
	}
	// Its check answers, and changes nothing; nor does the early request.
	s.peers[0].check(context.Background())
	early(true)
	if _, err := choose(); err == nil || !strings.Contains(err.Error(), "one request is let through to try it at 03:05:05.000") {
		t.Fatalf("benched, checked: Choose error %v", err)
	}

	// The cool-down passes: one trial, and only one.
	clock.Add(time.Minute)
	if got, err := choose(); err != nil || got != tg {
		t.Fatalf("after the cool-down: Choose = %v, %v; want the trial", got, err)
	}
	end := tg.Begin()
	if _, err := choose(); err == nil {
		t.Fatal("a second request went to a peer on trial")
	}
	tg.Failed(errors.New("reset"))
	end(false)
	if st := s.Statuses()[0]; st.State != Down || !st.RetryAt.Equal(clock.Now().Add(time.Minute)) {
		t.Fatalf("a failed trial: %+v", st)
	}

	// The next trial answers: up, the count cleared.
	clock.Add(time.Minute)
	if _, err := choose(); err != nil {
		t.Fatal(err)
	}
	tg.Begin()(true)
	if st := await(Up); st.Failures != 0 || st.Error != "" || !st.RetryAt.IsZero() {
		t.Fatalf("back: %+v", st)
	}
}

// A set that replaces another (a reload of peers:) keeps the health of a
// peer configured as it was — benched by its failures, it stays down
// until its cool-down ends — and starts a changed or new one afresh.
// Every such reload put every peer back to unknown, forwarding to one
// benched a moment before.
func TestNew_PreviousKeepsTheHealthOfUnchangedPeers(t *testing.T) {
	clock := &fakeClock{now: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
	peer := func(id, u string) Peer {
		return Peer{ID: id, URL: mustURL(t, u), Models: []string{"m"}, Interval: time.Hour, Timeout: time.Second, CoolDown: time.Minute}
	}
	old := newSet(t, Config{Peers: []Peer{peer("b", "http://127.0.0.1:1"), peer("c", "http://127.0.0.1:2")}, Now: clock.Now})
	for _, id := range []string{"b", "c"} {
		tg := old.Lookup(id + "/m")[0]
		for i := range DefaultFailures {
			end := tg.Begin()
			tg.Failed(fmt.Errorf("reset (%d)", i))
			end(false)
		}
	}
	next := newSet(t, Config{Peers: []Peer{peer("b", "http://127.0.0.1:1"), peer("c", "http://127.0.0.1:3"), peer("d", "http://127.0.0.1:4")},
		Previous: old, Now: clock.Now})
	got := map[string]string{}
	for _, st := range next.Statuses() {
		got[st.Peer] = st.State
	}
	if want := map[string]string{"b": Down, "c": Unknown, "d": Unknown}; !maps.Equal(got, want) {
		t.Fatalf("after the reload: %v, want %v (b unchanged and benched; c moved; d new)", got, want)
	}
	if _, err := next.Choose(context.Background(), next.Lookup("b/m"), nil); err == nil {
		t.Fatal("a request went to b, benched before the reload, inside its cool-down")
	}
}
