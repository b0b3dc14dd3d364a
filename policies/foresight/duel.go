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
	s.duels = evict.Settle(s.duels, s.counts.List, target, s.lose)
}

// lose lowers expert e's weight (lost).
func (s *swapper) lose(e int) { lost(s.w[:], e) }

// lost lowers weight i of w by e^-rate after a lost duel, the weights
// summing to 1 again, none below minWeight: the rule of both duels.
func lost(w []float64, i int) {
	w[i] *= math.Exp(-rate)
	var sum float64
	for _, x := range w {
		sum += x
	}
	for j := range w {
		w[j] = max(w[j]/sum, minWeight)
	}
}

// challenge starts a duel for each model ev evicts that another expert
// would have kept, against a model that expert would have evicted in
// its place: its first len(ev.Evict) idle (or stopping), unpinned
// running models in its order. s.idle must hold the swap's candidates
// (evictable).
func (s *swapper) challenge(ev sdk.SwapStartEvent) {
	for other := range nExperts {
		if other != s.expert {
			s.duels = s.rival(s.duels, ev.Evict, s.estimator(other), s.expert, other)
		}
	}
}

// evictable fills s.idle with ev's candidates for a duel: the idle (or
// stopping), unpinned running models, read from the snapshot of the plan
// this swap carries out (read moments ago, in the same event), or the
// host's when no plan read one.
func (s *swapper) evictable(ev sdk.SwapStartEvent) {
	s.idle = evict.Evictable(s.idle[:0], s.plan.Models(s.h), ev.Running)
}

// rival appends to duels a duel for each model of chosen (the evictions
// of side chooser) that estimator j's order (LRU's for -1) would have
// kept, against the model it would have evicted in its place
// (evict.Challenge), other naming j's side; it sorts s.idle in j's order.
func (s *swapper) rival(duels []evict.Duel, chosen []string, j, chooser, other int) []evict.Duel {
	s.sortIdle(j)
	return evict.Challenge(duels, chosen, s.idle, s.counts.List, chooser, other, maxDuels)
}

// sortIdle sorts s.idle in estimator j's order (LRU's for -1), valuing
// only its models.
func (s *swapper) sortIdle(j int) {
	clear(s.alt)
	if j >= 0 {
		g := s.scale(j)
		for _, m := range s.idle {
			if d := evict.Demand(s.counts.List, m.Name); d != nil {
				s.alt[m.Name] = s.valueOf(j, g, d)
			}
		}
	}
	slices.SortStableFunc(s.idle, func(a, b *sdk.ModelInfo) int {
		return by(s.alt[a.Name], a, footprint(a), s.alt[b.Name], b, footprint(b))
	})
}

// The duel of the ways of counting. The scores choose each estimator's
// half-life, but they cannot choose between counting requests and counting
// bursts: what they score is the set of models asked for between two
// swaps, which is what a count of bursts forecasts, so they favour bursts
// even where request counts order the models better (Zipf traffic of
// independent requests: docs/RATIONALE.md, "Counting requests or
// bursts"). Which way orders evictions better is settled as LRU's lead
// is: by duels decided by Belady's rule after the fact, between the best
// estimator of each way.

// countingLeads is the weight above which the forecast counts requests:
// bursts are the default (a batch client's twenty requests are one sign of
// demand), and requests must have won clearly more of the recent duels
// than they lost.
const countingLeads = 0.7

// counting is the way of counting the forecast follows: countRequests
// while its weight is above countingLeads, else countBursts.
func (s *swapper) counting() int {
	if s.wc[countRequests] > countingLeads {
		return countRequests
	}
	return countBursts
}

// bestOf is the estimator of the way of counting mode with the highest
// score, the longest memory among equals (as at start-up, when every
// estimator has forecast alike).
func (s *swapper) bestOf(mode int) int {
	lo := mode * len(halfLives)
	best := lo + len(halfLives) - 1
	for j := best - 1; j >= lo; j-- {
		if s.score[j] > s.score[best] {
			best = j
		}
	}
	return best
}

// settleCounting decides every duel of the ways of counting that the swap
// of target tells.
func (s *swapper) settleCounting(target string) {
	s.countDuels = evict.Settle(s.countDuels, s.counts.List, target, s.loseCounting)
}

// loseCounting lowers way of counting m's weight (lost).
func (s *swapper) loseCounting(m int) { lost(s.wc[:], m) }

// challengeCounting starts a duel for each model the way of counting
// followed evicts, or would have evicted, that the best estimator of the
// other way would have kept (as challenge does for LRU). While the
// forecast leads, those are ev's evictions; while LRU leads, the first
// len(ev.Evict) candidates in the followed way's order: the ways keep
// dueling, so the forecast LRU gives the lead back to counts the better
// way (on Zipf traffic the requests' count won its duels 60 swaps
// sooner; docs/RATIONALE.md, "Counting requests or bursts"). s.idle must
// hold the swap's candidates (evictable).
func (s *swapper) challengeCounting(ev sdk.SwapStartEvent) {
	cur := s.counting()
	other := countBursts + countRequests - cur
	chosen := ev.Evict
	if s.expert != expertForecast {
		s.sortIdle(s.bestOf(cur))
		s.chosen = s.chosen[:0]
		for _, m := range s.idle[:min(len(s.idle), len(ev.Evict))] {
			s.chosen = append(s.chosen, m.Name)
		}
		chosen = s.chosen
	}
	s.countDuels = s.rival(s.countDuels, chosen, s.bestOf(other), cur, other)
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
