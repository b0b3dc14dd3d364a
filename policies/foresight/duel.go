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

// The recency orders the LRU expert follows: LRU's, or, while it has won
// clearly more of their duels, the order of reuse (urgency).
const (
	recencyLRU   = 0 // the least recently used first
	recencyReuse = 1 // the model whose next request is expected last first
	nRecency     = 2
	// reuseLeads is the recency duels' weight above which the order of
	// reuse is followed: it must have won clearly more than it lost, as
	// LRU must against the forecast.
	reuseLeads = 0.7
)

// What estimator answers for the LRU expert: orders that are no
// estimator's.
const (
	estLRU   = -1 // LRU's: every value 0
	estReuse = -2 // the order of reuse: values are urgencies
)

// expertNames are the experts' names in logs.
var expertNames = [nExperts]string{"forecast", "lru"}

// expertName is the name in logs of the order s.expert follows: the
// LRU expert's is "reuse" while it follows the order of reuse.
func (s *swapper) expertName() string {
	if s.expert == expertLRU && s.estimator(expertLRU) == estReuse {
		return "reuse"
	}
	return expertNames[s.expert]
}

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
// weight is above lruLeads, while the likelihood says the traffic's
// memory is the shortest there is (recent), or while LRU's own cache
// has missed less than the forecast's (the shadows); else the forecast.
// The forecast is the default, as it is on every traffic shape but
// moving working sets and conversations.
//
// Recent traffic: when the best-scored bursts estimator is the one of
// half-life 1 observation, the models asked for between the last two
// swaps predict the next ones best — the working set moves, as an
// agent's does — and a count of that memory is a coarse recency, every
// model observed between two swaps alike. LRU's order is the same rule
// told by each model's last request, so it is followed at once, without
// the four net duel wins it needs otherwise: on agent traffic those cost
// the start-up (code agent8 seed 12: 12 loads above the LRU router in
// the first 69 swaps, none after). On stationary traffic the bursts
// likelihood prefers longer memories and this seldom holds (under 1% of
// the swaps on the Azure Zipf traces, none on the production-shaped ones,
// whose figures are unchanged to the load; docs/RATIONALE.md, "Recent
// traffic follows LRU at once").
//
// LRU's shadow: a duel judges one eviction at a time, and its weights
// swing with streaks (on users in conversations, from 0.01 to 0.99 and
// back within a few hundred swaps), so the forecast led a third of the
// swaps there, where LRU is the best of the classical rules. What the
// two orders come to when their choices compound, their own caches tell:
// LRU's shadow (played as the estimators' are) against the shadow of
// the estimator the forecast follows, their misses counted over about
// the last 1,000 swaps (lruMemory). Where LRU's has missed fewer, its
// order is followed; on Zipf and production traffic that seldom holds
// (a handful of the 9,825 swaps of an Azure hour over 86 models on four
// slots, none of prod-3w's; docs/BENCHMARKS.md, "Popularity that
// drifts, and users in conversations").
func (s *swapper) leader() int {
	if s.w[expertLRU] > lruLeads || s.recent() || s.lmiss < s.slong[s.best] {
		return expertLRU
	}
	return expertForecast
}

// recent reports whether the best-scored bursts estimator has the
// shortest half-life: the traffic's memory is the last swap's models.
func (s *swapper) recent() bool {
	return s.bestOf(countBursts) == countBursts*len(halfLives)
}

// estimator is the estimator expert e's order reads; for the LRU
// expert, estLRU, or estReuse while the order of reuse leads the recency
// duels.
func (s *swapper) estimator(e int) int {
	if e == expertLRU {
		if s.rw[recencyReuse] > reuseLeads {
			return estReuse
		}
		return estLRU
	}
	return s.best
}

// recencyDuels starts a recency duel for each of LRU's first n victims
// among s.idle (the swap's candidates, evictable) that the order of reuse
// would have kept, against the one it would have evicted in its place,
// whichever order the swap followed: the two are judged on every
// eviction, as the trials judge the estimators.
func (s *swapper) recencyDuels(n int) {
	s.sortIdle(estLRU)
	s.pick = s.pick[:0]
	for _, m := range s.idle[:min(n, len(s.idle))] {
		s.pick = append(s.pick, m.Name)
	}
	s.sortIdle(estReuse)
	s.rduels = evict.Challenge(s.rduels, s.pick, s.idle, s.counts.List, recencyLRU, recencyReuse, maxDuels)
}

// settleRecency decides the recency duels the swap of target tells.
func (s *swapper) settleRecency(target string) {
	s.rduels = evict.Settle(s.rduels, s.counts.List, target, func(e int) { lost(s.rw[:], e) })
}

// settle decides every duel whose two models' order of requests the
// swap of target tells (evict.DuelVerdict), the recency duels too, and
// keeps the undecided.
func (s *swapper) settle(target string) {
	s.duels = evict.Settle(s.duels, s.counts.List, target, s.lose)
	s.settleRecency(target)
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
// of side chooser) that estimator j's order (see sortIdle) would have
// kept, against the model it would have evicted in its place
// (evict.Challenge), other naming j's side; it sorts s.idle in j's order.
func (s *swapper) rival(duels []evict.Duel, chosen []string, j, chooser, other int) []evict.Duel {
	s.sortIdle(j)
	return evict.Challenge(duels, chosen, s.idle, s.counts.List, chooser, other, maxDuels)
}

// sortIdle sorts s.idle in estimator j's order (estLRU, estReuse or an
// estimator's), valuing only its models.
func (s *swapper) sortIdle(j int) {
	clear(s.alt)
	if j != estLRU {
		var g float64
		if j >= 0 {
			g = s.scale(j)
		}
		for _, m := range s.idle {
			if d := evict.Demand(s.counts.List, m.Name); d != nil {
				s.alt[m.Name] = s.orderValue(j, g, d)
			}
		}
	}
	slices.SortStableFunc(s.idle, func(a, b *sdk.ModelInfo) int {
		return by(s.alt[a.Name], a, footprint(a), s.alt[b.Name], b, footprint(b))
	})
}

// The choice of forecast. The scores choose each way of counting's
// half-life, but they cannot choose between the ways: what they score is
// the set of models asked for between two swaps, which is what a count of
// bursts forecasts, so they favour bursts even where request counts order
// the models better (Zipf traffic of independent requests:
// docs/RATIONALE.md, "Counting requests or bursts"); and on stationary
// traffic they favour short half-lives, whose noise orders a small box's
// few models worse than a plain decayed count (RATIONALE, "The forecast
// chosen by trials of its estimators' evictions"). So the forecast is chosen by
// what it is for: at every swap that evicts, each estimator's victim among
// the swap's candidates is judged by Belady's rule after the fact
// (evict.Trial), and the forecast follows whichever of three lost fewest
// recent trials: the best-scored estimator of each way of counting, and
// LFU's (requests, the longest memory).

// Constants of the trials.
const (
	// lfu is the estimator of LFU with decay: requests, the longest
	// half-life.
	lfu = nEst - 1
	// maxTrials bounds the trials waiting for a verdict; the oldest go.
	maxTrials = 64
)

// forecast is the estimator the forecast follows: of the best-scored of
// each way of counting and LFU's, the one with the least loss (lost
// trials, older ones times memory); bursts' first among equals (a batch
// client's twenty requests are one sign of demand), as at start-up —
// unless another estimator's own cache missed clearly less (shadows):
// by more than shadowMargin of the trials' choice's misses.
func (s *swapper) forecast() int {
	best := s.bestOf(countBursts)
	for _, j := range [...]int{s.bestOf(countRequests), lfu} {
		if s.loss[j] < s.loss[best] {
			best = j
		}
	}
	least := best
	for j := range nEst {
		if s.smiss[j] < s.smiss[least] {
			least = j
		}
	}
	if s.smiss[least] < (1-shadowMargin)*s.smiss[best] {
		return least
	}
	return best
}

// Each estimator's own cache. A trial judges an estimator's victim at
// one of the box's evictions, among the models the box holds then, which
// the forecast followed so far chose; what an estimator's choices come to
// when they compound — the models it keeps deciding what it may evict
// later — no trial sees. On chat users beside agents, a count of bursts
// with a half-life of one or four observations alone beats LRU-2 there,
// while the likelihood picks another and the trials mostly request
// counts (docs/BENCHMARKS.md, "Chat users and agents on one box"). So
// every estimator also keeps a shadow: the models its own cache would
// hold in the box's room, played through the models asked for at every
// swap, and the forecast follows the one that missed least there where
// it beats the trials' choice by a margin. The margin keeps the trials'
// choice where the two are close: the shadows see the requests between
// two swaps in the order of each model's last use only (the counts tell
// no more), and on the traces the trials were built on, following the
// shadows alone cost 0.3–0.5% more loads.

// shadowMargin is how much fewer misses (a fraction of the trials'
// choice's) another estimator's shadow must have for the forecast to
// follow it.
const shadowMargin = 0.05

// shadows plays the swap into every estimator's shadow and LRU's: the
// models asked for since the last swap, in the order the host last used
// them, the target last. A model a shadow holds is a hit; any other a
// miss, which adds 1 to the shadow's misses (older ones times memory)
// and goes in, the shadow first evicting, while it lacks the room, its
// model of least value per byte by that estimator (LRU's: the least
// recently used). The room is the most bytes the box has run at once
// (the models running after a swap, the target's included).
func (s *swapper) shadows(ev sdk.SwapStartEvent) {
	clear(s.shm)
	held := s.shadowed(ev.Target).bytes
	for _, name := range ev.Running {
		if name != ev.Target && !slices.Contains(ev.Evict, name) {
			held += s.shadowed(name).bytes
		}
	}
	s.room = max(s.room, held)
	row := s.models.Align(s.counts.List)
	s.asks = evict.AskedSince(s.asks, s.h, s.counts.List, func(i int) uint64 { return row[i].seen })
	if i := slices.IndexFunc(s.asks, func(a evict.Asked) bool { return a.Name == ev.Target }); i >= 0 {
		s.asks = slices.Delete(s.asks, i, i+1)
	}
	s.asks = append(s.asks, evict.Asked{Name: ev.Target})
	s.playLRU()
	for j := range nEst {
		s.smiss[j] *= memory
		s.slong[j] *= lruMemory
		g := s.scale(j)
		var used uint64
		for _, name := range s.shadow[j] {
			used += s.shadowed(name).bytes
		}
		for _, a := range s.asks {
			if slices.Contains(s.shadow[j], a.Name) {
				continue
			}
			s.smiss[j]++
			s.slong[j]++
			for need := s.shadowed(a.Name).bytes; len(s.shadow[j]) > 0 && used+need > s.room; {
				v, vv := 0, math.Inf(1)
				for i, name := range s.shadow[j] {
					sm := s.shadowed(name)
					var x float64 // 0 for a model the host does not count, as in val
					if sm.d != nil {
						x = s.valueOf(j, g, sm.d) / float64(sm.bytes)
					}
					if x < vv {
						v, vv = i, x
					}
				}
				used -= s.shadowed(s.shadow[j][v]).bytes
				s.shadow[j] = slices.Delete(s.shadow[j], v, v+1)
			}
			s.shadow[j] = append(s.shadow[j], a.Name)
			used += s.shadowed(a.Name).bytes
		}
	}
}

// lruMemory is what each swap leaves of the misses LRU's shadow and the
// estimators' are compared on (leader): where the two differ by a few
// misses in a hundred, the 200 swaps of the estimators' own memory
// handed the lead back and forth (at 0.995: up to 24 loads more on three
// seeds of conversations, 92 more on the mixtures of agents and chat;
// 0.9997 is within a few loads of 0.999).
const lruMemory = 0.999

// playLRU plays the models asked for since the last swap (s.asks) into
// LRU's shadow: a hit becomes the most recently used; a miss goes in
// after the least recently used models have left the room it needs.
func (s *swapper) playLRU() {
	s.lmiss *= lruMemory
	var used uint64
	for _, name := range s.lru {
		used += s.shadowed(name).bytes
	}
	for _, a := range s.asks {
		if i := slices.Index(s.lru, a.Name); i >= 0 {
			s.lru = append(slices.Delete(s.lru, i, i+1), a.Name)
			continue
		}
		s.lmiss++
		need := s.shadowed(a.Name).bytes
		for len(s.lru) > 0 && used+need > s.room {
			used -= s.shadowed(s.lru[0]).bytes
			s.lru = slices.Delete(s.lru, 0, 1)
		}
		s.lru = append(s.lru, a.Name)
		used += need
	}
}

// shadowModel is what a shadow needs of a model during one swap: its
// counts (nil for a model the host does not count) and the bytes it takes
// (its footprint, at least 1).
type shadowModel struct {
	d     *sdk.ModelDemand
	bytes uint64
}

// shadowed is model name's shadowModel for the swap being played, looked
// up once a swap (s.shm; shadows clears it).
func (s *swapper) shadowed(name string) shadowModel {
	if sm, ok := s.shm[name]; ok {
		return sm
	}
	info, _ := s.h.ModelState(name)
	sm := shadowModel{bytes: max(footprint(&info), 1)}
	sm.d = evict.Demand(s.counts.List, name)
	s.shm[name] = sm
	return sm
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

// settleTrials moves every trial on by the swap of target, each lost one
// adding 1 to its estimator's loss.
func (s *swapper) settleTrials(target string) {
	s.trials = evict.SettleTrials(s.trials, s.counts.List, target, func(j int) { s.loss[j]++ })
}

// judge starts a trial of the swap's eviction: each estimator's victim,
// the first of the swap's candidates in its order (the least value per
// byte, then the least recently used). s.idle must hold the candidates
// (evictable); with fewer than two there is no choice to judge.
func (s *swapper) judge() {
	if len(s.idle) < 2 {
		return
	}
	s.cand = s.cand[:0]
	for _, m := range s.idle {
		c := candidate{m: m, bytes: footprint(m), cost: 1}
		if d := evict.Demand(s.counts.List, m.Name); d != nil {
			c.counted = true
			c.row = s.models.Get(d.Name)
			c.cost = loadCost(d, c.row)
			c.delta = since(d, c.row)
		}
		s.cand = append(s.cand, c)
	}
	s.victims = s.victims[:0]
	for j := range nEst {
		g := s.scale(j)
		var v *candidate
		var vv float64
		for i := range s.cand {
			c := &s.cand[i]
			var x float64 // 0 for a model the host does not count, as in val
			if c.counted {
				x = expected(j, g, c.row, c.delta, c.cost)
			}
			if v == nil || by(x, c.m, c.bytes, vv, v.m, v.bytes) < 0 {
				v, vv = c, x
			}
		}
		s.victims = append(s.victims, v.m.Name)
	}
	s.trials = evict.StartTrial(s.trials, s.victims, s.counts.List, maxTrials)
}

// candidate is one of a swap's candidates as judge values it: its model,
// the bytes evicting it gives back, whether the host counts its requests,
// its load cost in seconds, what the swapper keeps of it (nil before its
// first swap) and its requests since the last swap.
type candidate struct {
	m       *sdk.ModelInfo
	counted bool
	bytes   uint64
	cost    float64
	row     *model
	delta   uint64
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
