package main

import (
	"cmp"
	"math"
	"strings"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/evict"
	"github.com/loadout-dev/loadout/sdk/placement"
	sdksettings "github.com/loadout-dev/loadout/sdk/settings"
)

// swapper is the Ollama-rule swapper: sdk/evict's mechanics with the order
// of Ollama's scheduler. Plan reads the snapshot, so it does not claim
// sdk.PurePlanner.
type swapper struct {
	h     sdk.Host
	rules evict.Rules
	plan  evict.Planner
}

// New makes the swapper from its settings JSON (sdk/evict's: margin and
// the host's placement); it is the factory registered with
// sdk.RegisterSwapper.
func New(h sdk.Host, raw []byte) (sdk.Swapper, error) {
	st, _, err := evict.ParseSettings(raw)
	if err != nil {
		return nil, sdksettings.Wrap("ollama settings", err)
	}
	return &swapper{
		h:     h,
		rules: evict.NewRules(st.Placement, st.Margin),
		plan:  evict.Planner{Policy: "ollama", Margin: st.Margin, Order: evictionOrder},
	}, nil
}

// Plan decides what must stop before q.Target loads, and where it goes;
// see the package documentation.
func (s *swapper) Plan(q sdk.PlanRequest) (sdk.Plan, error) {
	return s.plan.Plan(s.h, q, s.rules.For(q.Target))
}

// evictionOrder: stopping, then idle, then busy models; within a class the
// soonest keep-alive expiry first, then the least recently used.
func evictionOrder(a, b *evict.Victim) int {
	if c := cmp.Compare(a.Class, b.Class); c != 0 {
		return c
	}
	if c := cmp.Compare(expiry(a.Model), expiry(b.Model)); c != 0 {
		return c
	}
	return cmp.Compare(a.Model.LastUse, b.Model.LastUse)
}

// expiry is when m's keep-alive runs out, in Unix ns: its last use plus
// its ttl; never (math.MaxInt64) without a ttl.
func expiry(m *sdk.ModelInfo) int64 {
	if m.TTL <= 0 {
		return math.MaxInt64
	}
	return m.LastUse + m.TTL
}

// OnSwapStart logs the swap once, when it really starts.
func (s *swapper) OnSwapStart(ev sdk.SwapStartEvent) {
	s.h.Log(sdk.LevelInfo, "ollama swap: model="+ev.Target+" evict=["+strings.Join(ev.Evict, ",")+"] devices="+placement.FormatDevices(ev.Devices))
}
