package main

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/policytest"
)

// The benchmarks run the scheduler against benchFx, a lean host that
// records nothing, so the figures are the policy's (plus, for Wasm, the ABI
// round trips), not policytest.Host's bookkeeping.
//
//	go test ./policies/fifo -run '^$' -bench . -benchmem

// benchFx is a minimal sdk.Effects for benchmarks: a model table, swaps
// that complete when told, and a group eviction rule (a target evicts the
// running models of its own group). It does not count requests in flight,
// so no model ever becomes busy.
type benchFx struct {
	models  map[string]*sdk.ModelInfo
	names   []string       // sorted
	groupOf map[string]int // eviction rule
	active  map[string][]string
	running []string // Plan's scratch
	grants  int
}

func newBenchFx(groupOf map[string]int) *benchFx {
	f := &benchFx{models: map[string]*sdk.ModelInfo{}, groupOf: groupOf, active: map[string][]string{}}
	for name := range groupOf {
		f.models[name] = &sdk.ModelInfo{Name: name, ConcurrencyLimit: 1 << 30}
		f.names = append(f.names, name)
	}
	slices.Sort(f.names)
	return f
}

func (f *benchFx) Log(sdk.LogLevel, string) {}
func (f *benchFx) ModelState(model string) (sdk.ModelInfo, bool) {
	if m, ok := f.models[model]; ok {
		return *m, true
	}
	return sdk.ModelInfo{}, false
}
func (f *benchFx) RunningModels() []sdk.ModelInfo { return nil }
func (f *benchFx) Snapshot() sdk.Snapshot         { return sdk.Snapshot{} }
func (f *benchFx) GrantServe(sdk.RequestID, string) bool {
	f.grants++
	return true
}
func (f *benchFx) GrantError(id sdk.RequestID, code sdk.ErrorCode, msg string) {
	panic(fmt.Sprintf("benchmark request %d failed: %s %s", id, policytest.CodeName(code), msg))
}
func (f *benchFx) SetQueuePosition(sdk.RequestID, int) {}
func (f *benchFx) StopProcesses([]string) error        { return nil }

func (f *benchFx) StartSwap(s sdk.SwapRequest) error {
	if _, ok := f.active[s.Model]; ok {
		return sdk.ErrSwapActive
	}
	for _, e := range s.Evict {
		f.models[e].State = sdk.StateStopping
	}
	f.models[s.Model].State = sdk.StateStarting
	f.active[s.Model] = s.Evict
	return nil
}

func (f *benchFx) complete(model string) {
	for _, e := range f.active[model] {
		f.models[e].State = sdk.StateStopped
	}
	delete(f.active, model)
	f.models[model].State = sdk.StateReady
}

func (f *benchFx) Plan(target string) (sdk.Plan, error) {
	running := f.running[:0]
	for _, name := range f.names {
		if _, active := f.active[name]; name != target && (f.models[name].State.Running() || active) {
			running = append(running, name)
		}
	}
	f.running = running
	var p sdk.Plan
	for _, m := range running {
		if f.groupOf[m] == f.groupOf[target] {
			p.Evict = append(p.Evict, m)
		}
	}
	return p, nil
}

// fastPath serves requests for 8 ready models, each alone in its group.
func fastPath(b *testing.B, s policytest.Scheduler, fx *benchFx) {
	for _, m := range fx.models {
		m.State = sdk.StateReady
	}
	ev := sdk.RequestEvent{Now: 1e12}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ev.ID = sdk.RequestID(i + 1)
		ev.Model = fx.names[i%len(fx.names)]
		if err := s.OnRequest(ev); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if fx.grants != b.N {
		b.Fatalf("%d grants for %d requests", fx.grants, b.N)
	}
}

func eightModels() map[string]int {
	g := map[string]int{}
	for i := range 8 {
		g[fmt.Sprintf("model-%d", i)] = i
	}
	return g
}

// BenchmarkFIFO_OnRequest_Native: the fast path with 8 running models.
func BenchmarkFIFO_OnRequest_Native(b *testing.B) {
	fx := newBenchFx(eightModels())
	s, err := New(fx, nil)
	if err != nil {
		b.Fatal(err)
	}
	fastPath(b, policytest.Native(s), fx)
}

const drainN = 1000

// drain1000 times the drain of a queue of 1,000 requests for model a that
// waited behind a swap of b (a and b exclude each other): when b's swap
// completes, the first starts a's swap and the other 999 join it. ns/op and
// ns/drained-request are that OnSwapDone; the setup (1,001 OnRequest) and
// the grants of a's swap are not timed (grant-ns/request reports the
// latter).
func drain1000(b *testing.B, s policytest.Scheduler, fx *benchFx) {
	fx.models["a"].State = sdk.StateReady
	var id sdk.RequestID
	var grantNs int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		now := int64(i+1) * 1e9
		id++
		must(b, s.OnRequest(sdk.RequestEvent{Now: now, ID: id, Model: "b"})) // evicts idle a
		must(b, s.OnCancel(sdk.CancelEvent{Now: now, ID: id, Model: "b"}))   // b's swap will have no one to serve
		for range drainN {
			id++
			must(b, s.OnRequest(sdk.RequestEvent{Now: now, ID: id, Model: "a"})) // collides with b's swap: queued
		}
		fx.complete("b")
		b.StartTimer()
		must(b, s.OnSwapDone(sdk.SwapDoneEvent{Now: now, Model: "b"}))
		b.StopTimer()
		if len(fx.active) != 1 {
			b.Fatalf("after the drain: swaps %v, want a's", fx.active)
		}
		fx.complete("a")
		before, start := fx.grants, time.Now()
		must(b, s.OnSwapDone(sdk.SwapDoneEvent{Now: now, Model: "a"}))
		grantNs += time.Since(start).Nanoseconds()
		if fx.grants-before != drainN {
			b.Fatalf("%d grants, want %d", fx.grants-before, drainN)
		}
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*drainN), "ns/drained-request")
	b.ReportMetric(float64(grantNs)/float64(b.N*drainN), "grant-ns/request")
}

func must(b *testing.B, err error) {
	if err != nil {
		b.Helper()
		b.Fatal(err)
	}
}

// BenchmarkFIFO_Drain1000_Native: a queue of 1,000 drained after one swap
// completes.
func BenchmarkFIFO_Drain1000_Native(b *testing.B) {
	fx := newBenchFx(map[string]int{"a": 0, "b": 0})
	s, err := New(fx, []byte(`{"max_queue": 0}`))
	if err != nil {
		b.Fatal(err)
	}
	drain1000(b, policytest.Native(s), fx)
}

func BenchmarkFIFO_OnRequest_Wasm(b *testing.B) {
	fx := newBenchFx(eightModels())
	fastPath(b, benchWasm(b, fx, "{}"), fx)
}

func BenchmarkFIFO_Drain1000_Wasm(b *testing.B) {
	fx := newBenchFx(map[string]int{"a": 0, "b": 0})
	drain1000(b, benchWasm(b, fx, `{"max_queue": 0}`), fx)
}

func benchWasm(b *testing.B, fx sdk.Effects, settings string) policytest.Scheduler {
	rt, mod := wasmModule(b)
	ctx := context.Background()
	s, err := rt.NewScheduler(ctx, mod, []byte(settings), fx)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close(ctx) })
	return s
}
