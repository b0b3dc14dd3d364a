package main

import (
	"testing"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/evict"
	"github.com/loadout-dev/loadout/sdk/policytest"
)

// TestForesight_DuelLRULeadsOnlyAfterWinning: the forecast leads until
// LRU has won clearly more duels than it lost (its weight above
// lruLeads); a duel is won by the expert whose victim is asked for last,
// and the forecast takes the lead back the same way.
func TestForesight_DuelLRULeadsOnlyAfterWinning(t *testing.T) {
	sw, err := New(policytest.NewHost(t), []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	s := sw.(*swapper)
	// One duel a swap: the forecast evicted x where LRU would have
	// evicted y; then target is asked for (and loaded).
	duelAt := func(target string) {
		s.demand = []sdk.ModelDemand{{Name: "x", Requests: 1}, {Name: "y", Requests: 1}}
		s.duels = append(s.duels, evict.Duel{X: "x", Y: "y", Chooser: expertForecast, Other: expertLRU, XSeen: 1, YSeen: 1})
		s.settle(target)
	}
	if got := s.leader(); got != expertForecast {
		t.Fatalf("leader at start-up: %s, want forecast", expertNames[got])
	}
	duelAt("x") // the forecast's victim came back first: LRU was right
	if got := s.leader(); got != expertForecast {
		t.Errorf("after one duel won by LRU the leader is %s (weight %.2f), want the forecast still", expertNames[got], s.w[expertLRU])
	}
	for range 3 {
		duelAt("x")
	}
	if got := s.leader(); got != expertLRU {
		t.Errorf("after four duels won by LRU the leader is %s (weight %.2f), want lru", expertNames[got], s.w[expertLRU])
	}
	if len(s.duels) != 0 {
		t.Errorf("%d duels left undecided, want 0", len(s.duels))
	}
	for range 2 {
		duelAt("y") // LRU's victim came back first: the forecast was right
	}
	if got := s.leader(); got != expertForecast {
		t.Errorf("after two duels won back the leader is %s (weight %.2f), want the forecast", expertNames[got], s.w[expertLRU])
	}
	duelAt("z") // neither asked for: the duel waits
	if len(s.duels) != 1 {
		t.Errorf("%d duels waiting after a swap that asked for neither model, want 1", len(s.duels))
	}
}
