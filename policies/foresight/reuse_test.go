package main

import (
	"testing"

	"github.com/loadout-dev/loadout/sdk/policytest"
)

// runCycleLargerThanTheBox: an agent cycling through three models on a
// box of two slots asks, every request, for the model LRU evicted last
// (LRU loads every request). The order of reuse wins the recency duels
// and evicts the model asked for last instead, as Belady's rule would: a
// load every other request. When the agent moves on to a new pair, the
// old cycle's models, late, go before it.
func runCycleLargerThanTheBox(t *testing.T, mk policytest.MakeSwapper) {
	b := policytest.NewBox(t, mk, `{}`, 2, "a", "b", "c", "d", "e")
	const rounds = 60
	for range rounds {
		b.AskAll([]string{"a", "b", "c"})
	}
	// LRU: 3 × 60 = 180; Belady's optimum: 91. The duels need a few
	// rounds to hand the lead over.
	if got := b.ColdLoads(); got > 3*rounds*6/10 {
		t.Errorf("%d cold loads in %d requests cycling over three models on two slots (LRU: every request, Belady: about half): %v",
			got, 3*rounds, b.Loads)
	}
	before := b.ColdLoads()
	for range 20 {
		b.AskAll([]string{"d", "e"})
	}
	if got := b.ColdLoads() - before; got > 3 {
		t.Errorf("the next pair of models took %d cold loads over 20 rounds, want 2 (each once) or 3: %v", got, b.Loads)
	}
}

func TestForesight_CycleLargerThanTheBox(t *testing.T) {
	runCycleLargerThanTheBox(t, nativeSwapper)
}

// A model's gap between requests, in the box's requests: the mean since
// it was last observed; unknown at its first observation, when it comes
// back after more than four times its last gap, or when the box's count
// fell (a model removed).
func TestReuseGap(t *testing.T) {
	for _, c := range []struct {
		name  string
		m     model
		r     float64
		delta uint64
		want  float64
	}{
		{"first observation", model{}, 10, 1, 0},
		{"one request three later", model{seen: 1, lastR: 7}, 10, 1, 3},
		{"two requests over six", model{seen: 1, lastR: 4, gap: 3}, 10, 2, 3},
		{"back after a long absence", model{seen: 5, lastR: 10, gap: 3}, 110, 1, 0},
		{"within four times its gap", model{seen: 5, lastR: 10, gap: 3}, 22, 1, 12},
		{"next gap after an absence", model{seen: 6, lastR: 110, gap: 0}, 112, 1, 2},
		{"the box's count fell", model{seen: 5, lastR: 50, gap: 3}, 40, 1, 0},
	} {
		if got := reuseGap(&c.m, c.r, c.delta); got != c.want {
			t.Errorf("%s: gap %v, want %v", c.name, got, c.want)
		}
	}
}
