package router

import (
	"slices"

	"github.com/loadout-dev/loadout/sdk"
)

// Selector strategies (llama-swap's selectors: strategy; host/config's
// SelectorWarm, SelectorPin, SelectorSpillover).
const (
	SelectWarm      = "warm"
	SelectPin       = "pin"
	SelectSpillover = "spillover"
)

// Selector is a llama-swap selector a request named: a virtual model whose
// model the run loop picks among Targets when the request arrives, from
// the targets' state at that moment (select).
type Selector struct {
	// ID is the selector's id, the name the client asked for.
	ID string
	// Strategy is SelectWarm, SelectPin or SelectSpillover.
	Strategy string
	// Targets are model ids in the table, in the configured order.
	Targets []string
	// Spillover is how many requests an active target holds (in flight
	// and waiting for it) before the next target is started (spillover
	// only); less than 1 means 1.
	Spillover int
}

// selectModel resolves w's selector to a model id, on the run loop, with
// llama-swap's strategies (internal/server/selector.go):
//
//   - pin: the first target;
//   - warm: the first target that is ready, else the first that is
//     starting, else the first (a cold start);
//   - spillover: targets that are ready, starting or hold requests are
//     active; a stopping one is skipped. With none active, the first cold
//     target. While the least loaded active target holds fewer than
//     Spillover requests, it takes the request (the first of equals);
//     otherwise the first cold target is started, or, with none left,
//     the least loaded active target takes it.
//
// A target's load is its requests in flight plus those waiting for it,
// the loop's own counts, so no second count is kept.
func (r *Router) selectModel(w *waiter) {
	sel := w.req.Select
	if sel == nil || len(sel.Targets) == 0 {
		return
	}
	l := &r.loop
	w.req.Model = sel.Targets[0]
	switch sel.Strategy {
	case SelectWarm:
		for _, want := range []sdk.ModelState{sdk.StateReady, sdk.StateStarting} {
			if i := slices.IndexFunc(sel.Targets, func(id string) bool { return l.selectState(id) == want }); i >= 0 {
				w.req.Model = sel.Targets[i]
				return
			}
		}
	case SelectSpillover:
		limit := max(sel.Spillover, 1)
		var active, cold []string
		for _, id := range sel.Targets {
			switch st, load := l.selectState(id), l.load(id); {
			case st == sdk.StateStopping:
			case st == sdk.StateReady || st == sdk.StateStarting || load > 0:
				active = append(active, id)
			default:
				cold = append(cold, id)
			}
		}
		least := ""
		for _, id := range active {
			if least == "" || l.load(id) < l.load(least) {
				least = id
			}
		}
		switch {
		case least != "" && (l.load(least) < limit || len(cold) == 0):
			w.req.Model = least
		case len(cold) > 0:
			w.req.Model = cold[0]
		}
	}
}

// selectState is a selector target's state as the strategies read it:
// for a model with replicas, Ready when any replica is, else Starting
// when any is; a model a swap is starting is Starting.
func (l *loopState) selectState(id string) sdk.ModelState {
	rows := []string{id}
	if set := l.replicas[id]; set != nil {
		rows = set.rows
	}
	best := sdk.StateStopped
	for _, name := range rows {
		m, ok := l.models[name]
		if !ok || m.removed {
			continue
		}
		st := m.visible()
		if l.swaps[name] != nil && st != sdk.StateReady {
			st = sdk.StateStarting
		}
		switch {
		case st == sdk.StateReady:
			return st
		case st == sdk.StateStarting:
			best = st
		case st == sdk.StateStopping && best != sdk.StateStarting:
			best = st
		}
	}
	return best
}

// load is the requests a selector target holds: in flight on it (its
// replicas included) and waiting for it.
func (l *loopState) load(id string) int {
	n := 0
	for _, m := range l.models {
		if m.name == id || m.cfg.ReplicaOf == id {
			n += m.inFlight
		}
	}
	for _, w := range l.waiters {
		if w.req.Model == id || w.asked == id || l.models[w.req.Model] != nil && l.models[w.req.Model].cfg.ReplicaOf == id {
			n++
		}
	}
	return n
}
