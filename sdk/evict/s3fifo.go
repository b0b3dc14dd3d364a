package evict

import (
	"maps"
	"math"
	"slices"
)

// S3FIFO is S3-FIFO's state over keys of type K (Yang et al., "FIFO queues
// are all you need for cache eviction", SOSP 2023, Algorithm 1): a small
// FIFO S of a tenth of the slots (at least one), a main FIFO M of the
// rest, and a ghost FIFO G of as many keys as M. A key enters S (or M, if
// G remembers it); S's oldest moves to M if it was asked for more than
// once while in S, else leaves to G; M's oldest goes back to M's tail
// while its 2-bit counter, decremented each time, is above 0.
//
// It is written once for both of its users: `loadout simulate`'s S3-FIFO
// anchor feeds it a model sequence one request at a time (Access), and
// the s3fifo router feeds it what it sees of the traffic at swaps (Hit,
// Admit, Evicted) and reads the order in which it would evict (Order),
// since the run loop's victim must be one it may evict now. Not safe for
// concurrent use.
type S3FIFO[K comparable] struct {
	slots   int
	s, m, g []K // oldest first
	freq    map[K]int
}

// NewS3FIFO is an empty S3FIFO of slots slots (at least 1); SetSlots
// changes it.
func NewS3FIFO[K comparable](slots int) *S3FIFO[K] {
	return &S3FIFO[K]{slots: max(slots, 1), freq: map[K]int{}}
}

// SetSlots sets how many keys the cache holds (at least 1), and so the
// sizes of S, M and G. A router learns it from the box: the most models
// that have run at once.
func (c *S3FIFO[K]) SetSlots(n int) { c.slots = max(n, 1) }

// Slots is how many keys the cache holds.
func (c *S3FIFO[K]) Slots() int { return c.slots }

// caps is the sizes of S and M (G's is M's, at least 1).
func (c *S3FIFO[K]) caps() (small, main int) {
	small = max(1, int(math.Round(0.1*float64(c.slots))))
	return small, c.slots - small
}

// Clone is a copy of the cache that changes apart from it.
func (c *S3FIFO[K]) Clone() *S3FIFO[K] {
	return &S3FIFO[K]{slots: c.slots, s: slices.Clone(c.s), m: slices.Clone(c.m), g: slices.Clone(c.g), freq: maps.Clone(c.freq)}
}

// Held calls yield with every key held, S's oldest first, then M's,
// until it returns false.
func (c *S3FIFO[K]) Held(yield func(K) bool) {
	for _, k := range c.s {
		if !yield(k) {
			return
		}
	}
	for _, k := range c.m {
		if !yield(k) {
			return
		}
	}
}

// Contains reports whether k is held (in S or M).
func (c *S3FIFO[K]) Contains(k K) bool { return slices.Contains(c.s, k) || slices.Contains(c.m, k) }

// Len is how many keys are held.
func (c *S3FIFO[K]) Len() int { return len(c.s) + len(c.m) }

// Access serves one request for k, evicting as S3-FIFO does when the
// cache is full, and reports whether it missed: the anchor's step.
func (c *S3FIFO[K]) Access(k K) bool {
	if c.Contains(k) {
		c.Hit(k, 1)
		return false
	}
	for c.Len() >= c.slots && c.evict(func(K) {}) {
	}
	c.Admit(k)
	return true
}

// Hit counts n requests for k served while it was held (its counter
// saturates at 3); a key not held is not counted.
func (c *S3FIFO[K]) Hit(k K, n int) {
	if n > 0 && c.Contains(k) {
		c.freq[k] = min(c.freq[k]+n, 3)
	}
}

// Admit puts k in the cache after a miss, with its counter at 0: into M
// if G remembers it, else into S. Making room is the caller's (Access,
// or the router's evictions reported through Evicted). A key held
// already is left where it is.
func (c *S3FIFO[K]) Admit(k K) {
	if c.Contains(k) {
		return
	}
	c.freq[k] = 0
	if i := slices.Index(c.g, k); i >= 0 {
		c.g = slices.Delete(c.g, i, i+1)
		c.m = append(c.m, k)
		return
	}
	c.s = append(c.s, k)
}

// Order calls yield with the held keys in the order S3-FIFO would evict
// them, one eviction after another, until yield returns false or every
// key is out; the cache is not changed.
func (c *S3FIFO[K]) Order(yield func(K) bool) {
	sim := c.Clone()
	more := true
	for more && sim.Len() > 0 {
		sim.evict(func(k K) { more = more && yield(k) })
	}
}

// Evicted records that k left the cache. S3-FIFO's evictions run until
// one evicts k (moving S's twice-asked keys to M and spending M's
// counters on the way, as they would have), so the state is the one the
// rule would have after evicting k; a key they evict first was not the
// caller's victim (the router's first choice was busy) and is held again
// at M's tail. A key they never reach is taken out where it is, to G if
// it was in S. A key not held is ignored.
func (c *S3FIFO[K]) Evicted(k K) {
	if !c.Contains(k) {
		return
	}
	var passed []K
	for found := false; !found && c.Contains(k); {
		if !c.evict(func(v K) {
			if v == k {
				found = true
			} else {
				passed = append(passed, v)
			}
		}) {
			break
		}
	}
	for _, v := range passed { // held still: not a ghost
		if i := slices.Index(c.g, v); i >= 0 {
			c.g = slices.Delete(c.g, i, i+1)
		}
	}
	c.m = append(c.m, passed...)
	if i := slices.Index(c.s, k); i >= 0 {
		c.s = slices.Delete(c.s, i, i+1)
		c.ghost(k)
	} else if i := slices.Index(c.m, k); i >= 0 {
		c.m = slices.Delete(c.m, i, i+1)
	}
	delete(c.freq, k)
}

// ghost appends k to G, dropping G's oldest beyond M's size.
func (c *S3FIFO[K]) ghost(k K) {
	_, mCap := c.caps()
	c.g = append(c.g, k)
	if len(c.g) > max(mCap, 1) {
		c.g = c.g[1:]
	}
}

// evict is one S3-FIFO eviction (Algorithm 1's EVICT), calling out with
// the key it evicts; false when it evicted nothing.
func (c *S3FIFO[K]) evict(out func(K)) bool {
	small, _ := c.caps()
	if len(c.s) >= small || len(c.m) == 0 {
		return c.evictS(out)
	}
	return c.evictM(out)
}

// evictS evicts from S: its oldest key leaves to G unless it was asked
// for more than once, which moves it to M and goes on to the next — or,
// when M is then over its size, evicts from M instead. The paper's EVICTS
// goes on in S after that, so one call can evict two keys where one was
// needed (with 15 slots or more, when S holds two or more); here a call
// evicts one, as a router does (it evicts what the target needs), so the
// anchor and the router follow one rule.
func (c *S3FIFO[K]) evictS(out func(K)) bool {
	_, mCap := c.caps()
	for len(c.s) > 0 {
		t := c.s[0]
		c.s = c.s[1:]
		if c.freq[t] > 1 {
			c.m = append(c.m, t)
			if len(c.m) > mCap {
				return c.evictM(out)
			}
			continue
		}
		c.ghost(t)
		out(t)
		return true
	}
	return false
}

// evictM evicts from M: its oldest key goes back to the tail, its counter
// decremented, while the counter is above 0.
func (c *S3FIFO[K]) evictM(out func(K)) bool {
	for len(c.m) > 0 {
		t := c.m[0]
		c.m = c.m[1:]
		if c.freq[t] > 0 {
			c.freq[t]--
			c.m = append(c.m, t)
			continue
		}
		out(t)
		return true
	}
	return false
}
