package peers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Status is one peer's health and models, for GET /api/peers and
// Config.OnChange.
type Status struct {
	Peer  string `json:"peer"`
	URL   string `json:"url"`
	State string `json:"state"` // Unknown, Up or Down
	// Since is when it went up or down; Checked when it was last checked.
	Since   time.Time `json:"since,omitzero"`
	Checked time.Time `json:"checked,omitzero"`
	// Error is why it is down (or why its models' states are unknown):
	// its check's failure, or the forwarded requests that failed in a
	// row (passive health), or both, joined by "; ".
	Error string `json:"error,omitempty"`
	// Failures is how many forwarded requests in a row failed
	// (passive.go); Peer.Failures of them put it down.
	Failures int `json:"failures"`
	// Hung: it is down and its last Peer.Failures checks in a row (or
	// more) got no answer within Peer.Timeout — a stopped process, not a
	// refused connection — so the requests in flight to it were ended
	// (Target.Hung). False again at its first answer.
	Hung bool `json:"hung,omitempty"`
	// RetryAt, when it is down because forwarded requests failed, is when
	// one request is let through to try it.
	RetryAt time.Time `json:"retry_at,omitzero"`
	// IntervalS is how often it is checked, in seconds.
	IntervalS float64 `json:"interval_s"`
	// Loadout: it answers /api/models, so its models' states are known.
	Loadout bool `json:"loadout"`
	// InFlight is the requests this server forwarded to it, not ended.
	InFlight int           `json:"in_flight"`
	Models   []ModelStatus `json:"models"`
}

// ModelStatus is one of a peer's models, as its last check saw it.
type ModelStatus struct {
	Model string `json:"model"` // as the peer names it
	Name  string `json:"name"`  // PEER/MODEL
	// State is the peer's state for it (ready, stopped, ...); "" when
	// unknown (the peer is not a Loadout, or does not list it).
	State    string `json:"state,omitempty"`
	InFlight int    `json:"in_flight"` // the peer's, at the last check
	Queued   int    `json:"queued"`
}

// Statuses returns every peer's status, in id order.
func (s *Set) Statuses() []Status {
	out := make([]Status, len(s.peers))
	for i, p := range s.peers {
		out[i] = p.status(p.state.Load())
	}
	return out
}

func (p *peer) status(st *state) Status {
	out := Status{Peer: p.ID, URL: p.URL.String(), State: st.health(), Since: st.since, Checked: st.checked,
		Error: st.err, Failures: st.failures, Hung: p.isHung(st), IntervalS: p.Interval.Seconds(), Loadout: st.loadout, Models: []ModelStatus{}}
	if st.benched {
		out.RetryAt = st.retryAt
		out.Error = strings.TrimPrefix(st.err+"; "+st.benchReason(), "; ")
	}
	for _, m := range p.Models {
		t := p.targets[m]
		out.InFlight += int(t.inFlight.Load())
		ms := ModelStatus{Model: m, Name: t.name}
		if got, ok := st.models[m]; ok {
			ms.State, ms.InFlight, ms.Queued = got.state, got.inFlight, got.queued
		}
		out.Models = append(out.Models, ms)
	}
	return out
}

// Start starts a poller per peer: each checks its peer at once, then
// every interval, and at once after a forwarded request failed
// (Target.Failed), until Stop. A peer that does not answer at start is
// logged as down (a warning, not an error: it may come up later). A check
// never lifts a peer benched by failed requests (passive.go).
func (s *Set) Start(ctx context.Context) {
	ctx, s.stop = context.WithCancel(ctx)
	s.run.Store(&ctx)
	for _, p := range s.peers {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			p.run(ctx)
		}()
	}
}

// Stop ends the pollers and waits for them. Safe to call when Start was
// not.
func (s *Set) Stop() {
	if s.stop != nil {
		s.stop()
	}
	s.wg.Wait()
}

// run is the peer's poller. Checks start every Interval (a check that
// takes longer, one that waits out its Timeout, is followed by the next
// at once), so a hung peer's Failures timed-out checks take Failures ×
// max(Interval, Timeout), as the run loop's probes of a local server do.
func (p *peer) run(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-p.poke:
		}
		start := time.Now()
		p.check(ctx)
		timer.Reset(max(0, p.Interval-time.Since(start)))
	}
}

// maxListBytes bounds the /api/models body a check reads.
const maxListBytes = 4 << 20

// check asks the peer for its models and records what it found: up with
// their states (a Loadout), up without (another server: /api/models
// answered 404 or 405 and /v1/models 200), or down with the reason.
func (p *peer) check(ctx context.Context) {
	for _, t := range p.targets {
		t.atCheck.Store(t.inFlight.Load())
	}
	start := p.set.cfg.Now()
	models, loadout, err := p.poll(ctx)
	if ctx.Err() != nil {
		return // stopping: say nothing
	}
	var hung int // the timed-out checks in a row, when they make the peer hung
	p.update(func(n *state) {
		wasDown, wasHung := n.polled == Down, p.isHung(n)
		n.polled, n.checked, n.err, n.loadout, n.models = Up, start, "", loadout, models
		n.ended = p.set.cfg.Now()
		timeouts := n.timeouts
		n.timeouts = 0
		if err != nil {
			n.polled, n.err, n.models, n.loadout = Down, err.Error(), nil, false
			var te *checkTimeoutError
			if errors.As(err, &te) || errors.Is(err, context.DeadlineExceeded) {
				n.timeouts = timeouts + 1
			}
		} else if wasDown && !n.benched {
			n.failures, n.failure = 0, "" // passive health, rule 4
		}
		if !wasHung && p.isHung(n) {
			hung = n.timeouts
		}
	})
	if hung > 0 {
		p.declareHung(hung)
	}
}

// declareHung ends the requests in flight to the peer (Target.Hung's
// context) after checks timed-out checks in a row, and arms a new
// context for the requests forwarded after.
func (p *peer) declareHung(checks int) {
	var n int64
	for _, t := range p.targets {
		n += t.inFlight.Load()
	}
	level := slog.LevelWarn // nothing to end: the peer is down already, as its first check said
	if n > 0 {
		level = slog.LevelError
	}
	p.set.log.Log(context.Background(), level, "peer hung: its health check got no answer in time, again and again; ending the requests in flight to it",
		"peer", p.ID, "url", p.URL.String(), "checks", checks, "timeout", p.Timeout, "in_flight", n)
	old := p.hung.Swap(newHungSignal())
	old.cancel(&HungError{Peer: p.ID, Checks: checks, Timeout: p.Timeout})
}

// checkTimeoutError is a check that got no answer within the peer's
// Timeout.
type checkTimeoutError struct {
	path  string
	limit time.Duration
}

func (e *checkTimeoutError) Error() string {
	return fmt.Sprintf("GET %s: no answer within %s", e.path, e.limit)
}

// poll is one check: GET /api/models, falling back to /v1/models for a
// peer that has none.
func (p *peer) poll(ctx context.Context) (map[string]modelState, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, p.Timeout)
	defer cancel()
	code, body, err := p.get(ctx, "/api/models")
	if err != nil {
		return nil, false, err
	}
	switch {
	case code == http.StatusOK:
		var list struct {
			Models []struct {
				Model    string `json:"model"`
				State    string `json:"state"`
				InFlight int    `json:"in_flight"`
				Queued   int    `json:"queued"`
				Loading  int    `json:"loading"`
			} `json:"models"`
		}
		if err := json.Unmarshal(body, &list); err != nil {
			return nil, false, fmt.Errorf("GET /api/models answered 200 with a body that is not JSON: %v: %s", err, excerpt(body))
		}
		if list.Models == nil { // another server's /api/models: states unknown
			return nil, false, nil
		}
		out := make(map[string]modelState, len(list.Models))
		for _, m := range list.Models {
			out[m.Model] = modelState{state: m.State, inFlight: m.InFlight, queued: m.Queued + m.Loading}
		}
		return out, true, nil
	case code == http.StatusNotFound || code == http.StatusMethodNotAllowed:
		code, body, err := p.get(ctx, "/v1/models")
		if err != nil {
			return nil, false, err
		}
		if code != http.StatusOK {
			return nil, false, fmt.Errorf("GET /v1/models answered %d: %s", code, excerpt(body))
		}
		return nil, false, nil
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return nil, false, fmt.Errorf("GET /api/models answered %d: check the peer's apiKey: %s", code, excerpt(body))
	default:
		return nil, false, fmt.Errorf("GET /api/models answered %d: %s", code, excerpt(body))
	}
}

// get GETs path under the peer's URL with its API key, and reads at most
// maxListBytes of the answer.
func (p *peer) get(ctx context.Context, path string) (int, []byte, error) {
	u := p.URL.JoinPath(path)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return 0, nil, err
	}
	if p.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+p.APIKey)
		req.Header.Set("X-Api-Key", p.APIKey)
	}
	resp, err := p.set.cfg.Client.Do(req)
	if err != nil {
		var ue interface{ Timeout() bool }
		if errors.As(err, &ue) && ue.Timeout() {
			return 0, nil, &checkTimeoutError{path: path, limit: p.Timeout}
		}
		return 0, nil, fmt.Errorf("GET %s: %w", path, unwrapURL(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxListBytes))
	if err != nil {
		return 0, nil, fmt.Errorf("GET %s: reading the answer: %w", path, err)
	}
	return resp.StatusCode, body, nil
}

// unwrapURL drops url.Error's "Get "http://...": " prefix: the message
// names the path already.
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// excerpt is the start of a body, for a message.
func excerpt(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	if s == "" {
		s = "(empty body)"
	}
	return s
}
