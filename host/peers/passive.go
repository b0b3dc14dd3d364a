package peers

import (
	"fmt"
	"sync"
	"time"
)

// Passive health: what real traffic says about a peer. A peer can answer
// its /api/models check at once while every inference it is sent hangs (a
// wedged model server behind a live router), so the check alone would
// keep it up and every client would wait out the forwarding limits. So:
//
//  1. every forwarded request that fails — no answer in time, reset,
//     stalled mid-stream, a 200 that is not an answer — is reported
//     (Target.Failed); Peer.Failures of them in a row bench the peer: it
//     is down, its requests fail at once, and its checks cannot lift
//     that, since they answer while inference hangs;
//  2. after Peer.CoolDown, one request is let through (Choose: the
//     trial, half-open); if it fails the peer stays benched for another
//     cool-down, and so does it if its client left before a verdict;
//  3. a forwarded request that the peer answered well (a Begin's end
//     with answered true) resets the count, and when it is a trial (begun
//     after the peer was benched) brings the peer back;
//  4. a check that finds the peer back up after it was down resets the
//     count too (the failures were of a peer that was gone), but never
//     lifts a bench.
//
// Each change of health is logged once and reported (Config.OnChange).

// Passive health defaults (Loadout's, llama-swap's peers have none).
const (
	// DefaultFailures is Peer.Failures's default: forwarded requests in a
	// row that fail before the peer is put down. One failure may be the
	// request's own (a prompt that crashes the model), three in a row are
	// the peer's.
	DefaultFailures = 3
	// DefaultCoolDown is Peer.CoolDown's default: how long a benched peer
	// gets no requests before one is let through to try it.
	DefaultCoolDown = 30 * time.Second
)

// Begin counts a request forwarded to t as in flight until end is called
// (once; later calls do nothing). answered reports that the peer answered
// it well — a response whose body ended without a failure, whatever its
// status — which resets the peer's count of failures and, for a request
// begun while the peer was benched (its trial), brings the peer back
// (passive health, rule 3). A request that failed is reported by Failed
// as it fails and ended with answered false, as is one whose client left
// before a verdict.
func (t *Target) Begin() (end func(answered bool)) {
	t.inFlight.Add(1)
	gen := t.peer.state.Load().benchGen
	var once sync.Once
	return func(answered bool) {
		once.Do(func() {
			t.inFlight.Add(-1)
			if answered {
				t.peer.answered(gen)
			}
		})
	}
}

// Failed reports a forwarded request the peer failed (err says how: no
// answer in time, refused, reset, stalled mid-body, not an answer): it
// counts toward benching the peer (passive health, rule 1; a trial's
// failure benches it for another cool-down), and the peer is checked at
// once instead of at its next interval, so a dead peer is marked down
// after one failed request. A peer whose check already failed is left to
// its poller.
func (t *Target) Failed(err error) {
	p := t.peer
	p.update(func(n *state) {
		n.failures++
		n.failure = err.Error()
		if n.benched || n.failures >= p.Failures {
			n.benched, n.retryAt = true, p.set.cfg.Now().Add(p.CoolDown)
			n.benchGen++
		}
	})
	if p.state.Load().polled == Down {
		return
	}
	select {
	case p.poke <- struct{}{}:
	default:
	}
}

// answered is rule 3 for a request begun at bench generation gen.
func (p *peer) answered(gen uint64) {
	if st := p.state.Load(); st.failures == 0 && !st.benched {
		return // the warm path: nothing to change, no lock
	}
	p.update(func(n *state) {
		n.failures, n.failure = 0, ""
		if n.benched && gen == n.benchGen {
			n.benched, n.retryAt = false, time.Time{}
		}
	})
}

// admits reports whether a request may go to the peer at now: its check
// has not failed, and it is not benched or its cool-down is over.
func (st *state) admits(now time.Time) bool {
	return st.polled != Down && (!st.benched || !now.Before(st.retryAt))
}

// claimTrial makes the caller's request the benched peer's trial (rule
// 2): false when another request took it first or the peer is no longer
// admitted. A peer no longer benched needs no trial: true.
func (p *peer) claimTrial(now time.Time) bool {
	claimed, trial := false, false
	p.update(func(n *state) {
		switch {
		case !n.benched:
			claimed = true
		case n.admits(now):
			claimed, trial = true, true
			n.retryAt = now.Add(p.CoolDown)
			n.benchGen++
		}
	})
	if trial {
		p.set.log.Info("peer cool-down over: one request let through to try it", "peer", p.ID, "url", p.URL.String())
	}
	return claimed
}

// update replaces p's state with change applied to a copy, under p.mu so
// concurrent updates are neither lost nor reported out of order; a change
// of health is logged and reported (Config.OnChange) once, and a change of
// Hung or of a model's state is reported.
func (p *peer) update(change func(next *state)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	prev := p.state.Load()
	next := *prev
	change(&next)
	was, is := prev.health(), next.health()
	if was != is {
		next.since = p.set.cfg.Now()
	}
	p.state.Store(&next)
	if was == is {
		if p.set.cfg.OnChange != nil && (p.isHung(prev) != p.isHung(&next) || !sameModelStates(prev.models, next.models)) {
			p.set.cfg.OnChange(p.status(&next))
		}
		return
	}
	switch {
	case is == Down && next.benched:
		p.set.log.Warn("peer down: forwarded requests failed; its models' requests fail at once until one let through after the cool-down succeeds",
			"peer", p.ID, "url", p.URL.String(), "failures", next.failures, "err", next.failure, "retry_at", next.retryAt)
	case is == Down:
		p.set.log.Warn("peer down: its models' requests fail at once until it answers again", "peer", p.ID, "url", p.URL.String(), "err", next.err)
	case is == Up:
		p.set.log.Info("peer up", "peer", p.ID, "url", p.URL.String(), "loadout", next.loadout)
	}
	if p.set.cfg.OnChange != nil {
		p.set.cfg.OnChange(p.status(&next))
	}
}

// isHung reports whether st makes p hung: its last Failures checks or more
// got no answer within its Timeout (Status.Hung).
func (p *peer) isHung(st *state) bool { return st.timeouts >= p.Failures }

// sameModelStates reports whether two checks found every model in the
// same state (requests in flight aside).
func sameModelStates(a, b map[string]modelState) bool {
	if len(a) != len(b) {
		return false
	}
	for m, x := range a {
		if y, ok := b[m]; !ok || x.state != y.state {
			return false
		}
	}
	return true
}

// benchReason is why a benched peer is down, for Status.Error.
func (st *state) benchReason() string {
	return fmt.Sprintf("%d forwarded requests in a row failed, the last: %s", st.failures, st.failure)
}
