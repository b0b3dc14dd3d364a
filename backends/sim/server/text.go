package simserver

import (
	"encoding/binary"
	"hash/fnv"
	"math"
	"strings"
)

// vocab is what the simulated model says.
var vocab = strings.Fields(`the a model token batch server loads swaps runs fast slow queue
GPU memory request stream answer simple small large quiet bright river stone cloud
light sound paper window garden signal vector kernel cache page thread clock
north south east west early late green blue red gold silver copper`)

// generator produces the deterministic text of one prompt.
type generator struct{ h uint64 }

func newGenerator(seed int64, prompt string) generator {
	return generator{h: hashOf(seed, prompt)}
}

// word is the i-th generated word.
func (g generator) word(i int) string {
	return vocab[mix(g.h+uint64(i))%uint64(len(vocab))]
}

// piece is the i-th word as streamed: words after the first carry a space.
func (g generator) piece(i int) string {
	if i == 0 {
		return g.word(0)
	}
	return " " + g.word(i)
}

// text is the first n words.
func (g generator) text(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(g.piece(i))
	}
	return b.String()
}

// embeddingDims is the length of every embedding vector.
const embeddingDims = 32

// embedding is a deterministic unit vector for input.
func embedding(seed int64, input string) []float64 {
	h := hashOf(seed, input)
	v := make([]float64, embeddingDims)
	var norm float64
	for i := range v {
		v[i] = float64(mix(h+uint64(i))>>11)/(1<<52) - 1 // in [-1, 1)
		norm += v[i] * v[i]
	}
	norm = math.Sqrt(norm)
	for i := range v {
		v[i] /= norm
	}
	return v
}

func hashOf(seed int64, s string) uint64 {
	f := fnv.New64a()
	_ = binary.Write(f, binary.LittleEndian, seed)
	_, _ = f.Write([]byte(s))
	return f.Sum64()
}

// mix is splitmix64's finaliser.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// countTokens is the simulated tokenizer: one token per word, at least one.
func countTokens(s string) int {
	return max(1, len(strings.Fields(s)))
}
