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
		s.counts.List = []sdk.ModelDemand{{Name: "x", Requests: 1}, {Name: "y", Requests: 1}}
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

// TestForesight_CountingFollowsItsDuels: the forecast counts bursts until
// the request-counting estimators have won clearly more duels than they
// lost, then follows the best of those (the highest score among them, not
// among all fourteen), and goes back the same way.
func TestForesight_CountingFollowsItsDuels(t *testing.T) {
	sw, err := New(policytest.NewHost(t), []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	s := sw.(*swapper)
	// Scores that favour a bursts estimator overall, and among the
	// request-counting ones the one of half-life 16.
	for j := range nEst {
		s.score[j] = -10
	}
	s.score[len(halfLives)*countBursts+1] = -1
	wantRequests := len(halfLives)*countRequests + 2
	s.score[wantRequests] = -5
	// One duel a swap: the counting followed now evicted x where the other
	// would have evicted y; the target asked for then decides it for winner.
	duelWonBy := func(winner int) {
		cur := s.counting()
		s.counts.List = []sdk.ModelDemand{{Name: "x", Requests: 1}, {Name: "y", Requests: 1}}
		s.countDuels = append(s.countDuels, evict.Duel{X: "x", Y: "y", Chooser: cur, Other: countBursts + countRequests - cur, XSeen: 1, YSeen: 1})
		target := "x" // x back first: evicting it was wrong
		if winner == cur {
			target = "y"
		}
		s.settleCounting(target)
	}
	if got := s.counting(); got != countBursts || s.bestOf(got) != 1 {
		t.Fatalf("at start-up: counting %s, estimator %d; want bursts, 1", modeNames[got], s.bestOf(got))
	}
	duelWonBy(countRequests)
	if got := s.counting(); got != countBursts {
		t.Errorf("after one duel won by requests: counting %s (weight %.2f), want bursts still", modeNames[got], s.wc[countRequests])
	}
	for range 3 {
		duelWonBy(countRequests)
	}
	if got := s.counting(); got != countRequests || s.bestOf(got) != wantRequests {
		t.Errorf("after four duels won by requests: counting %s, estimator %d (weight %.2f); want requests, %d",
			modeNames[got], s.bestOf(got), s.wc[countRequests], wantRequests)
	}
	for range 2 {
		duelWonBy(countBursts)
	}
	if got := s.counting(); got != countBursts {
		t.Errorf("after two duels won back: counting %s (weight %.2f), want bursts", modeNames[got], s.wc[countRequests])
	}
	s.countDuels = append(s.countDuels, evict.Duel{X: "x", Y: "y", Chooser: countBursts, Other: countRequests, XSeen: 1, YSeen: 1})
	s.settleCounting("z") // neither asked for: the duel waits
	if len(s.countDuels) != 1 {
		t.Errorf("%d duels waiting after a swap that asked for neither model, want 1", len(s.countDuels))
	}
}

// TestForesight_CountingDuelsStartWhereTheCountsDisagree: where a batch
// client's bursts make the two ways of counting order models differently,
// the swaps start duels between them (pending, or already settled and
// moving the weights); where they agree, none.
func TestForesight_CountingDuelsStartWhereTheCountsDisagree(t *testing.T) {
	var s *swapper
	mk := keep(&s, nil)
	started := func() bool { return len(s.countDuels) > 0 || s.wc != [nModes]float64{0.5, 0.5} }

	b := newBox(t, mk, `{}`, 2, "a", "b", "c")
	for range 10 { // one request each, round robin: the counts agree
		b.ask("a")
		b.ask("b")
		b.ask("c")
	}
	if started() {
		t.Errorf("duels of the ways of counting on traffic where they agree: %d pending, weights %v", len(s.countDuels), s.wc)
	}

	batchBurst(t, mk)
	if !started() {
		t.Error("no duel of the ways of counting after a batch burst made bursts and requests disagree")
	}
}

// TestForesight_CountingDuelsGoOnWhileLRULeads: while LRU's order is
// followed, the two ways of counting still duel over the evictions each
// would have made, so the forecast that takes the lead back counts the
// better way.
func TestForesight_CountingDuelsGoOnWhileLRULeads(t *testing.T) {
	var s *swapper
	var ledByLRU int
	mk := keep(&s, func(s *swapper) sdk.Swapper {
		s.w = [nExperts]float64{minWeight, 1 - minWeight} // LRU has won every duel so far
		return countLeads{s, &ledByLRU}
	})
	batchBurst(t, mk)
	if ledByLRU == 0 || s.leader() != expertLRU {
		t.Fatalf("LRU led %d swaps and leads now: %v (weight %.2f); the test's premise is that it leads throughout",
			ledByLRU, s.leader() == expertLRU, s.w[expertLRU])
	}
	if len(s.countDuels) == 0 && s.wc == [nModes]float64{0.5, 0.5} {
		t.Errorf("no duel of the ways of counting in %d swaps led by LRU on traffic where they disagree", ledByLRU)
	}
}

// countLeads counts the swaps that start while LRU leads.
type countLeads struct {
	*swapper
	n *int
}

func (c countLeads) OnSwapStart(ev sdk.SwapStartEvent) {
	if c.leader() == expertLRU {
		*c.n++
	}
	c.swapper.OnSwapStart(ev)
}
