package main

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/loadout-dev/loadout/host/gpu"
	"github.com/loadout-dev/loadout/sdk/evict"
	"github.com/loadout-dev/loadout/sdk/placement"
)

// TestPlace_AgreesWithHost: the swapper's placement rule (sdk/evict's,
// which is sdk/placement's) is the host's (host/gpu.PlaceUnder), which
// places a target when a plan names no devices: the same devices for the
// same free memory, margin, constraint and packing, and the same refusals.
func TestPlace_AgreesWithHost(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 5000 {
		n := r.IntN(5)
		devices := make([]placement.Device, n)
		host := make([]gpu.DeviceFree, n)
		for i := range n {
			f := r.Uint64N(8) * 10 * gib // coarse values: plenty of ties
			devices[i] = placement.Device{Index: int32(i), Free: f}
			host[i] = gpu.DeviceFree{Index: i, Free: f}
		}
		margin := r.Uint64N(3) * gib
		need := (r.Uint64N(30) + 1) * 5 * gib

		// A random constraint and packing, as the host's configuration
		// hands them to both.
		var c gpu.Constraint
		p := evict.Placement{Pack: r.IntN(2) == 0}
		for i := range n {
			if r.IntN(3) == 0 {
				c.GPUs = append(c.GPUs, i)
			}
		}
		c.Split = placement.SplitMode(r.IntN(3))
		if len(c.GPUs) > 0 || c.Split != placement.SplitAuto {
			sc := evict.Constraint{Split: c.Split}
			for _, g := range c.GPUs {
				sc.GPUs = append(sc.GPUs, int32(g))
			}
			p.Models = map[string]evict.Constraint{"t": sc}
		}
		rules := evict.NewRules(p, margin)
		planner := evict.Planner{Margin: margin}

		devs, fits := planner.Place(need, devices, rules.For("t"))
		placed, err := gpu.PlaceUnder(need, host, margin, c, p.Pack)
		if fits != (err == nil) {
			t.Fatalf("need %d on %v margin %d: swapper fits=%t, host %v", need, host, margin, fits, err)
		}
		if err != nil {
			if !errors.Is(err, gpu.ErrDoesNotFit) {
				t.Fatal(err)
			}
			continue
		}
		want := gpu.SortedDevices(placed)
		got := make([]int, len(devs))
		for i, d := range devs {
			got[i] = int(d)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("need %d on %v margin %d: swapper %v, host %v", need, host, margin, got, want)
		}
	}
}
