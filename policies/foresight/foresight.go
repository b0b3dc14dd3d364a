package main

import (
	"cmp"
	"math"
	"strconv"
	"strings"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/evict"
	"github.com/loadout-dev/loadout/sdk/placement"
	sdksettings "github.com/loadout-dev/loadout/sdk/settings"
)

// The estimators: every half-life (in observations, the clock) for each
// way of counting.
var halfLives = [...]float64{1, 4, 16, 64, 256, 1024, 4096}

// Ways of counting a model's demand between two swaps.
const (
	countBursts   = 0 // 1 if it was asked for at all
	countRequests = 1 // every request
	nModes        = 2
)

// nEst is the number of estimators.
const nEst = len(halfLives) * nModes

// modeNames are the ways of counting in logs.
var modeNames = [nModes]string{"bursts", "requests"}

// Constants of the learning.
const (
	// prior is the observations every model is credited with when its
	// share is predicted or its value weighed (Laplace's rule): a model
	// never asked for still has a chance, and a slow one a cost.
	prior = 0.5
	// memory is what each swap leaves of an estimator's score and of
	// its lost trials: the choice follows about the last 200 swaps, so
	// it moves when the traffic changes.
	memory = 0.995
	// rescaleAt is the growth of an estimator's scale (log2) at which
	// its counts are scaled back, far below float64's range.
	rescaleAt = 400
)

// swapper is the foresight swapper: sdk/evict's mechanics with the order
// of the expected cost of each eviction, the demand forecast by the
// estimator that has predicted the traffic best.
type swapper struct {
	h     sdk.Host
	rules evict.Rules
	plan  evict.Planner
	// patience is settings.Patience: 0, or how readily a busy or
	// starting model goes before an idle one (order).
	patience float64
	// freeWaits is settings.free_waits (default true): whether plans
	// may wait where the waits are free.
	freeWaits bool
	// waitFree: the plan being made may wait for a busy victim, the
	// host's record of waits having room for it (sdk.WaitStats.Slack).
	waitFree bool
	// clock counts observations: a model asked for between two swaps
	// is one. Half-lives are on this clock, so nights and weekends
	// (fewer swaps, fewer observations) age nothing.
	clock float64
	// base is, per estimator, the clock at which its scale was 1: counts
	// are stored multiplied by 2^((clock at the addition − base)/H), so
	// decaying them all is a change of scale.
	base [nEst]float64
	// total is, per estimator, the sum of its stored counts.
	total [nEst]float64
	// score is, per estimator, its predictions' log-likelihood of the
	// models asked for at each swap, older swaps' times memory.
	score [nEst]float64
	// best is the estimator the forecast follows (forecast).
	best int
	// w is each expert's weight, summing to 1; duels move them, and
	// the plans follow LRU's order only while its weight is above
	// lruLeads (see leader).
	w [nExperts]float64
	// expert is the expert whose order the plan being made follows.
	expert int
	// duels are the evictions on which the experts disagreed, not yet
	// decided, oldest first.
	duels []evict.Duel
	// trials are the evictions each estimator's victim is judged on, not
	// yet decided, oldest first; loss is, per estimator, its lost
	// trials, older ones times memory.
	trials []evict.Trial
	loss   [nEst]float64
	// shadow is, per estimator, the models its own cache would hold
	// (shadows); smiss its misses there, older ones times memory; room
	// the shadows' size in bytes, the most the box has run at once;
	// asks and shm the shadows' scratch: the models asked for since the
	// last swap, and what the shadows need of each model.
	shadow [nEst][]string
	smiss  [nEst]float64
	// lru is LRU's shadow: the models LRU's own cache would hold in the
	// same room, the least recently used first; lmiss its misses and,
	// per estimator, slong its shadow's, older ones times lruMemory, the
	// longer memory they are compared on (leader).
	lru   []string
	lmiss float64
	slong [nEst]float64
	room  uint64
	asks  []evict.Asked
	shm   map[string]shadowModel
	// idle is the duels' and trials' scratch: the swap's candidates;
	// alt their values in one order; cand what judge values them by;
	// victims each estimator's choice.
	idle    []*sdk.ModelInfo
	alt     map[string]float64
	cand    []candidate
	victims []string
	// models is what the swapper keeps of each model.
	models evict.Rows[model]
	// value is the value of each model the plan being made has compared
	// (val fills it), by estimator valueJ (or estLRU, estReuse: orderValue),
	// whose scale was valueG when the plan began.
	value  map[string]float64
	valueJ int
	valueG float64
	// counts is the host's counts, read at the start of OnSwapStart or
	// Plan; counts.List is valid until the next read. reqs is the box's
	// request count then: every model's, summed.
	counts sdk.DemandAt
	reqs   float64
	// rw is each recency order's weight (LRU's, reuse's), summing to 1;
	// the recency duels (rduels) move them, and the LRU expert follows
	// the order of reuse while its weight is above reuseLeads. pick is
	// their scratch: LRU's victims at a swap.
	rw     [nRecency]float64
	rduels []evict.Duel
	pick   []string
}

// model is what the swapper remembers of one model between swaps.
type model struct {
	seen  uint64        // the host's request count at the last swap (sdk.ModelDemand.Requests)
	count [nEst]float64 // per estimator, its stored count (see swapper.base)
	load  float64       // its last cold load in seconds (sdk.ModelDemand.LoadTime); 0 before the first
	// lastR is the box's request count (every model's, summed) at the
	// swap that last observed it; gap is its last gap between two
	// requests in the box's requests, 0 while unknown (the order of
	// reuse: urgency).
	lastR, gap float64
}

// New makes the swapper from its settings JSON; it is the factory
// registered with sdk.RegisterSwapper.
func New(h sdk.Host, raw []byte) (sdk.Swapper, error) {
	st, err := parseSettings(raw)
	if err != nil {
		return nil, sdksettings.Wrap("foresight settings", err)
	}
	s := &swapper{h: h, rules: evict.NewRules(st.Placement, st.Margin), patience: st.Patience,
		freeWaits: !st.NoFreeWaits, value: map[string]float64{}, alt: map[string]float64{},
		shm: map[string]shadowModel{}}
	s.w = [nExperts]float64{0.5, 0.5}
	s.rw = [nRecency]float64{0.5, 0.5}
	s.best = len(halfLives)*countBursts + len(halfLives) - 1 // longest memory, bursts, until the traffic says otherwise
	s.plan = evict.Planner{
		Policy:     "foresight",
		Margin:     st.Margin,
		Eligible:   evict.NotHigherPriority,
		Order:      s.order,
		Volatile:   true,
		Kept:       "pinned and higher-priority models are never evicted",
		SleepOrder: s.sleepOrder,
	}
	return s, nil
}

// Plan decides what must stop before q.Target loads, and where it goes.
func (s *swapper) Plan(q sdk.PlanRequest) (sdk.Plan, error) {
	if t, ok := s.h.ModelState(q.Target); ok && (t.State == sdk.StateReady || t.State == sdk.StateStarting) {
		return sdk.Plan{}, nil // loaded or loading: the planner needs nothing either
	}
	s.read(q.Now, false)
	s.expert = s.leader()
	s.waitFree = s.freeWaits && s.patience == 0 && s.expert == expertForecast && s.freeWait(q.Target)
	clear(s.value)
	if s.valueJ = s.estimator(s.expert); s.valueJ >= 0 {
		s.valueG = s.scale(s.valueJ)
	}
	return s.plan.Plan(s.h, q, s.rules.For(q.Target))
}

// freeWait reports whether a request for target may wait for a busy
// victim without moving a 95th percentile of queueing delay — the box's
// or target's own (sdk.WaitStats.Slack): each record must have room for
// every request held now to end above its percentile, so a wait already
// under way, or one this plan starts, is paid for before it is counted.
// False on a host that keeps no record.
func (s *swapper) freeWait(target string) bool {
	for _, name := range [...]string{"", target} {
		w, ok := sdk.ReadWaits(s.h, name)
		if !ok || w.Slack() <= int(w.Held) {
			return false
		}
	}
	return true
}

// read reads the host's counts at now (sdk.DemandAt.Read; settle at a
// swap's start) and sums them into s.reqs.
func (s *swapper) read(now int64, settle bool) {
	s.counts.Read(s.h, now, settle)
	s.reqs = 0
	for i := range s.counts.List {
		s.reqs += float64(s.counts.List[i].Requests)
	}
}

// val is model name's value in the plan being made: by the estimator of
// the expert it follows (valueOf), its urgency in the order of reuse, 0
// in LRU's or for a model the host does not count. Only the models the
// plan compares are valued, once each.
func (s *swapper) val(name string) float64 {
	if s.valueJ == estLRU {
		return 0
	}
	v, ok := s.value[name]
	if !ok {
		if d := evict.Demand(s.counts.List, name); d != nil {
			v = s.orderValue(s.valueJ, s.valueG, d)
		}
		s.value[name] = v
	}
	return v
}

// orderValue is d's model's value in estimator j's order, whose scale is
// g now: its expected demand (valueOf), its urgency times its load cost
// in seconds (estReuse; the order weighs it per byte, as the forecast's),
// or 0 (estLRU).
func (s *swapper) orderValue(j int, g float64, d *sdk.ModelDemand) float64 {
	switch j {
	case estLRU:
		return 0
	case estReuse:
		return s.urgency(d) * loadCost(d, s.models.Get(d.Name))
	}
	return s.valueOf(j, g, d)
}

// urgency is how soon d's model is expected back, for the order of
// reuse: 1 / (1 + the box's requests until its next request). A model
// observed at least twice is expected its last gap after its last
// request, while no more than one request late; one that is later, back
// after a long absence (its gap unknown, see reuseGap) or seen once is
// expected as long after now as it has been away (the least recently
// used goes first).
// In a cycle of more models than the box holds, the model asked for
// longest ago is the next asked for, and LRU evicts it every request;
// this order evicts the one asked for last (Belady's choice), and once
// the cycle ends its models, late, go in LRU's order.
func (s *swapper) urgency(d *sdk.ModelDemand) float64 {
	m := s.models.Get(d.Name)
	last, gap := s.reqs, 0.0 // asked for since the last swap: last is now
	if m != nil {
		gap = m.gap
		if since(d, m) == 0 {
			last = m.lastR
		}
	} else if d.Requests == 0 {
		return 0
	}
	age := max(s.reqs-last, 0)
	next := s.reqs + age
	if gap > 0 && age <= gap+1 {
		next = last + gap
	}
	return 1 / (max(next-s.reqs, 0) + 1)
}

// valueOf is d's model's expected demand by estimator j, whose scale is g
// now, what it was asked for since the last swap counted in full, weighed
// by its load time.
func (s *swapper) valueOf(j int, g float64, d *sdk.ModelDemand) float64 {
	m := s.models.Get(d.Name)
	return expected(j, g, m, since(d, m), loadCost(d, m))
}

// expected is the value every order of the forecast compares: by
// estimator j, whose scale is g now, the expected demand of a model whose
// row is m (nil before its first swap) and that was asked for delta times
// since the last swap, plus the prior, times cost, its load cost in
// seconds.
func expected(j int, g float64, m *model, delta uint64, cost float64) float64 {
	f := increment(j, delta)
	if m != nil {
		f += m.count[j] / g
	}
	return (f + prior) * cost
}

// since is how many times d's model (row m, nil before its first swap)
// was asked for since the last swap.
func since(d *sdk.ModelDemand, m *model) uint64 {
	if m == nil {
		return d.Requests
	}
	if d.Requests > m.seen {
		return d.Requests - m.seen
	}
	return 0 // removed and added again: its count starts over
}

// loadCost is what loading d's model again costs, in seconds: its last
// cold load, else 1 (every model alike until one has loaded).
func loadCost(d *sdk.ModelDemand, m *model) float64 {
	if d.LoadTime > 0 {
		return float64(d.LoadTime) / 1e9
	}
	if m != nil && m.load > 0 {
		return m.load
	}
	return 1
}

// increment is what delta requests between two swaps add to a count of
// estimator j.
func increment(j int, delta uint64) float64 {
	if delta == 0 {
		return 0
	}
	if j/len(halfLives) == countRequests {
		return float64(delta)
	}
	return 1
}

// halfLife is estimator j's half-life in observations.
func halfLife(j int) float64 { return halfLives[j%len(halfLives)] }

// scale is estimator j's scale now: a stored count divided by it is the
// count decayed to the present.
func (s *swapper) scale(j int) float64 { return math.Exp2((s.clock - s.base[j]) / halfLife(j)) }

// order: stopping models first, then idle ones, then busy or starting
// ones; within a class the lowest priority, then the leading expert's
// order. With patience (settings.Patience) and the forecast leading,
// idle, busy and starting models are one class, a busy or starting
// model's value divided by the patience; where the wait is free
// (waitFree), one class too, by value alone.
func (s *swapper) order(a, b *evict.Victim) int {
	patient := (s.patience > 0 || s.waitFree) && s.expert == expertForecast
	if c := cmp.Compare(s.class(a, patient), s.class(b, patient)); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Model.Priority, b.Model.Priority); c != 0 {
		return c
	}
	if patient {
		if c := cmp.Compare(s.perByte(a), s.perByte(b)); c != 0 {
			return c
		}
		return cmp.Compare(a.Model.LastUse, b.Model.LastUse)
	}
	return by(s.val(a.Model.Name), a.Model, a.VRAM, s.val(b.Model.Name), b.Model, b.VRAM)
}

// class is v's class in order: Busy counts as Idle when the order is
// patient.
func (s *swapper) class(v *evict.Victim, patient bool) evict.Class {
	if patient && v.Class == evict.Busy {
		return evict.Idle
	}
	return v.Class
}

// perByte is v's value per byte it gives back, a busy or starting
// model's divided by the patience unless the wait is free.
func (s *swapper) perByte(v *evict.Victim) float64 {
	x := s.val(v.Model.Name) / float64(max(v.VRAM, 1))
	if v.Class == evict.Busy {
		if !s.waitFree {
			x /= s.patience
		}
	}
	return x
}

// by is an expert's order of two models a and b, of values va and vb
// (all 0 for LRU's), which give back av and bv bytes: the least value per
// byte first, then the least recently used.
func by(va float64, a *sdk.ModelInfo, av uint64, vb float64, b *sdk.ModelInfo, bv uint64) int {
	if c := cmp.Compare(va/float64(max(av, 1)), vb/float64(max(bv, 1))); c != 0 {
		return c
	}
	return cmp.Compare(a.LastUse, b.LastUse)
}

// OnSwapStart settles the duels and trials the models asked for since the
// last swap decide and starts this swap's, scores every estimator on
// those models, folds their requests into every estimator's counts,
// chooses the forecast, and logs the swap.
func (s *swapper) OnSwapStart(ev sdk.SwapStartEvent) {
	s.read(ev.Now, true)
	s.expert = s.leader() // the one whose plan this swap carries out
	s.settle(ev.Target)
	for j := range nEst {
		s.loss[j] *= memory
	}
	s.settleTrials(ev.Target)
	if len(ev.Evict) > 0 {
		s.evictable(ev)
		s.judge()
		s.challenge(ev)
		s.recencyDuels(len(ev.Evict))
	}
	s.shadows(ev)
	n := float64(len(s.counts.List))
	// Score: each estimator's predicted share of every model asked for.
	var asked float64
	for j := range nEst {
		s.score[j] *= memory
	}

	row := s.models.Align(s.counts.List)
	for i, m := range row {
		d := &s.counts.List[i]
		if d.Requests < m.seen { // the model was removed and added again
			*m = model{}
		}
		if d.LoadTime > 0 {
			m.load = float64(d.LoadTime) / 1e9
		}
		if d.Requests == m.seen {
			continue
		}
		asked++
		for j := range nEst {
			g := s.scale(j)
			s.score[j] += math.Log((m.count[j]/g + prior) / (s.total[j]/g + prior*n))
		}
	}
	// Fold: the clock moves by the observations, then each count grows
	// by its increment at the present scale, and each model asked for
	// notes its gap (the order of reuse).
	s.clock += asked
	for j := range nEst {
		if (s.clock-s.base[j])/halfLife(j) > rescaleAt {
			s.rescale(j)
		}
	}
	for i, m := range row {
		d := &s.counts.List[i]
		if d.Requests == m.seen {
			continue
		}
		delta := d.Requests - m.seen
		m.gap = reuseGap(m, s.reqs, delta)
		m.lastR = s.reqs
		m.seen = d.Requests
		for j := range nEst {
			add := increment(j, delta) * s.scale(j)
			m.count[j] += add
			s.total[j] += add
		}
	}
	s.best = s.forecast()
	s.h.Log(sdk.LevelInfo, "foresight swap: model="+ev.Target+" evict=["+strings.Join(ev.Evict, ",")+
		"] half_life="+strconv.FormatFloat(halfLife(s.best), 'f', -1, 64)+" counting="+modeNames[s.best/len(halfLives)]+
		" expert="+s.expertName()+" devices="+placement.FormatDevices(ev.Devices))
}

// reuseGap is m's gap between requests after delta more, the box's
// request count now r: their mean gap since m was last observed; 0
// (unknown) at its first, after a gap over four times its last (back
// after a long absence: a new working set, whose gaps its next request
// tells), or where the count fell (a model removed from the box).
func reuseGap(m *model, r float64, delta uint64) float64 {
	if m.seen == 0 || r <= m.lastR {
		return 0
	}
	g := (r - m.lastR) / float64(delta)
	if m.gap > 0 && g > 4*m.gap {
		return 0
	}
	return g
}

// rescale brings estimator j's scale back to 1 at the present clock.
func (s *swapper) rescale(j int) {
	g := s.scale(j)
	for _, m := range s.models.All() {
		m.count[j] /= g
	}
	s.total[j] /= g
	s.base[j] = s.clock
}

// sleepOrder ranks models for the sleep tier: the most forecast load
// seconds saved per byte of host memory first (its value, the forecast
// load seconds, times the share of a load a wake saves), then the most
// recently used.
func (s *swapper) sleepOrder(a, b *sdk.ModelInfo) int {
	saved := func(m *sdk.ModelInfo) float64 {
		bytes := m.HostBytes1
		if m.Asleep() {
			bytes = m.HostLeased
		}
		share := 1.0
		if m.LoadTime > 0 {
			share = float64(max(m.LoadTime-m.WakeTime1, 0)) / float64(m.LoadTime)
		}
		return s.val(m.Name) * share / float64(max(bytes, 1))
	}
	if c := cmp.Compare(saved(b), saved(a)); c != 0 {
		return c
	}
	return cmp.Compare(b.LastUse, a.LastUse)
}
