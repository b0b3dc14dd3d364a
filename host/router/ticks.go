package router

import (
	"fmt"
	"time"

	"github.com/loadout-dev/loadout/sdk"
)

// Ticks on demand (docs/ABI.md, "Ticks on demand"; sdk.TickRequester). A
// scheduler that never asks is ticked every Config.TickInterval, as
// before. One that calls RequestTick is, from then on, ticked only when
// it needs it: at the time it asked for, at a TTL deadline the host keeps
// (the host unloads for TTL on its own clock, then ticks), or for a state
// change outside a swap (TickEvent.Changed). The host still looks at its
// TTL deadlines every TickInterval under serve, but that costs no policy
// call, so an idle box makes none. The claim belongs to the instance:
// whatever replaces it (a crash's new instance, a reload, a fallback's
// hand-over) is ticked periodically until it asks again (revokeAll).
type tickState struct {
	onDemand bool      // the scheduler instance has called RequestTick
	at       time.Time // its requested tick; zero: none
	last     time.Time // the last onTick: the periodic grid, and when a passed TTL deadline is looked at again
	clamped  bool      // a clamped request was logged
}

// RequestTick records the scheduler's next tick (sdk.TickRequester),
// clamped to [now+sdk.MinTickDelay, now+sdk.MaxTickDelay], a time at or
// before now taken as now+sdk.PastTickDelay (the first clamp is logged).
// Errors: sdk.ErrNotAllowed with Config.PeriodicTicks.
func (fx *effects) RequestTick(at int64) error {
	r := fx.r
	l := &r.loop
	if r.cfg.PeriodicTicks {
		return sdk.ErrNotAllowed
	}
	l.ticks.onDemand = true
	if at == 0 {
		l.ticks.at = time.Time{}
		return nil
	}
	now := r.cfg.Clock().UnixNano()
	if lo, hi := now+sdk.MinTickDelay, now+sdk.MaxTickDelay; at < lo || at > hi {
		c := min(max(at, lo), hi)
		if at <= now {
			c = now + sdk.PastTickDelay
		}
		if !l.ticks.clamped {
			l.ticks.clamped = true
			r.log.Warn("scheduler asked for a tick too soon or too far off; clamped (logged once)", "policy", r.cfg.SchedulerName,
				"asked_in", time.Duration(at-now).String(), "tick_in", time.Duration(c-now).String())
		}
		at = c
	}
	l.ticks.at = time.Unix(0, at)
	return nil
}

// tickPeriodically takes back the scheduler's ticks on demand: the
// instance that asked for them is gone.
func (r *Router) tickPeriodically() {
	r.loop.ticks = tickState{last: r.loop.ticks.last}
}

// retrier is implemented by a scheduler decorator that does work of its
// own on a tick at a time it knows (host/policy's FallbackScheduler: the
// primary's retry after its cool-down); the zero time for none.
type retrier interface{ RetryAt() time.Time }

// retryAt is the scheduler decorator's own deadline (retrier), or zero.
func (r *Router) retryAt() time.Time {
	if d, ok := r.loop.sched.(retrier); ok {
		return d.RetryAt()
	}
	return time.Time{}
}

// tickDue reports whether onTick at now must call the scheduler: always
// for one ticked periodically; on demand, when its requested tick or its
// decorator's retry has come, or a change waits to be told.
func (r *Router) tickDue(now time.Time) bool {
	t := &r.loop.ticks
	due := func(at time.Time) bool { return !at.IsZero() && !now.Before(at) }
	return !t.onDemand || len(r.loop.changed) > 0 || due(t.at) || due(r.retryAt())
}

// nextTick is when the loop next needs onTick; the zero time for never
// (until an event). Periodically: TickInterval after the last. On demand:
// the earliest of the requested tick, a pending change (now), the
// decorator's retry (retrier), and the TTL
// deadlines of ready, idle models; a deadline that a tick at or after it
// already looked at (the scheduler kept the model) is looked at again
// TickInterval after that tick, as a periodic tick would.
func (r *Router) nextTick() time.Time {
	l := &r.loop
	t := &l.ticks
	if !t.onDemand {
		return t.last.Add(r.cfg.TickInterval)
	}
	if len(l.changed) > 0 {
		return r.cfg.Clock()
	}
	next := earliest(t.at, r.retryAt())
	if l.shuttingDown {
		return next
	}
	for _, name := range l.names {
		d := l.models[name].expiresAt()
		if d.IsZero() {
			continue
		}
		if !d.After(t.last) {
			d = t.last.Add(r.cfg.TickInterval)
		}
		next = earliest(next, d)
	}
	return next
}

// earliest is the earlier of two times, the zero time meaning none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// String describes the tick state for logs and tests.
func (t tickState) String() string {
	if !t.onDemand {
		return "periodic"
	}
	if t.at.IsZero() {
		return "on demand, none requested"
	}
	return fmt.Sprintf("on demand, next at %s", t.at.Format(time.RFC3339Nano))
}
