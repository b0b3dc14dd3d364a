package main

import (
	"slices"

	"github.com/loadout-dev/loadout/sdk/placement"
)

// rule is one model's placement rule as the swapper applies it: the
// sdk/placement Rule (its gpus:, its split:, the box's pack or spread)
// and the devices it may use (nil: every device), built once at New.
type rule struct {
	placement.Rule
	gpus []int32
}

// newRules builds the rules of st: one per constrained model, and the
// default one for every other model.
func newRules(st settings) (def rule, by map[string]*rule) {
	if st.pack {
		def.Prefer = placement.LeastFree(st.margin)
	}
	for name, c := range st.models {
		r := &rule{gpus: c.gpus}
		r.Prefer, r.Split = def.Prefer, c.split
		if len(c.gpus) > 0 {
			r.Filters = []placement.Filter{placement.Allowed(c.gpus)}
		}
		if by == nil {
			by = map[string]*rule{}
		}
		by[name] = r
	}
	return def, by
}

// ruleFor is the placement rule of the model named name.
func (s *swapper) ruleFor(name string) *rule {
	if r, ok := s.rules[name]; ok {
		return r
	}
	return &s.defRule
}

// allows reports whether r lets its model use the GPU with index.
func (r *rule) allows(index int32) bool { return len(r.gpus) == 0 || slices.Contains(r.gpus, index) }

// place decides where need bytes go given s.free (by GPU position) and the
// margin, by sdk/placement's rule under r — the one the host's ledger
// applies when it leases — and writes the devices to s.devs; it reports
// whether it fits. It allocates nothing once s's scratch slices have grown.
func (s *swapper) place(need uint64, r *rule) bool {
	s.devices = s.devices[:0]
	for p, g := range s.gpus {
		s.devices = append(s.devices, placement.Device{Index: g.Index, Free: s.free[p]})
	}
	var fits bool
	s.devs, fits = s.placer.Place(s.devs, need, s.devices, s.st.margin, r.Rule)
	return fits
}

// usable is GPU p's free memory beyond the margin, in bytes.
func (s *swapper) usable(p int) uint64 {
	return placement.Usable(placement.Device{Free: s.free[p]}, s.st.margin)
}
