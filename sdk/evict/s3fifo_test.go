package evict

import (
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

// What a router reads (Order's first key) and records (Evicted) is what
// the anchor does (Access): on random sequences over slot counts from 1
// to 12, a cache driven by Order and Evicted, as the s3fifo router drives
// it when its first choice is always free, holds the same keys as one
// driven by Access after every request, and misses on the same requests.
func TestS3FIFO_OrderAndEvictedFollowAccess(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for slots := 1; slots <= 40; slots++ {
		anchor, router := NewS3FIFO[int](slots), NewS3FIFO[int](slots)
		for i := range 3000 {
			k := int(r.ExpFloat64() * float64(slots))
			miss := anchor.Access(k)
			if router.Contains(k) == miss {
				t.Fatalf("slots %d, request %d (key %d): the anchor missed=%v, the router holds it=%v", slots, i, k, miss, router.Contains(k))
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
			a, b := held(anchor), held(router)
			if !slices.Equal(a, b) {
				t.Fatalf("slots %d, request %d (key %d): the anchor holds %v, the router %v", slots, i, k, a, b)
			}
		}
	}
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
	c.Evicted("zz") // not held: nothing happens
	if c.Len() != 3 {
		t.Errorf("evicting a key not held changed the cache: %v", held(c))
	}
}

func held[K int | string](c *S3FIFO[K]) []K {
	var out []K
	c.Order(func(k K) bool { out = append(out, k); return true })
	slices.Sort(out)
	return out
}
