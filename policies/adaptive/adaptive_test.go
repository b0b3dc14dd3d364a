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

const gib = uint64(1) << 30

var nativeSwapper = policytest.NativeSwapperOf(New)

// box is one GPU with room for slots models of 8 GiB, the models named,
// all stopped, driven by a minimal scheduler: a request for a ready model
// is granted, one for another starts the swap the router plans.
type box struct {
	t     testing.TB
	h     *policytest.Host
	next  sdk.RequestID
	loads map[string]int
}

func newBox(t testing.TB, mk policytest.MakeSwapper, settings string, slots int, names ...string) *box {
	t.Helper()
	var ms []sdk.ModelInfo
	for _, n := range names {
		ms = append(ms, sdk.ModelInfo{Name: n, EstimatedVRAM: 8 * gib})
	}
	h := policytest.NewHost(t, ms...)
	sw, err := mk(t, h, settings)
	if err != nil {
		t.Fatal(err)
	}
	h.Swapper = sw
	b := &box{t: t, h: h, loads: map[string]int{}}
	h.Scheduler = &swapOnMiss{fx: h, waiting: map[string][]sdk.RequestID{}}
	b.h.GPUs = []sdk.GPUInfo{{Index: 0, Name: "gpu0", Total: uint64(slots) * 8 * gib}}
	b.account()
	return b
}

// account puts every running model on GPU 0 and works out its free
// memory, as the host's ledger would.
func (b *box) account() {
	g := &b.h.GPUs[0]
	g.Leased = 0
	for _, m := range b.h.Models {
		if m.State.Running() {
			m.Devices = []int32{0}
			g.Leased += m.EstimatedVRAM
		} else {
			m.Devices = nil
		}
	}
	g.Free = g.Total - g.Leased
}

// ask sends one request for model a second after the last, loads the model
// if that takes a swap, and ends the request.
func (b *box) ask(model string) {
	b.t.Helper()
	b.h.Advance(time.Second)
	b.next++
	id := b.next
	b.h.Submit(sdk.RequestEvent{ID: id, Model: model})
	if slices.Contains(b.h.ActiveSwaps(), model) {
		b.loads[model]++
		b.account()
		b.h.Advance(time.Second)
		b.h.CompleteSwap(model, "")
		b.account()
	}
	if !b.h.Granted(id) {
		b.t.Fatalf("request %d for %s: %s", id, model, b.h.Outcome(id))
	}
	b.h.ServeDone(id)
}

// total is the cold loads so far.
func (b *box) total() int {
	n := 0
	for _, l := range b.loads {
		n += l
	}
	return n
}

// evicts is what the router would evict to load target now.
func (b *box) evicts(target string) []string {
	b.t.Helper()
	p, err := b.h.Plan(target)
	if err != nil {
		b.t.Fatalf("plan %s: %v", target, err)
	}
	return p.Evict
}

// swapOnMiss is the minimal scheduler of the cases.
type swapOnMiss struct {
	fx      sdk.Effects
	waiting map[string][]sdk.RequestID
}

func (s *swapOnMiss) OnRequest(ev sdk.RequestEvent) error {
	if m, _ := s.fx.ModelState(ev.Model); m.State == sdk.StateReady {
		s.fx.GrantServe(ev.ID, ev.Model)
		return nil
	}
	p, err := s.fx.Plan(ev.Model)
	if err != nil {
		return err
	}
	if err := s.fx.StartSwap(sdk.SwapRequest{Model: ev.Model, Evict: p.Evict, Devices: p.Devices}); err != nil {
		return err
	}
	s.waiting[ev.Model] = append(s.waiting[ev.Model], ev.ID)
	s.fx.SetQueuePosition(ev.ID, 0)
	return nil
}

func (s *swapOnMiss) OnSwapDone(ev sdk.SwapDoneEvent) error {
	for _, id := range s.waiting[ev.Model] {
		s.fx.GrantServe(id, ev.Model)
	}
	delete(s.waiting, ev.Model)
	return nil
}

func (s *swapOnMiss) OnServeDone(sdk.ServeDoneEvent) error { return nil }
func (s *swapOnMiss) OnCancel(sdk.CancelEvent) error       { return nil }
func (s *swapOnMiss) OnUnload(sdk.UnloadEvent) error       { return nil }
func (s *swapOnMiss) OnTick(sdk.TickEvent) error           { return nil }
func (s *swapOnMiss) OnShutdown(sdk.ShutdownEvent) error   { return nil }

// skewed is traffic where one model takes most requests and three rare
// ones come two at a time between them: on two slots the second rare
// request finds the hot model least recently used, so LRU evicts it and
// loads it again in every round; LFU loads it once.
func skewed(b *box, rounds int) {
	rare := []string{"r1", "r2", "r3"}
	for i := range rounds {
		b.ask("hot")
		b.ask("hot")
		b.ask("hot")
		b.ask(rare[(2*i)%3])
		b.ask(rare[(2*i+1)%3])
	}
}

// runLearnsFrequency: on skewed traffic over two slots the router learns to
// keep the hot model, which LRU (its start, and prioritylru's order)
// evicts for every rare request: far fewer cold loads of it, and a plan
// that evicts the rare model used last over the hot one used before it.
func runLearnsFrequency(t *testing.T, mk policytest.MakeSwapper) {
	b := newBox(t, mk, `{}`, 2, "hot", "r1", "r2", "r3")
	skewed(b, 30)
	if b.loads["hot"] > 5 {
		t.Errorf("hot loaded %d times in 30 rounds (LRU loads it every round): %v", b.loads["hot"], b.loads)
	}
	// Now hot was used before the last rare model: LRU would evict hot.
	b.ask("hot")
	b.ask("r1")
	if got := b.evicts("r2"); !slices.Equal(got, []string{"r1"}) {
		t.Errorf("plan for r2 evicts %v, want [r1] (the hot model stays)", got)
	}
}

// runFollowsMovingWorkingSets: after learning to keep a frequent model,
// traffic moves to working sets that never use it again. With decay 1 the
// LFU expert would keep that model for good (its count stays the
// highest); the router goes back to recency within a few duels, evicts
// it, and loads each new working set about as LRU would.
func runFollowsMovingWorkingSets(t *testing.T, mk policytest.MakeSwapper) {
	b := newBox(t, mk, `{"decay": 1}`, 3, "hot", "r1", "r2", "r3", "a", "b", "c", "d")
	skewed(b, 30)
	before := b.total()
	sets := [][]string{{"a", "b"}, {"c", "d"}, {"a", "c"}, {"b", "d"}, {"a", "d"}, {"b", "c"}}
	for i := range 12 {
		for range 3 {
			for _, m := range sets[i%len(sets)] {
				b.ask(m)
			}
		}
	}
	if m := b.h.Models["hot"]; m.State.Running() {
		t.Errorf("the hot model of the first phase is still loaded (%s) after 12 working sets without it", m.State)
	}
	// LRU loads at most the two models of each new set.
	if got := b.total() - before; got > 2*12+4 {
		t.Errorf("%d cold loads over 12 working sets of two; LRU needs at most 24", got)
	}
}

// runPlanIsPure: asking for plans between swaps changes nothing the next
// swap decides.
func runPlanIsPure(t *testing.T, mk policytest.MakeSwapper) {
	plan := func(extra bool) []string {
		b := newBox(t, mk, `{}`, 2, "hot", "r1", "r2", "r3")
		for i := range 10 {
			if extra {
				for _, m := range []string{"r1", "r2", "r3"} {
					b.evicts(m)
				}
			}
			b.ask("hot")
			b.ask([]string{"r1", "r2", "r3"}[i%3])
		}
		return b.evicts("r3")
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
	b := newBox(t, mk, `{}`, 2, "hot", "r1", "r2", "r3")
	skewed(b, 12)
	if b.loads["hot"] < 12 {
		t.Errorf("hot loaded %d times in 12 rounds; LRU loads it in every round", b.loads["hot"])
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
	b := newBox(t, mk, `{}`, 2, "hot", "r1", "r2")
	for range 5 {
		b.ask("hot")
	}
	b.ask("r1") // loaded: hot (asked for often, least recently) and r1
	for _, c := range []struct {
		w    [2]float64
		want string
	}{{[2]float64{0.1, 0.9}, "r1"}, {[2]float64{0.9, 0.1}, "hot"}, {[2]float64{0.1, 0.9}, "r1"}} {
		sw.w = c.w
		if got := b.evicts("r2"); !slices.Equal(got, []string{c.want}) {
			t.Errorf("weights %v: plan for r2 evicts %v, want [%s]", c.w, got, c.want)
		}
	}
}
