package main

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/evict"
	"github.com/loadout-dev/loadout/sdk/placement"
	sdksettings "github.com/loadout-dev/loadout/sdk/settings"
)

// The two experts whose eviction orders the swapper follows.
const (
	expertLRU = 0 // least recently used first
	expertLFU = 1 // least often requested first (decayed counts), then least recently used
)

// expertNames are the experts' names in logs, by expert.
var expertNames = [2]string{"lru", "lfu"}

// swapper is the adaptive swapper: sdk/evict's mechanics with the order
// of whichever expert, LRU or LFU, has the higher weight, weights moving
// with the duels each wins or loses.
// Its frequencies come from the host's demand counts (sdk.ReadDemand)
// and the history it keeps at each real swap, so it does not claim
// sdk.PurePlanner, and the planner keeps its ranking between plans only
// while LRU leads (Volatile otherwise; see Plan).
type swapper struct {
	h     sdk.Host
	st    settings
	rules evict.Rules
	plan  evict.Planner
	// w is each expert's weight, summing to 1; the higher one's order
	// is followed (LRU's on a tie).
	w [2]float64
	// hist is each model's history as of the last real swap.
	hist evict.Rows[history]
	// expert is the expert whose order the plan being made follows;
	// planned is the one the last plan followed.
	expert, planned int
	// duels are the evictions on which the experts disagreed, not yet
	// decided, oldest first.
	duels []evict.Duel
	// counts is the host's counts, read at the start of OnSwapStart (and
	// in Plan while LFU leads); counts.List is valid until the next read.
	// idle is challenge's scratch.
	counts sdk.DemandAt
	idle   []*sdk.ModelInfo
}

// duel is one eviction on which the experts disagreed: chooser evicted x
// where the other expert would have evicted y. Whichever of the two is
// asked for first says who was right (Belady's rule, after the fact).
// history is what the swapper remembers of one model between swaps.
type history struct {
	score float64 // requests counted up to the last swap, older swaps' shares times decay
	seen  uint64  // the host's request count then (sdk.ModelDemand.Requests)
}

// New makes the swapper from its settings JSON; it is the factory
// registered with sdk.RegisterSwapper.
func New(h sdk.Host, raw []byte) (sdk.Swapper, error) {
	st, err := parseSettings(raw)
	if err != nil {
		return nil, sdksettings.Wrap("adaptive settings", err)
	}
	s := &swapper{h: h, st: st, rules: evict.NewRules(st.Placement, st.Margin),
		w: [2]float64{0.5, 0.5}}
	s.plan = evict.Planner{
		Policy:   "adaptive",
		Margin:   st.Margin,
		Eligible: evict.NotHigherPriority,
		Order:    s.order,
		Kept:     "pinned and higher-priority models are never evicted",
		// The sleep tier follows the leading expert: the model it would
		// evict last keeps its place in host memory first.
		SleepOrder: func(a, b *sdk.ModelInfo) int { return s.by(s.expert, b, a) },
	}
	return s, nil
}

// Plan decides what must stop before q.Target loads, and where it goes.
func (s *swapper) Plan(q sdk.PlanRequest) (sdk.Plan, error) {
	if t, ok := s.h.ModelState(q.Target); ok && (t.State == sdk.StateReady || t.State == sdk.StateStarting) {
		return sdk.Plan{}, nil // loaded or loading: the planner needs nothing either
	}
	s.expert = s.leader()
	// LFU's order reads the counts, refreshed here: the planner sorts
	// afresh. LRU's reads the models' fields only: the planner keeps its
	// ranking between plans, rebuilt once when the leader has changed.
	s.plan.Volatile = s.expert == expertLFU || s.expert != s.planned
	s.planned = s.expert
	if s.expert == expertLFU { // LRU's order needs no counts: spare the host read
		s.counts.Read(s.h, q.Now, false)
	}
	return s.plan.Plan(s.h, q, s.rules.For(q.Target))
}

// leader is the expert with the higher weight, LRU on a tie.
func (s *swapper) leader() int {
	if s.w[expertLFU] > s.w[expertLRU] {
		return expertLFU
	}
	return expertLRU
}

// frequency is model name's frequency, what LFU compares: its decayed
// request count as of the last swap, its requests since then counted in
// full (all of them for a model no swap has counted yet), from the counts
// read last (s.counts); 0 for a model the host does not count, or from a
// host without counts. Only the models an order compares are looked up.
func (s *swapper) frequency(name string) float64 {
	d := evict.Demand(s.counts.List, name)
	if d == nil {
		return 0
	}
	f := float64(d.Requests)
	if h := s.hist.Get(name); h != nil && d.Requests >= h.seen {
		f = h.score + float64(d.Requests-h.seen)
	}
	return f
}

// order: stopping models first, then idle ones, then busy or starting
// ones; within a class the lowest priority, then the expert's order.
func (s *swapper) order(a, b *evict.Victim) int {
	if c := cmp.Compare(a.Class, b.Class); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Model.Priority, b.Model.Priority); c != 0 {
		return c
	}
	return s.by(s.expert, a.Model, b.Model)
}

// by is expert e's order of two models: LFU the lower frequency first,
// then the least recently used; LRU the least recently used first.
func (s *swapper) by(e int, a, b *sdk.ModelInfo) int {
	if e == expertLFU {
		if c := cmp.Compare(s.frequency(a.Name), s.frequency(b.Name)); c != 0 {
			return c
		}
	}
	return cmp.Compare(a.LastUse, b.LastUse)
}

// OnSwapStart settles the duels this swap decides, starts one for each
// eviction on which the experts disagree, folds the requests since the
// last swap into each model's frequency, and logs the swap.
func (s *swapper) OnSwapStart(ev sdk.SwapStartEvent) {
	s.counts.Read(s.h, ev.Now, true)
	s.expert = s.leader() // the one whose plan this swap carries out
	s.settle(ev.Target)
	if len(ev.Evict) > 0 {
		s.challenge(ev)
	}
	for i, h := range s.hist.Align(s.counts.List) {
		d := &s.counts.List[i]
		if d.Requests < h.seen { // the model was removed and added again
			*h = history{}
		}
		h.score = h.score*s.st.Decay + float64(d.Requests-h.seen)
		h.seen = d.Requests
	}
	s.h.Log(sdk.LevelInfo, "adaptive swap: model="+ev.Target+" evict=["+strings.Join(ev.Evict, ",")+
		"] expert="+expertNames[s.expert]+" lru_weight="+strconv.FormatFloat(s.w[expertLRU], 'f', 2, 64)+
		" devices="+placement.FormatDevices(ev.Devices))
}

// settle decides every duel whose two models' order of requests the
// swap of target tells (evict.DuelVerdict), and keeps the undecided.
func (s *swapper) settle(target string) {
	s.duels = evict.Settle(s.duels, s.counts.List, target, s.lose)
}

// lose lowers the weight of the expert that lost a duel by e^-rate, the
// weights summing to 1 again, neither below minWeight (so an expert
// that was wrong for a while can win the lead back when traffic
// changes).
func (s *swapper) lose(e int) {
	s.w[e] *= math.Exp(-s.st.Rate)
	sum := s.w[0] + s.w[1]
	s.w[0], s.w[1] = max(s.w[0]/sum, minWeight), max(s.w[1]/sum, minWeight)
}

// minWeight is the least weight an expert keeps.
const minWeight = 0.01

// maxDuels bounds the duels waiting for a verdict; the oldest go first.
const maxDuels = 64

// challenge starts a duel for each model ev evicts that the other expert
// would have kept, against a model the other expert would have evicted
// in its place: the other expert's choice is its first len(ev.Evict)
// idle (or stopping), unpinned running models in its order.
func (s *swapper) challenge(ev sdk.SwapStartEvent) {
	s.idle = evict.Evictable(s.idle[:0], s.plan.Models(s.h), ev.Running)
	other := 1 - s.expert
	slices.SortStableFunc(s.idle, func(a, b *sdk.ModelInfo) int { return s.by(other, a, b) })
	s.duels = evict.Challenge(s.duels, ev.Evict, s.idle, s.counts.List, s.expert, other, maxDuels)
}
