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

// box is one GPU of room GiB with the models named, 8 GiB each unless
// sized, all stopped, driven by a minimal scheduler: a request for a ready
// model is granted, one for another starts the swap the router plans.
type box struct {
	t     testing.TB
	h     *policytest.Host
	next  sdk.RequestID
	loads map[string]int
	// load is each model's load duration (1 s unless set).
	load map[string]time.Duration
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
	b := &box{t: t, h: h, loads: map[string]int{}, load: map[string]time.Duration{}}
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
		d := b.load[model]
		if d == 0 {
			d = time.Second
		}
		b.h.Advance(d)
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
// loads it again in every round.
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

// runKeepsThePopularModel: on skewed traffic over two slots the router
// keeps the hot model, which LRU evicts for every rare request, and a
// plan evicts the rare model used last over the hot one used before it.
func runKeepsThePopularModel(t *testing.T, mk policytest.MakeSwapper) {
	b := newBox(t, mk, `{}`, 2, "hot", "r1", "r2", "r3")
	skewed(b, 30)
	if b.loads["hot"] > 3 {
		t.Errorf("hot loaded %d times in 30 rounds (LRU loads it every round): %v", b.loads["hot"], b.loads)
	}
	b.ask("hot")
	b.ask("r1")
	if got := b.evicts("r2"); !slices.Equal(got, []string{"r1"}) {
		t.Errorf("plan for r2 evicts %v, want [r1] (the hot model stays)", got)
	}
}

// runForgetsWhatTrafficLeft: after a long phase in which one model was
// the most popular, traffic moves to working sets that never use it
// again. Counting from start-up would keep that model for good; the
// router learns a shorter memory from its forecasts' misses, evicts it,
// and loads each new working set about as LRU would.
func runForgetsWhatTrafficLeft(t *testing.T, mk policytest.MakeSwapper) {
	b := newBox(t, mk, `{}`, 3, "hot", "r1", "r2", "r3", "a", "b", "c", "d")
	skewed(b, 60)
	before := b.total()
	sets := [][]string{{"a", "b"}, {"c", "d"}, {"a", "c"}, {"b", "d"}, {"a", "d"}, {"b", "c"}}
	for i := range 24 {
		for range 3 {
			for _, m := range sets[i%len(sets)] {
				b.ask(m)
			}
		}
	}
	if m := b.h.Models["hot"]; m.State.Running() {
		t.Errorf("the hot model of the first phase is still loaded (%s) after 24 working sets without it", m.State)
	}
	// LRU loads at most the two models of each new set.
	if got := b.total() - before; got > 2*24+4 {
		t.Errorf("%d cold loads over 24 working sets of two; LRU needs at most 48", got)
	}
}

// batchBurst is a box of three slots and five models on which a model
// asked for once in each of 12 rounds (with one of three rare ones), then
// one asked for twenty times in one burst, then 12 rounds more: traffic
// that counting requests and counting bursts order differently. It
// returns the box and the rare models.
func batchBurst(t *testing.T, mk policytest.MakeSwapper) (*box, []string) {
	b := newBox(t, mk, `{}`, 3, "steady", "batch", "r1", "r2", "r3")
	rare := []string{"r1", "r2", "r3"}
	for i := range 12 {
		b.ask("steady")
		b.ask(rare[i%3])
	}
	for range 20 {
		b.ask("batch")
	}
	for i := range 12 {
		b.ask("steady")
		b.ask(rare[i%3])
	}
	return b, rare
}

// runBurstsCountOnce: a batch client's burst of requests to one model is
// one sign of demand, not twenty. After a model asked for twenty times in
// one burst and another asked for once in each of many rounds, the plan
// keeps the steady one.
func runBurstsCountOnce(t *testing.T, mk policytest.MakeSwapper) {
	b, rare := batchBurst(t, mk)
	b.ask("batch")
	b.ask("steady")
	// Loaded: steady, batch and a rare model; r-next must evict one of
	// steady and batch (the rare one is least used by either count).
	b.ask(rare[0])
	b.ask("batch")
	b.ask("steady")
	if got := b.evicts(rare[1]); !slices.Equal(got, []string{"batch"}) && !slices.Equal(got, []string{rare[0]}) {
		t.Errorf("plan for %s evicts %v, want batch or %s (steady stays)", rare[1], got, rare[0])
	}
}

// runWeighsLoadTime: of two models asked for alike, the one that takes
// longer to load again stays (expected load seconds, not loads).
func runWeighsLoadTime(t *testing.T, mk policytest.MakeSwapper) {
	b := newBox(t, mk, `{}`, 2, "fast", "slow", "x")
	b.load["slow"] = 30 * time.Second
	for range 6 {
		b.ask("fast")
		b.ask("slow")
	}
	if got := b.evicts("x"); !slices.Equal(got, []string{"fast"}) {
		t.Errorf("plan for x evicts %v, want [fast] (slow takes 30 s to load again, fast 1 s)", got)
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
	b := newBox(t, mk, `{}`, 2, "hot", "r1", "r2", "r3")
	skewed(b, 12)
	if b.loads["hot"] < 12 {
		t.Errorf("hot loaded %d times in 12 rounds; LRU loads it in every round", b.loads["hot"])
	}
}

// TestForesight_IdleBeforeBusy: a busy model goes after every idle one,
// however little it is asked for (the scheduler would wait for it).
func TestForesight_IdleBeforeBusy(t *testing.T) {
	b := newBox(t, nativeSwapper, `{}`, 2, "hot", "rare", "x")
	for range 10 {
		b.ask("hot")
	}
	b.ask("rare")
	b.h.Models["rare"].InFlight = 1
	if got := b.evicts("x"); !slices.Equal(got, []string{"hot"}) {
		t.Errorf("plan for x with rare busy evicts %v, want [hot]", got)
	}
	b.h.Models["rare"].InFlight = 0
	if got := b.evicts("x"); !slices.Equal(got, []string{"rare"}) {
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
		b := newBox(t, mk, c.settings, 2, "hot", "rare", "x")
		for range 10 {
			b.ask("hot")
		}
		b.ask("rare")
		b.h.Models["rare"].State, b.h.Models["rare"].InFlight = c.state, c.inFlight
		if got := b.evicts("x"); !slices.Equal(got, []string{c.want}) {
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
		b := newBox(t, mk, c.settings, 2, "hot", "rare", "x")
		for range 10 {
			b.ask("hot")
		}
		b.ask("rare")
		b.h.Models["rare"].InFlight = 1
		b.h.WaitRecords = c.records
		if got := b.evicts("x"); !slices.Equal(got, []string{c.want}) {
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
	b := newBox(t, keep(&s, nil), `{}`, 1, "a", "c", "e") // one slot: every ask below is a swap
	for _, m := range []string{"a", "c", "e", "a", "c", "e"} {
		b.ask(m)
	}
	// A reload that renames c to b: as many models, b where c was.
	delete(b.h.Models, "c")
	b.h.Models["b"] = &sdk.ModelInfo{Name: "b", EstimatedVRAM: 8 * gib}
	for _, m := range []string{"b", "a", "e", "b", "a", "b"} {
		b.ask(m)
	}
	for _, d := range b.h.Demand() {
		if m := s.models.Get(d.Name); m == nil || m.seen != d.Requests {
			t.Errorf("model %s: the swapper has seen %v requests, the host counts %d", d.Name, m, d.Requests)
		}
	}
}
