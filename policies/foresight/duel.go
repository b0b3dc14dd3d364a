package main

import (
	"math"
	"slices"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/evict"
)

// The experts whose eviction orders the plans may follow.
const (
	expertForecast = 0 // the forecast: least expected load seconds per byte first
	expertLRU      = 1 // the least recently used first
	nExperts       = 2
)

// expertNames are the experts' names in logs.
var expertNames = [nExperts]string{"forecast", "lru"}

// Constants of the duels.
const (
	// rate: a lost duel multiplies the loser's weight by e^-rate
	// (adaptive's 0.45 let LRU lead on Zipf traffic after a lucky
	// streak; docs/RATIONALE.md).
	rate = 0.3
	// lruLeads is the weight above which LRU's order is followed: LRU
	// must have won clearly more of the recent duels than it lost.
	lruLeads = 0.7
	// minWeight is the least weight an expert keeps.
	minWeight = 0.01
	// maxDuels bounds the duels waiting for a verdict; the oldest go.
	maxDuels = 64
)

// leader is the expert whose order the plans follow: LRU while its
// weight is above lruLeads, else the forecast. The forecast is the
// default, as it is on every traffic shape but moving working sets.
func (s *swapper) leader() int {
	if s.w[expertLRU] > lruLeads {
		return expertLRU
	}
	return expertForecast
}

// estimator is the estimator expert e's order reads; -1 for LRU's.
func (s *swapper) estimator(e int) int {
	if e == expertLRU {
		return -1
	}
	return s.best
}

// settle decides every duel whose two models' order of requests the
// swap of target tells (evict.DuelVerdict), and keeps the undecided.
func (s *swapper) settle(target string) {
	s.duels = evict.Settle(s.duels, s.demand, target, s.lose)
}

// lose lowers expert e's weight by e^-rate, the weights summing to 1
// again, none below minWeight.
func (s *swapper) lose(e int) {
	s.w[e] *= math.Exp(-rate)
	var sum float64
	for _, w := range s.w {
		sum += w
	}
	for i := range s.w {
		s.w[i] = max(s.w[i]/sum, minWeight)
	}
}

// challenge starts a duel for each model ev evicts that another expert
// would have kept, against a model that expert would have evicted in
// its place: its first len(ev.Evict) idle (or stopping), unpinned
// running models in its order.
func (s *swapper) challenge(ev sdk.SwapStartEvent) {
	s.idle = evict.Evictable(s.idle[:0], s.h.Snapshot().Models, ev.Running)
	for other := range nExperts {
		if other == s.expert {
			continue
		}
		s.values(s.estimator(other), s.alt)
		slices.SortStableFunc(s.idle, func(a, b *sdk.ModelInfo) int { return by(s.alt, a, footprint(a), b, footprint(b)) })
		s.duels = evict.Challenge(s.duels, ev.Evict, s.idle, s.demand, s.expert, other, maxDuels)
	}
}

// footprint is the bytes evicting m gives back: its leases, else its
// VRAM figure (as sdk/evict's Victim.VRAM).
func footprint(m *sdk.ModelInfo) uint64 {
	var n uint64
	for _, b := range m.Leased {
		n += b
	}
	if n > 0 {
		return n
	}
	return evict.VRAM(m)
}
