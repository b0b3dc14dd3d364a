package main

import (
	"cmp"
	"slices"
	"strings"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/evict"
	"github.com/loadout-dev/loadout/sdk/placement"
	sdksettings "github.com/loadout-dev/loadout/sdk/settings"
)

// swapper is the S3-FIFO router: sdk/evict's mechanics with the order of
// S3-FIFO's queues (evict.S3FIFO, the state `loadout simulate`'s S3-FIFO
// anchor keeps too), fed what the host's request counts say of the
// traffic at each swap.
type swapper struct {
	h     sdk.Host
	rules evict.Rules
	plan  evict.Planner
	// cache is S3-FIFO's state as of the last swap.
	cache *evict.S3FIFO[string]
	// seen is each model's request count (sdk.ModelDemand.Requests) when
	// the cache last counted it.
	seen map[string]uint64
	// view is the cache with what happened since the last swap applied
	// (see update), made for the plan being made; rank is each held
	// model's place in its eviction order.
	view *evict.S3FIFO[string]
	rank map[string]int
	// counts is the host's counts, read at the start of Plan or
	// OnSwapStart.
	counts sdk.DemandAt
}

// New makes the swapper from its settings JSON (sdk/evict's: margin and
// the host's placement); it is the factory registered with
// sdk.RegisterSwapper.
func New(h sdk.Host, raw []byte) (sdk.Swapper, error) {
	st, _, err := evict.ParseSettings(raw)
	if err != nil {
		return nil, sdksettings.Wrap("s3fifo settings", err)
	}
	s := &swapper{h: h, rules: evict.NewRules(st.Placement, st.Margin), cache: evict.NewS3FIFO[string](1),
		seen: map[string]uint64{}, rank: map[string]int{}}
	s.plan = evict.Planner{
		Policy:   "s3fifo",
		Margin:   st.Margin,
		Eligible: eligible,
		Order:    s.order,
		Volatile: true,
		Kept:     "pinned and higher-priority models are never evicted",
	}
	return s, nil
}

// eligible: a model of higher priority than the target is never evicted,
// as in prioritylru; sdk/evict never evicts a pinned one.
func eligible(target, m *sdk.ModelInfo) bool { return m.Priority <= target.Priority }

// Plan decides what must stop before q.Target loads, and where it goes.
// It changes nothing of the swapper's (the update goes to a copy).
func (s *swapper) Plan(q sdk.PlanRequest) (sdk.Plan, error) {
	if t, ok := s.h.ModelState(q.Target); ok && (t.State == sdk.StateReady || t.State == sdk.StateStarting) {
		return sdk.Plan{}, nil // loaded or loading: the planner needs nothing either
	}
	s.view = s.cache.Clone()
	s.update(s.view, s.counts.Read(s.h, q.Now, false), q.Running, false)
	clear(s.rank)
	i := 0
	s.view.Order(func(name string) bool {
		s.rank[name] = i
		i++
		return true
	})
	return s.plan.Plan(s.h, q, s.rules.For(q.Target))
}

// update brings c up to the host's counts and running set: a held model
// that was asked for since the last count is hit that many times, and a
// held model no longer running (stopped by its TTL, unloaded, crashed) is
// out of the cache, as if evicted. With commit, the counts are recorded
// as counted.
func (s *swapper) update(c *evict.S3FIFO[string], counts []sdk.ModelDemand, running []string, commit bool) {
	for _, d := range counts {
		if n := d.Requests - min(s.seen[d.Name], d.Requests); n > 0 {
			c.Hit(d.Name, int(n))
		}
		if commit {
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
// priority, then S3-FIFO's order (a running model the cache does not hold
// — one it never saw loaded — first), then the least recently used.
func (s *swapper) order(a, b *evict.Victim) int {
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

// rankOf is name's place in S3-FIFO's order for the plan being made; -1
// for a model the cache does not hold.
func (s *swapper) rankOf(name string) int {
	if r, ok := s.rank[name]; ok {
		return r
	}
	return -1
}

// OnSwapStart counts what was asked for since the last swap (as Plan's
// view did), takes the swap's victims out of the cache as S3-FIFO evicts
// (evict.S3FIFO.Evicted) and admits the target; the cache's size is the
// most models that have run at once. It logs the swap.
func (s *swapper) OnSwapStart(ev sdk.SwapStartEvent) {
	s.update(s.cache, s.counts.Read(s.h, ev.Now, true), ev.Running, true)
	for _, name := range ev.Evict {
		s.cache.Evicted(name)
	}
	s.cache.SetSlots(max(s.cache.Slots(), len(ev.Running)-len(ev.Evict)+1))
	s.cache.Admit(ev.Target)
	s.h.Log(sdk.LevelInfo, "s3fifo swap: model="+ev.Target+" evict=["+strings.Join(ev.Evict, ",")+"] devices="+placement.FormatDevices(ev.Devices))
}
