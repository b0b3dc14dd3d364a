package policytest_test

import (
	"testing"
	"time"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/policytest"
)

// lruWhenFull evicts the least recently used running model, and only when
// the target does not fit in GPU 0's free memory: LRU on equal slots.
type lruWhenFull struct{ h sdk.Host }

func (l lruWhenFull) Plan(q sdk.PlanRequest) (sdk.Plan, error) {
	snap := l.h.Snapshot()
	var target sdk.ModelInfo
	for _, m := range snap.Models {
		if m.Name == q.Target {
			target = m
		}
	}
	if snap.GPUs[0].Free >= target.EstimatedVRAM {
		return sdk.Plan{Devices: []int32{0}}, nil
	}
	var victim *sdk.ModelInfo
	for _, m := range l.h.RunningModels() {
		if victim == nil || m.LastUse < victim.LastUse {
			victim = &m
		}
	}
	return sdk.Plan{Evict: []string{victim.Name}, Devices: []int32{0}}, nil
}

func (lruWhenFull) OnSwapStart(sdk.SwapStartEvent) {}

var lru = policytest.NativeSwapperOf(func(h sdk.Host, _ []byte) (sdk.Swapper, error) { return lruWhenFull{h}, nil })

// On two slots LRU loads the hot model of Skewed traffic again in every
// round, and each rare model at each of its requests but none: the Box
// counts every load, keeps the ledger and advances the clock by each
// load's time.
func TestBox_CountsLRUsLoadsOnSkewedTraffic(t *testing.T) {
	const rounds = 9
	b := policytest.NewBox(t, lru, `{}`, 2, "hot", "r1", "r2", "r3")
	b.LoadTime["r3"] = 30 * time.Second
	start := b.H.Now
	b.AskAll(policytest.Skewed(rounds))
	if b.Loads["hot"] != rounds {
		t.Errorf("hot loaded %d times in %d rounds, want every round: %v", b.Loads["hot"], rounds, b.Loads)
	}
	// Every rare request finds its model evicted: 2 a round.
	if got, want := b.ColdLoads(), rounds+2*rounds; got != want {
		t.Errorf("cold loads %d, want %d: %v", got, want, b.Loads)
	}
	// A second per request, LoadTime per load (1 s unset, 30 s for r3).
	want := time.Duration(5*rounds)*time.Second + time.Duration(b.ColdLoads()-b.Loads["r3"])*time.Second +
		time.Duration(b.Loads["r3"])*30*time.Second
	if got := time.Duration(b.H.Now - start); got != want {
		t.Errorf("the clock moved %v, want %v", got, want)
	}
	running := 0
	for _, m := range b.H.Models {
		if m.State.Running() {
			running++
		}
	}
	if g := b.H.GPUs[0]; running != 2 || g.Leased != 2*policytest.SlotVRAM || g.Free != 0 {
		t.Errorf("%d running, GPU leased %d and free %d; want 2 running and the GPU full", running, g.Leased, g.Free)
	}
	// The last round asked for hot before two rare models: LRU's plan
	// for a third evicts the older of the two.
	last := policytest.Skewed(rounds)[5*rounds-2]
	if got := b.Evicts("hot"); len(got) != 1 || got[0] != last {
		t.Errorf("plan for hot evicts %v, want [%s]", got, last)
	}
}
