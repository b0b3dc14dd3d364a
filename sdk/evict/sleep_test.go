package evict

import (
	"cmp"
	"slices"
	"testing"

	"github.com/loadout-dev/loadout/sdk"
)

// sleepy is a model that can sleep at both levels, with 1 GiB of process
// overhead at level 2.
func sleepy(m sdk.ModelInfo) sdk.ModelInfo {
	m.CanSleep, m.HostBytes1, m.HostBytes2 = 3, VRAM(&m), gib
	return m
}

// asleep is a model asleep at level 1 holding its weights in host memory.
func asleep(name string, vram uint64, lastUse int64) sdk.ModelInfo {
	m := sleepy(stopped(name, vram))
	m.LastUse, m.SleepLevel, m.HostLeased = lastUse, 1, vram
	return m
}

// byRecency: the most recently used first, the deserving sleeper.
func byRecency(a, b *sdk.ModelInfo) int { return cmp.Compare(b.LastUse, a.LastUse) }

// TestSleepTier: the victim and the sleepers compete for host memory,
// most recently used first; the one left out of the tier is stopped.
func TestSleepTier(t *testing.T) {
	models := []sdk.ModelInfo{
		sleepy(ready("a", 8*gib, 30, 0)), // the victim, used at 30
		asleep("old", 8*gib, 10),         // asleep, used at 10: it loses its place
		asleep("new", 8*gib, 20),         // asleep, used at 20: it keeps it
		stopped("t", 16*gib),
	}
	h := box(t, []uint64{16 * gib}, models...)
	h.HostMemory = 16 * gib // holds two 8 GiB sleepers
	got, err := plan(t, &Planner{Order: byClassThenLRU, SleepOrder: byRecency}, h, "t")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Evict, []string{"a", "old"}) || !slices.Equal(got.Modes, []sdk.EvictMode{sdk.EvictSleep1, sdk.EvictStop}) {
		t.Fatalf("plan = %v %v; want a to sleep at level 1 and old stopped", got.Evict, got.Modes)
	}

	// Room for all three: nobody is stopped.
	h.HostMemory = 24 * gib
	got, err = plan(t, &Planner{Order: byClassThenLRU, SleepOrder: byRecency}, h, "t")
	if err != nil || !slices.Equal(got.Evict, []string{"a"}) || !slices.Equal(got.Modes, []sdk.EvictMode{sdk.EvictSleep1}) {
		t.Fatalf("24 GiB: plan = %v %v, %v; want only a, asleep at level 1", got.Evict, got.Modes, err)
	}

	// No host memory accounted: no modes, the host's default.
	h.HostMemory = 0
	got, err = plan(t, &Planner{Order: byClassThenLRU, SleepOrder: byRecency}, h, "t")
	if err != nil || !slices.Equal(got.Evict, []string{"a"}) || got.Modes != nil {
		t.Fatalf("no host memory: plan = %v %v, %v; want [a] and no modes", got.Evict, got.Modes, err)
	}
}

// TestSleepTier_Level2WhenWeightsDoNotFit: host memory that holds the
// process overhead but not the weights gets a level-2 sleeper.
func TestSleepTier_Level2WhenWeightsDoNotFit(t *testing.T) {
	h := box(t, []uint64{16 * gib}, sleepy(ready("a", 8*gib, 30, 0)), stopped("t", 16*gib))
	h.HostMemory = 4 * gib
	got, err := plan(t, &Planner{Order: byClassThenLRU, SleepOrder: byRecency}, h, "t")
	if err != nil || !slices.Equal(got.Modes, []sdk.EvictMode{sdk.EvictSleep2}) {
		t.Fatalf("plan = %v %v, %v; want a asleep at level 2", got.Evict, got.Modes, err)
	}
}

// TestSleepTier_TargetAsleepIsNotASleeper: a plan that wakes its target
// never stops it as a sleeper that lost its place.
func TestSleepTier_TargetAsleepIsNotASleeper(t *testing.T) {
	h := box(t, []uint64{16 * gib}, sleepy(ready("a", 16*gib, 30, 0)), asleep("t", 16*gib, 1))
	h.HostMemory = 16 * gib // holds t now; a cannot join it
	got, err := plan(t, &Planner{Order: byClassThenLRU, SleepOrder: byRecency}, h, "t")
	if err != nil || !slices.Equal(got.Evict, []string{"a"}) || !slices.Equal(got.Modes, []sdk.EvictMode{sdk.EvictStop}) {
		t.Fatalf("plan = %v %v, %v; want a stopped and t left to its wake", got.Evict, got.Modes, err)
	}
}
