package router

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/loadout-dev/loadout/sdk"
)

// A model server that hangs — stopped (SIGSTOP), wedged in a driver call,
// deadlocked — looks ready: its process lives and its port accepts
// connections. The run loop treats it as dead within a bound (DESIGN.md,
// "Liveness"): a ready server with requests in flight is probed every
// Liveness.Interval, and Liveness.Failures probes in a row that fail
// (no answer within Liveness.Timeout, or not ready) declare it hung. A
// probe that fails after an Interval or more (one that waited out its
// Timeout) is followed by the next at once rather than at the next
// periodic tick, so failed probes start max(Interval, Timeout) apart and
// a hung server is found within Interval + Failures × max(Interval,
// Timeout) of its hang (20 s with the defaults) — not twice that when a
// timed-out probe's answer comes a moment after the tick it missed. So
// does the proxy, through Grant.Stalled, when an open stream has sent
// nothing for its idle limit after its first byte. A hung server is
// killed without grace; the model is failed with the reason (its in-flight
// requests end with an error when their connections close, its queued
// ones wait for the restart the scheduler starts for them, or go to a
// sibling replica), and it counts as a failed start for the crash-loop
// backoff (backoff.go). A long prefill is not a hang: it sends no bytes,
// but the server still answers its health check; only the token stream,
// once it has started, is held to the idle limit.

// HealthChecker is an Instance whose server can be asked whether it still
// answers. The run loop probes it only while it has requests in flight.
type HealthChecker interface {
	// Healthy returns nil when the server answered its health check as
	// ready just now, else why not. It must return by ctx's deadline.
	Healthy(ctx context.Context) error
}

// Killer is an Instance that can be ended without grace (SIGKILL to its
// process group): how a hung server is stopped, since one that is stopped
// would never honour SIGTERM. An Instance that is not a Killer is stopped.
type Killer interface {
	// Kill ends the server at once and returns once it has exited or ctx
	// ends.
	Kill(ctx context.Context) error
}

// Liveness says how a hung model server is told from a busy one.
type Liveness struct {
	// Interval is how often a ready server with requests in flight is
	// probed. Default 5 s.
	Interval time.Duration
	// Timeout bounds each probe. Default 5 s.
	Timeout time.Duration
	// Failures is how many failed probes in a row declare the server
	// hung. Default 3, so with the default interval and timeout a hung
	// server is found 15–20 s after it stops answering: the next probe
	// starts 0–5 s after the hang and three probes wait 5 s each.
	Failures int
}

// withDefaults fills Liveness's zero fields.
func (lv Liveness) withDefaults() Liveness {
	if lv.Interval <= 0 {
		lv.Interval = 5 * time.Second
	}
	if lv.Timeout <= 0 {
		lv.Timeout = 5 * time.Second
	}
	if lv.Failures <= 0 {
		lv.Failures = 3
	}
	return lv
}

// probeResult is one liveness probe's answer, handed back to the loop.
type probeResult struct {
	model string
	gen   uint64
	phase probePhase // what the server was doing when probed
	err   error
}

// probePhase is why a server is probed: someone waits on it.
type probePhase uint8

const (
	probeNone     probePhase = iota
	probeServing             // ready, with requests in flight
	probeSleeping            // being put to sleep: a swap waits for the GPU memory
	probeWaking              // being woken: a request waits for it
)

// probed is the server of m that a liveness probe looks at now, and why;
// probeNone when nobody waits on it — an idle server, asleep or not, is
// found hung when a request wakes or uses it. A sleep or wake already
// cut is not probed again.
func (r *Router) probed(m *model) (Instance, probePhase) {
	switch {
	case m.state == sdk.StateReady && m.inFlight > 0:
		return m.inst, probeServing
	case m.isSleeping() && m.cutSleep != nil:
		return m.inst, probeSleeping
	case m.isWaking():
		if sw := r.loop.swaps[m.name]; sw != nil && sw.cutWake != nil {
			return m.asleep, probeWaking
		}
	}
	return nil, probeNone
}

// stall is the proxy's report, through Grant.Stalled, that a stream from
// a model's server stopped producing.
type stall struct {
	model  string
	gen    uint64
	reason string
}

// startProbing probes, off the loop, every server someone waits on
// (probed) that is not being probed already — during a shutdown too,
// which waits for the requests in flight: a server hung under them is
// killed, rather than holding the shutdown to its timeout.
func (r *Router) startProbing() {
	for _, name := range r.loop.names {
		r.probe(r.loop.models[name])
	}
}

// probe starts a liveness probe of m's server, off the loop, unless one
// of its present generation is out already or nobody waits on it
// (probed). A probe still out of an instance that is gone (or of the
// same server before a sleep, a wake or a restart moved the generation
// on) does not count: its answer is dropped when it comes.
func (r *Router) probe(m *model) {
	if m.probing && m.probeGen == m.gen {
		return
	}
	inst, phase := r.probed(m)
	hc, ok := inst.(HealthChecker)
	if !ok {
		return
	}
	m.probing, m.probeGen, m.probeStart = true, m.gen, time.Now()
	timeout := r.cfg.Liveness.Timeout
	go func(name string, gen uint64) {
		ctx, cancel := context.WithTimeout(r.procCtx, timeout)
		err := hc.Healthy(ctx)
		if err == nil && ctx.Err() != nil {
			err = ctx.Err()
		}
		cancel()
		select {
		case r.probes <- probeResult{model: name, gen: gen, phase: phase, err: err}:
		case <-r.done:
		}
	}(m.name, m.gen)
}

// onProbe counts a probe's answer: Liveness.Failures failures in a row
// declare the server hung. A serving server is killed (hung); a sleep
// or wake is cut, and what follows a failed one follows: a sleep's server
// is killed and the eviction is a stop, a wake's is killed and the swap
// cold-starts the model.
func (r *Router) onProbe(p probeResult) {
	m := r.loop.models[p.model]
	if m == nil {
		return
	}
	if m.probeGen == p.gen {
		m.probing = false
	}
	if _, phase := r.probed(m); m.gen != p.gen || phase != p.phase {
		return // an old instance, or no longer doing what was probed
	}
	if p.err == nil {
		m.probeFailures = 0
		return
	}
	m.probeFailures++
	need := r.cfg.Liveness.Failures
	r.log.Warn("model server did not answer its health check", "model", m.name, "in_flight", m.inFlight,
		"while", p.phase.String(), "failures", m.probeFailures, "of", need, "err", p.err)
	if m.probeFailures < need {
		if time.Since(m.probeStart) >= r.cfg.Liveness.Interval {
			r.probe(m) // due already: the tick it missed will not come again for an Interval
		}
		return
	}
	reason := fmt.Sprintf("its health check failed %d times in a row, %s apart (last: %v)", m.probeFailures,
		max(r.cfg.Liveness.Interval, r.cfg.Liveness.Timeout), p.err)
	switch p.phase {
	case probeServing:
		r.hung(m, reason)
	case probeSleeping:
		r.log.Error("model server hung while being put to sleep; killing it", "model", m.name, "reason", reason)
		m.cutSleep(errors.New("hung: " + reason))
		m.cutSleep = nil
		m.probeFailures = 0
	case probeWaking:
		r.log.Error("model server hung while being woken; killing it and cold-loading the model", "model", m.name, "reason", reason)
		sw := r.loop.swaps[m.name]
		sw.cutWake(errors.New("hung: " + reason))
		sw.cutWake = nil
		m.probeFailures = 0
	}
}

// String names the phase for logs.
func (p probePhase) String() string {
	switch p {
	case probeServing:
		return "serving"
	case probeSleeping:
		return "sleeping"
	case probeWaking:
		return "waking"
	}
	return "idle"
}

// onStall handles a stream that stopped producing: its server is hung.
func (r *Router) onStall(s stall) {
	m := r.loop.models[s.model]
	if m == nil || m.gen != s.gen || m.state != sdk.StateReady {
		return
	}
	r.hung(m, s.reason)
}

// hung kills m's server, which stopped answering, and fails the model
// once it is gone: the lease is kept until then, since the memory is
// still held.
func (r *Router) hung(m *model, reason string) {
	r.log.Error("model server hung; killing it", "model", m.name, "in_flight", m.inFlight, "reason", reason)
	m.lastErr = "hung: " + reason
	m.hung = true
	if m.ended != nil { // the grants to this instance learn why it ends
		why := m.lastErr
		m.ended.Store(&why)
		m.ended = nil
	}
	r.setState(m, sdk.StateStopping)
	r.exec.stop(eviction{model: m.name, gen: m.gen, inst: m.inst, timeout: stopTimeout(m.cfg), kill: true})
	r.loop.changed = append(r.loop.changed, m.name)
	r.tickNow()
}

// Stalled reports that the grant's stream has sent nothing for too long
// after it started (reason says how long): the server is taken as hung
// and killed (liveness.go). The request itself is the caller's to end. It
// may be called at any time, more than once, and after Release.
func (g *Grant) Stalled(reason string) {
	if g.stalled != nil {
		g.stalled(reason)
	}
}
