package sim

import (
	"github.com/loadout-dev/loadout/sdk/evict"

	"math"
	"math/rand/v2"
	"slices"
)

// Anchor is one classical online eviction rule's cost on a trace's model
// sequence for k equal slots (ColdLoads.Slots), requests served one at a
// time in arrival order, a model loaded on a miss and kept until evicted.
type Anchor struct {
	Name      string  `json:"name"`
	ColdLoads int     `json:"cold_loads"` // misses, first loads included
	LoadS     float64 `json:"load_s"`     // the misses' load time, seconds (1 per load where load times are unknown)
}

// DecayHalfLife is the half-life, in trace seconds, of the decayed LFU
// anchor's request counts: a request ten minutes ago counts half as much
// as one now.
const DecayHalfLife = 600.0

// Anchor names, in the order ColdLoads.Anchors lists them.
const (
	AnchorLRU    = "LRU"
	AnchorLFU    = "LFU-decay"
	AnchorLRU2   = "LRU-2"
	AnchorARC    = "ARC"
	AnchorS3FIFO = "S3-FIFO"
	AnchorSIEVE  = "SIEVE"
	AnchorLeCaR  = "LeCaR"
	AnchorGDSF   = "GDSF"
)

// AnchorRouters are the anchors whose rule is a built-in router too, and
// that router: the rule on the run loop's terms (its victim may be busy,
// requests overlap), where the anchor's figure is on the model
// sequence's. On a sequence replay (`simulate --sequence`) each router
// makes its anchor's cold loads exactly (cmd/loadout's
// TestSimulate_AnchorRoutersMatchTheirAnchors). prioritylru is LRU's
// (ollama is too, without priorities).
var AnchorRouters = []struct{ Anchor, Router string }{
	{AnchorLRU, "prioritylru"},
	{AnchorS3FIFO, "s3fifo"},
	{AnchorSIEVE, "sieve"},
	{AnchorGDSF, "gdsf"},
}

// slotCache is an online eviction rule over k equal slots. access serves
// model m (a dense index) at position i of the sequence and time t
// (seconds) and says whether it missed; resident lists what it holds.
type slotCache interface {
	access(m, i int, t float64) (miss bool)
	resident() []int
}

// newAnchors are the classical rules for k slots; cost[m] is model m's
// load time (GDSF weighs by it; the others ignore it). Deterministic:
// LeCaR's coin is seeded.
func newAnchors(k, models int, cost []float64) []struct {
	name string
	c    slotCache
} {
	return []struct {
		name string
		c    slotCache
	}{
		{AnchorLRU, newLRUK(k, 1)},
		{AnchorLFU, newDecayLFU(k, DecayHalfLife)},
		{AnchorLRU2, newLRUK(k, 2)},
		{AnchorARC, newARC(k)},
		{AnchorS3FIFO, newS3FIFO(k)},
		{AnchorSIEVE, newSIEVE(k)},
		{AnchorLeCaR, newLeCaR(k, 1)},
		{AnchorGDSF, newGDSF(k, cost)},
	}
}

// anchors replays seq (model indices, arrivals at[i]) through every
// classical rule.
func anchors(seq []int, at []float64, k int, cost []float64) []Anchor {
	var out []Anchor
	for _, a := range newAnchors(k, len(cost), cost) {
		r := Anchor{Name: a.name}
		for i, m := range seq {
			if a.c.access(m, i, at[i]) {
				r.ColdLoads++
				r.LoadS += cost[m]
			}
		}
		out = append(out, r)
	}
	return out
}

// lruK is LRU-K (O'Neil, O'Neil & Weikum, "The LRU-K page replacement
// algorithm for database disk buffering", SIGMOD 1993): evict the resident
// model whose K-th most recent request is oldest (the largest backward
// K-distance); models with fewer than K requests have an infinite
// distance and go first, least recently used among them (the paper's
// subsidiary policy). History is kept for every model, resident or not
// (an unbounded retained-information period), and the correlated
// reference period is 0. K = 1 is LRU.
type lruK struct {
	k, K int
	hist map[int][]int // model → its last K request positions, oldest first
	res  map[int]bool
}

func newLRUK(k, K int) *lruK {
	return &lruK{k: k, K: K, hist: map[int][]int{}, res: map[int]bool{}}
}

func (c *lruK) access(m, i int, _ float64) bool {
	miss := !c.res[m]
	if miss {
		if len(c.res) == c.k {
			victim, vd, vl := -1, 0, 0
			for _, r := range c.resident() {
				h := c.hist[r]
				d := math.MaxInt // infinite backward K-distance
				if len(h) >= c.K {
					d = i - h[len(h)-c.K]
				}
				last := h[len(h)-1]
				if victim < 0 || d > vd || (d == vd && last < vl) {
					victim, vd, vl = r, d, last
				}
			}
			delete(c.res, victim)
		}
		c.res[m] = true
	}
	h := append(c.hist[m], i)
	if len(h) > c.K {
		h = h[1:]
	}
	c.hist[m] = h
	return miss
}

func (c *lruK) resident() []int { return sortedKeys(c.res) }

// decayLFU evicts the resident model with the fewest requests, each
// weighted by 2^(−age/halfLife) (age in trace seconds): LFU whose memory
// fades, so yesterday's popular model does not squat a slot today. Counts
// are kept for every model; ties go to the least recently used.
type decayLFU struct {
	k        int
	halfLife float64
	score    map[int]float64 // as of last[m]
	last     map[int]float64
	lastPos  map[int]int
	res      map[int]bool
}

func newDecayLFU(k int, halfLife float64) *decayLFU {
	return &decayLFU{k: k, halfLife: halfLife, score: map[int]float64{}, last: map[int]float64{}, lastPos: map[int]int{}, res: map[int]bool{}}
}

func (c *decayLFU) at(m int, t float64) float64 {
	return c.score[m] * math.Exp2(-(t-c.last[m])/c.halfLife)
}

func (c *decayLFU) access(m, i int, t float64) bool {
	miss := !c.res[m]
	if miss {
		if len(c.res) == c.k {
			victim, vs := -1, 0.0
			for _, r := range c.resident() {
				s := c.at(r, t)
				if victim < 0 || s < vs || (s == vs && c.lastPos[r] < c.lastPos[victim]) {
					victim, vs = r, s
				}
			}
			delete(c.res, victim)
		}
		c.res[m] = true
	}
	c.score[m] = c.at(m, t) + 1
	c.last[m], c.lastPos[m] = t, i
	return miss
}

func (c *decayLFU) resident() []int { return sortedKeys(c.res) }

// arc is ARC (Megiddo & Modha, "ARC: A Self-Tuning, Low Overhead
// Replacement Cache", FAST 2003, Fig. 4), for a cache of c slots: T1
// holds models requested once recently, T2 those requested at least
// twice, B1 and B2 their ghosts; p, the target size of T1, grows on a hit
// in B1 and shrinks on a hit in B2. Lists are LRU first, MRU last.
type arc struct {
	c              int
	p              float64
	t1, t2, b1, b2 []int
}

func newARC(c int) *arc { return &arc{c: c} }

func (a *arc) access(x, _ int, _ float64) bool {
	switch {
	case slices.Contains(a.t1, x) || slices.Contains(a.t2, x): // case I
		a.t1, a.t2 = remove(a.t1, x), append(remove(a.t2, x), x)
		return false
	case slices.Contains(a.b1, x): // case II
		a.p = min(float64(a.c), a.p+max(float64(len(a.b2))/float64(len(a.b1)), 1))
		a.replace(false)
		a.b1, a.t2 = remove(a.b1, x), append(a.t2, x)
		return true
	case slices.Contains(a.b2, x): // case III
		a.p = max(0, a.p-max(float64(len(a.b1))/float64(len(a.b2)), 1))
		a.replace(true)
		a.b2, a.t2 = remove(a.b2, x), append(a.t2, x)
		return true
	}
	// case IV
	l1 := len(a.t1) + len(a.b1)
	total := l1 + len(a.t2) + len(a.b2)
	switch {
	case l1 == a.c:
		if len(a.t1) < a.c {
			a.b1 = a.b1[1:]
			a.replace(false)
		} else {
			a.t1 = a.t1[1:]
		}
	case total >= a.c:
		if total == 2*a.c {
			a.b2 = a.b2[1:]
		}
		a.replace(false)
	}
	a.t1 = append(a.t1, x)
	return true
}

// replace is ARC's REPLACE(x, p): evict T1's LRU into B1 when T1 exceeds
// its target (or meets it on a hit in B2), else T2's LRU into B2.
func (a *arc) replace(inB2 bool) {
	if n := float64(len(a.t1)); n >= 1 && ((inB2 && n == a.p) || n > a.p) {
		a.b1, a.t1 = append(a.b1, a.t1[0]), a.t1[1:]
	} else if len(a.t2) > 0 {
		a.b2, a.t2 = append(a.b2, a.t2[0]), a.t2[1:]
	}
}

func (a *arc) resident() []int { return slices.Sorted(slices.Values(slices.Concat(a.t1, a.t2))) }

// cacheAnchor is an anchor whose rule is one of sdk/evict's cache types,
// which the rule's router runs too: S3-FIFO (Yang et al., SOSP 2023),
// SIEVE (Zhang et al., NSDI 2024) and GDSF (Cherkasova, HP Labs
// HPL-98-69, 1998), fed one request at a time.
type cacheAnchor struct {
	c interface {
		Access(int) bool
		Held(func(int) bool)
	}
}

func newS3FIFO(k int) cacheAnchor { return cacheAnchor{evict.NewS3FIFO[int](k)} }

func newSIEVE(k int) cacheAnchor { return cacheAnchor{evict.NewSIEVE[int](k)} }

// newGDSF weighs model m by cost[m], its load time (one slot each).
func newGDSF(k int, cost []float64) cacheAnchor {
	return cacheAnchor{evict.NewGDSF(k, func(m int) float64 { return cost[m] })}
}

func (a cacheAnchor) access(x, _ int, _ float64) bool { return a.c.Access(x) }

func (a cacheAnchor) resident() []int {
	var out []int
	a.c.Held(func(k int) bool { out = append(out, k); return true })
	slices.Sort(out)
	return out
}

// leCaR is LeCaR (Vietri et al., "Driving Cache Replacement with
// ML-based LeCaR", HotStorage 2018, as the authors' code sylab/LeCaR
// runs it): on each eviction it follows LRU with probability w_LRU, else
// LFU (in-cache counts, ties to the least recent); where the two agree
// the victim goes to no history, else to that expert's (k entries,
// FIFO), with its count. A miss on a model in an expert's history is
// that expert's regret: the other expert's weight is multiplied by
// e^(λ·d^age), age in requests since the eviction, with λ = 0.45 and
// d = 0.005^(1/k) as in the paper; the weights stay within [0.01, 0.99];
// the model comes back with its count plus one. The coin is a PCG seeded
// with seed, tossed at every eviction.
type leCaR struct {
	k          int
	res        map[int]bool
	last, freq map[int]int
	wLRU       float64
	hLRU, hLFU []ghost
	lr, d      float64
	rng        *rand.Rand
}

// ghost is a model in an expert's history: evicted at request at with
// count freq.
type ghost struct{ m, at, freq int }

func newLeCaR(k int, seed uint64) *leCaR {
	return &leCaR{k: k, res: map[int]bool{}, last: map[int]int{}, freq: map[int]int{}, wLRU: 0.5,
		lr: 0.45, d: math.Pow(0.005, 1/float64(k)), rng: rand.New(rand.NewPCG(seed, seed))}
}

func (c *leCaR) access(m, i int, _ float64) bool {
	if c.res[m] {
		c.freq[m]++
		c.last[m] = i
		return false
	}
	freq := 1
	if j := slices.IndexFunc(c.hLRU, func(g ghost) bool { return g.m == m }); j >= 0 {
		c.reward(false, c.hLRU[j].at, i)
		freq += c.hLRU[j].freq
		c.hLRU = slices.Delete(c.hLRU, j, j+1)
	} else if j := slices.IndexFunc(c.hLFU, func(g ghost) bool { return g.m == m }); j >= 0 {
		c.reward(true, c.hLFU[j].at, i)
		freq += c.hLFU[j].freq
		c.hLFU = slices.Delete(c.hLFU, j, j+1)
	}
	if len(c.res) == c.k {
		useLRU := c.rng.Float64() < c.wLRU
		lru, lfu := -1, -1
		for _, r := range c.resident() {
			if lru < 0 || c.last[r] < c.last[lru] {
				lru = r
			}
			if lfu < 0 || c.freq[r] < c.freq[lfu] || (c.freq[r] == c.freq[lfu] && c.last[r] < c.last[lfu]) {
				lfu = r
			}
		}
		victim, h := lfu, &c.hLFU
		if useLRU {
			victim, h = lru, &c.hLRU
		}
		if lru != lfu {
			if *h = append(*h, ghost{victim, i, c.freq[victim]}); len(*h) > c.k {
				*h = (*h)[1:]
			}
		}
		delete(c.res, victim)
	}
	c.res[m], c.freq[m], c.last[m] = true, freq, i
	return true
}

// reward follows a regret at request i: the other expert's victim,
// evicted at request at, was asked for again, so expert toLRU (LRU if
// true, else LFU) has its weight multiplied by e^(λ·d^age); the weights
// are normalized and held within [0.01, 0.99].
func (c *leCaR) reward(toLRU bool, at, i int) {
	r := math.Exp(c.lr * math.Pow(c.d, float64(i-at)))
	wLRU, wLFU := c.wLRU, 1-c.wLRU
	if toLRU {
		wLRU *= r
	} else {
		wLFU *= r
	}
	c.wLRU = min(max(wLRU/(wLRU+wLFU), 0.01), 0.99)
}

func (c *leCaR) resident() []int { return sortedKeys(c.res) }

func sortedKeys[V any](m map[int]V) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func remove(s []int, x int) []int {
	if i := slices.Index(s, x); i >= 0 {
		return slices.Delete(s, i, i+1)
	}
	return s
}
