package sim

import "slices"

// block is one residency drawn on one memory panel: a rectangle over
// [from, to] seconds and [lo, hi) of the panel's y axis (bytes on a
// device, a model's lane index otherwise).
type block struct {
	model    string
	state    string
	from, to float64
	lo, hi   float64
}

// panelLayout is one memory panel of a run's timeline: a device's
// residencies stacked by memory offset, or (dev < 0) the models that hold
// no device, one lane each.
type panelLayout struct {
	dev    int      // device index; -1 for the lanes of models without one
	bytes  uint64   // the device's size; 0 for lanes
	lanes  []string // models without a device, by name; lane i at y = len-1-i (dev < 0)
	blocks []block
}

// layoutMemory places tl's residencies on panels: one per device (in
// tl.Devices order, then any device a residency names that tl.Devices
// lacks, by index), then one of lanes for residencies without a device
// (every residency of a run without GPUs). On a device a model placed on
// n devices holds Bytes/n of each, at an offset found first-fit among the
// residencies alive at its start; a model keeps its offset from one state
// to the next (starting → ready → stopping) when that space is still free.
// Residencies of no duration are left out. The result depends on tl
// alone, not on map order.
func layoutMemory(tl Timeline) []panelLayout {
	var panels []panelLayout
	index := map[int]int{} // device → its panel
	for _, d := range tl.Devices {
		if _, dup := index[d.Index]; !dup {
			index[d.Index] = len(panels)
			panels = append(panels, panelLayout{dev: d.Index, bytes: d.Bytes})
		}
	}
	var extra []int
	for _, r := range tl.Residency {
		for _, d := range r.Devices {
			if _, ok := index[d]; !ok && !slices.Contains(extra, d) {
				extra = append(extra, d)
			}
		}
	}
	slices.Sort(extra)
	for _, d := range extra {
		index[d] = len(panels)
		panels = append(panels, panelLayout{dev: d})
	}

	var lanes []string // models with a residency on no device
	for _, r := range tl.Residency {
		if len(r.Devices) == 0 && r.To > r.From && !slices.Contains(lanes, r.Model) {
			lanes = append(lanes, r.Model)
		}
	}
	slices.Sort(lanes)
	packers := make([]packer, len(panels))
	unplaced := panelLayout{dev: -1, lanes: lanes}
	for _, r := range tl.Residency {
		if !(r.To > r.From) {
			continue
		}
		if len(r.Devices) == 0 {
			// Lanes top to bottom by name: the first at the top.
			y := float64(len(lanes) - 1 - slices.Index(lanes, r.Model))
			unplaced.blocks = append(unplaced.blocks, block{model: r.Model, state: r.State, from: r.From, to: r.To, lo: y - 0.4, hi: y + 0.4})
			continue
		}
		size := float64(r.Bytes) / float64(len(r.Devices))
		for _, d := range r.Devices {
			i := index[d]
			// A model of unknown size still shows: 1% of its device.
			sz := max(size, float64(panels[i].bytes)/100, 1)
			lo := packers[i].place(r.Model, r.From, r.To, sz)
			panels[i].blocks = append(panels[i].blocks, block{model: r.Model, state: r.State, from: r.From, to: r.To, lo: lo, hi: lo + sz})
		}
	}
	if len(lanes) > 0 {
		panels = append(panels, unplaced)
	}
	return panels
}

// packer assigns memory offsets on one device over time.
type packer struct {
	live []span          // residencies still holding memory
	last map[string]span // each model's latest residency
}

type span struct {
	lo, size, to float64
}

// place returns the offset of a residency of size bytes over [from, to].
func (p *packer) place(model string, from, to, size float64) float64 {
	p.live = slices.DeleteFunc(p.live, func(s span) bool { return s.to <= from })
	if p.last == nil {
		p.last = map[string]span{}
	}
	lo := -1.0
	if prev, ok := p.last[model]; ok && prev.to == from && p.free(prev.lo, size) {
		lo = prev.lo
	}
	if lo < 0 {
		lo = 0
		cands := []float64{0}
		for _, s := range p.live {
			cands = append(cands, s.lo+s.size)
		}
		slices.Sort(cands)
		for _, c := range cands {
			if p.free(c, size) {
				lo = c
				break
			}
		}
	}
	s := span{lo: lo, size: size, to: to}
	p.live = append(p.live, s)
	p.last[model] = s
	return lo
}

// free reports whether [lo, lo+size) overlaps no live residency.
func (p *packer) free(lo, size float64) bool {
	for _, s := range p.live {
		if lo < s.lo+s.size && s.lo < lo+size {
			return false
		}
	}
	return true
}
