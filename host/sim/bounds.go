package sim

import "container/heap"

// ColdLoads is what a trace costs a box that holds k models at once (k
// equal-sized slots), with a model loaded on its first request and kept
// until evicted, counted in loads (the first load of each model included):
// the figures a policy's cold loads are read against.
type ColdLoads struct {
	Slots  int `json:"slots"`  // k
	LRU    int `json:"lru"`    // evicting the least recently used model
	Belady int `json:"belady"` // evicting the model whose next request is furthest away: the offline optimum
}

// Bounds replays the model sequence of reqs (in arrival order) through k
// slots under LRU and under Belady's offline optimum (MIN: on a miss with
// every slot full, evict the resident model requested again furthest in
// the future, or never). No online policy has fewer cold loads than
// Belady on the same sequence. k < 1 counts as 1.
func Bounds(reqs []Request, k int) ColdLoads {
	k = max(k, 1)
	seq := make([]string, len(reqs))
	for i, q := range reqs {
		seq[i] = q.Model
	}
	return ColdLoads{Slots: k, LRU: lruLoads(seq, k), Belady: beladyLoads(seq, k)}
}

func lruLoads(seq []string, k int) int {
	lastUse := map[string]int{}
	loads := 0
	for i, m := range seq {
		if _, ok := lastUse[m]; !ok {
			loads++
			if len(lastUse) == k {
				victim, oldest := "", len(seq)
				for name, t := range lastUse {
					if t < oldest || (t == oldest && name < victim) {
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
func beladyLoads(seq []string, k int) int {
	never := len(seq)
	next := make([]int, len(seq))
	seen := map[string]int{}
	for i := len(seq) - 1; i >= 0; i-- {
		if j, ok := seen[seq[i]]; ok {
			next[i] = j
		} else {
			next[i] = never
		}
		seen[seq[i]] = i
	}
	resident := map[string]int{} // model → its next request's position
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
	model string
	at    int
}

// nextHeap is a max-heap by next use; ties by name, so the result does
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
