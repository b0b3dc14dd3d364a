package sim

import (
	"maps"
	"math"
	"slices"
)

// LoadBound is what a trace's cold loads cost in load time, on a box whose
// models differ in size or load time, where Belady's rule is no longer
// optimal: a lower bound no schedule can beat and a schedule that meets
// it from above, both serving requests one at a time in arrival order.
// The optimum lies between Lower and Feasible.
type LoadBound struct {
	// Memory is the GPUs' memory, bytes, all devices together; Unit the
	// granularity, bytes, in which the bound counted sizes (a size's
	// remainder below it is not counted, which only lowers the bound).
	Memory uint64 `json:"memory_bytes"`
	Unit   uint64 `json:"unit_bytes"`
	// Lower is the min-cost-flow relaxation of Berger, Beckmann &
	// Harchol-Balter, "Practical Bounds on Optimal Caching with Variable
	// Object Sizes" (SIGMETRICS 2018; their FOO-L), in load seconds: each
	// model may be kept in part between two of its requests, memory
	// pooled across devices, and the requested model is resident while
	// it is served. Exact (Belady's count, weighted) when every model has
	// the same size.
	Lower float64 `json:"lower_s"`
	// Feasible is a schedule a box could run, seconds and loads: on a
	// miss, on the device where what it must evict would be missed least
	// soon, evict models never requested again, then those with the
	// largest (requests until the next) × size ÷ load time — Belady
	// weighed by size and cost.
	Feasible      float64 `json:"feasible_s"`
	FeasibleLoads int     `json:"feasible_loads"`
	loadS         map[string]float64
}

// LoadSeconds is what run spent loading models: each model's cold loads
// times its load time.
func (b *LoadBound) LoadSeconds(run *Result) float64 {
	return loadSeconds(run, func(name string) float64 { return b.loadS[name] })
}

// LoadSeconds is what run spent loading models: each model's cold loads
// times its load time in models.
func LoadSeconds(run *Result, models map[string]Model) float64 {
	return loadSeconds(run, func(name string) float64 { return models[name].Load.Seconds() })
}

// loadSeconds sums each model's cold loads times loadS(model), in model
// order (so that the float sum is the same every time).
func loadSeconds(run *Result, loadS func(string) float64) float64 {
	var s float64
	for _, name := range slices.Sorted(maps.Keys(run.Models)) {
		s += float64(run.Models[name].ColdLoads) * loadS(name)
	}
	return s
}

// maxUnits caps the memory's size in units, so the flow's successive
// shortest paths (at least one unit each) stay few.
const maxUnits = 4096

// loadBounds computes a LoadBound for seq (dense model indices) with
// per-model sizes (bytes), load times (seconds) and devices (bytes). A
// model no device can hold is skipped (its requests fail in a replay).
// slots > 0 says every model has the same size and the box holds that
// many: the bound counts in slots.
func loadBounds(seq []int, size []uint64, cost []float64, devices []uint64, slots int) *LoadBound {
	b := &LoadBound{}
	for _, d := range devices {
		b.Memory += d
	}
	largest := slices.Max(devices)
	var kept []int
	for _, m := range seq {
		if size[m] > 0 && size[m] <= largest {
			kept = append(kept, m)
		}
	}
	units := make([]int64, len(size))
	var capUnits int64
	if slots > 0 {
		b.Unit, capUnits = size[0], int64(slots)
		if len(kept) > 0 {
			b.Unit = size[kept[0]]
		}
		for m := range units {
			units[m] = 1
		}
	} else {
		g := b.Memory
		for _, m := range kept {
			g = gcd(g, size[m])
		}
		b.Unit = max(g, (b.Memory+maxUnits-1)/maxUnits, 1)
		capUnits = int64(b.Memory / b.Unit)
		for m := range units {
			units[m] = int64(size[m] / b.Unit)
		}
	}
	b.Lower = flowBound(kept, units, cost, capUnits)
	b.Feasible, b.FeasibleLoads = sizeAwareBelady(kept, size, cost, devices)
	return b
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// flowBound is Berger et al.'s FOO-L for seq: the least load time of a
// schedule that may keep any fraction (in units) of a model between two
// of its requests, with capUnits of memory, the requested model's whole
// size held at its request. As a flow (the k-paths form of an interval
// LP): nodes 0…n between the requests; at request p an arc p−1→p for the
// requested model (its size, cost −M so that it is always taken) and one
// for free memory (capUnits − its size); for each two consecutive
// requests p < q of a model with others between, an arc p→q−1 of its
// size at −(load time ÷ size) per unit: keeping it saves the reload. The
// least-cost flow of capUnits units from 0 to n gives the greatest
// saving. The constraint matrix is an interval matrix, so with equal
// sizes the relaxation is integral: Belady's optimum.
func flowBound(seq []int, units []int64, cost []float64, capUnits int64) float64 {
	n := len(seq)
	if n == 0 {
		return 0
	}
	type interval struct {
		from, to int // nodes
		m        int
	}
	var ivs []interval
	var total, bigM float64
	last := map[int]int{}
	for p, m := range seq {
		q, seen := last[m]
		last[m] = p
		switch {
		case !seen:
			total += cost[m] // the first load, which nothing saves
		case q == p-1: // requested twice in a row: kept for free
		case units[m] == 0:
			// smaller than a unit: the relaxation keeps it for free
		default:
			total += cost[m]
			ivs = append(ivs, interval{from: q + 1, to: p, m: m})
			bigM += cost[m]
		}
	}
	bigM++
	g := newFlowGraph(n + 1)
	var forced int64
	for p, m := range seq {
		s := min(units[m], capUnits)
		g.add(p, p+1, s, -bigM)
		forced += s
		if capUnits > s {
			g.add(p, p+1, capUnits-s, 0)
		}
	}
	for _, iv := range ivs {
		// node p sits just before request p (0-based), so the arc keeps
		// the model over requests from…to−1, those strictly between its two.
		g.add(iv.from, iv.to, units[iv.m], -cost[iv.m]/float64(units[iv.m]))
	}
	_, c := g.minCostFlow(capUnits)
	saving := -(c + bigM*float64(forced))
	return max(total-saving, 0)
}

// sizeAwareBelady is LoadBound.Feasible: it returns the schedule's load
// seconds and loads.
func sizeAwareBelady(seq []int, size []uint64, cost []float64, devices []uint64) (float64, int) {
	never := len(seq)
	next := make([]int, len(seq))
	seen := map[int]int{}
	for i := len(seq) - 1; i >= 0; i-- {
		next[i] = never
		if j, ok := seen[seq[i]]; ok {
			next[i] = j
		}
		seen[seq[i]] = i
	}
	free := slices.Clone(devices)
	where := map[int]int{}   // resident model → device
	nextUse := map[int]int{} // resident model → its next request
	var secs float64
	loads := 0
	for i, m := range seq {
		if _, ok := where[m]; ok {
			nextUse[m] = next[i]
			continue
		}
		loads++
		secs += cost[m]
		// rank: evict first what is never requested again, then the
		// largest distance × size ÷ cost; ties by model index.
		rank := func(v int) float64 {
			if nextUse[v] == never {
				return math.Inf(1)
			}
			return float64(nextUse[v]-i) * float64(size[v]) / math.Max(cost[v], 1e-9)
		}
		bestDev, bestRegret := -1, math.Inf(1)
		var bestVictims []int
		for d := range devices {
			if devices[d] < size[m] {
				continue
			}
			var on []int
			for v, dv := range where {
				if dv == d {
					on = append(on, v)
				}
			}
			slices.SortFunc(on, func(a, b int) int {
				ra, rb := rank(a), rank(b)
				switch {
				case ra > rb:
					return -1
				case ra < rb:
					return 1
				}
				return a - b
			})
			f, regret := free[d], 0.0
			var victims []int
			for _, v := range on {
				if f >= size[m] {
					break
				}
				victims = append(victims, v)
				f += size[v]
				if nextUse[v] != never {
					regret += cost[v] / float64(nextUse[v]-i)
				}
			}
			if regret < bestRegret {
				bestDev, bestRegret, bestVictims = d, regret, victims
			}
		}
		for _, v := range bestVictims {
			free[bestDev] += size[v]
			delete(where, v)
			delete(nextUse, v)
		}
		free[bestDev] -= size[m]
		where[m], nextUse[m] = bestDev, next[i]
	}
	return secs, loads
}
