package main

import (
	"math"
	"slices"
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

// TestForesight_ForecastFollowsTheFewestLostTrials: the forecast follows
// the best-scored bursts estimator until another of the three (the
// best-scored request-counting one, LFU's) has lost fewer trials; a trial
// is lost by every estimator whose victim was asked for while another
// estimator's was not yet.
func TestForesight_ForecastFollowsTheFewestLostTrials(t *testing.T) {
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
	wantBursts := len(halfLives)*countBursts + 1
	s.score[wantBursts] = -1
	wantRequests := len(halfLives)*countRequests + 2
	s.score[wantRequests] = -5
	// One trial a swap: the estimators right evicted y, the others x;
	// then x is asked for, so evicting it was wrong.
	trial := func(right func(j int) bool) {
		s.counts.List = []sdk.ModelDemand{{Name: "x", Requests: 1}, {Name: "y", Requests: 1}}
		victims := make([]string, nEst)
		for j := range victims {
			victims[j] = "x"
			if right(j) {
				victims[j] = "y"
			}
		}
		var tr evict.Trial
		if !tr.Start(victims, s.counts.List) {
			t.Fatal("no trial of two victims")
		}
		s.trials = append(s.trials, tr)
		s.counts.List[0].Requests++
		s.settleTrials("x")
	}
	if got := s.forecast(); got != wantBursts {
		t.Fatalf("at start-up the forecast follows estimator %d, want %d (the best-scored, bursts)", got, wantBursts)
	}
	trial(func(j int) bool { return j/len(halfLives) == countRequests })
	if got := s.forecast(); got != wantRequests {
		t.Errorf("after a trial the request counts won: estimator %d, want %d (their best-scored)", got, wantRequests)
	}
	trial(func(j int) bool { return j == lfu })
	if got := s.forecast(); got != lfu {
		t.Errorf("after a trial only LFU's estimator won: estimator %d, want %d", got, lfu)
	}
	trial(func(j int) bool { return j != lfu })
	trial(func(j int) bool { return j != lfu })
	if got := s.forecast(); got != wantRequests { // losses: bursts 2, requests 1, LFU 2
		t.Errorf("after LFU lost two trials the others won: estimator %d, want %d", got, wantRequests)
	}
	trial(func(j int) bool { return j/len(halfLives) == countBursts })
	if got := s.forecast(); got != wantBursts { // 2, 2, 3
		t.Errorf("after a trial only bursts won: estimator %d, want %d (bursts first among equals)", got, wantBursts)
	}
	if len(s.trials) != 0 {
		t.Errorf("%d trials left undecided, want 0", len(s.trials))
	}
	var tr evict.Trial
	tr.Start([]string{"x", "y"}, s.counts.List)
	s.trials = append(s.trials, tr)
	s.settleTrials("z") // neither asked for: the trial waits
	if len(s.trials) != 1 {
		t.Errorf("%d trials waiting after a swap that asked for neither model, want 1", len(s.trials))
	}
}

// TestForesight_TrialsStartWhereEstimatorsDisagree: where a batch
// client's bursts make the estimators choose different victims, the swaps
// start trials between them (pending, or already settled and adding to
// the losses); where every estimator chooses alike, none.
func TestForesight_TrialsStartWhereEstimatorsDisagree(t *testing.T) {
	var s *swapper
	mk := keep(&s, nil)
	started := func() bool { return len(s.trials) > 0 || s.loss != [nEst]float64{} }

	b := policytest.NewBox(t, mk, `{}`, 2, "a", "b", "c")
	for range 10 { // one request each, round robin: every count agrees
		b.Ask("a")
		b.Ask("b")
		b.Ask("c")
	}
	if started() {
		t.Errorf("trials on traffic where the estimators agree: %d pending, losses %v", len(s.trials), s.loss)
	}

	batchBurst(t, mk)
	if !started() {
		t.Error("no trial after a batch burst made the estimators disagree")
	}
}

// TestForesight_TrialsGoOnWhileLRULeads: while LRU's order is followed,
// the estimators are still judged on the swaps' candidates, so the
// forecast that takes the lead back is the one that would have done best.
func TestForesight_TrialsGoOnWhileLRULeads(t *testing.T) {
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
	if len(s.trials) == 0 && s.loss == [nEst]float64{} {
		t.Errorf("no trial in %d swaps led by LRU on traffic where the estimators disagree", ledByLRU)
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

// TestForesight_RecentTrafficFollowsLRUAtOnce: where the working set
// moves (an agent's pair of models, a new pair every few requests), the
// bursts likelihood's best memory is the shortest, and LRU's order is
// followed from then on without waiting for the duels to give it the lead;
// on stationary traffic (a fixed popularity over the same models) the
// likelihood prefers a longer memory and the forecast leads.
func TestForesight_RecentTrafficFollowsLRUAtOnce(t *testing.T) {
	names := []string{"m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7"}
	t.Run("moving working set", func(t *testing.T) {
		var s *swapper
		first := firstLRULead{at: -1}
		b := policytest.NewBox(t, keep(&s, func(s *swapper) sdk.Swapper { first.swapper = s; return &first }), `{}`, 3, names...)
		for phase := range 30 {
			a, c := names[(phase*3)%8], names[(phase*3+1)%8]
			for i := range 6 {
				b.Ask([]string{a, c}[i%2])
			}
		}
		if !s.recent() {
			t.Errorf("after 30 moves of the working set the bursts likelihood prefers half-life %v, want 1", halfLife(s.bestOf(countBursts)))
		}
		switch {
		case first.at < 0:
			t.Errorf("LRU led none of %d swaps", first.swaps)
		case first.weight > lruLeads:
			t.Errorf("LRU first led at swap %d with its duel weight %.2f: want it followed for the traffic's memory before its duels gave it the lead",
				first.at, first.weight)
		}
	})
	t.Run("stationary popularity", func(t *testing.T) {
		var s *swapper
		b := policytest.NewBox(t, keep(&s, nil), `{}`, 3, names...)
		// m0 every other request, m1 every fourth, the rest in turn.
		for i := range 360 {
			switch {
			case i%2 == 0:
				b.Ask("m0")
			case i%4 == 1:
				b.Ask("m1")
			default:
				b.Ask(names[2+(i/4)%6])
			}
		}
		if s.recent() {
			t.Errorf("on stationary traffic the bursts likelihood prefers half-life 1: want a longer memory")
		}
	})
}

// firstLRULead notes the first swap that starts while LRU leads, and
// LRU's duel weight then.
type firstLRULead struct {
	*swapper
	swaps, at int
	weight    float64
}

func (f *firstLRULead) OnSwapStart(ev sdk.SwapStartEvent) {
	if f.at < 0 && f.leader() == expertLRU {
		f.at, f.weight = f.swaps, f.w[expertLRU]
	}
	f.swaps++
	f.swapper.OnSwapStart(ev)
}

// TestForesight_ForecastFollowsAShadowPastTheMargin: the forecast keeps
// the trials' choice unless another estimator's own cache missed more
// than shadowMargin less.
func TestForesight_ForecastFollowsAShadowPastTheMargin(t *testing.T) {
	sw, err := New(policytest.NewHost(t), []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	s := sw.(*swapper)
	trials := s.forecast() // at start-up: bursts' best-scored
	other := lfu
	for j := range nEst {
		s.smiss[j] = 10
	}
	s.smiss[other] = 10 * (1 - shadowMargin/2)
	if got := s.forecast(); got != trials {
		t.Errorf("a shadow %g%% below the trials' choice's: the forecast follows %d, want the trials' %d", 100*shadowMargin/2, got, trials)
	}
	s.smiss[other] = 10 * (1 - 2*shadowMargin)
	if got := s.forecast(); got != other {
		t.Errorf("a shadow %g%% below the trials' choice's: the forecast follows %d, want %d", 200*shadowMargin, got, other)
	}
}

// TestForesight_LRUsShadowLeads: where LRU's own cache has missed less
// than the forecast's, LRU's order is followed, though the duels favour
// the forecast; where it has missed as much, the forecast leads.
func TestForesight_LRUsShadowLeads(t *testing.T) {
	sw, err := New(policytest.NewHost(t), []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	s := sw.(*swapper)
	s.w = [nExperts]float64{0.9, 0.1}
	s.slong[s.best], s.lmiss = 10, 10
	if got := s.leader(); got != expertForecast {
		t.Errorf("LRU's shadow missing as much as the forecast's: the leader is %s, want the forecast", expertNames[got])
	}
	s.lmiss = 9.5
	if got := s.leader(); got != expertLRU {
		t.Errorf("LRU's shadow missing less than the forecast's: the leader is %s, want lru", expertNames[got])
	}
}

// TestForesight_ShadowsAreEachEstimatorsOwnCache: on two slots, a model
// asked for three times and then five others once each — LFU's own cache
// keeps the first where LRU's keeps the last two, each misses once on each,
// the box's room is two models, and the misses are counted.
func TestForesight_ShadowsAreEachEstimatorsOwnCache(t *testing.T) {
	var s *swapper
	mk := func(tb testing.TB, h *policytest.Host, settings string) (policytest.Swapper, error) {
		sw, err := New(h, []byte(settings))
		if err == nil {
			s = sw.(*swapper)
		}
		return policytest.NativeSwapper(sw), err
	}
	b := policytest.NewBox(t, mk, `{}`, 2, "a", "b", "c", "d", "e", "f")
	b.AskAll([]string{"a", "a", "a", "b", "c", "d", "e", "f"})
	if s.room != 2*policytest.SlotVRAM {
		t.Errorf("room %d bytes, want two slots' %d", s.room, 2*policytest.SlotVRAM)
	}
	if got := s.shadow[lfu]; !slices.Contains(got, "a") || !slices.Contains(got, "f") || len(got) != 2 {
		t.Errorf("LFU's shadow holds %v, want a (asked for three times) and f (the last)", got)
	}
	if !slices.Equal(s.lru, []string{"e", "f"}) {
		t.Errorf("LRU's shadow holds %v, want [e f], the two asked for last, least recent first", s.lru)
	}
	// Six misses (a to f), each swap's older ones times memory: at most
	// six, at least six times memory to the number of swaps.
	swaps := b.ColdLoads()
	if m := s.smiss[lfu]; m > 6 || m < 6*math.Pow(memory, float64(swaps)) {
		t.Errorf("LFU's shadow missed %g (decayed), want six misses over %d swaps", m, swaps)
	}
}
