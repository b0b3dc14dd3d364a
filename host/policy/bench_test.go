package policy

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/policy/testdata/guests/echopolicy"
	"github.com/loadout-dev/loadout/host/policy/testdata/guests/swapperpolicy"
	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/wire"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// benchModels is the number of ready models in the scheduler benchmarks.
const benchModels = 8

// benchOptions are the runtime options of the call benchmarks. The
// deadline is on, as in production; it is long only so that a benchmark on
// a loaded machine is not killed by a stall that is not the policy's: what
// the deadline costs per call does not depend on its length.
var benchOptions = Options{CallTimeout: 10 * time.Second}

// drainEvery is how many held requests the OnRequest benchmarks let pile
// up before draining them (untimed) with on_swap_done.
const drainEvery = 64

// benchOnRequest times OnRequest for a stopped model: the scheduler reads
// model_state, asks for a plan (through sdk.Effects.Plan to the swapper:
// with Wasm, a nested call into another instance), starts a swap and sets
// the queue position. The host is frozen, so every request takes that path.
// It reports the median and p99 of single calls besides ns/op.
func benchOnRequest(b *testing.B, h *benchHost, onRequest func(sdk.RequestEvent) error, onSwapDone func(sdk.SwapDoneEvent) error) {
	h.frozen = true
	cold := h.models[h.ready].Name
	ev := sdk.RequestEvent{ID: 1, Model: cold}
	d := make([]time.Duration, 0, b.N)
	drain := func() {
		if err := onSwapDone(sdk.SwapDoneEvent{Model: cold, Err: "drained"}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		ev.ID++
		start := time.Now()
		if err := onRequest(ev); err != nil {
			b.Fatal(err)
		}
		d = append(d, time.Since(start))
		if i%drainEvery == drainEvery-1 {
			b.StopTimer()
			drain()
			b.StartTimer()
		}
	}
	b.StopTimer()
	if h.swaps != b.N {
		b.Fatalf("%d swaps for %d requests: the scheduler did not plan every time", h.swaps, b.N)
	}
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Nanoseconds())/1e3, "median-µs")
	b.ReportMetric(float64(d[len(d)*99/100].Nanoseconds())/1e3, "p99-µs")
}

// BenchmarkScheduler_OnRequest is the Wasm round trip the run loop pays
// per request: echo scheduler and swapper guests, 8 running models,
// deadline on.
func BenchmarkScheduler_OnRequest(b *testing.B) {
	r, _ := newTestRuntime(b, benchOptions)
	benchWasmOnRequest(b, r)
}

// BenchmarkScheduler_OnRequestNoDeadline is the same without
// WithCloseOnContextDone, to measure what the deadline costs: mostly the
// termination checks wazero compiles into every loop header of the guest,
// which Go's wasm code crosses at nearly every jump. Production never runs
// like this: a looping guest could not be stopped.
func BenchmarkScheduler_OnRequestNoDeadline(b *testing.B) {
	opts := benchOptions
	opts.CacheDir = b.TempDir()
	opts.Trusted = true
	r, err := NewRuntime(context.Background(), opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Close(context.Background()) })
	benchWasmOnRequest(b, r)
}

func benchWasmOnRequest(b *testing.B, r *Runtime) {
	h := newBenchHost(benchModels)
	m := compile(b, r, "swapper.wasm", guest(b, "swapper"))
	sw, err := r.NewSwapper(context.Background(), m, []byte(`{"max_running": 8}`), h)
	if err != nil {
		b.Fatal(err)
	}
	h.planner = sw
	m = compile(b, r, "echo.wasm", guest(b, "echo"))
	s, err := r.NewScheduler(context.Background(), m, nil, h)
	if err != nil {
		b.Fatal(err)
	}
	benchOnRequest(b, h, s.OnRequest, s.OnSwapDone)
}

// BenchmarkScheduler_OnRequestNative is the same scheduler and swapper as
// plain Go calls, for the ratio.
func BenchmarkScheduler_OnRequestNative(b *testing.B) {
	h := newBenchHost(benchModels)
	sw, err := swapperpolicy.New(h, []byte(`{"max_running": 8}`))
	if err != nil {
		b.Fatal(err)
	}
	h.planner = sw
	s, err := echopolicy.New(h, []byte("{}"))
	if err != nil {
		b.Fatal(err)
	}
	benchOnRequest(b, h,
		func(ev sdk.RequestEvent) error { s.OnRequest(ev); return nil },
		func(ev sdk.SwapDoneEvent) error { s.OnSwapDone(ev); return nil })
}

// BenchmarkScheduler_OnRequestReady is the cheapest useful path: a ready
// model, model_state then grant_serve.
func BenchmarkScheduler_OnRequestReady(b *testing.B) {
	r, _ := newTestRuntime(b, benchOptions)
	h := newBenchHost(benchModels)
	m := compile(b, r, "echo.wasm", guest(b, "echo"))
	s, err := r.NewScheduler(context.Background(), m, nil, h)
	if err != nil {
		b.Fatal(err)
	}
	ev := sdk.RequestEvent{Model: h.models[0].Name}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		ev.ID++
		if err := s.OnRequest(ev); err != nil {
			b.Fatal(err)
		}
		h.granted = h.granted[:0]
	}
}

// benchCompile compiles the echo guest (~3.5 MB) on a fresh runtime per
// iteration, with a compilation cache made by dir.
func benchCompile(b *testing.B, dir func() string) {
	wasm := guest(b, "echo")
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		r, err := NewRuntime(ctx, Options{CacheDir: dir()})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := r.Compile(ctx, "echo.wasm", wasm); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		r.Close(ctx)
		b.StartTimer()
	}
	b.ReportMetric(float64(len(wasm))/1e6, "MB")
}

// BenchmarkCompile_Cold compiles with an empty compilation cache.
func BenchmarkCompile_Cold(b *testing.B) {
	benchCompile(b, func() string {
		dir, err := os.MkdirTemp(b.TempDir(), "cold-")
		if err != nil {
			b.Fatal(err)
		}
		return dir
	})
}

// BenchmarkCompile_Warm compiles with the module already in the cache
// directory (a restart of loadout).
func BenchmarkCompile_Warm(b *testing.B) {
	dir := b.TempDir()
	r, err := NewRuntime(context.Background(), Options{CacheDir: dir})
	if err != nil {
		b.Fatal(err)
	}
	compile(b, r, "echo.wasm", guest(b, "echo"))
	r.Close(context.Background())
	benchCompile(b, func() string { return dir })
}

// The BenchmarkDeadline_* benchmarks measure the per-call deadline
// mechanisms on their own: one call of a trivial export (i64.const 0) of
// the mini policy, straight through wazero. docs/RATIONALE.md records the
// figures.

func deadlineBench(b *testing.B, closeOnDone bool) (api.Function, context.Context) {
	b.ReportAllocs()
	return deadlineBench2(b, closeOnDone)
}

func deadlineBench2(b testing.TB, closeOnDone bool) (api.Function, context.Context) {
	ctx := context.Background()
	cfg := wazero.NewRuntimeConfigCompiler().WithCloseOnContextDone(closeOnDone)
	wz := wazero.NewRuntimeWithConfig(ctx, cfg)
	b.Cleanup(func() { wz.Close(ctx) })
	_, err := wz.NewHostModuleBuilder("loadout_v2").NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(func(context.Context, api.Module, []uint64) {}), []api.ValueType{i32, i32}, nil).
		Export("set_error").Instantiate(ctx)
	if err != nil {
		b.Fatal(err)
	}
	mod, err := wz.Instantiate(ctx, miniPolicy().bytes())
	if err != nil {
		b.Fatal(err)
	}
	return mod.ExportedFunction("on_tick"), ctx
}

// BenchmarkDeadline_None: no deadline at all (WithCloseOnContextDone off),
// the floor.
func BenchmarkDeadline_None(b *testing.B) {
	fn, ctx := deadlineBench(b, false)
	stack := []uint64{0}
	for range b.N {
		if err := fn.CallWithStack(ctx, stack); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDeadline_WatcherOnly: WithCloseOnContextDone on and a context
// that is never cancelled: what wazero's per-call watcher goroutine costs.
func BenchmarkDeadline_WatcherOnly(b *testing.B) {
	fn, ctx := deadlineBench(b, true)
	stack := []uint64{0}
	for range b.N {
		if err := fn.CallWithStack(ctx, stack); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDeadline_WithTimeout: a context.WithTimeout per call.
func BenchmarkDeadline_WithTimeout(b *testing.B) {
	fn, ctx := deadlineBench(b, true)
	stack := []uint64{0}
	for range b.N {
		cctx, cancel := context.WithTimeout(ctx, DefaultCallTimeout)
		err := fn.CallWithStack(cctx, stack)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDeadline_ReusedTimer: what this package does: one cancellable
// context per instance, cancelled by a timer that is Reset per call and
// stopped after it (plus the time.Now the nested-plan pause needs).
func BenchmarkDeadline_ReusedTimer(b *testing.B) {
	fn, ctx := deadlineBench(b, true)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t := time.AfterFunc(time.Hour, cancel)
	t.Stop()
	stack := []uint64{0}
	var started time.Time
	for range b.N {
		started = time.Now()
		t.Reset(DefaultCallTimeout)
		err := fn.CallWithStack(cctx, stack)
		if !t.Stop() {
			b.Fatalf("deadline fired after %s", time.Since(started))
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	_ = started
}

// BenchmarkDeadline_CPUClock is the mechanism the instances use
// (deadline): the reused timer, the call locked to its thread and that
// thread's id read, under a lock; its CPU clock is read only when a
// budget runs out, which it never does here.
func BenchmarkDeadline_CPUClock(b *testing.B) {
	fn, ctx := deadlineBench(b, true)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	d := newDeadline(cancel)
	stack := []uint64{0}
	for range b.N {
		d.start(DefaultCallTimeout)
		err := fn.CallWithStack(cctx, stack)
		if d.stop() {
			b.Fatal("deadline fired")
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScheduler_UnhealthyCall is what a call to a disabled policy
// costs.
func BenchmarkScheduler_UnhealthyCall(b *testing.B) {
	r, _ := newTestRuntime(b, Options{MaxCrashes: 1})
	m := compile(b, r, "evil.wasm", guest(b, "evil"))
	s, err := r.NewScheduler(context.Background(), m, []byte(`{"misbehave": "panic"}`), newFakeEffects())
	if err != nil {
		b.Fatal(err)
	}
	for s.Status().Healthy {
		_ = s.OnRequest(sdk.RequestEvent{Model: "x"})
	}
	ev := sdk.RequestEvent{Model: "x"}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		_ = s.OnRequest(ev)
	}
}

// BenchmarkScheduler_HostOverhead is this package's own cost per call:
// the mini policy's on_request returns at once, so what remains is
// encoding, writing the in-buffer, the deadline and wazero's call.
func BenchmarkScheduler_HostOverhead(b *testing.B) {
	r, _ := newTestRuntime(b, benchOptions)
	m := compile(b, r, "mini.wasm", miniPolicy().bytes())
	s, err := r.NewScheduler(context.Background(), m, nil, newFakeEffects())
	if err != nil {
		b.Fatal(err)
	}
	ev := sdk.RequestEvent{Now: 1, Model: "m00", Client: "bench"}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		ev.ID++
		if err := s.OnRequest(ev); err != nil {
			b.Fatal(err)
		}
	}
}

// The BenchmarkCodec_* benchmarks compare, natively, one round trip
// (encode then decode) of a snapshot of 8 models and 1 GPU in the ABI's
// binary encoding and in JSON. Through Wasm the gap is wider: the guest's
// encoding/json runs on Go's wasm backend.

func benchSnapshot() sdk.Snapshot {
	h := newBenchHost(benchModels)
	return h.Snapshot()
}

func BenchmarkCodec_Binary(b *testing.B) {
	snap := benchSnapshot()
	var buf []byte
	var out sdk.Snapshot
	b.ReportAllocs()
	for range b.N {
		buf = wire.Append(buf[:0], &snap)
		if err := wire.Decode(buf, &out); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(buf)), "bytes")
}

func BenchmarkCodec_JSON(b *testing.B) {
	snap := benchSnapshot()
	var buf []byte
	b.ReportAllocs()
	for range b.N {
		var err error
		if buf, err = json.Marshal(&snap); err != nil {
			b.Fatal(err)
		}
		var out sdk.Snapshot
		if err := json.Unmarshal(buf, &out); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(buf)), "bytes")
}

// BenchmarkGuest times single pieces of Go guest work through wazero, with
// and without the deadline machinery (WithCloseOnContextDone): an empty
// export, decoding one small event, and runtime.Gosched (which the SDK
// calls every few exports). The difference is mostly the termination checks
// compiled into the guest's loop headers. Each run gets a fresh instance:
// the bare guest never yields to its Go scheduler, so its GC never finishes
// a cycle, and a few million allocating calls exhaust its memory.
func BenchmarkGuest(b *testing.B) {
	ctx := context.Background()
	wasm := guest(b, "bare")
	for _, deadlines := range []bool{false, true} {
		opts := benchOptions
		opts.CacheDir = b.TempDir()
		opts.Trusted = !deadlines
		r, err := NewRuntime(ctx, opts)
		if err != nil {
			b.Fatal(err)
		}
		compiled, err := r.wz.CompileModule(ctx, wasm)
		if err != nil {
			b.Fatal(err)
		}
		suffix := map[bool]string{false: "NoDeadline", true: "Deadline"}[deadlines]
		for _, name := range []string{"noop", "decode", "gosched"} {
			b.Run(name+"/"+suffix, func(b *testing.B) {
				mod, err := r.wz.InstantiateModule(ctx, compiled, r.modCfg)
				if err != nil {
					b.Fatal(err)
				}
				defer mod.Close(ctx)
				fn := mod.ExportedFunction(name)
				stack := []uint64{0}
				b.ResetTimer()
				for range b.N {
					if err := fn.CallWithStack(ctx, stack); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		r.Close(ctx)
	}
}
