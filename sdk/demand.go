package sdk

import "github.com/loadout-dev/loadout/sdk/wire"

// ModelDemand is what the host has counted of one model's traffic and
// loads: the figures a cost-aware router weighs (GreedyDual-Size-Frequency
// values a cache entry by its hits × the cost of fetching it again ÷ its
// size) and that the snapshot, which says only what is true now, does
// not carry. Counts start at 0 when the host starts or a reload adds the
// model; a replica (issue 15) is its own row with its own counts.
type ModelDemand struct {
	Name string
	// Requests is how many requests arrived for the model since the host
	// started: every request once, whether it was served at once, queued,
	// cancelled or failed.
	Requests uint64
	// Loads is how many cold loads of the model completed.
	Loads uint32
	// LoadTime is its last completed cold load in nanoseconds, from the
	// swap's start (its evictions included) to ready, on the host's clock
	// (virtual under `loadout simulate`); 0 before the first.
	LoadTime int64
}

// DemandList is the reply of the optional `demand` import: every model,
// in the order of the snapshot (sorted by name).
type DemandList struct{ Models []ModelDemand }

// DemandReader is implemented by a Host that counts demand: the Go SDK's
// Wasm glue (through the optional `demand` import, ABI version 2, which a
// module imports only if it calls it) and the router. Use it through
// ReadDemand.
type DemandReader interface {
	// Demand returns every model's counts, sorted by name.
	Demand() []ModelDemand
}

// ReadDemand returns every model's counts from h, sorted by name, and
// true; false from a host that does not implement DemandReader (one
// built before the `demand` import): a policy then decides without them.
func ReadDemand(h Host) ([]ModelDemand, bool) {
	if r, ok := h.(DemandReader); ok {
		return r.Demand(), true
	}
	return nil, false
}

// DemandAt is the host's counts as a policy last read them (ReadDemand)
// and when: the zero value has read nothing.
type DemandAt struct {
	// List is the counts read last, valid until the next read (the Wasm
	// glue reuses its storage); nil from a host without them.
	List []ModelDemand
	// At is the host's clock (Unix nanoseconds) at that read.
	At   int64
	read bool
}

// Read reads h's counts at now (the event's clock) into d.List and
// returns them. With again, counts already read at now are kept: they
// change only when a request arrives, an event of its own, so a swap
// that starts at the instant of its plan (one scheduler call: plan, then
// start_swap) has the counts the plan read. A request that arrives at
// the very instant of a read, after it (two arrivals with one timestamp
// in a replay), is then counted at the next read. Each read decodes every
// model's counts, which was an eighth of a replay of traffic where every
// request is a cold load when a swapper read them in Plan and again in
// OnSwapStart.
func (d *DemandAt) Read(h Host, now int64, again bool) []ModelDemand {
	if again && d.read && now == d.At {
		return d.List
	}
	d.List, _ = ReadDemand(h)
	d.At, d.read = now, true
	return d.List
}

func (m *DemandList) kind() wire.Kind { return wire.MsgDemand }
func (m *DemandList) encode(e *encoder) {
	e.u32(uint32(len(m.Models)))
	for i := range m.Models {
		d := &m.Models[i]
		e.str(d.Name)
		e.u64(d.Requests)
		e.u32(d.Loads)
		e.i64(d.LoadTime)
	}
}
func (m *DemandList) decode(d *decoder) {
	n := d.count(4+8+4+8, "demand list")
	m.Models = m.Models[:0]
	for range n {
		var md ModelDemand
		md.Name = d.str()
		md.Requests = d.u64()
		md.Loads = d.u32()
		md.LoadTime = d.i64()
		m.Models = append(m.Models, md)
	}
}
