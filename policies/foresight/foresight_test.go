package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/policytest"
)

// The cases are written once, against policytest.Swapper, and run natively
// here and as WebAssembly in wasm_test.go.

var nativeSwapper = policytest.NativeSwapperOf(New)

// keep is the MakeSwapper of the native swapper that also hands the case
// the swapper it made (into *s), to look inside, served as wrap returns
// it (nil: as made).
func keep(s **swapper, wrap func(*swapper) sdk.Swapper) policytest.MakeSwapper {
	return func(_ testing.TB, h *policytest.Host, settings string) (policytest.Swapper, error) {
		sw, err := New(h, []byte(settings))
		if err != nil {
			return nil, err
		}
		*s = sw.(*swapper)
		if wrap != nil {
			sw = wrap(*s)
		}
		return policytest.NativeSwapper(sw), nil
	}
}

// runKeepsThePopularModel: on skewed traffic over two slots the router
// keeps the hot model, which LRU evicts for every rare request, and a
// plan evicts the rare model used last over the hot one used before it
// (policytest.KeepsTheHotModel, at most 3 loads of hot).
func runKeepsThePopularModel(t *testing.T, mk policytest.MakeSwapper) {
	policytest.KeepsTheHotModel(t, mk, 3)
}

// runForgetsWhatTrafficLeft: after a long phase in which one model was
// the most popular, traffic moves to working sets that never use it
// again. Counting from start-up would keep that model for good; the
// router learns a shorter memory from its forecasts' misses, evicts it,
// and loads each new working set about as LRU would.
func runForgetsWhatTrafficLeft(t *testing.T, mk policytest.MakeSwapper) {
	b := policytest.NewBox(t, mk, `{}`, 3, "hot", "r1", "r2", "r3", "a", "b", "c", "d")
	b.AskAll(policytest.Skewed(60))
	before := b.ColdLoads()
	sets := [][]string{{"a", "b"}, {"c", "d"}, {"a", "c"}, {"b", "d"}, {"a", "d"}, {"b", "c"}}
	for i := range 24 {
		for range 3 {
			for _, m := range sets[i%len(sets)] {
				b.Ask(m)
			}
		}
	}
	if m := b.H.Models["hot"]; m.State.Running() {
		t.Errorf("the hot model of the first phase is still loaded (%s) after 24 working sets without it", m.State)
	}
	// LRU loads at most the two models of each new set.
	if got := b.ColdLoads() - before; got > 2*24+4 {
		t.Errorf("%d cold loads over 24 working sets of two; LRU needs at most 48", got)
	}
}

// batchBurst is a box of three slots and five models on which a model
// asked for once in each of 12 rounds (with one of three rare ones), then
// one asked for twenty times in one burst, then 12 rounds more: traffic
// that counting requests and counting bursts order differently. It
// returns the box and the rare models.
func batchBurst(t *testing.T, mk policytest.MakeSwapper) (*policytest.Box, []string) {
	b := policytest.NewBox(t, mk, `{}`, 3, "steady", "batch", "r1", "r2", "r3")
	rare := []string{"r1", "r2", "r3"}
	for i := range 12 {
		b.Ask("steady")
		b.Ask(rare[i%3])
	}
	for range 20 {
		b.Ask("batch")
	}
	for i := range 12 {
		b.Ask("steady")
		b.Ask(rare[i%3])
	}
	return b, rare
}

// runBurstsCountOnce: a batch client's burst of requests to one model is
// one sign of demand, not twenty. After a model asked for twenty times in
// one burst and another asked for once in each of many rounds, the plan
// keeps the steady one.
func runBurstsCountOnce(t *testing.T, mk policytest.MakeSwapper) {
	b, rare := batchBurst(t, mk)
	b.Ask("batch")
	b.Ask("steady")
	// Loaded: steady, batch and a rare model; r-next must evict one of
	// steady and batch (the rare one is least used by either count).
	b.Ask(rare[0])
	b.Ask("batch")
	b.Ask("steady")
	if got := b.Evicts(rare[1]); !slices.Equal(got, []string{"batch"}) && !slices.Equal(got, []string{rare[0]}) {
		t.Errorf("plan for %s evicts %v, want batch or %s (steady stays)", rare[1], got, rare[0])
	}
}

// runWeighsLoadTime: of two models asked for alike, the one that takes
// longer to load again stays (expected load seconds, not loads).
func runWeighsLoadTime(t *testing.T, mk policytest.MakeSwapper) {
	b := policytest.NewBox(t, mk, `{}`, 2, "fast", "slow", "x")
	b.LoadTime["slow"] = 30 * time.Second
	for range 6 {
		b.Ask("fast")
		b.Ask("slow")
	}
	if got := b.Evicts("x"); !slices.Equal(got, []string{"fast"}) {
		t.Errorf("plan for x evicts %v, want [fast] (slow takes 30 s to load again, fast 1 s)", got)
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
		{`{"margin": "lots"}`, "margin"},
		{`{"half_life": 10}`, "half_life"},
		{`{"patience": 1.5}`, "patience"},
		{`{"patience": -0.1}`, "patience"},
		{`{"patience": "a lot"}`, "patience"},
		{`{"free_waits": "yes"}`, "free_waits"},
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
	for _, good := range []string{`{"margin": "1GiB"}`, `{"patience": 0}`, `{"patience": 1}`, `{"free_waits": false}`} {
		if _, err := mk(t, policytest.NewHost(t), good); err != nil {
			t.Errorf("good settings %s: %v", good, err)
		}
	}
}

func TestForesight_KeepsThePopularModel(t *testing.T) { runKeepsThePopularModel(t, nativeSwapper) }

func TestForesight_ForgetsWhatTrafficLeft(t *testing.T) {
	runForgetsWhatTrafficLeft(t, nativeSwapper)
}

func TestForesight_BurstsCountOnce(t *testing.T) { runBurstsCountOnce(t, nativeSwapper) }

func TestForesight_WeighsLoadTime(t *testing.T) { runWeighsLoadTime(t, nativeSwapper) }

func TestForesight_PlanIsPure(t *testing.T) { runPlanIsPure(t, nativeSwapper) }

func TestForesight_BadSettings(t *testing.T) { runBadSettings(t, nativeSwapper) }

func TestForesight_Patience(t *testing.T) { runPatience(t, nativeSwapper) }

func TestForesight_FreeWait(t *testing.T) { runFreeWait(t, nativeSwapper) }

// noDemand hides the policytest host's demand counts: a host built before
// the `demand` import.
type noDemand struct{ *policytest.Host }

func (noDemand) Demand() {} // shadows Host.Demand, so noDemand is no sdk.DemandReader

// TestForesight_WithoutDemandIsLRU: on a host without counts every model
// is valued alike and the least recently used idle model goes.
func TestForesight_WithoutDemandIsLRU(t *testing.T) {
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

// TestForesight_IdleBeforeBusy: a busy model goes after every idle one,
// however little it is asked for (the scheduler would wait for it).
func TestForesight_IdleBeforeBusy(t *testing.T) {
	b := policytest.NewBox(t, nativeSwapper, `{}`, 2, "hot", "rare", "x")
	for range 10 {
		b.Ask("hot")
	}
	b.Ask("rare")
	b.H.Models["rare"].InFlight = 1
	if got := b.Evicts("x"); !slices.Equal(got, []string{"hot"}) {
		t.Errorf("plan for x with rare busy evicts %v, want [hot]", got)
	}
	b.H.Models["rare"].InFlight = 0
	if got := b.Evicts("x"); !slices.Equal(got, []string{"rare"}) {
		t.Errorf("plan for x with rare idle evicts %v, want [rare]", got)
	}
}

// runPatience: with patience, a rarely asked model that is serving or
// still loading goes before a popular idle one once its value, divided by
// the patience, is the lower; without, the popular idle one goes.
func runPatience(t *testing.T, mk policytest.MakeSwapper) {
	for _, c := range []struct {
		settings string
		state    sdk.ModelState
		inFlight uint32
		want     string
	}{
		{`{}`, sdk.StateReady, 1, "hot"},
		{`{}`, sdk.StateStarting, 0, "hot"},
		{`{"patience": 1}`, sdk.StateReady, 1, "rare"},
		{`{"patience": 1}`, sdk.StateStarting, 0, "rare"},
		// Ten requests against one: a patience of 0.01 values rare's one
		// at a hundred, above hot's ten.
		{`{"patience": 0.01}`, sdk.StateReady, 1, "hot"},
		{`{"patience": 0.5}`, sdk.StateReady, 0, "rare"}, // idle: patience changes nothing
	} {
		b := policytest.NewBox(t, mk, c.settings, 2, "hot", "rare", "x")
		for range 10 {
			b.Ask("hot")
		}
		b.Ask("rare")
		b.H.Models["rare"].State, b.H.Models["rare"].InFlight = c.state, c.inFlight
		if got := b.Evicts("x"); !slices.Equal(got, []string{c.want}) {
			t.Errorf("%s, rare %s with %d in flight: plan for x evicts %v, want [%s]", c.settings, c.state, c.inFlight, got, c.want)
		}
	}
}

// runFreeWait: with patience 0, a rarely asked model that is serving or
// loading goes before a popular idle one only while the host's record of
// waits has room — neither the box's 95th percentile nor the target's
// would move if every request held ended above it; otherwise, and on a
// host that keeps no record, the popular idle one goes.
func runFreeWait(t *testing.T, mk policytest.MakeSwapper) {
	// A record with room for r requests above its p95, h of them held.
	room := func(r, h uint32) sdk.WaitStats { return sdk.WaitStats{Granted: 100, P95: 10e9, Above: 5 - r, Held: h} }
	both := map[string]sdk.WaitStats{"": room(3, 1), "x": room(2, 1)}
	for _, c := range []struct {
		name, settings string
		records        map[string]sdk.WaitStats
		want           string
	}{
		{"no record", `{}`, nil, "hot"},
		{"room in both", `{}`, both, "rare"},
		{"room in both, free_waits off", `{"free_waits": false}`, both, "hot"},
		{"no room in the box", `{}`, map[string]sdk.WaitStats{"": room(1, 1), "x": room(2, 1)}, "hot"},
		{"no room for the target", `{}`, map[string]sdk.WaitStats{"": room(3, 0), "x": room(0, 0)}, "hot"},
		{"the target unknown to the record", `{}`, map[string]sdk.WaitStats{"": room(3, 0)}, "hot"},
	} {
		b := policytest.NewBox(t, mk, c.settings, 2, "hot", "rare", "x")
		for range 10 {
			b.Ask("hot")
		}
		b.Ask("rare")
		b.H.Models["rare"].InFlight = 1
		b.H.WaitRecords = c.records
		if got := b.Evicts("x"); !slices.Equal(got, []string{c.want}) {
			t.Errorf("%s: plan for x with rare busy evicts %v, want [%s]", c.name, got, c.want)
		}
	}
}

// TestForesight_CountsFollowTheirModelsAcrossAReload: a reload that
// renames a model puts another name where it was in the demand list
// (sorted by name); each model's counts stay its own (a swap walks the
// list by position, so a stale position would fold one model's requests
// into another's).
func TestForesight_CountsFollowTheirModelsAcrossAReload(t *testing.T) {
	var s *swapper
	b := policytest.NewBox(t, keep(&s, nil), `{}`, 1, "a", "c", "e") // one slot: every ask below is a swap
	for _, m := range []string{"a", "c", "e", "a", "c", "e"} {
		b.Ask(m)
	}
	// A reload that renames c to b: as many models, b where c was.
	delete(b.H.Models, "c")
	b.H.Models["b"] = &sdk.ModelInfo{Name: "b", EstimatedVRAM: policytest.SlotVRAM}
	for _, m := range []string{"b", "a", "e", "b", "a", "b"} {
		b.Ask(m)
	}
	for _, d := range b.H.Demand() {
		if m := s.models.Get(d.Name); m == nil || m.seen != d.Requests {
			t.Errorf("model %s: the swapper has seen %v requests, the host counts %d", d.Name, m, d.Requests)
		}
	}
}
