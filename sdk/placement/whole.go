package placement

import (
	"slices"

	"github.com/loadout-dev/loadout/sdk"
)

// WholeDevice is a GPU as a job that takes whole devices sees it: its
// index and the models holding memory on it (none: the device is free).
type WholeDevice struct {
	Index   int32
	Holders []string
}

// Whole chooses n GPUs for a job that takes whole devices (a job never
// shares a GPU with a model), from devices listed in the caller's order of
// preference, and says which holders must be evicted. One device at a
// time, it takes the first of:
//
//  1. a free device (no holders);
//  2. a device whose holders are all evicted already (a model split over
//     several GPUs frees them all at once);
//  3. a device every holder of which evictable accepts: the one whose
//     evictions free the most of the devices still needed (so a split
//     model goes before two that each hold one GPU), then in the order
//     given.
//
// It returns the chosen indices, sorted, and the holders to evict, sorted
// and without repeats; ok is false, with nothing chosen, when fewer than n
// devices can be had. The host's rule for a swapper that does not plan
// for jobs is Whole over the devices in index order with "ready, idle,
// unpinned" as evictable; a policy passes its own order and test.
func Whole(n int, devices []WholeDevice, evictable func(model string) bool) (chosen []int32, evict []string, ok bool) {
	if n <= 0 {
		return nil, nil, n == 0
	}
	taken := make([]bool, len(devices))
	// cost ranks a device by the rules above: 0 free, 1 its holders
	// evicted already, 2 evictable, -1 not to be had.
	cost := func(d WholeDevice) int {
		c := 0
		for _, h := range d.Holders {
			switch {
			case slices.Contains(evict, h):
				c = max(c, 1)
			case evictable(h):
				c = 2
			default:
				return -1
			}
		}
		return c
	}
	// frees counts the devices not taken yet that evicting d's holders
	// (besides those evicted already) leaves with no holder, d included,
	// up to the want still needed.
	frees := func(d WholeDevice, want int) int {
		k := 0
		for i, e := range devices {
			if !taken[i] && !slices.ContainsFunc(e.Holders, func(h string) bool {
				return !slices.Contains(evict, h) && !slices.Contains(d.Holders, h)
			}) {
				k++
			}
		}
		return min(k, want)
	}
	for len(chosen) < n {
		pick, best, gain := -1, -1, 0
		for i, d := range devices {
			c := cost(d)
			if taken[i] || c < 0 || (pick >= 0 && c > best) {
				continue
			}
			g := 0
			if c == 2 {
				g = frees(d, n-len(chosen))
			}
			if pick < 0 || c < best || g > gain {
				pick, best, gain = i, c, g
			}
		}
		if pick < 0 {
			return nil, nil, false
		}
		taken[pick] = true
		chosen = append(chosen, devices[pick].Index)
		for _, h := range devices[pick].Holders {
			if !slices.Contains(evict, h) {
				evict = append(evict, h)
			}
		}
	}
	slices.Sort(chosen)
	slices.Sort(evict)
	return chosen, evict, true
}

// JobCandidates turns a JobPlanRequest's candidates into WholeDevices for
// Whole: each device with the models (from a Snapshot's Models) whose
// Devices include it, in the models' order. An asleep model holds nothing
// there (its Devices say where its server is, ABI version 3): the host
// stops it when a job takes its GPU, so it is no holder.
func JobCandidates(candidates []int32, models []sdk.ModelInfo) []WholeDevice {
	out := make([]WholeDevice, len(candidates))
	for i, d := range candidates {
		out[i].Index = d
		for j := range models {
			if !models[j].Asleep() && slices.Contains(models[j].Devices, d) {
				out[i].Holders = append(out[i].Holders, models[j].Name)
			}
		}
	}
	return out
}
