package evict

import (
	"cmp"
	"maps"
	"math"
	"slices"
)

// GDSF is Greedy-Dual-Size-Frequency's state over keys of type K
// (Cherkasova, "Improving WWW Proxies Performance with
// Greedy-Dual-Size-Frequency Caching Policy", HP Labs HPL-98-69, 1998):
// each held key has a priority H = L + F·cost, F its requests since it was
// admitted and cost what a miss on it costs per unit of room it takes
// (Cost's answer: load seconds per byte for a router, load seconds for
// the anchor's equal slots); the key of least H is evicted (ties to the
// one asked for least recently), and L, the inflation that ages every
// key held, becomes its H. On equal costs it is LFU with dynamic aging,
// and ties are common, so two H within a billionth of each other are
// equal: sums of the same costs in another order are.
//
// It is written once for both of its users, as S3FIFO is: `loadout
// simulate`'s GDSF anchor feeds it a model sequence one request at a time
// (Access), and the gdsf router feeds it the host's counts at swaps (Hit,
// Admit, Evicted) and reads its eviction order (Order). H depends only on
// how many requests a key had since its admission and on L, which moves
// only at evictions, so the counts give the router the anchor's H
// exactly; the tie-break needs the order of the last requests, which the
// router gets by hitting keys in the order the host last used them. Not
// safe for concurrent use.
type GDSF[K comparable] struct {
	slots int
	cost  func(K) float64
	l     float64
	h     map[K]float64
	f     map[K]int
	last  map[K]uint64 // tick of the key's last request
	tick  uint64
}

// NewGDSF is an empty GDSF of slots slots (at least 1) that weighs a key
// by cost(key) (nil: 1 for every key, LFU with dynamic aging); SetSlots
// and SetCost change them.
func NewGDSF[K comparable](slots int, cost func(K) float64) *GDSF[K] {
	return &GDSF[K]{slots: max(slots, 1), cost: cost, h: map[K]float64{}, f: map[K]int{}, last: map[K]uint64{}}
}

// SetSlots sets how many keys the cache holds (at least 1).
func (c *GDSF[K]) SetSlots(n int) { c.slots = max(n, 1) }

// Slots is how many keys the cache holds.
func (c *GDSF[K]) Slots() int { return c.slots }

// SetCost sets what a miss on each key costs per unit of room (nil: 1).
// Keys held keep the H they have until they are asked for again.
func (c *GDSF[K]) SetCost(cost func(K) float64) { c.cost = cost }

// Len is how many keys are held.
func (c *GDSF[K]) Len() int { return len(c.h) }

// Contains reports whether k is held.
func (c *GDSF[K]) Contains(k K) bool { _, ok := c.h[k]; return ok }

// Held calls yield with every key held, in eviction order, until it
// returns false.
func (c *GDSF[K]) Held(yield func(K) bool) { c.Order(yield) }

// Clone is a copy of the cache that changes apart from it (the cost
// function is shared).
func (c *GDSF[K]) Clone() *GDSF[K] {
	return &GDSF[K]{slots: c.slots, cost: c.cost, l: c.l, h: maps.Clone(c.h), f: maps.Clone(c.f), last: maps.Clone(c.last), tick: c.tick}
}

// Access serves one request for k, evicting the key of least H when the
// cache is full, and reports whether it missed: the anchor's step.
func (c *GDSF[K]) Access(k K) bool {
	if c.Contains(k) {
		c.Hit(k, 1)
		return false
	}
	if c.Len() >= c.slots {
		c.Order(func(v K) bool {
			c.Evicted(v)
			return false
		})
	}
	c.Admit(k)
	return true
}

// Hit counts n requests for k served while it was held: F grows by n, H
// is L + F·cost, and k becomes the most recently asked for. A key not
// held is not counted.
func (c *GDSF[K]) Hit(k K, n int) {
	if n > 0 && c.Contains(k) {
		c.f[k] += n
		c.touch(k)
	}
}

// Admit puts k in the cache after a miss, with F at 1 (the request that
// missed). Making room is the caller's (Access, or the router's
// evictions reported through Evicted). A key held already is left as it
// is.
func (c *GDSF[K]) Admit(k K) {
	if c.Contains(k) {
		return
	}
	c.f[k] = 1
	c.touch(k)
}

// touch sets k's H from its F and the present L, and its recency.
func (c *GDSF[K]) touch(k K) {
	cost := 1.0
	if c.cost != nil {
		cost = c.cost(k)
	}
	c.h[k] = c.l + float64(c.f[k])*cost
	c.tick++
	c.last[k] = c.tick
}

// Order calls yield with the held keys in the order GDSF would evict
// them (least H first, ties to the least recently asked for), until
// yield returns false; the cache is not changed.
func (c *GDSF[K]) Order(yield func(K) bool) {
	keys := slices.Collect(maps.Keys(c.h))
	slices.SortFunc(keys, func(a, b K) int {
		ha, hb := c.h[a], c.h[b]
		if math.Abs(ha-hb) > 1e-9*max(math.Abs(ha), math.Abs(hb)) {
			return cmp.Compare(ha, hb)
		}
		return cmp.Compare(c.last[a], c.last[b])
	})
	for _, k := range keys {
		if !yield(k) {
			return
		}
	}
}

// Evicted records that k left the cache, and L becomes the least H held
// (k's, when k was GDSF's own choice): a key evicted out of GDSF's order,
// because the router's first choice was busy, ages the others as much as
// that choice would have, no more. A key not held is ignored.
func (c *GDSF[K]) Evicted(k K) {
	if !c.Contains(k) {
		return
	}
	c.Order(func(v K) bool {
		c.l = max(c.l, c.h[v])
		return false
	})
	delete(c.h, k)
	delete(c.f, k)
	delete(c.last, k)
}
