package router

import (
	"slices"
	"time"

	"github.com/loadout-dev/loadout/sdk"
)

// waitWindow is the number of most recent grants whose queueing delay the
// router keeps for sdk.WaitStats: enough that 5% of it is a few hundred
// requests, few enough that an afternoon's burst is not averaged over a
// month.
const waitWindow = 4096

// waitRecord is the queueing delay of the last waitWindow grants, arrival
// to grant, to the microsecond (as simulate reports waits): ring in grant
// order, and each distinct wait with how many grants waited it, ascending.
// Waits repeat — every warm grant waits about nothing, a box's cold loads
// take about one time — so a grant is a binary search and a count
// (BenchmarkRouter_AcquireRelease: the warm path pays for it on every
// request), and a read walks the distinct waits.
type waitRecord struct {
	ring   []time.Duration
	next   int // ring index of the oldest once full
	vals   []time.Duration
	counts []uint32 // parallel to vals, each above 0
}

// add records one grant's wait.
func (w *waitRecord) add(d time.Duration) {
	d = d.Round(time.Microsecond)
	if len(w.ring) < waitWindow {
		w.ring = append(w.ring, d)
	} else {
		old := w.ring[w.next]
		w.ring[w.next] = d
		w.next = (w.next + 1) % waitWindow
		i, _ := slices.BinarySearch(w.vals, old)
		if w.counts[i]--; w.counts[i] == 0 {
			w.vals = slices.Delete(w.vals, i, i+1)
			w.counts = slices.Delete(w.counts, i, i+1)
		}
	}
	i, found := slices.BinarySearch(w.vals, d)
	if found {
		w.counts[i]++
		return
	}
	w.vals = slices.Insert(w.vals, i, d)
	w.counts = slices.Insert(w.counts, i, 1)
}

// stats is the record as sdk.WaitStats, held being how long each request
// held now has waited so far.
func (w *waitRecord) stats(held []time.Duration) sdk.WaitStats {
	n := len(w.ring)
	st := sdk.WaitStats{Granted: uint32(n), Held: uint32(len(held))}
	if n == 0 {
		return st
	}
	rank, seen := sdk.NearestRank(0.95, n), 0 // the p95 is the rank-th smallest
	var p95 time.Duration
	for i, c := range w.counts {
		if seen += int(c); seen >= rank {
			p95 = w.vals[i]
			break
		}
	}
	st.P95 = int64(p95)
	st.Above = uint32(n - seen)
	for _, d := range held {
		if d.Round(time.Microsecond) > p95 {
			st.Above++
		}
	}
	return st
}

// Waits implements sdk.WaitReader for both policies: the queueing delay
// of the last waitWindow grants (the warm path's included, at about 0) and of
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
