// Package cacherouter is a router (swapper) policy built from a classical
// cache rule's state (sdk/evict's S3FIFO, SIEVE and GDSF): the s3fifo,
// sieve and gdsf built-ins are this package with one rule each. The rule's state is fed
// what a router sees of the traffic — the host's request counts at each
// swap (the optional `demand` import) — and its eviction order is the
// order sdk/evict's planner evicts in.
package cacherouter

import (
	"cmp"
	"slices"
	"strings"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/evict"
	"github.com/loadout-dev/loadout/sdk/placement"
	sdksettings "github.com/loadout-dev/loadout/sdk/settings"
)

// Cache is a classical cache rule's state over model names, as sdk/evict
// keeps S3-FIFO's and SIEVE's: C is the type itself, so Clone returns it.
type Cache[C any] interface {
	// Hit records n requests for a held model.
	Hit(name string, n int)
	// Admit puts a model in after a miss.
	Admit(name string)
	// Evicted takes a model out as the rule evicts it.
	Evicted(name string)
	// Order yields the held models in the order the rule evicts them.
	Order(yield func(string) bool)
	// Held yields every held model.
	Held(yield func(string) bool)
	// Clone is a copy that changes apart from the original.
	Clone() C
	// Slots and SetSlots are how many models the rule holds.
	Slots() int
	SetSlots(n int)
}

// New returns the factory (for sdk.RegisterSwapper) of the router named
// policy whose rule's empty state newCache makes: sdk/evict's mechanics
// with the rule's order. Its settings are sdk/evict's (margin, and the
// placement the host adds); an unknown one is an error naming it.
func New[C Cache[C]](policy string, newCache func() C) func(sdk.Host, []byte) (sdk.Swapper, error) {
	return func(h sdk.Host, raw []byte) (sdk.Swapper, error) {
		st, _, err := evict.ParseSettings(raw)
		if err != nil {
			return nil, sdksettings.Wrap(policy+" settings", err)
		}
		s := &swapper[C]{policy: policy, h: h, rules: evict.NewRules(st.Placement, st.Margin), cache: newCache(),
			seen: map[string]uint64{}, rank: map[string]int{}}
		if w, ok := any(s.cache).(weighed); ok {
			w.SetCost(s.cost)
		}
		s.plan = evict.Planner{
			Policy:   policy,
			Margin:   st.Margin,
			Eligible: evict.NotHigherPriority,
			Order:    s.order,
			Volatile: true,
			Kept:     "pinned and higher-priority models are never evicted",
		}
		return s, nil
	}
}

// weighed is a cache whose rule weighs models by what a miss costs
// (sdk/evict's GDSF): the router gives it Cost.
type weighed interface {
	SetCost(func(name string) float64)
}

// cost is what a miss on model name costs per byte of room it takes: its
// cold load in seconds (the host's figure: the last measured, else the
// configured or estimated one; 1 s when it has none) over its VRAM in GiB
// (the host's estimate; 1 GiB when it has none). On K equal slots every
// model costs the same, and GDSF is LFU with dynamic aging.
func (s *swapper[C]) cost(name string) float64 {
	m, _ := s.h.ModelState(name)
	sec := float64(m.LoadTime) / 1e9
	if sec <= 0 {
		sec = 1
	}
	gib := float64(m.EstimatedVRAM) / (1 << 30)
	if gib <= 0 {
		gib = 1
	}
	return sec / gib
}

// swapper is a cache rule's router.
type swapper[C Cache[C]] struct {
	policy string
	h      sdk.Host
	rules  evict.Rules
	plan   evict.Planner
	// cache is the rule's state as of the last swap.
	cache C
	// seen is each model's request count (sdk.ModelDemand.Requests) when
	// the cache last counted it.
	seen map[string]uint64
	// rank is each held model's place in the eviction order of the plan
	// being made (Plan's copy of the cache, brought up to date).
	rank map[string]int
	// counts is the host's counts, read at the start of Plan or
	// OnSwapStart.
	counts sdk.DemandAt
	// hits is update's scratch: the models asked for since the last
	// count.
	hits []evict.Asked
}

// Plan decides what must stop before q.Target loads, and where it goes.
// It changes nothing of the swapper's but its scratch: the update goes to
// a copy of the cache.
func (s *swapper[C]) Plan(q sdk.PlanRequest) (sdk.Plan, error) {
	if t, ok := s.h.ModelState(q.Target); ok && (t.State == sdk.StateReady || t.State == sdk.StateStarting) {
		return sdk.Plan{}, nil // loaded or loading: the planner needs nothing either
	}
	view := s.cache.Clone()
	s.update(view, s.counts.Read(s.h, q.Now, false), q.Running, false)
	clear(s.rank)
	i := 0
	view.Order(func(name string) bool {
		s.rank[name] = i
		i++
		return true
	})
	return s.plan.Plan(s.h, q, s.rules.For(q.Target))
}

// update brings c up to the host's counts and running set: a held model
// asked for since the last count is hit that many times, in the order
// the host last used them (evict.AskedSince: a rule that breaks ties by
// recency, as GDSF does, so sees them as they came), and a held model no longer running
// (stopped by its TTL, unloaded, crashed) is out of the cache, as if
// evicted. With commit, the counts are recorded as counted.
func (s *swapper[C]) update(c C, counts []sdk.ModelDemand, running []string, commit bool) {
	s.hits = evict.AskedSince(s.hits, s.h, counts, func(i int) uint64 { return s.seen[counts[i].Name] })
	for _, h := range s.hits {
		c.Hit(h.Name, int(h.N))
	}
	if commit {
		for _, d := range counts {
			s.seen[d.Name] = d.Requests
		}
	}
	var gone []string
	c.Held(func(name string) bool {
		if !slices.Contains(running, name) {
			gone = append(gone, name)
		}
		return true
	})
	for _, name := range gone {
		c.Evicted(name)
	}
}

// order: stopping, then idle, then busy models; within a class the lowest
// priority, then the rule's order (a running model the cache does not
// hold — one it never saw loaded — first), then the least recently used.
func (s *swapper[C]) order(a, b *evict.Victim) int {
	if c := cmp.Compare(a.Class, b.Class); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Model.Priority, b.Model.Priority); c != 0 {
		return c
	}
	if c := cmp.Compare(s.rankOf(a.Model.Name), s.rankOf(b.Model.Name)); c != 0 {
		return c
	}
	return cmp.Compare(a.Model.LastUse, b.Model.LastUse)
}

// rankOf is name's place in the rule's order for the plan being made; -1
// for a model the cache does not hold.
func (s *swapper[C]) rankOf(name string) int {
	if r, ok := s.rank[name]; ok {
		return r
	}
	return -1
}

// OnSwapStart counts what was asked for since the last swap (as Plan's
// copy did), takes the swap's victims out of the cache as the rule evicts
// them and admits the target; the cache's size is the most models that
// have run at once. It logs the swap.
func (s *swapper[C]) OnSwapStart(ev sdk.SwapStartEvent) {
	s.update(s.cache, s.counts.Read(s.h, ev.Now, true), ev.Running, true)
	for _, name := range ev.Evict {
		s.cache.Evicted(name)
	}
	s.cache.SetSlots(max(s.cache.Slots(), len(ev.Running)-len(ev.Evict)+1))
	s.cache.Admit(ev.Target)
	s.h.Log(sdk.LevelInfo, s.policy+" swap: model="+ev.Target+" evict=["+strings.Join(ev.Evict, ",")+"] devices="+placement.FormatDevices(ev.Devices))
}
