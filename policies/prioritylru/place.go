package main

import "slices"

// place decides where need bytes go given s.free (by GPU position) and the
// margin, and writes the devices to s.devs; it reports whether it fits.
// It is host/gpu.Place's rule, which the host applies when a plan names no
// devices, so the two agree (place_test.go checks it):
//
//  1. the single GPU with the most usable memory (free beyond the margin),
//     ties to the one listed first, if the target fits on it;
//  2. else a split over the fewest GPUs that hold it, most usable first;
//  3. else it does not fit.
//
// It allocates nothing once s's scratch slices have grown.
func (s *swapper) place(need uint64) bool {
	s.devs = s.devs[:0]
	best := -1
	for p := range s.free {
		if best < 0 || s.usable(p) > s.usable(best) {
			best = p
		}
	}
	if best < 0 {
		return false
	}
	if need <= s.usable(best) {
		s.devs = append(s.devs, s.gpus[best].Index)
		return true
	}
	// Positions by usable memory, most first, ties in listed order: an
	// insertion sort, stable and allocation-free for a handful of GPUs.
	s.order = s.order[:0]
	for p := range s.free {
		i := len(s.order)
		s.order = append(s.order, p)
		for i > 0 && s.usable(s.order[i-1]) < s.usable(p) {
			s.order[i] = s.order[i-1]
			i--
		}
		s.order[i] = p
	}
	var sum uint64
	for k, p := range s.order {
		sum += s.usable(p)
		if sum >= need {
			for _, q := range s.order[:k+1] {
				s.devs = append(s.devs, s.gpus[q].Index)
			}
			slices.Sort(s.devs)
			return true
		}
	}
	return false
}

// usable is GPU p's free memory beyond the margin, in bytes.
func (s *swapper) usable(p int) uint64 {
	if f := s.free[p]; f > s.st.margin {
		return f - s.st.margin
	}
	return 0
}
