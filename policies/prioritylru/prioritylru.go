package main

import (
	"cmp"
	"strings"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/evict"
	"github.com/loadout-dev/loadout/sdk/placement"
	sdksettings "github.com/loadout-dev/loadout/sdk/settings"
)

// swapper is the prioritylru swapper: sdk/evict's mechanics with its
// eviction order. Plan reads the host's snapshot, so it does not claim
// sdk.PurePlanner.
type swapper struct {
	h     sdk.Host
	st    settings
	rules evict.Rules
	plan  evict.Planner
}

// New makes the swapper from its settings JSON; it is the factory
// registered with sdk.RegisterSwapper.
func New(h sdk.Host, raw []byte) (sdk.Swapper, error) {
	st, err := parseSettings(raw)
	if err != nil {
		return nil, sdksettings.Wrap("prioritylru settings", err)
	}
	sw := &swapper{h: h, st: st, rules: evict.NewRules(st.Placement, st.Margin)}
	sw.plan = evict.Planner{
		Policy:   "prioritylru",
		Margin:   st.Margin,
		Eligible: evict.NotHigherPriority,
		Order:    evictionOrder,
		Kept:     "pinned and higher-priority models are never evicted",
		// The sleep tier is LRU too: the most recently used victims and
		// sleepers keep host memory, the least recently used are stopped.
		SleepOrder: func(a, b *sdk.ModelInfo) int { return cmp.Compare(b.LastUse, a.LastUse) },
	}
	return sw, nil
}

// Plan decides what must stop before q.Target loads, and where it goes.
// See the package documentation for the rules. The returned slices are the
// swapper's own and valid until the next call (the SDK encodes them at
// once).
func (s *swapper) Plan(q sdk.PlanRequest) (sdk.Plan, error) {
	return s.plan.Plan(s.h, q, s.rules.For(q.Target))
}

// evictionOrder: stopping models first, then idle ones, then busy or
// starting ones; within a class the lowest priority, then the least
// recently used (0, never used, first); sdk/evict breaks the remaining
// ties by name.
func evictionOrder(a, b *evict.Victim) int {
	if c := cmp.Compare(a.Class, b.Class); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Model.Priority, b.Model.Priority); c != 0 {
		return c
	}
	return cmp.Compare(a.Model.LastUse, b.Model.LastUse)
}

// OnSwapStart logs the swap once, when it really starts: the target, the
// evicted models, the bytes they free and the placement.
func (s *swapper) OnSwapStart(ev sdk.SwapStartEvent) {
	// The snapshot of the plan this swap carries out, read moments ago;
	// the host's whole snapshot (every model decoded again) only when no
	// plan read one with the target in it.
	snap := s.plan.Snapshot()
	var need, freed uint64
	next := 0
	t := evict.Find(snap.Models, ev.Target, &next)
	if t == nil {
		full := s.h.Snapshot()
		snap, next = &full, 0
		t = evict.Find(snap.Models, ev.Target, &next)
	}
	if t != nil {
		need = evict.VRAM(t)
	}
	next = 0
	for _, e := range ev.Evict {
		if m := evict.Find(snap.Models, e, &next); m != nil {
			freed += evict.VRAM(m)
		}
	}
	devices := "host"
	if len(ev.Devices) > 0 {
		devices = placement.FormatDevices(ev.Devices)
	}
	s.h.Log(sdk.LevelInfo, "prioritylru swap: model="+ev.Target+" need="+sdksettings.FormatSize(need, "")+
		" evict=["+strings.Join(ev.Evict, ",")+"] freed="+sdksettings.FormatSize(freed, "")+" devices="+devices)
}
