package policy

import (
	"context"
	"errors"
	"time"

	"github.com/loadout-dev/loadout/sdk"
)

// Backoff is how long a policy disabled for crash-looping stays replaced by
// its fallback before it is tried again: Initial after its first disable,
// doubling with each disable that follows a retry, up to Max. A primary
// that has run for Max since its retry without being disabled again starts
// over at Initial.
type Backoff struct {
	Initial time.Duration // 0: DefaultBackoffInitial
	Max     time.Duration // 0: DefaultBackoffMax
}

// Backoff defaults.
const (
	DefaultBackoffInitial = 30 * time.Second
	DefaultBackoffMax     = 10 * time.Minute
)

func (b Backoff) withDefaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = DefaultBackoffInitial
	}
	if b.Max <= 0 {
		b.Max = DefaultBackoffMax
	}
	b.Max = max(b.Max, b.Initial)
	return b
}

// cooldown is the state both fallback decorators share: whether the
// fallback is in charge, until when, and whether the router must be told of
// a change of policy. Times are the events' own clock (unix ns), so a
// replay in virtual time backs off in virtual time.
type cooldown struct {
	backoff    Backoff
	onFallback bool
	retryAt    int64 // when the primary is tried again (onFallback only)
	disables   int   // consecutive disables, for the doubling
	revivedAt  int64 // when the primary was last tried again
	reason     string
	handedOver bool
}

// disable records that the primary was disabled at now for reason and sets
// the retry time.
func (c *cooldown) disable(now int64, reason string) {
	if c.disables > 0 && now-c.revivedAt >= int64(c.backoff.Max) {
		c.disables = 0 // it ran long enough since its retry: start over
	}
	c.disables++
	wait := c.backoff.Initial
	for i := 1; i < c.disables && wait < c.backoff.Max; i++ {
		wait *= 2
	}
	wait = min(wait, c.backoff.Max)
	c.onFallback, c.retryAt, c.reason = true, now+int64(wait), reason
}

// due reports whether the primary's cool-down is over at now.
func (c *cooldown) due(now int64) bool { return c.onFallback && now >= c.retryAt }

// retry tries the primary again if its cool-down is over at now: a fresh
// instance, and the fallback (nil if none was made) closed. It reports
// whether the primary is back in charge; a failed retry disables it again.
func (c *cooldown) retry(now int64, primary, fallback *supervisor) bool {
	if !c.due(now) {
		return false
	}
	if err := primary.revive(); err != nil {
		c.disable(now, err.Error())
		return false
	}
	primary.log.Info("policy retried after its cool-down", "kind", primary.m.Kind.String())
	c.onFallback, c.revivedAt, c.handedOver = false, now, true
	if fallback != nil {
		fallback.close()
	}
	return true
}

// HandedOver reports, once, whether the policy answering behind the
// decorator changed since the last call: the run loop then offers the
// requests the old one held to the new one.
func (c *cooldown) HandedOver() bool {
	h := c.handedOver
	c.handedOver = false
	return h
}

// statuses describes primary and fallback for the admin API.
func (c *cooldown) statuses(primary Status, fallback *Status) []Status {
	primary.Active = !c.onFallback
	if c.onFallback {
		primary.Healthy = false
		primary.DisabledReason = c.reason
		primary.RetryAt = time.Unix(0, c.retryAt)
	}
	out := []Status{primary}
	if fallback != nil {
		fb := *fallback
		fb.Fallback, fb.Active = true, c.onFallback
		out = append(out, fb)
	}
	return out
}

// unhealthy reports whether err says the primary has just been disabled.
func unhealthy(err error) bool { return err != nil && errors.Is(err, ErrUnhealthy) }

// FallbackScheduler is a scheduler decorator: it calls the primary, and
// while the primary is disabled for crash-looping it calls a fallback
// scheduler (the built-in fifo) instead, so requests are scheduled rather
// than failed (DESIGN.md rule 7). The primary is tried again, with a fresh
// instance, on the first tick after its cool-down (Backoff); requests the
// fallback holds then are handed over (HandedOver). Call it from the run
// loop only, like Scheduler.
type FallbackScheduler struct {
	primary     *Scheduler
	newFallback func() (*Scheduler, error)
	fallback    *Scheduler // made at each switch, so it starts empty
	cd          cooldown
}

// NewFallbackScheduler decorates primary with a fallback made by
// newFallback (called at each switch to it, so each takeover starts with a
// fresh instance) and retried after b's cool-down.
func NewFallbackScheduler(primary *Scheduler, newFallback func() (*Scheduler, error), b Backoff) *FallbackScheduler {
	return &FallbackScheduler{primary: primary, newFallback: newFallback, cd: cooldown{backoff: b.withDefaults()}}
}

// active returns the scheduler in charge.
func (f *FallbackScheduler) active() *Scheduler {
	if f.cd.onFallback && f.fallback != nil {
		return f.fallback
	}
	return f.primary
}

// after switches to the fallback when err says the primary was just
// disabled. The caller's error is returned unchanged: the requests the
// primary held are lost with it and the run loop fails them.
func (f *FallbackScheduler) after(now int64, s *Scheduler, err error) error {
	if s != f.primary || !unhealthy(err) || f.cd.onFallback {
		return err // not a new disable (or the fallback could not start)
	}
	f.cd.disable(now, err.Error())
	fb, ferr := f.newFallback()
	if ferr != nil {
		f.primary.sv.log.Error("fallback scheduler failed to start; requests fail until the primary is retried", "err", ferr)
		f.fallback = nil
		return err
	}
	f.fallback = fb
	f.primary.sv.log.Error("scheduler policy disabled; the fallback takes over", "fallback", fb.sv.m.Name,
		"retry_in", time.Duration(f.cd.retryAt-now).String())
	return err
}

// OnRequest implements the run loop's scheduler.
func (f *FallbackScheduler) OnRequest(ev sdk.RequestEvent) error {
	s := f.active()
	return f.after(ev.Now, s, s.OnRequest(ev))
}

// OnSwapDone implements the run loop's scheduler.
func (f *FallbackScheduler) OnSwapDone(ev sdk.SwapDoneEvent) error {
	s := f.active()
	return f.after(ev.Now, s, s.OnSwapDone(ev))
}

// OnServeDone implements the run loop's scheduler.
func (f *FallbackScheduler) OnServeDone(ev sdk.ServeDoneEvent) error {
	s := f.active()
	return f.after(ev.Now, s, s.OnServeDone(ev))
}

// OnCancel implements the run loop's scheduler.
func (f *FallbackScheduler) OnCancel(ev sdk.CancelEvent) error {
	s := f.active()
	return f.after(ev.Now, s, s.OnCancel(ev))
}

// OnUnload implements the run loop's scheduler.
func (f *FallbackScheduler) OnUnload(ev sdk.UnloadEvent) error {
	s := f.active()
	return f.after(ev.Now, s, s.OnUnload(ev))
}

// OnTick implements the run loop's scheduler. The first tick after the
// primary's cool-down tries it again: a fresh instance gets this tick, and
// the fallback's requests are handed over.
func (f *FallbackScheduler) OnTick(ev sdk.TickEvent) error {
	var fb *supervisor
	if f.fallback != nil {
		fb = f.fallback.sv
	}
	if f.cd.retry(ev.Now, f.primary.sv, fb) {
		f.fallback = nil
	}
	s := f.active()
	return f.after(ev.Now, s, s.OnTick(ev))
}

// OnShutdown implements the run loop's scheduler.
func (f *FallbackScheduler) OnShutdown(ev sdk.ShutdownEvent) error {
	s := f.active()
	return f.after(ev.Now, s, s.OnShutdown(ev))
}

// HandedOver reports, once, that the scheduler in charge changed back to
// the primary since the last call (see cooldown.HandedOver).
func (f *FallbackScheduler) HandedOver() bool { return f.cd.HandedOver() }

// RetryAt is when the primary is tried again, on the first OnTick at or
// after it, while the fallback answers; the zero time otherwise. A run
// loop that ticks its scheduler only on demand (sdk.TickRequester) ticks
// by then all the same: it is a deadline the host knows.
func (f *FallbackScheduler) RetryAt() time.Time {
	if !f.cd.onFallback {
		return time.Time{}
	}
	return time.Unix(0, f.cd.retryAt)
}

// Statuses describes the primary (Active, or disabled with its reason and
// retry time) and, once one was made, the fallback.
func (f *FallbackScheduler) Statuses() []Status {
	var fb *Status
	if f.fallback != nil {
		st := f.fallback.Status()
		fb = &st
	}
	return f.cd.statuses(f.primary.Status(), fb)
}

// FallbackSwapper is the swapper decorator: while the primary swapper is
// disabled for crash-looping, plans come from a fallback (the built-in
// group swapper, llama-swap's group semantics), so a broken swapper never
// takes every model down. The plan whose call disabled the primary is asked
// of the fallback at once. The primary is tried again on the first plan
// after its cool-down.
type FallbackSwapper struct {
	primary     *Swapper
	newFallback func() (*Swapper, error)
	fallback    *Swapper
	cd          cooldown
}

// NewFallbackSwapper decorates primary with a fallback made by newFallback
// (at each switch to it) and retried after b's cool-down.
func NewFallbackSwapper(primary *Swapper, newFallback func() (*Swapper, error), b Backoff) *FallbackSwapper {
	return &FallbackSwapper{primary: primary, newFallback: newFallback, cd: cooldown{backoff: b.withDefaults()}}
}

// Plan implements the run loop's swapper.
func (f *FallbackSwapper) Plan(q sdk.PlanRequest) (sdk.Plan, error) {
	var fb *supervisor
	if f.fallback != nil {
		fb = f.fallback.sv
	}
	if f.cd.retry(q.Now, f.primary.sv, fb) {
		f.fallback = nil
	}
	if f.cd.onFallback && f.fallback != nil {
		return f.fallback.Plan(q)
	}
	p, err := f.primary.Plan(q)
	if !unhealthy(err) || f.cd.onFallback {
		return p, err // not a new disable (or the fallback could not start)
	}
	f.cd.disable(q.Now, err.Error())
	nfb, ferr := f.newFallback()
	if ferr != nil {
		f.primary.sv.log.Error("fallback swapper failed to start; plans fail until the primary is retried", "err", ferr)
		return p, err
	}
	f.fallback, f.cd.handedOver = nfb, true
	f.primary.sv.log.Error("swapper policy disabled; the fallback takes over", "fallback", nfb.sv.m.Name,
		"retry_in", time.Duration(f.cd.retryAt-q.Now).String())
	return nfb.Plan(q)
}

// PlanJob implements sdk.JobPlanner: the swapper in charge plans for the
// job (the group fallback by its own rule).
func (f *FallbackSwapper) PlanJob(q sdk.JobPlanRequest) (sdk.Plan, error) {
	if f.cd.onFallback && f.fallback != nil {
		return f.fallback.PlanJob(q)
	}
	return f.primary.PlanJob(q)
}

// OnSwapStart implements the run loop's swapper.
func (f *FallbackSwapper) OnSwapStart(ev sdk.SwapStartEvent) error {
	if f.cd.onFallback && f.fallback != nil {
		return f.fallback.OnSwapStart(ev)
	}
	return f.primary.OnSwapStart(ev)
}

// PurePlan reports whether the swapper in charge claims sdk.PurePlanner.
// The run loop asks again after a hand-over.
func (f *FallbackSwapper) PurePlan() bool {
	if f.cd.onFallback && f.fallback != nil {
		return f.fallback.PurePlan()
	}
	return f.primary.PurePlan()
}

// HandedOver reports, once, that the swapper in charge changed since the
// last call; the run loop then drops the plans it cached.
func (f *FallbackSwapper) HandedOver() bool { return f.cd.HandedOver() }

// Statuses describes the primary and, once one was made, the fallback.
func (f *FallbackSwapper) Statuses() []Status {
	var fb *Status
	if f.fallback != nil {
		st := f.fallback.Status()
		fb = &st
	}
	return f.cd.statuses(f.primary.Status(), fb)
}

// Close discards the primary and the fallback instance, if any; it is
// how a hot reload gives back the policies it replaced. Later calls fail.
func (f *FallbackScheduler) Close(ctx context.Context) error {
	if f.fallback != nil {
		_ = f.fallback.Close(ctx)
	}
	return f.primary.Close(ctx)
}

// Close discards the primary and the fallback instance, if any; it is
// how a hot reload gives back the policies it replaced. Later calls fail.
func (f *FallbackSwapper) Close(ctx context.Context) error {
	if f.fallback != nil {
		_ = f.fallback.Close(ctx)
	}
	return f.primary.Close(ctx)
}
