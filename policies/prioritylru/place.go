package main

import "github.com/loadout-dev/loadout/sdk/placement"

// place decides where need bytes go given s.free (by GPU position) and the
// margin, by sdk/placement's rule — the one the host's ledger applies when
// it leases — and writes the devices to s.devs; it reports whether it
// fits. It allocates nothing once s's scratch slices have grown.
func (s *swapper) place(need uint64) bool {
	s.devices = s.devices[:0]
	for p, g := range s.gpus {
		s.devices = append(s.devices, placement.Device{Index: g.Index, Free: s.free[p]})
	}
	var fits bool
	s.devs, fits = s.placer.Choose(s.devs, need, s.devices, s.st.margin)
	return fits
}

// usable is GPU p's free memory beyond the margin, in bytes.
func (s *swapper) usable(p int) uint64 {
	return placement.Usable(placement.Device{Free: s.free[p]}, s.st.margin)
}
