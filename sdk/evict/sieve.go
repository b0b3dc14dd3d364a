package evict

import (
	"maps"
	"slices"
)

// SIEVE is SIEVE's state over keys of type K (Zhang et al., "SIEVE is
// Simpler than LRU: an Efficient Turn-Key Eviction Algorithm for Web
// Caches", NSDI 2024): one FIFO of the keys held with a visited bit each,
// set when a held key is asked for; to evict, a hand walks from the
// oldest key toward the newest clearing set bits, evicts the first key
// whose bit is clear, and moves on to the next newer key, back to the
// oldest past the newest (the paper's Algorithm 1).
//
// Like S3FIFO it is written once for both of its users: `loadout
// simulate`'s SIEVE anchor feeds it a model sequence (Access), and the
// sieve router feeds it the host's counts at swaps (Hit, Admit, Evicted)
// and reads its eviction order (Order). A visited bit needs only whether
// a held key was asked for, so the counts give the router the anchor's
// state exactly. Not safe for concurrent use.
type SIEVE[K comparable] struct {
	slots   int
	q       []K // oldest first, newest last
	visited map[K]bool
	hand    int // index into q of the next key the hand looks at
}

// NewSIEVE is an empty SIEVE of slots slots (at least 1); SetSlots
// changes it.
func NewSIEVE[K comparable](slots int) *SIEVE[K] {
	return &SIEVE[K]{slots: max(slots, 1), visited: map[K]bool{}}
}

// SetSlots sets how many keys the cache holds (at least 1).
func (c *SIEVE[K]) SetSlots(n int) { c.slots = max(n, 1) }

// Slots is how many keys the cache holds.
func (c *SIEVE[K]) Slots() int { return c.slots }

// Len is how many keys are held.
func (c *SIEVE[K]) Len() int { return len(c.q) }

// Contains reports whether k is held.
func (c *SIEVE[K]) Contains(k K) bool { return slices.Contains(c.q, k) }

// Held calls yield with every key held, oldest first, until it returns
// false.
func (c *SIEVE[K]) Held(yield func(K) bool) {
	for _, k := range c.q {
		if !yield(k) {
			return
		}
	}
}

// Clone is a copy of the cache that changes apart from it.
func (c *SIEVE[K]) Clone() *SIEVE[K] {
	return &SIEVE[K]{slots: c.slots, q: slices.Clone(c.q), visited: maps.Clone(c.visited), hand: c.hand}
}

// Access serves one request for k, evicting as SIEVE does when the cache
// is full, and reports whether it missed: the anchor's step.
func (c *SIEVE[K]) Access(k K) bool {
	if c.Contains(k) {
		c.Hit(k, 1)
		return false
	}
	if len(c.q) >= c.slots {
		c.evict()
	}
	c.Admit(k)
	return true
}

// Hit records n requests for k served while it was held: its visited bit
// is set. A key not held is not counted.
func (c *SIEVE[K]) Hit(k K, n int) {
	if n > 0 && c.Contains(k) {
		c.visited[k] = true
	}
}

// Admit puts k in the cache after a miss, as the newest, its bit clear.
// Making room is the caller's. A key held already is left where it is.
func (c *SIEVE[K]) Admit(k K) {
	if c.Contains(k) {
		return
	}
	c.q = append(c.q, k)
	c.visited[k] = false
}

// Order calls yield with the held keys in the order SIEVE would evict
// them, one eviction after another, until yield returns false or every
// key is out; the cache is not changed.
func (c *SIEVE[K]) Order(yield func(K) bool) {
	sim := c.Clone()
	for len(sim.q) > 0 {
		if !yield(sim.evict()) {
			return
		}
	}
}

// Evicted records that k left the cache. The hand walks as SIEVE's does
// until it evicts k, clearing the bits it passes (k's too, if set: it is
// evicted when the hand comes round to it again); a key with a clear bit
// that it meets first — SIEVE's own victim, busy, so it stays — it passes
// by. A key not held is ignored.
func (c *SIEVE[K]) Evicted(k K) {
	if !c.Contains(k) {
		return
	}
	for {
		if c.hand >= len(c.q) {
			c.hand = 0
		}
		o := c.q[c.hand]
		if o == k && !c.visited[o] {
			c.remove()
			return
		}
		c.visited[o] = false
		c.hand++
	}
}

// evict is one SIEVE eviction; the cache must hold a key.
func (c *SIEVE[K]) evict() K {
	for {
		if c.hand >= len(c.q) {
			c.hand = 0
		}
		o := c.q[c.hand]
		if !c.visited[o] {
			c.remove()
			return o
		}
		c.visited[o] = false
		c.hand++
	}
}

// remove evicts the key under the hand, which moves to the next newer
// key; past the newest it goes back to the oldest (the paper's
// "p ← o.prev", NULL at the head, then the tail), not to the key
// admitted next, which would be SIEVE's next victim before it could be
// asked for again.
func (c *SIEVE[K]) remove() {
	delete(c.visited, c.q[c.hand])
	c.q = slices.Delete(c.q, c.hand, c.hand+1)
	if c.hand >= len(c.q) {
		c.hand = 0
	}
}
