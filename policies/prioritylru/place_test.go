package main

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/loadout-dev/loadout/host/gpu"
	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/placement"
)

// TestPlace_AgreesWithHost: the swapper's placement rule is the host's
// (host/gpu.PlaceUnder), which places a target when a plan names no
// devices: the same devices for the same free memory, margin, constraint
// and packing, and the same refusals.
func TestPlace_AgreesWithHost(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	s := &swapper{}
	for range 5000 {
		n := r.IntN(5)
		s.gpus, s.free = s.gpus[:0], s.free[:0]
		host := make([]gpu.DeviceFree, n)
		for i := range n {
			f := r.Uint64N(8) * 10 * gib // coarse values: plenty of ties
			s.gpus = append(s.gpus, sdk.GPUInfo{Index: int32(i)})
			s.free = append(s.free, f)
			host[i] = gpu.DeviceFree{Index: i, Free: f}
		}
		s.st.margin = r.Uint64N(3) * gib
		need := (r.Uint64N(30) + 1) * 5 * gib

		// A random constraint and packing, as the host's configuration
		// hands them to both.
		var c gpu.Constraint
		var st settings
		st.margin, st.pack = s.st.margin, r.IntN(2) == 0
		for i := range n {
			if r.IntN(3) == 0 {
				c.GPUs = append(c.GPUs, i)
			}
		}
		c.Split = placement.SplitMode(r.IntN(3))
		if len(c.GPUs) > 0 || c.Split != placement.SplitAuto {
			sc := constraint{split: c.Split}
			for _, g := range c.GPUs {
				sc.gpus = append(sc.gpus, int32(g))
			}
			st.models = map[string]constraint{"t": sc}
		}
		s.defRule, s.rules = newRules(st)

		fits := s.place(need, s.ruleFor("t"))
		placement, err := gpu.PlaceUnder(need, host, s.st.margin, c, st.pack)
		if fits != (err == nil) {
			t.Fatalf("need %d on %v margin %d: swapper fits=%t, host %v", need, host, s.st.margin, fits, err)
		}
		if err != nil {
			if !errors.Is(err, gpu.ErrDoesNotFit) {
				t.Fatal(err)
			}
			continue
		}
		want := gpu.SortedDevices(placement)
		got := make([]int, len(s.devs))
		for i, d := range s.devs {
			got[i] = int(d)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("need %d on %v margin %d: swapper %v, host %v", need, host, s.st.margin, got, want)
		}
	}
}
