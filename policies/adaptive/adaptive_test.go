package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/sdk/policytest"
)

// The cases are written once, against policytest.Swapper, and run natively
// here and as WebAssembly in wasm_test.go.

var nativeSwapper = policytest.NativeSwapperOf(New)

// runLearnsFrequency: on skewed traffic over two slots the router learns to
// keep the hot model, which LRU (its start, and prioritylru's order)
// evicts for every rare request: far fewer cold loads of it, and a plan
// that evicts the rare model used last over the hot one used before it
// (policytest.KeepsTheHotModel; learning takes a few rounds, so up to 5
// loads of hot).
func runLearnsFrequency(t *testing.T, mk policytest.MakeSwapper) {
	policytest.KeepsTheHotModel(t, mk, 5)
}

// runFollowsMovingWorkingSets: after learning to keep a frequent model,
// traffic moves to working sets that never use it again. With decay 1 the
// LFU expert would keep that model for good (its count stays the
// highest); the router goes back to recency within a few duels, evicts
// it, and loads each new working set about as LRU would.
func runFollowsMovingWorkingSets(t *testing.T, mk policytest.MakeSwapper) {
	b := policytest.NewBox(t, mk, `{"decay": 1}`, 3, "hot", "r1", "r2", "r3", "a", "b", "c", "d")
	b.AskAll(policytest.Skewed(30))
	before := b.ColdLoads()
	sets := [][]string{{"a", "b"}, {"c", "d"}, {"a", "c"}, {"b", "d"}, {"a", "d"}, {"b", "c"}}
	for i := range 12 {
		for range 3 {
			for _, m := range sets[i%len(sets)] {
				b.Ask(m)
			}
		}
	}
	if m := b.H.Models["hot"]; m.State.Running() {
		t.Errorf("the hot model of the first phase is still loaded (%s) after 12 working sets without it", m.State)
	}
	// LRU loads at most the two models of each new set.
	if got := b.ColdLoads() - before; got > 2*12+4 {
		t.Errorf("%d cold loads over 12 working sets of two; LRU needs at most 24", got)
	}
}

// runPlanIsPure: asking for plans between swaps changes nothing the next
// swap decides.
func runPlanIsPure(t *testing.T, mk policytest.MakeSwapper) {
	plan := func(extra bool) []string {
		b := policytest.NewBox(t, mk, `{}`, 2, "hot", "r1", "r2", "r3")
		for i := range 10 {
			if extra {
				for _, m := range []string{"r1", "r2", "r3"} {
					b.Evicts(m)
				}
			}
			b.Ask("hot")
			b.Ask([]string{"r1", "r2", "r3"}[i%3])
		}
		return b.Evicts("r3")
	}
	if a, b := plan(false), plan(true); !slices.Equal(a, b) {
		t.Errorf("plan after extra plans %v, without %v", b, a)
	}
}

// runBadSettings: every bad value names its setting.
func runBadSettings(t *testing.T, mk policytest.MakeSwapper) {
	for _, c := range []struct{ settings, want string }{
		{`{"decay": 0}`, "decay"},
		{`{"decay": 1.5}`, "decay"},
		{`{"decay": "slow"}`, "decay"},
		{`{"rate": 0}`, "rate"},
		{`{"rate": -1}`, "rate"},
		{`{"speed": 1}`, "speed"},
		{`[1]`, ""},
	} {
		h := policytest.NewHost(t)
		_, err := mk(t, h, c.settings)
		if err == nil {
			t.Errorf("%s: no error", c.settings)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %q does not name %q", c.settings, err, c.want)
		}
	}
	if _, err := mk(t, policytest.NewHost(t), `{"decay": 1, "rate": 2, "margin": "1GiB"}`); err != nil {
		t.Errorf("good settings: %v", err)
	}
}

func TestAdaptive_LearnsFrequency(t *testing.T) { runLearnsFrequency(t, nativeSwapper) }

func TestAdaptive_FollowsMovingWorkingSets(t *testing.T) {
	runFollowsMovingWorkingSets(t, nativeSwapper)
}

func TestAdaptive_PlanIsPure(t *testing.T) { runPlanIsPure(t, nativeSwapper) }

func TestAdaptive_BadSettings(t *testing.T) { runBadSettings(t, nativeSwapper) }

// noDemand hides the policytest host's demand counts: a host built before
// the `demand` import.
type noDemand struct{ *policytest.Host }

func (noDemand) Demand() {} // shadows Host.Demand, so noDemand is no sdk.DemandReader

// TestAdaptive_WithoutDemandIsLRU: on a host without counts the router is
// prioritylru: the least recently used idle model goes.
func TestAdaptive_WithoutDemandIsLRU(t *testing.T) {
	mk := func(_ testing.TB, h *policytest.Host, settings string) (policytest.Swapper, error) {
		s, err := New(noDemand{h}, []byte(settings))
		if err != nil {
			return nil, err
		}
		return policytest.NativeSwapper(s), nil
	}
	b := policytest.NewBox(t, mk, `{}`, 2, "hot", "r1", "r2", "r3")
	b.AskAll(policytest.Skewed(12))
	if b.Loads["hot"] < 12 {
		t.Errorf("hot loaded %d times in 12 rounds; LRU loads it in every round", b.Loads["hot"])
	}
}

// A plan follows whichever expert leads when it is made, with nothing
// else changed since the plan before it, back and forth. (In the router
// the lead moves only in OnSwapStart, when the running set changes too,
// which rebuilds the planner's kept ranking anyway; Plan rebuilds it on
// a change of leader all the same.)
func TestPlan_FollowsANewLeaderAtOnce(t *testing.T) {
	var sw *swapper
	mk := func(_ testing.TB, h *policytest.Host, settings string) (policytest.Swapper, error) {
		s, err := New(h, []byte(settings))
		if err != nil {
			return nil, err
		}
		sw = s.(*swapper)
		return policytest.NativeSwapper(s), nil
	}
	b := policytest.NewBox(t, mk, `{}`, 2, "hot", "r1", "r2")
	for range 5 {
		b.Ask("hot")
	}
	b.Ask("r1") // loaded: hot (asked for often, least recently) and r1
	for _, c := range []struct {
		w    [2]float64
		want string
	}{{[2]float64{0.1, 0.9}, "r1"}, {[2]float64{0.9, 0.1}, "hot"}, {[2]float64{0.1, 0.9}, "r1"}} {
		sw.w = c.w
		if got := b.Evicts("r2"); !slices.Equal(got, []string{c.want}) {
			t.Errorf("weights %v: plan for r2 evicts %v, want [%s]", c.w, got, c.want)
		}
	}
}
