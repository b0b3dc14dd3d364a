package evict

import (
	"cmp"
	"slices"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/policytest"
	sdksettings "github.com/loadout-dev/loadout/sdk/settings"
)

const gib = uint64(1) << 30

// box is a policytest host with gpus of the given sizes and models, each
// ready on the devices given (nil: stopped), its lease split evenly.
func box(t *testing.T, gpus []uint64, models ...sdk.ModelInfo) *policytest.Host {
	h := policytest.NewHost(t, models...)
	for i, total := range gpus {
		h.GPUs = append(h.GPUs, sdk.GPUInfo{Index: int32(i), Total: total, Free: total})
	}
	for _, m := range models {
		if !m.State.Running() {
			continue
		}
		for _, d := range m.Devices {
			h.GPUs[d].Leased += VRAM(&m) / uint64(len(m.Devices))
			h.GPUs[d].Free -= VRAM(&m) / uint64(len(m.Devices))
		}
	}
	return h
}

func ready(name string, vram uint64, lastUse int64, devices ...int32) sdk.ModelInfo {
	return sdk.ModelInfo{Name: name, State: sdk.StateReady, EstimatedVRAM: vram, LastUse: lastUse, Devices: devices}
}

func stopped(name string, vram uint64) sdk.ModelInfo {
	return sdk.ModelInfo{Name: name, EstimatedVRAM: vram}
}

// byClassThenLRU is the simplest order a policy would give.
func byClassThenLRU(a, b *Victim) int {
	if c := cmp.Compare(a.Class, b.Class); c != 0 {
		return c
	}
	return cmp.Compare(a.Model.LastUse, b.Model.LastUse)
}

func plan(t *testing.T, p *Planner, h *policytest.Host, target string) (sdk.Plan, error) {
	t.Helper()
	return p.Plan(h, sdk.PlanRequest{Now: h.Now, Target: target, Running: h.Running(target)}, &Rule{})
}

// TestPlan_OrderDecidesTheVictim: the same box, two orders, two victims;
// the mechanics (fit, evict until it fits) are the planner's.
func TestPlan_OrderDecidesTheVictim(t *testing.T) {
	h := box(t, []uint64{24 * gib}, ready("a", 12*gib, 1, 0), ready("b", 12*gib, 2, 0), stopped("t", 12*gib))
	lru := &Planner{Order: byClassThenLRU}
	if got, err := plan(t, lru, h, "t"); err != nil || !slices.Equal(got.Evict, []string{"a"}) || !slices.Equal(got.Devices, []int32{0}) {
		t.Fatalf("LRU plan = %+v, %v; want evict [a] on [0]", got, err)
	}
	mru := &Planner{Order: func(a, b *Victim) int { return -byClassThenLRU(a, b) }}
	if got, err := plan(t, mru, h, "t"); err != nil || !slices.Equal(got.Evict, []string{"b"}) {
		t.Fatalf("MRU plan = %+v, %v; want evict [b]", got, err)
	}
}

// TestPlan_Modes: a planner without Mode plans no modes (every victim the
// host's default, as before version 3); with Mode, one per victim, in the
// order of Evict.
func TestPlan_Modes(t *testing.T) {
	h := box(t, []uint64{24 * gib}, ready("a", 8*gib, 2, 0), ready("b", 8*gib, 1, 0), ready("c", 8*gib, 3, 0), stopped("t", 20*gib))
	got, err := plan(t, &Planner{Order: byClassThenLRU}, h, "t")
	if err != nil || !slices.Equal(got.Evict, []string{"a", "b", "c"}) || got.Modes != nil {
		t.Fatalf("plan = %+v, %v; want evict [a b c] and no modes", got, err)
	}
	sleepOld := func(target *sdk.ModelInfo, v *Victim) sdk.EvictMode {
		if target.Name != "t" {
			t.Errorf("Mode for target %q", target.Name)
		}
		if v.Model.LastUse == 1 {
			return sdk.EvictStop
		}
		return sdk.EvictSleep1
	}
	got, err = plan(t, &Planner{Order: byClassThenLRU, Mode: sleepOld}, h, "t")
	want := []sdk.EvictMode{sdk.EvictSleep1, sdk.EvictStop, sdk.EvictSleep1}
	if err != nil || !slices.Equal(got.Evict, []string{"a", "b", "c"}) || !slices.Equal(got.Modes, want) {
		t.Fatalf("plan = %+v, %v; want evict [a b c] modes %v", got, err, want)
	}
}

// TestPlan_GivesBackUnneededVictims: a small victim evicted first turns
// out not to be needed once a large one goes, and is kept.
func TestPlan_GivesBackUnneededVictims(t *testing.T) {
	h := box(t, []uint64{24 * gib}, ready("small", 4*gib, 1, 0), ready("large", 16*gib, 2, 0), stopped("t", 16*gib))
	got, err := plan(t, &Planner{Order: byClassThenLRU}, h, "t")
	if err != nil || !slices.Equal(got.Evict, []string{"large"}) {
		t.Fatalf("plan = %+v, %v; want only [large] evicted", got, err)
	}
}

// TestPlan_FitsWithoutEviction and the cases that need nothing.
func TestPlan_NothingToEvict(t *testing.T) {
	h := box(t, []uint64{24 * gib, 24 * gib}, ready("a", 12*gib, 1, 0), stopped("t", 12*gib), ready("r", 12*gib, 1, 1))
	p := &Planner{Order: byClassThenLRU}
	if got, err := plan(t, p, h, "t"); err != nil || len(got.Evict) != 0 || !slices.Equal(got.Devices, []int32{0}) {
		t.Fatalf("plan = %+v, %v; want no eviction, on [0] (ties to the first)", got, err)
	}
	if got, err := plan(t, p, h, "r"); err != nil || len(got.Evict) != 0 || got.Devices != nil {
		t.Fatalf("a ready target: plan = %+v, %v; want nothing", got, err)
	}
	if _, err := plan(t, &Planner{Policy: "x", Order: byClassThenLRU}, h, "nope"); err == nil || !strings.HasPrefix(err.Error(), `x: unknown model "nope"`) {
		t.Fatalf("an unknown model: %v", err)
	}
}

// TestPlan_IdleBeforeBusy_PinnedAndIneligibleNever: classes come first
// under any sensible order; a pinned model or one Eligible refuses is never
// a victim, and a target that cannot fit says what could be freed.
func TestPlan_IdleBeforeBusy_PinnedAndIneligibleNever(t *testing.T) {
	busy := ready("busy", 12*gib, 1, 0)
	busy.InFlight = 1
	idle := ready("idle", 12*gib, 9, 1)
	h := box(t, []uint64{12 * gib, 12 * gib}, busy, idle, stopped("t", 12*gib))
	if got, err := plan(t, &Planner{Order: byClassThenLRU}, h, "t"); err != nil || !slices.Equal(got.Evict, []string{"idle"}) || !slices.Equal(got.Devices, []int32{1}) {
		t.Fatalf("plan = %+v, %v; want the idle model evicted, though used later", got, err)
	}
	notIdle := &Planner{Order: byClassThenLRU, Eligible: func(_, m *sdk.ModelInfo) bool { return m.Name != "idle" }}
	if got, err := plan(t, notIdle, h, "t"); err != nil || !slices.Equal(got.Evict, []string{"busy"}) {
		t.Fatalf("plan = %+v, %v; want the busy model named (the scheduler waits)", got, err)
	}
	pinned := busy
	pinned.Pinned = true
	h = box(t, []uint64{12 * gib}, pinned, stopped("t", 12*gib))
	_, err := plan(t, &Planner{Order: byClassThenLRU, Kept: "pinned models stay"}, h, "t")
	if err == nil || !strings.Contains(err.Error(), "model t needs 12 GiB; at most 0 B can be freed") || !strings.HasSuffix(err.Error(), "pinned models stay)") {
		t.Fatalf("err = %v", err)
	}
}

// TestPlan_AllocatesNothing once grown: policies plan on every request.
func TestPlan_AllocatesNothing(t *testing.T) {
	h := box(t, []uint64{24 * gib}, ready("a", 12*gib, 1, 0), ready("b", 12*gib, 2, 0), stopped("t", 12*gib))
	p := &Planner{Order: byClassThenLRU}
	q := sdk.PlanRequest{Target: "t", Running: h.Running("t")}
	r := &Rule{}
	snap := h.Snapshot()
	var lean sdk.Host = leanHost{snap: snap, t: snap.Models[2]}
	p.Plan(lean, q, r)
	if n := testing.AllocsPerRun(100, func() { p.Plan(lean, q, r) }); n != 0 {
		t.Fatalf("Plan allocates %v times", n)
	}
}

// leanHost answers the two reads a plan makes from a fixed snapshot.
type leanHost struct {
	sdk.Host
	snap sdk.Snapshot
	t    sdk.ModelInfo
}

func (l leanHost) ModelState(string) (sdk.ModelInfo, bool) { return l.t, true }
func (l leanHost) Snapshot() sdk.Snapshot                  { return l.snap }

func TestParsePlacement(t *testing.T) {
	root, err := sdksettings.Decode([]byte(`{"pack": true, "models": {"m": {"gpus": [1], "split": "never"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := ParsePlacement(root)
	if err != nil || !p.Pack || !slices.Equal(p.Models["m"].GPUs, []int32{1}) || p.Models["m"].Split.String() != "never" {
		t.Fatalf("ParsePlacement = %+v, %v", p, err)
	}
	rs := NewRules(p, 0)
	if rs.For("m").Allows(0) || !rs.For("m").Allows(1) || !rs.For("other").Allows(0) {
		t.Fatal("rules do not follow the constraints")
	}
	root, _ = sdksettings.Decode([]byte(`{"models": {"m": {"split": "sometimes"}}}`))
	if _, err := ParsePlacement(root); err == nil || !strings.Contains(err.Error(), "models.m.split") {
		t.Fatalf("bad split: %v", err)
	}
}

// Find finds every name wherever the search starts, in a sorted list (by
// halving) and in one that is not (by the walk it falls back to), and
// moves the hint past a match found from it.
func TestFind_SortedOrNotFromAnyHint(t *testing.T) {
	for _, tc := range []struct {
		name  string
		names []string
	}{
		{"sorted", []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m"}},
		{"not sorted", []string{"m", "b", "k", "d", "a", "f", "l", "h", "i", "c", "e", "g", "j"}},
		{"short", []string{"b", "a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var models []sdk.ModelInfo
			for _, n := range tc.names {
				models = append(models, sdk.ModelInfo{Name: strings.Clone(n)})
			}
			for want, name := range tc.names {
				for start := 0; start <= len(models)+1; start++ {
					next := start
					m := Find(models, strings.Clone(name), &next)
					if m != &models[want] {
						t.Fatalf("Find(%q) from %d = %v; want entry %d", name, start, m, want)
					}
					if wantNext := start; want >= start {
						wantNext = want + 1
						if next != wantNext {
							t.Errorf("Find(%q) from %d left the hint at %d; want %d", name, start, next, wantNext)
						}
					} else if next != wantNext {
						t.Errorf("Find(%q) from %d moved the hint to %d; want it kept", name, start, next)
					}
				}
			}
			for start := 0; start <= len(models); start++ {
				next := start
				if m := Find(models, "zz", &next); m != nil || next != start {
					t.Errorf("Find(zz) from %d = %v, hint %d; want nil, hint kept", start, m, next)
				}
			}
		})
	}
}

// TestPlanner_Models: before any plan the host's snapshot; after a plan
// that read one, that plan's snapshot, even once the host's has moved on.
func TestPlanner_Models(t *testing.T) {
	h := box(t, []uint64{24 * gib}, ready("a", 12*gib, 1, 0), ready("b", 12*gib, 2, 0), stopped("t", 12*gib))
	p := &Planner{Order: byClassThenLRU}
	if got := p.Models(h); len(got) != 3 {
		t.Fatalf("Models before a plan: %d models, want the host's 3", len(got))
	}
	if _, err := plan(t, p, h, "t"); err != nil {
		t.Fatal(err)
	}
	h.Models["u"] = &sdk.ModelInfo{Name: "u", EstimatedVRAM: gib}
	got := p.Models(h)
	if len(got) != 3 || got[0].Name != "a" {
		t.Errorf("Models after a plan: %d models, first %q; want the plan's 3, not the host's 4 now", len(got), got[0].Name)
	}
}

// asleepOn is a model asleep at level 1 whose server was started on
// devices (ABI version 3: an asleep model's Devices, Leased 0).
func asleepOn(name string, vram uint64, devices ...int32) sdk.ModelInfo {
	m := asleep(name, vram, 0)
	m.Devices, m.Leased = devices, make([]uint64, len(devices))
	return m
}

// An asleep model is placed on the GPU its sleeping server holds, where
// the host can wake it, even when another GPU is emptier; when it cannot
// fit there it goes where it fits (the host then cold-loads it).
func TestPlan_AsleepModelGoesWhereItsServerIs(t *testing.T) {
	h := box(t, []uint64{24 * gib, 24 * gib}, ready("a", 12*gib, 1, 0), ready("b", 12*gib, 2, 0), asleepOn("t", 12*gib, 0))
	p := &Planner{Order: byClassThenLRU}
	if got, err := plan(t, p, h, "t"); err != nil || !slices.Equal(got.Evict, []string{"a"}) || !slices.Equal(got.Devices, []int32{0}) {
		t.Fatalf("plan = %+v, %v; want evict [a] on [0], where t's server is, not the empty GPU 1", got, err)
	}
	a, b := ready("a", 12*gib, 1, 0), ready("b", 12*gib, 2, 0)
	a.Pinned, b.Pinned = true, true
	h = box(t, []uint64{24 * gib, 24 * gib}, a, b, asleepOn("t", 12*gib, 0))
	if got, err := plan(t, p, h, "t"); err != nil || len(got.Evict) != 0 || !slices.Equal(got.Devices, []int32{1}) {
		t.Fatalf("plan with GPU 0 pinned full = %+v, %v; want no eviction, on [1]", got, err)
	}
}
