package router

import (
	"fmt"

	"github.com/loadout-dev/loadout/sdk"
)

// The warm path (DESIGN.md, "The warm path"; docs/ABI.md): a scheduler
// that implements its decision for a ready model as "grant while under a
// limit" says so once with sdk.Admitter.Admit, and the loop then grants
// such requests itself, with no policy call. The admission lives on the
// model (model.admitLimit) and is revoked by every change the policy must
// see (revoke's callers); what the loop checks per request is only what
// changes without an event the policy hears: the in-flight count.

// Admit records the scheduler's warm-path admission for name after
// checking that the conditions of sdk.Admitter hold now.
func (fx *effects) Admit(name string, limit uint32, flags sdk.AdmitFlags) error {
	r, l := fx.r, &fx.r.loop
	refuse := func(err error, why string) error {
		r.refusedWith(&l.schedCounters, err, fmt.Sprintf("Admit(%q, %d): %s", name, limit, why))
		return err
	}
	m, ok := l.models[name]
	switch {
	case r.cfg.NoWarmPath:
		return sdk.ErrNotAllowed // not the policy's mistake: not counted
	case !ok:
		return refuse(sdk.ErrUnknownModel, "unknown model")
	case flags&^sdk.AdmitAllFlags != 0:
		return refuse(sdk.ErrBadArgument, fmt.Sprintf("undefined flags %#x", uint32(flags&^sdk.AdmitAllFlags)))
	case limit == 0:
		r.revoke(m)
		return nil
	case l.shuttingDown:
		return refuse(sdk.ErrNotAllowed, "shutting down")
	case m.visible() != sdk.StateReady:
		return refuse(sdk.ErrNotReady, "model is "+m.visible().String())
	case l.swaps[name] != nil || l.evicting(name):
		return refuse(sdk.ErrNotReady, "a swap loads or evicts it")
	case l.holds(name):
		return refuse(sdk.ErrNotReady, "the scheduler holds a request for it")
	}
	m.admitLimit, m.admitFlags = limit, flags
	return nil
}

// holds reports whether the scheduler holds a request for model name.
// Between events every waiter is held (offer ends each new one), so this
// is a scan of the held requests, done only when a policy asks to admit.
func (l *loopState) holds(name string) bool {
	for _, w := range l.waiters {
		if w.held && w.req.Model == name {
			return true
		}
	}
	return false
}

// admitWarm grants w on the warm path if its model's admission allows it,
// and reports whether it did (the caller took the grant or had left: the
// request has ended either way, rule 5). It runs before the request is a
// waiter, so the policy never hears of it.
func (r *Router) admitWarm(w *waiter) bool {
	m, ok := r.loop.models[w.req.Model]
	if !ok || m.admitLimit == 0 || m.inFlight >= int(m.admitLimit) || m.visible() != sdk.StateReady {
		return false
	}
	r.loop.now = w.arrived
	r.serve(w, m)
	r.loop.observeOnly = m.name // nothing else changed
	return true
}

// quietServeDone reports whether the scheduler need not hear a request of
// m end: m is admitted without AdmitServeDone and the scheduler holds no
// request at all (between events every waiter is a held one).
func (r *Router) quietServeDone(m *model) bool {
	return m.admitLimit > 0 && m.admitFlags&sdk.AdmitServeDone == 0 && len(r.loop.waiters) == 0
}

// revoke takes back m's warm-path admission.
func (r *Router) revoke(m *model) { m.admitLimit, m.admitFlags = 0, 0 }

// revokeAll takes back every admission, and ticks on demand (ticks.go):
// the policy that gave them lost its state or was replaced.
func (r *Router) revokeAll() {
	for _, m := range r.loop.models {
		r.revoke(m)
	}
	r.tickPeriodically()
}
