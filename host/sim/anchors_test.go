package sim

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// ids turns "a b c" into dense indices, a = 0, with arrivals one second
// apart.
func ids(s string) ([]int, []float64) {
	var seq []int
	var at []float64
	for i, f := range strings.Fields(s) {
		seq = append(seq, int(f[0]-'a'))
		at = append(at, float64(i))
	}
	return seq, at
}

func replayCache(c slotCache, seq []int, at []float64) (misses int) {
	for i, m := range seq {
		if c.access(m, i, at[i]) {
			misses++
		}
	}
	return misses
}

func names(ms []int) string {
	var b strings.Builder
	for _, m := range ms {
		b.WriteByte(byte('a' + m))
	}
	return b.String()
}

// Each anchor on a sequence worked by hand (the comments show the work),
// where it differs from LRU.
func TestAnchors_HandWorked(t *testing.T) {
	cases := []struct {
		name     string
		c        slotCache
		seq      string
		misses   int
		resident string
	}{
		// a a b: a has two requests, b one (infinite distance) → c evicts
		// b; a hit; b: a's 2nd-last request is 1, c has one → evict c.
		{"LRU-2 keeps the twice-used", newLRUK(2, 2), "a a b c a b", 4, "ab"},
		{"LRU on the same", newLRUK(2, 1), "a a b c a b", 5, "ab"},
		// a enters T1, its hit moves it to T2; the scan b c d e churns T1
		// through B1 while a stays in T2.
		{"ARC resists a scan", newARC(2), "a a b c d e a", 5, "ae"},
		{"LRU loses to the scan", newLRUK(2, 1), "a a b c d e a", 6, "ae"},
		// q=[a b c], a visited; d: hand clears a, evicts b; b: hand at c,
		// evicts c; e: hand at d, evicts d → a survives on one bit.
		{"SIEVE", newSIEVE(3), "a b c a d b e", 6, "abe"},
		{"LRU on SIEVE's", newLRUK(3, 1), "a b c a d b e", 6, "bde"},
		// S fills to [a b c d]; a hit (freq 1, not > 1); e: S's tail a
		// leaves to G; a: S's tail b leaves to G, a comes back into M.
		{"S3-FIFO readmits from the ghost", newS3FIFO(4), "a b c d a e a", 6, "acde"},
	}
	for _, tc := range cases {
		seq, at := ids(tc.seq)
		got := replayCache(tc.c, seq, at)
		if res := names(tc.c.resident()); got != tc.misses || res != tc.resident {
			t.Errorf("%s: %q: %d misses holding %q, want %d holding %q", tc.name, tc.seq, got, res, tc.misses, tc.resident)
		}
	}
}

// ARC's adaptation, step by step on a b a c b with 2 slots: b goes to
// B1 when c arrives; its return (a hit in B1) raises p to 1 and sends
// T2's a to B2.
func TestARC_GhostHitAdaptsP(t *testing.T) {
	a := newARC(2)
	seq, at := ids("a b a c b")
	if got := replayCache(a, seq, at); got != 4 {
		t.Fatalf("misses %d, want 4", got)
	}
	if a.p != 1 || names(a.t1) != "c" || names(a.t2) != "b" || names(a.b1) != "" || names(a.b2) != "a" {
		t.Fatalf("p=%v T1=%s T2=%s B1=%s B2=%s, want p=1 T1=c T2=b B1= B2=a", a.p, names(a.t1), names(a.t2), names(a.b1), names(a.b2))
	}
}

// The decayed LFU forgets: three requests to a outweigh b's one a second
// later, but not ten thousand seconds later (2^(−10000/600) · 3 < 1).
func TestDecayLFU_Forgets(t *testing.T) {
	for _, tc := range []struct {
		gap  float64
		kept string
	}{{1, "ac"}, {10000, "bc"}} {
		c := newDecayLFU(2, DecayHalfLife)
		at := []float64{0, 1, 2, 2 + tc.gap, 3 + tc.gap}
		seq := []int{0, 0, 0, 1, 2}
		replayCache(c, seq, at)
		if got := names(c.resident()); got != tc.kept {
			t.Errorf("gap %v s: holds %q, want %q", tc.gap, got, tc.kept)
		}
	}
}

// GDSF keeps the model that is expensive to load: a (10 s) outlives b and
// c (1 s each), which LRU would have kept.
func TestGDSF_KeepsCostly(t *testing.T) {
	c := newGDSF(2, []float64{10, 1, 1})
	seq, at := ids("a b c b")
	if got := replayCache(c, seq, at); got != 4 || names(c.resident()) != "ab" {
		t.Fatalf("%d misses holding %q, want 4 holding ab", got, names(c.resident()))
	}
}

// LeCaR's regret: a miss on a model LRU evicted at the same request
// rewards LFU by e^λ (d⁰ = 1), so w_LRU = 0.5 / (0.5 + 0.5·e^0.45).
func TestLeCaR_RegretShiftsWeight(t *testing.T) {
	c := newLeCaR(2, 1)
	c.hLRU = []ghost{{m: 0, at: 5}}
	c.access(0, 5, 5)
	if want := 1 / (1 + math.Exp(0.45)); math.Abs(c.wLRU-want) > 1e-12 || len(c.hLRU) != 0 {
		t.Fatalf("w_LRU %v, history %v; want %v, empty", c.wLRU, c.hLRU, want)
	}
}

// LeCaR as its authors' code runs it: a model back from a history
// keeps its count (plus this request); where LRU and LFU choose the same
// victim it goes to neither history; regrets never take a weight past
// 0.99.
func TestLeCaR_AsTheAuthorsCodeRunsIt(t *testing.T) {
	c := newLeCaR(2, 1)
	c.hLRU = []ghost{{m: 0, at: 5, freq: 3}}
	c.access(0, 6, 6)
	if c.freq[0] != 4 {
		t.Errorf("a model back from LRU's history with 3 requests has count %d, want 4", c.freq[0])
	}
	// a b c on two slots: a is both the least recent and (tied on one
	// request, the least recent) the least used: evicted, remembered by
	// neither expert.
	c = newLeCaR(2, 1)
	for i, m := range []int{0, 1, 2} {
		c.access(m, i, float64(i))
	}
	if c.res[0] || len(c.hLRU)+len(c.hLFU) != 0 {
		t.Errorf("resident %v, histories %v %v; want a evicted into neither history", c.resident(), c.hLRU, c.hLFU)
	}
	for i := range 50 {
		c.reward(false, i, i) // LRU's victim back at once: LFU is rewarded
	}
	if c.wLRU < 0.01 || c.wLRU > 0.011 {
		t.Errorf("after 50 regrets of LRU, w_LRU = %v, want the floor 0.01", c.wLRU)
	}
}

// Known properties on random sequences: LRU-1 is LRU; Belady is below
// every anchor; none loads a model fewer times than there are models nor
// more than there are requests; each holds at most k models, the one just
// requested among them; LeCaR is a function of its seed.
func TestAnchors_Properties(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 300 {
		n, models, k := r.IntN(300), 1+r.IntN(10), 1+r.IntN(6)
		seq, at := make([]int, n), make([]float64, n)
		cost := make([]float64, models)
		for i := range cost {
			cost[i] = 1 + float64(r.IntN(20))
		}
		distinct := map[int]bool{}
		for i := range seq {
			seq[i], at[i] = r.IntN(models), float64(i)*r.Float64()*100
			distinct[seq[i]] = true
		}
		slices.Sort(at)
		belady, lru := beladyLoads(seq, k), lruLoads(seq, k)
		if got := replayCache(newLRUK(k, 1), seq, at); got != lru {
			t.Fatalf("LRU-1 %d, LRU %d on %v k=%d", got, lru, seq, k)
		}
		for _, a := range newAnchors(k, models, cost) {
			misses := 0
			for i, m := range seq {
				if a.c.access(m, i, at[i]) {
					misses++
				}
				res := a.c.resident()
				if len(res) > k || !slices.Contains(res, m) {
					t.Fatalf("%s at %d holds %v after %d, k=%d", a.name, i, res, m, k)
				}
			}
			if misses < belady || misses < len(distinct) || misses > n {
				t.Fatalf("%s: %d misses, Belady %d, %d models, %d requests", a.name, misses, belady, len(distinct), n)
			}
		}
		if x, y := anchors(seq, at, k, cost), anchors(seq, at, k, cost); !slices.Equal(x, y) {
			t.Fatalf("not deterministic: %v, %v", x, y)
		}
	}
}
