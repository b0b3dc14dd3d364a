package evict

import (
	"container/list"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// S3-FIFO promotes from S to M a key asked for more than once while in
// S: with 10 slots S is 1, so a, asked for three times, moves to M when S
// must evict, and the one-hit b, c … go to G.
func TestS3FIFO_PromotesRepeated(t *testing.T) {
	c := NewS3FIFO[string](10)
	for _, k := range strings.Fields("a a a b c d e f g h i j k") {
		c.Access(k)
	}
	if !slices.Contains(c.m, "a") || slices.Contains(c.s, "a") || !slices.Contains(c.g, "b") {
		t.Fatalf("S=%v M=%v G=%v: want a in M, b in G", c.s, c.m, c.g)
	}
	// b is remembered by G: asked for again it goes straight to M.
	c.Access("b")
	if !slices.Contains(c.m, "b") || slices.Contains(c.g, "b") {
		t.Errorf("after b came back: S=%v M=%v G=%v, want b in M and out of G", c.s, c.m, c.g)
	}
}

// cache is what the equivalence test drives: S3FIFO, SIEVE and GDSF.
type cache interface {
	Access(int) bool
	Hit(int, int)
	Admit(int)
	Evicted(int)
	Contains(int) bool
	Len() int
	Order(func(int) bool)
}

// What a router reads (Order's first key) and records (Evicted) is what
// the anchor does (Access): on random sequences over slot counts from 1
// to 40, a cache driven by Order and Evicted, as the s3fifo, sieve and
// gdsf routers drive theirs when their first choice is always free, holds the
// same keys as one driven by Access after every request, and misses on
// the same requests.
func TestCaches_OrderAndEvictedFollowAccess(t *testing.T) {
	for _, rule := range []struct {
		name string
		make func(int) cache
	}{
		{"S3-FIFO", func(n int) cache { return NewS3FIFO[int](n) }},
		{"SIEVE", func(n int) cache { return NewSIEVE[int](n) }},
		{"GDSF", func(n int) cache { return NewGDSF(n, func(k int) float64 { return float64(1 + k%3) }) }},
	} {
		r := rand.New(rand.NewPCG(1, 2))
		for slots := 1; slots <= 40; slots++ {
			anchor, router := rule.make(slots), rule.make(slots)
			for i := range 3000 {
				k := int(r.ExpFloat64() * float64(slots))
				miss := anchor.Access(k)
				if router.Contains(k) == miss {
					t.Fatalf("%s, slots %d, request %d (key %d): the anchor missed=%v, the router holds it=%v", rule.name, slots, i, k, miss, router.Contains(k))
				}
				if !miss {
					router.Hit(k, 1)
					continue
				}
				for router.Len() >= slots {
					var first int
					router.Order(func(v int) bool { first = v; return false })
					router.Evicted(first)
				}
				router.Admit(k)
				if a, b := keys(anchor), keys(router); !slices.Equal(a, b) {
					t.Fatalf("%s, slots %d, request %d (key %d): the anchor holds %v, the router %v", rule.name, slots, i, k, a, b)
				}
			}
		}
	}
}

func keys(c cache) []int {
	var out []int
	c.Order(func(k int) bool { out = append(out, k); return true })
	slices.Sort(out)
	return out
}

// A key evicted out of S3-FIFO's order (the router's first choice was
// busy) leaves; the keys before it stay held, and Order no longer names it.
func TestS3FIFO_EvictedOutOfOrder(t *testing.T) {
	c := NewS3FIFO[string](4)
	for _, k := range strings.Fields("a b c d") {
		c.Access(k)
	}
	var order []string
	c.Order(func(k string) bool { order = append(order, k); return true })
	if len(order) != 4 {
		t.Fatalf("order %v: want all four keys", order)
	}
	last := order[len(order)-1]
	c.Evicted(last)
	if c.Contains(last) || c.Len() != 3 {
		t.Fatalf("after evicting %s out of order: holds %v", last, held(c))
	}
	for _, k := range order[:3] {
		if !c.Contains(k) {
			t.Errorf("%s, before %s in the order, is no longer held", k, last)
		}
	}
	// A key the eviction passed on its way (S's one-hit oldest, before
	// the victim) is held again, and not remembered by G as evicted.
	d := NewS3FIFO[string](3)
	for _, k := range strings.Fields("a b c") {
		d.Access(k)
	}
	d.Evicted("b")
	if !d.Contains("a") || d.Contains("b") || slices.Contains(d.g, "a") || !slices.Contains(d.g, "b") {
		t.Errorf("after evicting b past a: S=%v M=%v G=%v, want a held and not in G, b in G", d.s, d.m, d.g)
	}
	c.Evicted("zz") // not held: nothing happens
	if c.Len() != 3 {
		t.Errorf("evicting a key not held changed the cache: %v", held(c))
	}
}

func held[K int | string](c interface{ Order(func(K) bool) }) []K {
	var out []K
	c.Order(func(k K) bool { out = append(out, k); return true })
	slices.Sort(out)
	return out
}

// SIEVE keeps a key asked for again: with three slots a, b, c, a asked
// for again, d evicts b (the hand passes a, clearing its bit); e then
// evicts c, where the hand stopped; from there d, e and then a go.
func TestSIEVE_KeepsVisited(t *testing.T) {
	c := NewSIEVE[string](3)
	for _, k := range strings.Fields("a b c a d") {
		c.Access(k)
	}
	if c.Contains("b") || !c.Contains("a") {
		t.Fatalf("after a b c a d: holds %v, want b evicted and a kept", held(c))
	}
	c.Access("e")
	if c.Contains("c") || !c.Contains("a") {
		t.Fatalf("after e: holds %v, want c evicted and a kept", held(c))
	}
	var order []string
	c.Order(func(k string) bool { order = append(order, k); return true })
	if !slices.Equal(order, []string{"d", "e", "a"}) {
		t.Errorf("eviction order %v, want [d e a] (the hand on d, a's bit cleared)", order)
	}
}

// SIEVE's hand, having evicted the newest key, goes back to the oldest
// (the paper's "p ← o.prev", NULL past the head, then the tail), not to
// the key admitted next: on two slots, a b b c d e evicts a (for c), c
// (for d: the hand passes b, clearing its bit, and stops on the newest),
// then b for e — the oldest, its bit cleared — and keeps d.
func TestSIEVE_HandWrapsAfterEvictingTheNewest(t *testing.T) {
	c := NewSIEVE[string](2)
	var missed []string
	for _, k := range strings.Fields("a b b c d e d") {
		if c.Access(k) {
			missed = append(missed, k)
		}
	}
	if !slices.Equal(missed, strings.Fields("a b c d e")) || !c.Contains("d") || !c.Contains("e") {
		t.Errorf("missed %v and holds %v; want misses [a b c d e] and d and e held", missed, held(c))
	}
}

// paperSIEVE is SIEVE as the paper's Algorithm 1 writes it, on a linked
// list (front: the head, the newest; back: the tail, the oldest) with a
// hand that is an element or nil: the reference SIEVE is checked
// against.
type paperSIEVE struct {
	slots   int
	l       *list.List
	at      map[int]*list.Element
	visited map[int]bool
	hand    *list.Element
}

func (p *paperSIEVE) access(x int) (miss bool) {
	if _, ok := p.at[x]; ok {
		p.visited[x] = true
		return false
	}
	if p.l.Len() == p.slots {
		o := p.hand
		if o == nil {
			o = p.l.Back()
		}
		for p.visited[o.Value.(int)] {
			p.visited[o.Value.(int)] = false
			if o = o.Prev(); o == nil {
				o = p.l.Back()
			}
		}
		p.hand = o.Prev()
		delete(p.at, o.Value.(int))
		delete(p.visited, o.Value.(int))
		p.l.Remove(o)
	}
	p.at[x] = p.l.PushFront(x)
	p.visited[x] = false
	return true
}

// SIEVE misses where the paper's does: random sequences over 1 to 20
// slots, skewed so that keys come back.
func TestSIEVE_MatchesThePaper(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for slots := 1; slots <= 20; slots++ {
		c := NewSIEVE[int](slots)
		p := &paperSIEVE{slots: slots, l: list.New(), at: map[int]*list.Element{}, visited: map[int]bool{}}
		for i := range 5000 {
			k := int(r.ExpFloat64() * float64(slots))
			if got, want := c.Access(k), p.access(k); got != want {
				t.Fatalf("slots %d, request %d (key %d): missed=%v, the paper's SIEVE missed=%v", slots, i, k, got, want)
			}
		}
	}
}

// GDSF keeps the model that is expensive to load: a (10 s) outlives b and
// c (1 s each), which LRU would have kept, and evicting c (H = L + 1·1 =
// 2, after b's eviction set L to 1) ages the rest to L = 2.
func TestGDSF_KeepsCostly(t *testing.T) {
	cost := map[string]float64{"a": 10, "b": 1, "c": 1}
	c := NewGDSF(2, func(k string) float64 { return cost[k] })
	misses := 0
	for _, k := range strings.Fields("a b c b") {
		if c.Access(k) {
			misses++
		}
	}
	if misses != 4 || !c.Contains("a") || !c.Contains("b") {
		t.Fatalf("%d misses holding %v, want 4 holding a and b", misses, c.h)
	}
	if c.l != 2 {
		t.Fatalf("L = %v, want 2 (c's H when evicted)", c.l)
	}
}

// A key evicted out of GDSF's order (the router's first choice was busy)
// ages the others only as GDSF's own choice would have: L becomes the
// least H held, not the victim's larger one.
func TestGDSF_EvictedOutOfOrder(t *testing.T) {
	c := NewGDSF[string](3, nil)
	for _, k := range strings.Fields("a b b b c c") {
		c.Access(k)
	}
	c.Evicted("b") // H 3; a's is 1
	if c.l != 1 || c.Contains("b") || !c.Contains("a") {
		t.Fatalf("after evicting b: L = %v, held %v; want L 1, a and c held", c.l, c.h)
	}
	var order []string
	c.Order(func(k string) bool { order = append(order, k); return true })
	if !slices.Equal(order, []string{"a", "c"}) {
		t.Fatalf("order %v, want [a c]", order)
	}
}
