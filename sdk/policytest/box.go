package policytest

import (
	"slices"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/sdk"
)

// SlotVRAM is the estimated VRAM of every model of a Box, in bytes
// (8 GiB): a Box of K slots is a GPU of K × SlotVRAM.
const SlotVRAM = uint64(8) << 30

// Box is a bench for a router (a Swapper) on equal slots, the terms of
// the classical cache anchors and of `simulate --sequence`: one GPU,
// "gpu0", with room for a number of models of SlotVRAM each, the models
// named, all stopped at first, driven by a minimal scheduler — a request
// for a ready model is granted, one for another starts the swap the
// router plans, evicting what the plan names. Requests come one at a
// time (Ask), each a second after the last and ended before the next,
// so a victim is never busy: what the router is judged on is its order,
// and Loads counts the cold loads it cost.
//
// Box keeps the GPU's ledger itself (Account): every running model on
// GPU 0, its free memory the total less their estimates, as the host's
// ledger would be. A test may change H's models between requests (a
// model's InFlight or State, its size, one removed) and then Account.
type Box struct {
	// H is the host the router runs against; its Scheduler is the Box's.
	H *Host
	// Loads is each model's cold loads so far.
	Loads map[string]int
	// LoadTime is each model's load duration: how far Ask advances the
	// clock while it loads (1 s where unset).
	LoadTime map[string]time.Duration

	tb   testing.TB
	next sdk.RequestID
}

// NewBox is a Box of slots slots holding the models named, with the
// swapper mk makes from settings (JSON) as H's Swapper. A swapper that
// refuses its settings fails the test.
func NewBox(tb testing.TB, mk MakeSwapper, settings string, slots int, names ...string) *Box {
	tb.Helper()
	ms := make([]sdk.ModelInfo, 0, len(names))
	for _, n := range names {
		ms = append(ms, sdk.ModelInfo{Name: n, EstimatedVRAM: SlotVRAM})
	}
	h := NewHost(tb, ms...)
	sw, err := mk(tb, h, settings)
	if err != nil {
		tb.Fatal(err)
	}
	h.Swapper = sw
	h.Scheduler = &swapOnMiss{fx: h, waiting: map[string][]sdk.RequestID{}}
	h.GPUs = []sdk.GPUInfo{{Index: 0, Name: "gpu0", Total: uint64(slots) * SlotVRAM}}
	b := &Box{H: h, Loads: map[string]int{}, LoadTime: map[string]time.Duration{}, tb: tb}
	b.Account()
	return b
}

// Account puts every running model on GPU 0 and works out the GPU's
// leased and free memory from their estimates, as the host's ledger
// would.
func (b *Box) Account() {
	g := &b.H.GPUs[0]
	g.Leased = 0
	for _, m := range b.H.Models {
		if m.State.Running() {
			m.Devices = []int32{0}
			g.Leased += m.EstimatedVRAM
		} else {
			m.Devices = nil
		}
	}
	g.Free = g.Total - min(g.Leased, g.Total)
}

// Ask sends one request for model a second after the last; if it takes
// a swap, the model loads (LoadTime) and counts a cold load; then the
// request is served and ends. A request that is not granted fails the
// test with its outcome.
func (b *Box) Ask(model string) {
	b.tb.Helper()
	b.H.Advance(time.Second)
	b.next++
	id := b.next
	b.H.Submit(sdk.RequestEvent{ID: id, Model: model})
	if slices.Contains(b.H.ActiveSwaps(), model) {
		b.Loads[model]++
		b.Account()
		d := b.LoadTime[model]
		if d == 0 {
			d = time.Second
		}
		b.H.Advance(d)
		b.H.CompleteSwap(model, "")
		b.Account()
	}
	if !b.H.Granted(id) {
		b.tb.Fatalf("request %d for %s: %s", id, model, b.H.Outcome(id))
	}
	b.H.ServeDone(id)
}

// AskAll asks for each model of seq in turn (Ask).
func (b *Box) AskAll(seq []string) {
	b.tb.Helper()
	for _, m := range seq {
		b.Ask(m)
	}
}

// ColdLoads is the cold loads so far, over every model.
func (b *Box) ColdLoads() int {
	n := 0
	for _, l := range b.Loads {
		n += l
	}
	return n
}

// Evicts is what the router's plan for target evicts now; a plan that
// fails fails the test.
func (b *Box) Evicts(target string) []string {
	b.tb.Helper()
	p, err := b.H.Plan(target)
	if err != nil {
		b.tb.Fatalf("plan %s: %v", target, err)
	}
	return p.Evict
}

// Skewed is the model sequence of rounds rounds of traffic LRU serves
// worst on two slots: "hot" asked three times, then two of the rare
// models "r1", "r2" and "r3" in turn. The second rare request finds hot
// the least recently used, so LRU evicts it and loads it again every
// round; an order that counts requests loads it once.
func Skewed(rounds int) []string {
	rare := []string{"r1", "r2", "r3"}
	seq := make([]string, 0, 5*rounds)
	for i := range rounds {
		seq = append(seq, "hot", "hot", "hot", rare[(2*i)%3], rare[(2*i+1)%3])
	}
	return seq
}

// KeepsTheHotModel is the case of a router that weighs how often models
// are asked for, written once for every such router's tests: on
// Skewed(30) over two slots ("hot", "r1", "r2", "r3") it loads hot at
// most maxHot times (LRU: every round, 30), and once hot was asked for
// before the last rare model — where LRU would evict hot — the plan for r2
// evicts r1, the rare model used last. Failures are reported on tb.
func KeepsTheHotModel(tb testing.TB, mk MakeSwapper, maxHot int) {
	tb.Helper()
	b := NewBox(tb, mk, `{}`, 2, "hot", "r1", "r2", "r3")
	b.AskAll(Skewed(30))
	if b.Loads["hot"] > maxHot {
		tb.Errorf("hot loaded %d times in 30 rounds, want at most %d (LRU loads it every round): %v", b.Loads["hot"], maxHot, b.Loads)
	}
	b.Ask("hot")
	b.Ask("r1")
	if got := b.Evicts("r2"); !slices.Equal(got, []string{"r1"}) {
		tb.Errorf("plan for r2 evicts %v, want [r1] (the hot model stays)", got)
	}
}

// swapOnMiss is a Box's scheduler: a request for a ready model is
// granted; one for another starts the swap the router plans (evicting
// what the plan names) and waits for it.
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
