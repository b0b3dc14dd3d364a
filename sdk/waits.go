package sdk

import "github.com/loadout-dev/loadout/sdk/wire"

// WaitStats is the host's record of queueing delay — arrival to grant,
// the figure whose 95th percentile `loadout simulate` reports as the wait
// p95 — over its most recent grants, the box's or one model's: what a
// router needs to know before it makes a request wait (for a busy
// victim, say) in exchange for a cold load saved. The percentile is the
// nearest rank, as simulate's: the ⌈0.95·Granted⌉-th smallest wait.
type WaitStats struct {
	// Granted is how many grants the record covers: the most recent
	// ones, at most the host's window (the router keeps 4,096).
	Granted uint32
	// P95 is the 95th percentile of their waits, in nanoseconds on the
	// host's clock (virtual under `loadout simulate`; the router keeps
	// waits to the microsecond); 0 with none.
	P95 int64
	// Above is how many of them waited longer than P95, plus how many of
	// the requests the host holds now (queued or waiting on a load) have
	// already waited longer than it.
	Above uint32
	// Held is how many requests the host holds now (for a model: held
	// for it).
	Held uint32
}

// Slack is how many more requests may wait longer than P95 before the
// record's 95th percentile rises above it: Granted − ⌈0.95·Granted⌉ −
// Above, never below 0. Where many waits are equal at the percentile (on
// a box whose cold loads take one time, the p95 is one cold load and
// fewer than 5% of requests wait longer) this is the room to spend; where
// the waits are spread it is about 0.
func (w WaitStats) Slack() int {
	n := int(w.Granted)
	return max(n-NearestRank(0.95, n)-int(w.Above), 0)
}

// NearestRank is the rank, from 1, of the p-quantile (p in (0, 1]) of n
// values by the nearest-rank method, ⌈p·n⌉: the value `loadout simulate`
// reports as the p50, p95 and p99 of its waits, and WaitStats.P95. 0 for
// n = 0.
func NearestRank(p float64, n int) int {
	if n <= 0 {
		return 0
	}
	return min(max(int(p*float64(n)+0.999999), 1), n)
}

// WaitReader is implemented by a Host that keeps a record of queueing
// delay: the Go SDK's Wasm glue (through the optional `waits` import, ABI
// version 3, which a module imports only if it calls it) and the router.
// Use it through ReadWaits.
type WaitReader interface {
	// Waits returns the record as of now of model's requests (a
	// replica's, for a replica's name), or of every request for "";
	// false for a model the host does not know, or from a host that
	// keeps none.
	Waits(model string) (WaitStats, bool)
}

// ReadWaits returns h's record of queueing delay for model ("" the whole
// box) and true; false for an unknown model, or from a host that keeps
// none (one built before the `waits` import): a policy should then spend
// no waits it cannot count.
func ReadWaits(h Host, model string) (WaitStats, bool) {
	if r, ok := h.(WaitReader); ok {
		return r.Waits(model)
	}
	return WaitStats{}, false
}

func (m *WaitStats) kind() wire.Kind { return wire.MsgWaits }
func (m *WaitStats) encode(e *encoder) {
	e.u32(m.Granted)
	e.i64(m.P95)
	e.u32(m.Above)
	e.u32(m.Held)
}
func (m *WaitStats) decode(d *decoder) {
	m.Granted = d.u32()
	m.P95 = d.i64()
	m.Above = d.u32()
	m.Held = d.u32()
}
