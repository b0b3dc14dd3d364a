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

// duel is one eviction on which two experts disagreed: chooser evicted x
// where other would have evicted y. Whichever of the two is asked for
// first says who was right (Belady's rule, after the fact).
type duel struct {
	x, y           string
	chooser, other int
	xSeen, ySeen   uint64 // their request counts when the duel began
}

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
	kept := s.duels[:0]
	for _, d := range s.duels {
		decided, yFirst, keep := evict.DuelVerdict(d.x, d.y, target,
			evict.Requests(s.demand, d.x) > d.xSeen, evict.Requests(s.demand, d.y) > d.ySeen)
		switch {
		case keep:
			kept = append(kept, d) // neither asked for yet
		case !decided:
		case yFirst:
			s.lose(d.other) // evicting x was right
		default:
			s.lose(d.chooser)
		}
	}
	s.duels = kept
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
		evict.Challenges(ev.Evict, s.idle, func(x, y string) {
			s.duels = append(s.duels, duel{x: x, y: y, chooser: s.expert, other: other, xSeen: evict.Requests(s.demand, x), ySeen: evict.Requests(s.demand, y)})
		})
	}
	if n := len(s.duels); n > maxDuels {
		s.duels = append(s.duels[:0], s.duels[n-maxDuels:]...)
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
