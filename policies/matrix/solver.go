package main

import (
	"errors"
	"math/bits"
	"strconv"
)

// The solver answers a plan without listing combinations: everything it
// needs about the combinations that contain the target was indexed at init
// as bit columns, so a plan costs a few word operations per 64
// combinations, not a loop over them (in Go compiled to Wasm, under the
// host's per-call deadline, each loop iteration, call or taken branch
// costs about 40 ns).
//
// Index: for each model t, the combinations that contain t, in expansion
// order, are t's lanes (lane i is the i-th of them); for every model m
// that shares one of them with t, t has a column, the bitset over lanes of
// those that also contain m.
//
// Solve: the running models that share no combination with the target are
// evicted whatever is chosen, so they do not matter; for the others (the
// relevant ones), the value of a lane is the cost of the relevant running
// models it keeps, and the plan keeps the first lane of greatest value.
// Three searches find it, all exact (solver_test.go checks them against
// each other and against a plain list of combinations):
//
//   - bestLaneUniform, for up to four relevant models of one cost, the
//     usual case: counts the models each lane keeps, 64 lanes at a time,
//     in one pass;
//   - bestLaneByPatterns, for up to four of any costs: looks for the first
//     lane that keeps all of them, then of the most valuable subsets;
//   - bestLane, for any number and costs: sums the costs each lane keeps,
//     64 lanes at a time, one word per binary digit of the sum.

// Limits on the solver's index, so that a matrix of many large
// combinations is refused with a clear error rather than exhausting the
// guest's memory or overrunning the host's start deadline (2 s: in Wasm,
// init runs some 40 times slower than natively). Variables so that tests
// can lower them.
var (
	maxIndexWords = 2 << 20   // 16 MiB of columns and lane lists
	maxIndexPairs = 4_000_000 // Σ|combination|², the bits written to fill the columns
)

// candidates indexes the combinations that contain one model, t.
type candidates struct {
	combos []int32 // lane → combination, in expansion order
	words  int     // words per column: enough for len(combos) lanes, a multiple of four
	// slot maps a model index to the offset of its column in cols, or to
	// 0, the all-zero column, for a model that shares no combination with
	// t (t's own included).
	slot []int32
	ones int32 // the offset of a column of all ones
	cols []uint64
}

// buildCandidates indexes m.combos for the solver, one candidates per
// model.
func (m *matrix) buildCandidates() error {
	nm, w := len(m.models), m.words
	count := make([]int, nm)
	union := make([]uint64, nm*w) // union[t*w:]: every model that shares a combination with t
	pairs := 0
	for c := range int32(len(m.setOf)) {
		combo := m.combo(c)
		size := 0
		for _, word := range combo {
			size += bits.OnesCount64(word)
		}
		pairs += size * size
		for tw, word := range combo {
			for ; word != 0; word &= word - 1 {
				t := tw*64 + bits.TrailingZeros64(word)
				count[t]++
				u := union[t*w : (t+1)*w]
				for i, x := range combo {
					u[i] |= x
				}
			}
		}
	}
	need := 0
	for t := range nm {
		if count[t] == 0 {
			continue
		}
		columns := 0
		for _, word := range union[t*w : (t+1)*w] {
			columns += bits.OnesCount64(word) // t's own bit stands for the zero column
		}
		need += (columns+1)*((count[t]+255)/256*4) + nm/2 + count[t]/2
	}
	if need > maxIndexWords || pairs > maxIndexPairs {
		return errors.New("matrix too large to index: its " + strconv.Itoa(len(m.setOf)) + " combinations of " + strconv.Itoa(nm) +
			" models need " + size(need*8) + " and hold " + strconv.Itoa(pairs) + " model pairs (limits: " + size(maxIndexWords*8) +
			", " + strconv.Itoa(maxIndexPairs) + " pairs); simplify the sets")
	}
	m.targets = make([]candidates, nm)
	for t := range nm {
		if count[t] == 0 {
			continue
		}
		c := &m.targets[t]
		c.words = (count[t] + 255) / 256 * 4 // bestLaneUniform reads four words at a time
		c.combos = make([]int32, 0, count[t])
		c.slot = make([]int32, nm)
		off := int32(c.words) // after the zero column
		forEachBit(union[t*w:(t+1)*w], func(o int) {
			if o != t {
				c.slot[o] = off
				off += int32(c.words)
			}
		})
		c.ones = off
		c.cols = make([]uint64, off+int32(c.words))
		for i := range c.words {
			c.cols[int(c.ones)+i] = ^uint64(0)
		}
	}
	// Fill the columns: Σ|combination|² bits in all, written without
	// closures or branches, since in Wasm every call and taken branch
	// costs about 40 ns and big matrices must init well inside the host's
	// start deadline.
	for id := range int32(len(m.setOf)) {
		combo := m.combo(id)
		for tw, tword := range combo {
			for ; tword != 0; tword &= tword - 1 {
				c := &m.targets[tw*64+bits.TrailingZeros64(tword)]
				lane := len(c.combos)
				c.combos = append(c.combos, id) // within its capacity
				word, bit := lane>>6, uint64(1)<<(lane&63)
				for ow, oword := range combo {
					for ; oword != 0; oword &= oword - 1 {
						// The target's own bit lands in the zero column,
						// cleared below.
						c.cols[int(c.slot[ow*64+bits.TrailingZeros64(oword)])+word] |= bit
					}
				}
			}
		}
	}
	for t := range m.targets {
		c := &m.targets[t]
		clear(c.cols[:c.words])
	}
	return nil
}

// size writes a byte count in KiB or MiB.
func size(bytes int) string {
	if bytes < 1<<20 {
		return strconv.Itoa((bytes+1023)>>10) + " KiB"
	}
	return strconv.Itoa((bytes+1<<20-1)>>20) + " MiB"
}

func forEachBit(set []uint64, f func(int)) {
	for i, word := range set {
		for ; word != 0; word &= word - 1 {
			f(i*64 + bits.TrailingZeros64(word))
		}
	}
}

// Markers in scratch.run besides model indices.
const (
	unknownModel int32 = -1 // a running model no var names
	targetModel  int32 = -2 // the target itself, listed as running: never evicted
)

// relevant is a running model that shares a combination with the target.
type relevant struct {
	off  int32 // its column
	cost int64
}

// scratch holds the solver's buffers, reused from call to call: in Go
// compiled to Wasm every allocation costs about 1.3 µs.
type scratch struct {
	names  nameCache
	run    []int32 // model index of each running model, or unknownModel or targetModel
	rel    []relevant
	order  [16]uint8
	planes [64]uint64
}

// solve chooses, among the combinations that contain target, the one with
// the lowest evict cost of the running models outside it, the earliest on
// a tie, and returns it, or -1 when target is in no set and runs alone. It
// leaves the model index of each running model in sc.run. It allocates
// nothing once sc's buffers have grown.
func (m *matrix) solve(target string, running []string, sc *scratch) int32 {
	t, ok := sc.names.cached(target)
	if !ok {
		t = sc.names.fill(m, target)
	}
	var c *candidates
	if t >= 0 && len(m.targets[t].combos) > 0 {
		c = &m.targets[t]
	}
	sc.run, sc.rel = sc.run[:0], sc.rel[:0]
	var total int64  // the value of keeping every relevant model
	uniform := true  // all relevant models cost the same
	var off [4]int32 // the first four relevant models' columns; 0 pads
	var cost [4]int64
	for _, name := range running {
		mi, ok := sc.names.cached(name)
		if !ok {
			mi = sc.names.fill(m, name)
		}
		switch {
		case mi >= 0 && mi == t || mi < 0 && name == target:
			mi = targetModel
		case mi >= 0 && c != nil && c.slot[mi] != 0:
			r := relevant{off: c.slot[mi], cost: m.cost[mi]}
			if n := len(sc.rel); n < 4 {
				off[n], cost[n] = r.off, r.cost
			}
			uniform = uniform && r.cost == cost[0]
			sc.rel = append(sc.rel, r)
			total += r.cost
		}
		sc.run = append(sc.run, mi)
	}
	if c == nil {
		return -1
	}
	lane := 0
	switch n := len(sc.rel); {
	case n == 0:
	case n <= 4 && uniform:
		lane = c.bestLaneUniform(off, n)
	case n <= 4:
		lane = c.bestLaneByPatterns(off, cost, n, &sc.order)
	default:
		lane = c.bestLane(sc.rel, total, &sc.planes)
	}
	return c.combos[lane]
}

// evictCost is the evict cost of the running models outside combination
// combo (all of them for -1), given sc.run as solve left it.
func (m *matrix) evictCost(combo int32, running []string, run []int32) int64 {
	var cost int64
	for i, mi := range run {
		switch {
		case mi == unknownModel:
			cost += m.otherCost(running[i])
		case mi >= 0 && (combo < 0 || !m.has(combo, mi)):
			cost += m.cost[mi]
		}
	}
	return cost
}

// modelCost is a model's evict cost: its var's, else its own evict_costs
// entry, else 1.
func (m *matrix) modelCost(model string) int64 {
	if i, ok := m.index[model]; ok {
		return m.cost[i]
	}
	return m.otherCost(model)
}

// otherCost is the evict cost of a running model no var names.
func (m *matrix) otherCost(model string) int64 {
	if c, ok := m.other[model]; ok {
		return c
	}
	return 1
}

// bestLaneUniform returns the first lane of greatest value when the n
// relevant models (at most four, their columns in off, the zero column
// padding) cost the same: the first lane that keeps the most of them. The
// loop reads four words at a time (columns are padded to a multiple of
// four words) and its body inlines everything and never branches.
func (c *candidates) bestLaneUniform(off [4]int32, n int) int {
	w := c.words
	c0 := c.cols[off[0]:][:w]
	c1, c2, c3 := c.cols[off[1]:][:w], c.cols[off[2]:][:w], c.cols[off[3]:][:w]
	var best, bestLane uint64 // lane 0 until a lane keeps more than nothing
	for i := 0; i+4 <= len(c0); i += 4 {
		d0, d1, d2, d3 := c0[i:i+4:i+4], c1[i:i+4:i+4], c2[i:i+4:i+4], c3[i:i+4:i+4]
		lane := uint64(i) << 6
		var l, n4, n2, n1 uint64

		f, t, o := count4(d0[0], d1[0], d2[0], d3[0])
		l, n4 = narrowTo(^uint64(0), f)
		l, n2 = narrowTo(l, t)
		l, n1 = narrowTo(l, o)
		best, bestLane = better(best, bestLane, n4<<2|n2<<1|n1, lane+lowest(l))

		f, t, o = count4(d0[1], d1[1], d2[1], d3[1])
		l, n4 = narrowTo(^uint64(0), f)
		l, n2 = narrowTo(l, t)
		l, n1 = narrowTo(l, o)
		best, bestLane = better(best, bestLane, n4<<2|n2<<1|n1, lane+64+lowest(l))

		f, t, o = count4(d0[2], d1[2], d2[2], d3[2])
		l, n4 = narrowTo(^uint64(0), f)
		l, n2 = narrowTo(l, t)
		l, n1 = narrowTo(l, o)
		best, bestLane = better(best, bestLane, n4<<2|n2<<1|n1, lane+128+lowest(l))

		f, t, o = count4(d0[3], d1[3], d2[3], d3[3])
		l, n4 = narrowTo(^uint64(0), f)
		l, n2 = narrowTo(l, t)
		l, n1 = narrowTo(l, o)
		best, bestLane = better(best, bestLane, n4<<2|n2<<1|n1, lane+192+lowest(l))

		if best == uint64(n) {
			break
		}
	}
	return int(bestLane)
}

// count4 adds x0..x3 bit-sliced: for each lane, how many of them hold it,
// in binary (fours, twos, ones).
func count4(x0, x1, x2, x3 uint64) (fours, twos, ones uint64) {
	a := x0 ^ x1
	s, carry := a^x2, x0&x1|a&x2
	k := s & x3
	return carry & k, carry ^ k, s ^ x3
}

// narrowTo returns the lanes also in x and 1 if there are any, else lanes
// and 0. No branch: in Wasm a taken branch costs as much as a loop
// iteration.
func narrowTo(lanes, x uint64) (uint64, uint64) {
	t := lanes & x
	nz := (t | -t) >> 63
	return lanes ^ (lanes^t)&-nz, nz
}

// better returns (v, lane) if v > best, else (best, bestLane), without a
// branch. Values are below 2^63.
func better(best, bestLane, v, lane uint64) (uint64, uint64) {
	gt := -((best - v) >> 63) // all ones if v > best
	return best ^ (best^v)&gt, bestLane ^ (bestLane^lane)&gt
}

// lowest returns the index of the lowest lane in lanes.
func lowest(lanes uint64) uint64 { return uint64(bits.TrailingZeros64(lanes)) }

// bestLaneByPatterns returns the first lane of greatest value for at most
// four relevant models of any costs, their columns in off. Which of them a
// lane keeps, its pattern, sets its value: the patterns are tried from the
// most valuable down, each by a scan for the first lane that keeps all of
// its models. The first pattern found has the greatest value (a lane that
// kept more would have matched a more valuable pattern first); other
// patterns of the same value may still have an earlier lane. A scan is one
// pass like bestLaneUniform's, and keeping them all, the most valuable
// pattern, is tried before anything else.
func (c *candidates) bestLaneByPatterns(off [4]int32, cost [4]int64, n int, order *[16]uint8) int {
	all := 1<<n - 1
	if lane := c.firstLane(c.patternColumns(off, all), c.words); lane >= 0 {
		return lane
	}
	var val [16]int64
	k := 0
	for p := 1; p < all; p++ {
		val[p] = val[p&(p-1)] + cost[bits.TrailingZeros(uint(p))]
		j := k // insertion sort, most valuable first
		for ; j > 0 && val[order[j-1]] < val[p]; j-- {
			order[j] = order[j-1]
		}
		order[j] = uint8(p)
		k++
	}
	bestLane, bestVal := 0, int64(-1) // every single model is in some lane: the loop finds one
	for _, p := range order[:k] {
		if val[p] < bestVal {
			break
		}
		limit := c.words
		if bestVal >= 0 {
			limit = (bestLane>>8 + 1) * 4 // up to the four words of bestLane
		}
		if lane := c.firstLane(c.patternColumns(off, int(p)), limit); lane >= 0 && (bestVal < 0 || lane < bestLane) {
			bestLane, bestVal = lane, val[p]
		}
	}
	return bestLane
}

// patternColumns returns the columns of the models of pattern p (bit j:
// off[j]), padded with the ones column.
func (c *candidates) patternColumns(off [4]int32, p int) [4]int32 {
	cols := [4]int32{c.ones, c.ones, c.ones, c.ones}
	for j := range cols {
		if p>>j&1 != 0 {
			cols[j] = off[j]
		}
	}
	return cols
}

// firstLane returns the first lane in all four columns, looking at the
// words below limit (a multiple of four), or -1.
func (c *candidates) firstLane(cols [4]int32, limit int) int {
	w := c.words
	c0 := c.cols[cols[0]:][:w]
	c1, c2, c3 := c.cols[cols[1]:][:w], c.cols[cols[2]:][:w], c.cols[cols[3]:][:w]
	for i := 0; i+4 <= limit && i+4 <= w; i += 4 {
		d0, d1, d2, d3 := c0[i:i+4:i+4], c1[i:i+4:i+4], c2[i:i+4:i+4], c3[i:i+4:i+4]
		a0, a1 := d0[0]&d1[0]&d2[0]&d3[0], d0[1]&d1[1]&d2[1]&d3[1]
		a2, a3 := d0[2]&d1[2]&d2[2]&d3[2], d0[3]&d1[3]&d2[3]&d3[3]
		if a0|a1|a2|a3 == 0 {
			continue
		}
		switch {
		case a0 != 0:
			return i<<6 + bits.TrailingZeros64(a0)
		case a1 != 0:
			return i<<6 + 64 + bits.TrailingZeros64(a1)
		case a2 != 0:
			return i<<6 + 128 + bits.TrailingZeros64(a2)
		}
		return i<<6 + 192 + bits.TrailingZeros64(a3)
	}
	return -1
}

// bestLane returns the first lane of greatest value, for any costs: the
// value of each lane is summed bit-sliced in planes (plane p holds bit p
// of every lane's value), then the lanes of greatest value are narrowed
// down from the top plane.
func (c *candidates) bestLane(rel []relevant, total int64, buf *[64]uint64) int {
	planes := buf[:bits.Len64(uint64(total))]
	best, bestLane := int64(-1), 0
	for i := range c.words {
		clear(planes)
		for _, r := range rel {
			x := c.cols[int(r.off)+i]
			for w := uint64(r.cost); w != 0 && x != 0; w &= w - 1 {
				// Add x << (lowest bit of w); no lane's sum exceeds total.
				carry := x
				for p := bits.TrailingZeros64(w); carry != 0; p++ {
					planes[p], carry = planes[p]^carry, planes[p]&carry
				}
			}
		}
		lanes := ^uint64(0)
		var v int64
		for p := len(planes) - 1; p >= 0; p-- {
			var nz uint64
			lanes, nz = narrowTo(lanes, planes[p])
			v = v<<1 | int64(nz)
		}
		if v > best {
			best, bestLane = v, i<<6+bits.TrailingZeros64(lanes)
			if v == total {
				break
			}
		}
	}
	return bestLane
}
