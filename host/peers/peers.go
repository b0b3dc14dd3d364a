package peers

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/loadout-dev/loadout/host/config"
)

// Peer configures one peer (llama-swap's peers: entry, with Loadout's
// health-check timing).
type Peer struct {
	ID     string   // the key under peers:, its models' prefix
	URL    *url.URL // the base URL a request's path is appended to
	APIKey string   // sent as Authorization: Bearer and X-Api-Key when set
	Models []string // the ids it serves, as it names them
	// Interval is how often the peer is checked; Timeout bounds one
	// check. Both must be positive.
	Interval, Timeout time.Duration
	// Failures is how many forwarded requests in a row must fail (no
	// answer in time, reset, stalled, not an answer: Target.Failed) to
	// put the peer down, and CoolDown how long it then stays down before
	// one request is let through to try it (passive health, passive.go).
	// Failures checks in a row with no answer within Timeout make the
	// peer hung (Target.Hung). Zero: DefaultFailures and
	// DefaultCoolDown; negative is an error.
	Failures int
	CoolDown time.Duration
	// Timeouts bound the connections requests are forwarded on
	// (llama-swap's peers timeouts:, host/config's one type for a
	// timeouts: block); host/proxy applies them. Their ResponseHeader
	// bounds the answer's start: response headers and first byte.
	Timeouts config.Timeouts
	// Filters are the peer's request filters (llama-swap's peers
	// filters: stripParams, setParams); host/proxy applies them to every
	// request it forwards to the peer.
	Filters config.Filters
}

// Config builds a Set.
type Config struct {
	Peers []Peer
	// Client makes the health checks; nil means one with no environment
	// proxy. Each check is bounded by its peer's Timeout.
	Client *http.Client
	// Logger gets one line per change of a peer's health; nil:
	// slog.Default().
	Logger *slog.Logger
	// OnChange, when set, hears a peer's status each time it goes up or
	// down, is found hung or answers again (Status.Hung), or a check finds
	// one of its models in another state (Status.Models), in order: on
	// that peer's poller goroutine or on the goroutine of the forwarded
	// request that changed it (Target.Failed, a Begin's end), under the
	// peer's lock; it must not block. Counts of requests in flight alone
	// are no change.
	OnChange func(Status)
	// Previous is the set this one replaces (a reload of peers:), nil
	// for none: a peer configured exactly as it was there keeps the
	// health it had (its checks' findings, a bench and its cool-down, a
	// hang) rather than starting Unknown. Stop the previous set after
	// New.
	Previous *Set
	// Now is the clock passive health's cool-downs are measured on; nil:
	// time.Now. Tests set it to move through a cool-down without
	// sleeping.
	Now func() time.Time
}

// Set is the configured peers, their models' names and their health. Make
// it with New, start its pollers with Start. It is safe for concurrent
// use.
type Set struct {
	cfg   Config
	log   *slog.Logger
	peers []*peer              // in id order
	full  map[string]*Target   // PEER/MODEL
	plain map[string][]*Target // MODEL, peers in id order

	// run is Start's context, which rechecks on a request's behalf
	// (recheck) run under; flight shares one recheck per peer among the
	// requests that want it.
	run    atomic.Pointer[context.Context]
	flight singleflight.Group
	stop   context.CancelFunc
	wg     sync.WaitGroup
}

// peer is one peer and its health.
type peer struct {
	Peer
	set     *Set
	targets map[string]*Target // by model
	// state is read without a lock; mu serializes its replacements
	// (update), so that each change is seen, logged and reported once.
	state atomic.Pointer[state]
	mu    sync.Mutex
	poke  chan struct{} // a forwarded request failed: check now
	// hung is cancelled, with a *HungError, when the peer's checks time
	// out Failures times in a row, then replaced (declareHung).
	hung atomic.Pointer[hungSignal]
}

// hungSignal is one generation of a peer's hung context.
type hungSignal struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

func newHungSignal() *hungSignal {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &hungSignal{ctx, cancel}
}

// HungError is the cause Target.Hung's context ends with: the peer's
// health check got no answer within its timeout Checks times in a row,
// so the requests in flight to it are taken as hung with it (as a local
// model server's are by the run loop's liveness probes).
type HungError struct {
	Peer    string        // the peer's id (its key under peers:)
	Checks  int           // the checks in a row that got no answer (Peer.Failures)
	Timeout time.Duration // what each waited (Peer.Timeout)
}

// Error says why, for the answer of a request the peer's hang ended.
func (e *HungError) Error() string {
	return fmt.Sprintf("peer %s hung: its health check got no answer within %s %d times in a row", e.Peer, e.Timeout, e.Checks)
}

// Hung is a context that ends, with a *HungError as its cause, when t's
// peer is found hung: its checks time out Peer.Failures times in a row
// (a stopped process, a wedged box). A request forwarded to the peer
// ends with it (host/proxy) rather than at its responseHeader or stream
// idle limit. The context of a later hang is a new one: take it as the
// request is forwarded.
func (t *Target) Hung() context.Context { return t.peer.hung.Load().ctx }

// state is what the last check and the forwarded requests found;
// replaced whole (update), never changed.
type state struct {
	polled  string    // what the last check found: Unknown, Up or Down
	since   time.Time // when health() last changed
	checked time.Time
	// ended is when the last check's answer came (or its timeout):
	// rechecks on a request's behalf are counted from it, so a peer
	// whose checks time out is not checked back to back.
	ended time.Time
	// timeouts counts the checks in a row that got no answer within
	// Peer.Timeout: at Peer.Failures the peer is hung (Target.Hung).
	timeouts int
	err      string                // why the last check failed
	loadout  bool                  // it answered /api/models: model states are known
	models   map[string]modelState // by model, when loadout

	// Passive health (passive.go): what forwarded requests found.
	failures int    // forwarded requests in a row that failed
	failure  string // the last one's error
	// benched: failures reached Peer.Failures; the peer is down until a
	// request let through after retryAt succeeds, whatever its checks
	// say. benchGen counts the benchings and trials: a request begun
	// before the latest (an older gen) does not lift it.
	benched  bool
	retryAt  time.Time
	benchGen uint64
}

// health is the peer's health: Down when its check failed or it is
// benched, else what its check found.
func (st *state) health() string {
	if st.benched {
		return Down
	}
	return st.polled
}

// modelState is one model as a Loadout peer reported it.
type modelState struct {
	state            string
	inFlight, queued int
}

// A peer's health.
const (
	Unknown = "unknown" // not checked yet: requests are forwarded
	Up      = "up"
	Down    = "down" // requests fail at once with a DownError
)

// Target is one model on one peer: where a request for it is forwarded.
type Target struct {
	peer  *peer
	model string
	name  string
	// inFlight counts the requests forwarded and not ended; atCheck is
	// what it was when the peer's last check began (the peer's own count
	// includes those).
	inFlight, atCheck atomic.Int64
}

// Model is the id the peer knows the model by: what the forwarded
// request's body names.
func (t *Target) Model() string { return t.model }

// Name is the model's full name, PEER/MODEL: the model id in logs and
// metrics.
func (t *Target) Name() string { return t.name }

// Peer is the peer's id.
func (t *Target) Peer() string { return t.peer.ID }

// URL is the peer's base URL.
func (t *Target) URL() *url.URL { return t.peer.URL }

// APIKey is the key to send the peer, or "".
func (t *Target) APIKey() string { return t.peer.APIKey }

// Timeouts are the peer's connection limits (llama-swap's peers
// timeouts:), for the transport and deadline the request is forwarded
// with.
func (t *Target) Timeouts() config.Timeouts { return t.peer.Timeouts }

// Filters are the peer's request filters (llama-swap's peers filters:).
func (t *Target) Filters() config.Filters { return t.peer.Filters }

// New builds the set: every peer's targets and the names they take.
// Errors: a peer without an id, a URL, models or a positive interval and
// timeout, or with negative Failures, CoolDown or Timeouts (host/config
// reports these at their line first).
func New(cfg Config) (*Set, error) {
	s := &Set{cfg: cfg, log: cfg.Logger, full: map[string]*Target{}, plain: map[string][]*Target{}}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.cfg.Now == nil {
		s.cfg.Now = time.Now
	}
	if s.cfg.Client == nil {
		s.cfg.Client = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 2, IdleConnTimeout: 90 * time.Second}}
	}
	ps := slices.Clone(cfg.Peers)
	slices.SortFunc(ps, func(a, b Peer) int { return strings.Compare(a.ID, b.ID) })
	for _, pc := range ps {
		switch {
		case pc.ID == "" || pc.URL == nil || len(pc.Models) == 0:
			return nil, fmt.Errorf("peers: peer %q needs an id, a URL and models", pc.ID)
		case pc.Interval <= 0 || pc.Timeout <= 0:
			return nil, fmt.Errorf("peers: peer %s: the health interval and timeout must be positive", pc.ID)
		case pc.Failures < 0 || pc.CoolDown < 0:
			return nil, fmt.Errorf("peers: peer %s: failures and cool-down cannot be negative", pc.ID)
		case min(pc.Timeouts.Connect, pc.Timeouts.KeepAlive, pc.Timeouts.ResponseHeader, pc.Timeouts.TLSHandshake, pc.Timeouts.ExpectContinue, pc.Timeouts.IdleConn) < 0:
			return nil, fmt.Errorf("peers: peer %s: a timeout cannot be negative (zero disables it)", pc.ID)
		}
		if pc.Failures == 0 {
			pc.Failures = DefaultFailures
		}
		if pc.CoolDown == 0 {
			pc.CoolDown = DefaultCoolDown
		}
		p := &peer{Peer: pc, set: s, targets: map[string]*Target{}, poke: make(chan struct{}, 1)}
		p.hung.Store(newHungSignal())
		p.Models = nil // without repeats, in the order given
		p.state.Store(&state{polled: Unknown})
		for _, m := range pc.Models {
			if _, dup := p.targets[m]; dup {
				continue
			}
			p.Models = append(p.Models, m)
			t := &Target{peer: p, model: m, name: pc.ID + "/" + m}
			if _, dup := s.full[t.name]; dup {
				return nil, fmt.Errorf("peers: peer model name %q is ambiguous", t.name)
			}
			p.targets[m] = t
			s.full[t.name] = t
			s.plain[m] = append(s.plain[m], t)
		}
		if was := cfg.Previous.peer(p.ID); was != nil && reflect.DeepEqual(was.Peer, p.Peer) {
			p.state.Store(was.state.Load()) // a state is replaced whole, never changed
			p.hung.Store(was.hung.Load())
		}
		s.peers = append(s.peers, p)
	}
	// A full name is reserved: the plain name of another peer's model
	// that spells it is not a route (llama-swap's rule).
	for name := range s.plain {
		if _, reserved := s.full[name]; reserved {
			delete(s.plain, name)
		}
	}
	return s, nil
}

// peer returns the peer of id, nil when s is nil or has none.
func (s *Set) peer(id string) *peer {
	if s == nil {
		return nil
	}
	for _, p := range s.peers {
		if p.ID == id {
			return p
		}
	}
	return nil
}

// Lookup returns the targets name means: the one model a full name
// PEER/MODEL names, or every peer's model of that plain name (in peer id
// order), or none. A local model of the same name is the caller's to weigh
// beside them (Choose).
func (s *Set) Lookup(name string) []*Target {
	if t, ok := s.full[name]; ok {
		return []*Target{t}
	}
	return s.plain[name]
}

// Name is one model a peer serves, for /v1/models and metrics.
type Name struct {
	Name  string // PEER/MODEL
	Peer  string
	Model string
	// State is the model's state as the peer reported it at its last
	// check (ready, starting, stopped, …); "" when unknown (a peer that
	// is not a Loadout, or does not list it) or the peer is down.
	State string
}

// Names returns every peer model's full name, sorted.
func (s *Set) Names() []Name {
	out := make([]Name, 0, len(s.full))
	for _, t := range s.full {
		n := Name{Name: t.name, Peer: t.peer.ID, Model: t.model}
		if st := t.peer.state.Load(); st.health() != Down {
			n.State = st.models[t.model].state
		}
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b Name) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Local is the local model a plain name also names, as Choose weighs it.
type Local struct {
	Ready bool // loaded and serving: no load to wait for
	// Load is its requests in flight, queued and waiting on its load.
	Load int
}

// Choose picks where a request for targets (from Lookup) goes, beside the
// local model of the same name (nil when there is none). It returns nil
// and no error for the local model. The rule, the package's: never a peer
// that is down; a ready model before one that must load; then the
// smallest load (a peer's: what it reported at its last check for the
// model, in flight and queued, plus what this server forwarded since and
// is still waiting on); on a tie the local model, then peers in id order.
// When every candidate is a peer that is down, it returns a *DownError.
//
// A peer benched by failed requests (passive.go) whose cool-down is over
// is a candidate like one that is up; when it is chosen, this request is
// its one trial, and the next trial waits for another cool-down.
//
// When every candidate is down and some peer's check failed fast (refused,
// or an error answer) more than RecheckAfter ago, that peer is checked
// again first (recheck), so a peer that came back since — restarted, or
// started after this server — serves this request instead of failing it
// until its next periodic check. The wait is bounded by the peer's health
// timeout, or ctx.
func (s *Set) Choose(ctx context.Context, targets []*Target, local *Local) (*Target, error) {
	rechecked := false
	for {
		now := s.cfg.Now()
		best, err := s.choose(targets, local, now)
		if err != nil && !rechecked && s.recheck(ctx, targets, now) {
			rechecked = true
			continue
		}
		if best == nil || !best.peer.state.Load().benched || best.peer.claimTrial(now) {
			return best, err
		}
		// Another request took the trial: choose again without it.
	}
}

// RecheckAfter is how old a peer's failed check must be before a request
// that would fail for it has the peer checked again (Choose): at most one
// check a second per peer on the request path, however many requests
// ask.
const RecheckAfter = time.Second

// recheck checks again, all at once, each of targets' peers whose last
// check failed fast (refused, or an error answer: a peer restarting; not
// one that used half its timeout or more, as a hanging peer's does, which
// would hold the request for a timeout and a 503) and ended at least
// RecheckAfter before now, and that is not benched by failed requests (a
// check never lifts that, passive.go); a request that wants a check
// already under way waits for that one. It reports whether it checked
// any, once every check has ended or ctx has.
func (s *Set) recheck(ctx context.Context, targets []*Target, now time.Time) bool {
	var checks []<-chan singleflight.Result
	for _, t := range targets {
		p := t.peer
		st := p.state.Load()
		if st.polled != Down || st.benched || now.Sub(st.ended) < RecheckAfter || st.ended.Sub(st.checked) >= p.Timeout/2 {
			continue // up, benched, checked just now, or hanging: a recheck would hold the request for nothing
		}
		checks = append(checks, s.flight.DoChan(p.ID, func() (any, error) {
			run := context.Background()
			if c := s.run.Load(); c != nil {
				run = *c
			}
			p.check(run)
			return nil, nil
		}))
	}
	for _, c := range checks {
		select {
		case <-c:
		case <-ctx.Done():
			return false
		}
	}
	return len(checks) > 0
}

// choose is Choose's rule at now, without claiming a trial.
func (s *Set) choose(targets []*Target, local *Local, now time.Time) (*Target, error) {
	var best *Target
	bestReady, bestLoad, have := false, 0, false
	if local != nil {
		bestReady, bestLoad, have = local.Ready, local.Load, true
	}
	var down []Status
	for _, t := range targets {
		st := t.peer.state.Load()
		if !st.admits(now) {
			down = append(down, t.peer.status(st))
			continue
		}
		ready, load := t.weigh(st)
		if !have || (ready && !bestReady) || (ready == bestReady && load < bestLoad) {
			best, bestReady, bestLoad, have = t, ready, load, true
		}
	}
	if !have {
		name := ""
		if len(targets) > 0 {
			name = targets[0].model
			if len(targets) == 1 {
				name = targets[0].name
			}
		}
		return nil, &DownError{Model: name, Peers: down}
	}
	return best, nil
}

// weigh is whether t's model is ready on its peer and its load, by st:
// what the peer reported at its last check plus what this server sent it
// since, and never less than what this server has in flight there — a
// request forwarded just before a check may reach the peer after the
// check's answer, so the report can leave it out while the difference
// since the check does too.
func (t *Target) weigh(st *state) (ready bool, load int) {
	own := int(t.inFlight.Load())
	since := max(0, own-int(t.atCheck.Load()))
	m, known := st.models[t.model]
	if !known {
		return false, own
	}
	return m.state == "ready", max(m.inFlight+m.queued+since, own)
}

// DownError is Choose's error when every server of a model is a peer that
// is down: a request for it fails at once, naming the peers and why.
type DownError struct {
	Model string   // the name asked for
	Peers []Status // the peers serving it, all down
}

// Error names the model, then each peer: its URL, since when it is down
// (and how long ago), why, and how often it is checked.
func (e *DownError) Error() string {
	var b strings.Builder
	if len(e.Peers) == 1 {
		fmt.Fprintf(&b, "model %s: ", e.Model)
	} else {
		fmt.Fprintf(&b, "model %s: every peer that serves it is down: ", e.Model)
	}
	for i, p := range e.Peers {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "peer %s (%s) is down", p.Peer, p.URL)
		if !p.Since.IsZero() {
			fmt.Fprintf(&b, " since %s (%s ago)", p.Since.Format("15:04:05.000"), time.Since(p.Since).Round(time.Millisecond))
		}
		if p.Error != "" {
			fmt.Fprintf(&b, ": %s", p.Error)
		}
		fmt.Fprintf(&b, "; checked every %s", time.Duration(p.IntervalS*float64(time.Second)))
		if !p.RetryAt.IsZero() {
			fmt.Fprintf(&b, "; one request is let through to try it at %s", p.RetryAt.Format("15:04:05.000"))
		}
	}
	return b.String()
}
