package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/evict"
)

// The benchmarks plan against benchHost, a lean sdk.Host that returns a
// fixed snapshot and records nothing, so the figures are the policy's (plus,
// for Wasm, the ABI round trips and the snapshot's encoding and decoding),
// not policytest.Host's bookkeeping.
//
//	go test ./policies/prioritylru -run '^$' -bench . -benchmem

// benchHost is a box with n models on 2×80 GiB GPUs: n-1 loaded (a mix
// of priorities, last uses and busy ones, their VRAM scaled so that both
// GPUs are nearly full whatever n), and one stopped 40 GiB model to load,
// which must evict: at 16 models 4 of 15, at 100 models 21 of 99.
type benchHost struct{ snap sdk.Snapshot }

func newBenchHost() *benchHost { return newBenchHostN(16) }

func newBenchHostN(n int) *benchHost {
	h := &benchHost{snap: sdk.Snapshot{Now: 1e12}}
	leased := [2]uint64{}
	for i := range n - 1 {
		d := int32(i % 2)
		m := sdk.ModelInfo{
			Name: fmt.Sprintf("model-%02d", i), State: sdk.StateReady, Priority: int32(i % 3),
			LastUse: int64(1e12 - i*7919%15*1e9), EstimatedVRAM: 10 * gib * 15 / uint64(n-1), Devices: []int32{d},
		}
		if i%5 == 0 {
			m.InFlight = 1
		}
		if i%4 == 0 {
			m.MeasuredVRAM = m.EstimatedVRAM * 9 / 10
		}
		leased[d] += evict.VRAM(&m)
		h.snap.Models = append(h.snap.Models, m)
	}
	h.snap.Models = append(h.snap.Models, sdk.ModelInfo{Name: "target", Priority: 1, EstimatedVRAM: 40 * gib})
	for d := range 2 {
		h.snap.GPUs = append(h.snap.GPUs, sdk.GPUInfo{Index: int32(d), Name: "H100", Total: 80 * gib, Leased: leased[d], Free: 80*gib - min(leased[d], 80*gib)})
	}
	return h
}

func (h *benchHost) Log(sdk.LogLevel, string) {}
func (h *benchHost) ModelState(name string) (sdk.ModelInfo, bool) {
	for _, m := range h.snap.Models {
		if m.Name == name {
			return m, true
		}
	}
	return sdk.ModelInfo{}, false
}
func (h *benchHost) RunningModels() []sdk.ModelInfo { return nil }
func (h *benchHost) Snapshot() sdk.Snapshot         { return h.snap }

// running is the running set the host sends with a plan for target.
func (h *benchHost) running(target string) (out []string) {
	for _, m := range h.snap.Models {
		if m.State.Running() && m.Name != target {
			out = append(out, m.Name)
		}
	}
	return out
}

type planner interface {
	Plan(q sdk.PlanRequest) (sdk.Plan, error)
}

// benchPlan times Plan(target); evicts says whether the plan must evict.
// With touch set, one loaded model's last use moves before every plan, as
// a request served between two plans moves it: the plan sees one changed
// model (through Wasm, a snapshot delta of one model).
func benchPlan(b *testing.B, s planner, h *benchHost, target string, evicts, touch bool) {
	q := sdk.PlanRequest{Now: h.snap.Now, Target: target, Running: h.running(target)}
	p, err := s.Plan(q)
	if err != nil || (len(p.Evict) > 0) != evicts {
		b.Fatalf("Plan(%s) = %+v, %v; want evictions: %t", target, p, err, evicts)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if touch {
			h.snap.Models[i%(len(h.snap.Models)-1)].LastUse += int64(i)
		}
		if _, err := s.Plan(q); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPlan_Native: a plan that must evict (a stopped 40 GiB model onto
// two full 80 GiB GPUs), 16 models on 2 GPUs.
func BenchmarkPlan_Native(b *testing.B) {
	h := newBenchHost()
	benchPlan(b, nativePlanner(b, h), h, "target", true, false)
}

// BenchmarkPlan_Wasm: the same plan through the real runtime: the plan
// export, the model_state and snapshot_delta imports (encoded by the host,
// decoded by the guest) and the plan's encoding back.
func BenchmarkPlan_Wasm(b *testing.B) {
	h := newBenchHost()
	benchPlan(b, wasmPlanner(b, h), h, "target", true, false)
}

// BenchmarkPlan_OneChanged_Wasm: BenchmarkPlan_Wasm with one model's last
// use changed before every plan.
func BenchmarkPlan_OneChanged_Wasm(b *testing.B) {
	h := newBenchHost()
	benchPlan(b, wasmPlanner(b, h), h, "target", true, true)
}

// BenchmarkPlan_Ready_Native: the plan the scheduler asks for on every
// request for a loaded model (fifo's fast path): nothing to do.
func BenchmarkPlan_Ready_Native(b *testing.B) {
	h := newBenchHost()
	benchPlan(b, nativePlanner(b, h), h, "model-01", false, false)
}

// BenchmarkPlan_Ready_Wasm: the fast path through Wasm.
func BenchmarkPlan_Ready_Wasm(b *testing.B) {
	h := newBenchHost()
	benchPlan(b, wasmPlanner(b, h), h, "model-01", false, false)
}

// BenchmarkPlan100_Native, …_Wasm, …_OneChanged_Wasm and
// …_Ready_Wasm: the same at 100 models on the same 2 GPUs (99 loaded, 21
// of them evicted).
func BenchmarkPlan100_Native(b *testing.B) {
	h := newBenchHostN(100)
	benchPlan(b, nativePlanner(b, h), h, "target", true, false)
}

func BenchmarkPlan100_Wasm(b *testing.B) {
	h := newBenchHostN(100)
	benchPlan(b, wasmPlanner(b, h), h, "target", true, false)
}

func BenchmarkPlan100_OneChanged_Wasm(b *testing.B) {
	h := newBenchHostN(100)
	benchPlan(b, wasmPlanner(b, h), h, "target", true, true)
}

func BenchmarkPlan100_Ready_Wasm(b *testing.B) {
	h := newBenchHostN(100)
	benchPlan(b, wasmPlanner(b, h), h, "model-01", false, false)
}

const benchSettings = `{"margin": "512MiB"}`

func nativePlanner(b *testing.B, h sdk.Host) planner {
	s, err := New(h, []byte(benchSettings))
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func wasmPlanner(b *testing.B, h sdk.Host) planner {
	rt, mod := wasmModule(b)
	ctx := context.Background()
	s, err := rt.NewSwapper(ctx, mod, []byte(benchSettings), h)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close(ctx) })
	return s
}
