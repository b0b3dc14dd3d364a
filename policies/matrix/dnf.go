package main

import "strconv"

// A combination is a set of models, a bitset over model indices: bit i of
// word i/64 is model i. A set expression denotes a list of combinations,
// its disjunctive normal form (DNF), in expansion order:
//
//   - a var: the one combination holding its model;
//   - +set: the referenced set's combinations;
//   - x | y | …: the combinations of x, then those of y, and so on;
//   - x & y: every combination of x joined with every one of y, x-major:
//     "(a | b) & (c | d)" is [a c], [a d], [b c], [b d].
//
// A combination already listed is dropped (a & a is [a]), so every list
// holds distinct combinations and the first occurrence keeps its place,
// which is what ties are broken by.

// dnf is a list of distinct combinations of `words` words each.
type dnf struct {
	words int
	terms []uint64 // combination i is terms[i*words : (i+1)*words]
}

func (d *dnf) len() int            { return len(d.terms) / d.words }
func (d *dnf) term(i int) []uint64 { return d.terms[i*d.words : (i+1)*d.words] }

// termSet finds duplicate combinations while a dnf is built: an open
// addressing hash table of indices into the dnf, each slot tagged with the
// high bits of its combination's hash so that most mismatches cost one
// comparison.
type termSet struct {
	slots []uint64 // hash>>32<<32 | 1 + index of a combination in the dnf; 0 is empty
}

func hashTerm(t []uint64) uint64 {
	h := uint64(0x9E3779B97F4A7C15)
	for _, w := range t {
		h ^= w
		h *= 0xBF58476D1CE4E5B9
		h ^= h >> 31
	}
	return h
}

// reset empties the set and sizes it for up to n combinations.
func (s *termSet) reset(n int) {
	size := 16
	for size < 2*n {
		size *= 2
	}
	if cap(s.slots) >= size {
		s.slots = s.slots[:size]
		clear(s.slots)
		return
	}
	s.slots = make([]uint64, size)
}

// add appends t to d unless d already holds it.
func (s *termSet) add(d *dnf, t []uint64) {
	h := hashTerm(t)
	tag := h >> 32 << 32
	mask := uint64(len(s.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		e := s.slots[i]
		if e == 0 {
			d.terms = append(d.terms, t...)
			s.slots[i] = tag | uint64(d.len())
			return
		}
		if e>>32<<32 == tag && equalTerms(d.term(int(uint32(e))-1), t) {
			return
		}
	}
}

func equalTerms(a, b []uint64) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// expander expands parsed expressions into DNFs.
type expander struct {
	words int
	limit int                   // the most combinations a DNF may have, counted before duplicates are dropped
	vars  map[string]int        // var → model index
	sets  map[string]*dnf       // the sets expanded so far
	hint  func(v string) string // explains an unknown var
	src   string                // the expression being expanded, for errors
	seen  termSet
	buf   []uint64
}

// limitError reports an expansion past the limit.
type limitError struct{ limit, words int }

func (e *limitError) Error() string {
	if e.words > 1 {
		return "expands to more than " + strconv.Itoa(e.limit) + " combinations (the limit with more than " + strconv.Itoa(64*(e.words-1)) + " models)"
	}
	return "expands to more than " + strconv.Itoa(e.limit) + " combinations"
}

// expand returns n's DNF. References must already be expanded.
func (x *expander) expand(n *node) (*dnf, error) {
	switch n.kind {
	case nodeVar:
		m, ok := x.vars[n.name]
		if !ok {
			return nil, &exprError{col: column(x.src, n.off), msg: x.hint(n.name)}
		}
		d := &dnf{words: x.words, terms: make([]uint64, x.words)}
		d.terms[m/64] = 1 << (m % 64)
		return d, nil
	case nodeRef:
		return x.sets[n.name], nil
	}
	kids := make([]*dnf, len(n.kids))
	for i, k := range n.kids {
		d, err := x.expand(k)
		if err != nil {
			return nil, err
		}
		kids[i] = d
	}
	if n.kind == nodeOr {
		return x.or(kids)
	}
	out := kids[0]
	for _, k := range kids[1:] {
		var err error
		if out, err = x.and(out, k); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// or lists the combinations of every kid in turn.
func (x *expander) or(kids []*dnf) (*dnf, error) {
	n := 0
	for _, k := range kids {
		n += k.len()
	}
	if n > x.limit {
		return nil, &limitError{x.limit, x.words}
	}
	out := &dnf{words: x.words, terms: make([]uint64, 0, n*x.words)}
	x.seen.reset(n)
	for _, k := range kids {
		for i := range k.len() {
			x.seen.add(out, k.term(i))
		}
	}
	return out, nil
}

// and joins every combination of a with every one of b, a-major.
func (x *expander) and(a, b *dnf) (*dnf, error) {
	na, nb := a.len(), b.len()
	if na > x.limit/nb {
		return nil, &limitError{x.limit, x.words}
	}
	out := &dnf{words: x.words, terms: make([]uint64, 0, na*nb*x.words)}
	x.seen.reset(na * nb)
	if cap(x.buf) < x.words {
		x.buf = make([]uint64, x.words)
	}
	t := x.buf[:x.words]
	for i := range na {
		ta := a.term(i)
		for j := range nb {
			tb := b.term(j)
			for w := range t {
				t[w] = ta[w] | tb[w]
			}
			x.seen.add(out, t)
		}
	}
	return out, nil
}
