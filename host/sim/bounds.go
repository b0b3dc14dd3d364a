package sim

import (
	"container/heap"
	"slices"
)

// ColdLoads is what a trace costs a box that holds k models at once (k
// equal-sized slots), with a model loaded on its first request and kept
// until evicted, counted in loads (the first load of each model included):
// the figures a policy's cold loads are read against.
type ColdLoads struct {
	Slots  int `json:"slots"`  // k
	LRU    int `json:"lru"`    // evicting the least recently used model
	Belady int `json:"belady"` // evicting the model whose next request is furthest away: the offline optimum
	// Anchors are the classical online rules on the same sequence, in
	// the order of the Anchor* names: the figures a new policy must beat.
	Anchors []Anchor `json:"anchors"`
}

// Bounds replays the model sequence of reqs (in arrival order) through k
// slots under LRU, Belady's offline optimum (MIN: on a miss with every
// slot full, evict the resident model requested again furthest in the
// future, or never) and the classical anchors. No online policy has fewer
// cold loads than Belady on the same sequence. loadS is each model's load
// time, seconds (GDSF weighs by it, and Anchor.LoadS sums it); a model
// missing from it counts 1. k < 1 counts as 1.
func Bounds(reqs []Request, k int, loadS map[string]float64) ColdLoads {
	k = max(k, 1)
	seq, at, names := denseSeq(reqs)
	cost := make([]float64, len(names))
	for i, n := range names {
		cost[i] = 1
		if c, ok := loadS[n]; ok {
			cost[i] = c
		}
	}
	return ColdLoads{Slots: k, LRU: lruLoads(seq, k), Belady: beladyLoads(seq, k), Anchors: anchors(seq, at, k, cost)}
}

// denseSeq is reqs' model sequence as indices into names (sorted), with
// the arrivals.
func denseSeq(reqs []Request) (seq []int, at []float64, names []string) {
	idx := map[string]int{}
	for _, q := range reqs {
		idx[q.Model] = 0
	}
	for n := range idx {
		names = append(names, n)
	}
	slices.Sort(names)
	for i, n := range names {
		idx[n] = i
	}
	seq, at = make([]int, len(reqs)), make([]float64, len(reqs))
	for i, q := range reqs {
		seq[i], at[i] = idx[q.Model], q.Arrival
	}
	return seq, at, names
}

// BoxBounds are the limits of reqs on a box: devices (bytes each) and the
// models' sizes (Model.Config.VRAM) and load times (Model.Load). Cold
// loads (LRU, Belady, the anchors) when every model has the same size, K
// slots being how many fit, device by device; a LoadBound when sizes or
// load times differ. Either is nil where it does not apply (no devices,
// a model of unknown size, nothing fits).
func BoxBounds(reqs []Request, models map[string]Model, devices []uint64) (*ColdLoads, *LoadBound) {
	if len(devices) == 0 || len(models) == 0 {
		return nil, nil
	}
	var size uint64
	equalSize, equalLoad := true, true
	var load0 float64 = -1
	loadS := map[string]float64{}
	for name, m := range models {
		if m.Config.VRAM == 0 {
			return nil, nil
		}
		if size != 0 && m.Config.VRAM != size {
			equalSize = false
		}
		size = m.Config.VRAM
		loadS[name] = m.Load.Seconds()
		if load0 >= 0 && loadS[name] != load0 {
			equalLoad = false
		}
		load0 = loadS[name]
	}
	var cl *ColdLoads
	k := 0
	if equalSize {
		for _, d := range devices {
			k += int(d / size)
		}
		if k == 0 {
			return nil, nil
		}
		b := Bounds(reqs, k, loadS)
		cl = &b
	}
	if equalSize && equalLoad {
		return cl, nil
	}
	seq, _, names := denseSeq(reqs)
	sizes, cost := make([]uint64, len(names)), make([]float64, len(names))
	for i, n := range names {
		sizes[i], cost[i] = models[n].Config.VRAM, loadS[n]
	}
	slots := 0
	if equalSize {
		slots = k
	}
	lb := loadBounds(seq, sizes, cost, devices, slots)
	lb.loadS = loadS
	return cl, lb
}

func lruLoads(seq []int, k int) int {
	lastUse := map[int]int{}
	loads := 0
	for i, m := range seq {
		if _, ok := lastUse[m]; !ok {
			loads++
			if len(lastUse) == k {
				victim, oldest := -1, len(seq)
				for name, t := range lastUse {
					if t < oldest {
						victim, oldest = name, t
					}
				}
				delete(lastUse, victim)
			}
		}
		lastUse[m] = i
	}
	return loads
}

// beladyLoads is MIN in O(n log n): each resident model sits in a max-heap
// keyed by its next request's position; a stale entry (the model was
// requested since, or evicted) is skipped when popped.
func beladyLoads(seq []int, k int) int {
	never := len(seq)
	next := make([]int, len(seq))
	seen := map[int]int{}
	for i := len(seq) - 1; i >= 0; i-- {
		if j, ok := seen[seq[i]]; ok {
			next[i] = j
		} else {
			next[i] = never
		}
		seen[seq[i]] = i
	}
	resident := map[int]int{} // model → its next request's position
	h := &nextHeap{}
	loads := 0
	for i, m := range seq {
		if _, ok := resident[m]; !ok {
			loads++
			if len(resident) == k {
				for {
					e := heap.Pop(h).(nextUse)
					if at, ok := resident[e.model]; ok && at == e.at {
						delete(resident, e.model)
						break
					}
				}
			}
		}
		resident[m] = next[i]
		heap.Push(h, nextUse{model: m, at: next[i]})
	}
	return loads
}

type nextUse struct {
	model int
	at    int
}

// nextHeap is a max-heap by next use; ties by model, so the result does
// not depend on map order.
type nextHeap []nextUse

func (h nextHeap) Len() int { return len(h) }
func (h nextHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at > h[j].at
	}
	return h[i].model < h[j].model
}
func (h nextHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *nextHeap) Push(x any)   { *h = append(*h, x.(nextUse)) }
func (h *nextHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
