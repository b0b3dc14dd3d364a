package router

import (
	"slices"
	"time"

	"github.com/loadout-dev/loadout/sdk"
)

// waitWindow is the number of most recent grants whose queueing delay the
// router keeps for sdk.WaitStats: enough that 5% of it is a few hundred
// requests, few enough that an afternoon's burst is not averaged over a
// month and that each grant's bookkeeping (a sorted insert and delete) is
// a few microseconds.
const waitWindow = 4096

// waitRecord is the queueing delay of the last waitWindow grants, arrival
// to grant: ring in grant order, sorted for the percentile.
type waitRecord struct {
	ring   []time.Duration
	next   int // ring index of the oldest once full
	sorted []time.Duration
}

// add records one grant's wait.
func (w *waitRecord) add(d time.Duration) {
	if len(w.ring) < waitWindow {
		w.ring = append(w.ring, d)
	} else {
		old := w.ring[w.next]
		w.ring[w.next] = d
		w.next = (w.next + 1) % waitWindow
		i, _ := slices.BinarySearch(w.sorted, old)
		w.sorted = slices.Delete(w.sorted, i, i+1)
	}
	i, _ := slices.BinarySearch(w.sorted, d)
	w.sorted = slices.Insert(w.sorted, i, d)
}

// stats is the record as sdk.WaitStats, held being how long each request
// held now has waited so far.
func (w *waitRecord) stats(held []time.Duration) sdk.WaitStats {
	n := len(w.sorted)
	st := sdk.WaitStats{Granted: uint32(n), Held: uint32(len(held))}
	if n == 0 {
		return st
	}
	p95 := w.sorted[(95*n+99)/100-1]
	st.P95 = int64(p95)
	// The first index past every wait equal to p95.
	i, _ := slices.BinarySearch(w.sorted, p95+1)
	st.Above = uint32(n - i)
	for _, d := range held {
		if d > p95 {
			st.Above++
		}
	}
	return st
}

// Waits implements sdk.WaitReader for both policies: the queueing delay
// of the last waitWindow grants (the warm path's included, at 0) and of
// the requests held now — of every request for "", else of the model's
// (a replica's row for a replica's name).
func (fx *effects) Waits(name string) (sdk.WaitStats, bool) {
	l := &fx.r.loop
	rec := &l.waits
	if name != "" {
		m, ok := l.models[name]
		if !ok {
			return sdk.WaitStats{}, false
		}
		rec = &m.waits
	}
	now := fx.r.cfg.Clock()
	held := make([]time.Duration, 0, len(l.waiters))
	for _, w := range l.waiters {
		if name == "" || w.req.Model == name {
			held = append(held, now.Sub(w.arrived))
		}
	}
	return rec.stats(held), true
}

func (h readOnlyHost) Waits(name string) (sdk.WaitStats, bool) { return h.fx.Waits(name) }
