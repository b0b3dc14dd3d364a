package router

import (
	"slices"
	"time"

	"github.com/loadout-dev/loadout/sdk"
)

// UpdateModels applies a new model table while requests flow (a hot
// reload of the configuration), in one turn of the run loop:
//
//   - a model missing from models is removed: the scheduler hears an
//     OnUnload for it (it fails the requests it holds for it, as for an
//     operator's unload), a running one stops after its requests in
//     flight, one loading has its load aborted (as an unload's is), and
//     it leaves the table once stopped;
//   - a model new in models joins the table, stopped;
//   - a model named in changed takes its new ModelConfig for its next
//     load; if it is running, it stops once idle (a starting one once
//     started), and the next request for it loads it with the new one.
//
// Every other model is left as it is (its Process is not replaced), but
// for what a reload may change without a restart, which it takes from
// models at once: its replica range (MinReplicas, MaxReplicas: a new
// replica count adds or removes replicas' rows and restarts none), its
// Priority, ConcurrencyLimit, Pinned and Group (which the policies read),
// its TTL (counted from its last request), StopTimeout, and its Evict and
// WakeTimeout, which its next eviction and wake use; and, when given, the
// Process its next start uses (its server's spec unchanged but for how
// long its load may take).
// Errors: ErrShuttingDown.
func (r *Router) UpdateModels(models map[string]ModelConfig, changed []string) error {
	ran := false
	r.query(func() {
		ran = true
		r.updateModels(models, changed)
	})
	if !ran {
		return ErrShuttingDown
	}
	return nil
}

func (r *Router) updateModels(models map[string]ModelConfig, changed []string) {
	l := &r.loop
	var removed []string
	for _, name := range l.names {
		if _, ok := models[name]; !ok {
			removed = append(removed, name)
		}
	}
	for name, mc := range models {
		m, ok := l.models[name]
		switch {
		case !ok:
			l.models[name] = &model{name: name, cfg: mc}
			l.names = append(l.names, name)
			r.log.Info("model added", "model", name)
		case !slices.Contains(changed, name):
			// What a reload may change without a restart. The warm
			// path's admission was the scheduler's under the old
			// settings (its limit was the old concurrencyLimit): revoked,
			// the scheduler grants again under the new ones.
			if m.cfg.ConcurrencyLimit != mc.ConcurrencyLimit || m.cfg.Priority != mc.Priority || m.cfg.Pinned != mc.Pinned || m.cfg.Group != mc.Group {
				r.revoke(m)
			}
			m.cfg.Priority, m.cfg.ConcurrencyLimit, m.cfg.Pinned, m.cfg.Group = mc.Priority, mc.ConcurrencyLimit, mc.Pinned, mc.Group
			m.cfg.TTL, m.cfg.StopTimeout = mc.TTL, mc.StopTimeout
			m.cfg.MinReplicas, m.cfg.MaxReplicas = mc.MinReplicas, mc.MaxReplicas
			m.cfg.Evict = mc.Evict
			m.cfg.WakeTimeout = mc.WakeTimeout
			if mc.Process != nil { // for its next start; the running server is kept
				m.cfg.Process = mc.Process
			}
		default:
			m.cfg = mc
			m.startFailures, m.retryAt = 0, time.Time{} // a new configuration starts afresh
			m.sleepUnsupported = false
			r.log.Info("model changed; it reloads with its new configuration once idle", "model", name, "state", m.visible().String())
			r.restartWhenIdle(m)
		}
	}
	slices.Sort(l.names)
	l.indexReplicas()
	clear(l.planCache)
	if len(removed) > 0 {
		r.log.Info("models removed; they stop after their requests in flight", "models", removed)
		r.observer().Unloading(removed, "removed")
		err := l.sched.OnUnload(sdk.UnloadEvent{Now: r.stamp(), Models: removed, Reason: sdk.UnloadAdmin})
		r.schedulerFailed("on_unload", err)
		for _, name := range removed {
			m := l.models[name]
			m.removed = true
			l.removing++
			r.restartWhenIdle(m)
			if sw := l.swaps[name]; sw != nil && sw.abort != nil && m.state == sdk.StateStarting {
				// A load for a model no longer configured is not
				// waited for, however long: end it, as an unload does.
				sw.abort(errStartAborted)
			}
		}
	}
	r.reapRemoved()
	// sdk.TickEvent: a reload names every model, the removed ones too.
	l.changed = append(append(l.changed, removed...), l.names...)
	slices.Sort(l.changed)
	l.changed = slices.Compact(l.changed)
	r.tickNow()
}

// restartWhenIdle stops a running model after its requests in flight (a
// starting one once its swap ends), so that its next load uses its
// current configuration.
func (r *Router) restartWhenIdle(m *model) {
	r.revoke(m)
	switch {
	case m.isAsleep():
		r.stopSleeper(m, "configuration changed")
	case r.loop.swaps[m.name] != nil:
		m.stopAfterStart = true
	case m.state == sdk.StateReady && m.inFlight > 0:
		m.stopWhenIdle = true
	case m.state == sdk.StateReady:
		r.stopModel(m)
	}
}

// reapRemoved takes out of the table the removed models that have
// stopped: no process, no swap, no swap evicting them. It runs after
// every event.
func (r *Router) reapRemoved() {
	l := &r.loop
	if l.removing == 0 {
		return
	}
	for i := 0; i < len(l.names); i++ {
		name := l.names[i]
		m := l.models[name]
		if !m.removed || m.state.Running() || l.swaps[name] != nil || l.evicting(name) {
			continue
		}
		delete(l.models, name)
		l.names = slices.Delete(l.names, i, i+1)
		l.indexReplicas()
		l.removing--
		i--
		r.releaseLease(m)
		r.log.Info("model removed", "model", name)
	}
}

// evicting reports whether a running swap is evicting name: name is one
// of its victims and its stop (or sleep) has not ended.
func (l *loopState) evicting(name string) bool {
	for _, sw := range l.swaps {
		if sw.evicting(name) {
			return true
		}
	}
	return false
}

// evicting reports whether the swap is evicting name: name is one of its
// victims and its stop (or sleep) has not ended. A victim whose stop has
// ended is the swap's no longer — the swap goes on loading its target —
// so a request for it may start it again, elsewhere, at once, rather than
// wait out the target's load (docs/RATIONALE.md, "A victim is free once
// stopped").
func (sw *swap) evicting(name string) bool {
	return slices.Contains(sw.evict, name) && !slices.Contains(sw.stopped, name)
}
