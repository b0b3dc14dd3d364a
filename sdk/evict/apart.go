package evict

import (
	"slices"

	"github.com/loadout-dev/loadout/sdk/placement"
)

// placeApart places need bytes, as place does, on the devices that hold
// none of r.Apart (the target's sibling replicas, from p.snap), and
// reports whether it fits there; false when r has no siblings. Plan tries
// it first, without evictions: a replica goes on a device of its own when
// one has room, since two replicas on one device share its compute, and
// only otherwise where the rule puts it.
func (p *Planner) placeApart(need uint64, r *Rule) bool {
	if len(r.Apart) == 0 {
		return false
	}
	p.devices = p.devices[:0]
	next := 0
next:
	for i, g := range p.gpus {
		for _, name := range r.Apart {
			if m := Find(p.snap.Models, name, &next); m != nil && slices.Contains(m.Devices, g.Index) {
				continue next
			}
		}
		p.devices = append(p.devices, placement.Device{Index: g.Index, Free: p.free[i]})
	}
	if len(p.devices) == 0 {
		return false
	}
	devs, fits := p.Place(need, p.devices, r)
	// A split over the remaining devices costs more than sharing one
	// with a sibling: only a whole device counts (or the split the rule
	// demands).
	return fits && (len(devs) == 1 || r.Split == placement.SplitAlways)
}
