package main

import (
	"slices"
	"testing"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/policytest"
)

const gib = uint64(1) << 30

func ready(name string, lastUse int64) sdk.ModelInfo {
	return sdk.ModelInfo{Name: name, State: sdk.StateReady, LastUse: lastUse}
}

func plan(t *testing.T, h *policytest.Host, settings, target string) sdk.Plan {
	t.Helper()
	s, err := New(h, []byte(settings))
	if err != nil {
		t.Fatal(err)
	}
	h.Swapper = policytest.NativeSwapper(s)
	p, err := h.Plan(target)
	if err != nil {
		t.Fatalf("Plan(%s): %v", target, err)
	}
	return p
}

// Without GPU accounting, the least recently used idle model goes; a busy
// or pinned one never does.
func TestLRU_ByCount(t *testing.T) {
	busy := ready("busy", 1)
	busy.InFlight = 1
	pinned := ready("pinned", 2)
	pinned.Pinned = true
	h := policytest.NewHost(t, busy, pinned, ready("old", 3), ready("new", 9), sdk.ModelInfo{Name: "t"})
	p := plan(t, h, `{"max_running": 4}`, "t") // four running and the target: one goes
	if !slices.Equal(p.Evict, []string{"old"}) {
		t.Fatalf("evict %v, want [old]", p.Evict)
	}
	p = plan(t, h, `{}`, "t") // one at a time: every idle model goes
	if !slices.Equal(p.Evict, []string{"old", "new"}) {
		t.Fatalf("evict %v, want [old new]", p.Evict)
	}
}

// With GPUs accounted, it evicts until the target fits, crediting what each
// eviction gives back on each device, and names the device.
func TestLRU_ByMemory(t *testing.T) {
	a := ready("a", 1)
	a.Devices, a.Leased = []int32{0}, []uint64{10 * gib}
	b := ready("b", 2)
	b.Devices, b.Leased = []int32{1}, []uint64{20 * gib}
	target := sdk.ModelInfo{Name: "t", EstimatedVRAM: 14 * gib}
	h := policytest.NewHost(t, a, b, target)
	h.GPUs = []sdk.GPUInfo{{Index: 0, Total: 24 * gib, Free: 14 * gib}, {Index: 1, Total: 24 * gib, Free: 4 * gib}}
	if p := plan(t, h, `{}`, "t"); len(p.Evict) != 0 || !slices.Equal(p.Devices, []int32{0}) {
		t.Fatalf("plan %+v, want no eviction on GPU 0", p)
	}
	target.EstimatedVRAM = 20 * gib
	h.Models["t"].EstimatedVRAM = 20 * gib
	if p := plan(t, h, `{}`, "t"); !slices.Equal(p.Evict, []string{"a"}) || !slices.Equal(p.Devices, []int32{0}) {
		t.Fatalf("plan %+v, want a evicted and t on GPU 0", p)
	}
}

func TestLRU_BadSettings(t *testing.T) {
	for _, bad := range []string{`{"max_runing": 2}`, `{"max_running": -1}`, `[`} {
		if _, err := New(policytest.NewHost(t), []byte(bad)); err == nil {
			t.Errorf("settings %s accepted", bad)
		}
	}
}
