package sim

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/backends/sim/decode"
	"github.com/loadout-dev/loadout/host/gpu"
	"github.com/loadout-dev/loadout/host/policy"
	"github.com/loadout-dev/loadout/host/router"
	"github.com/loadout-dev/loadout/internal/wasmbuild"
	"github.com/loadout-dev/loadout/sdk"
)

// The replay's tests run the real built-in policies through the real Wasm
// runtime, as `loadout simulate` does (Trusted: without loop checks); one
// compilation per test binary.
var (
	modsOnce sync.Once
	modsRT   *policy.Runtime
	mods     = map[string]*policy.Module{}
	modsErr  error
	testClk  = &Clock{}
)

func modules(t testing.TB) (*policy.Runtime, map[string]*policy.Module) {
	t.Helper()
	modsOnce.Do(func() {
		ctx := context.Background()
		// Trusted, as `loadout simulate` runs the built-in policies.
		modsRT, modsErr = policy.NewRuntime(ctx, policy.Options{Logger: slog.New(slog.DiscardHandler), Clock: testClk.Now,
			CallTimeout: PolicyCallTimeout, Trusted: true})
		if modsErr != nil {
			return
		}
		for _, name := range []string{"fifo", "group", "prioritylru"} {
			pkg := "github.com/loadout-dev/loadout/policies/" + name
			wasm, err := wasmbuild.Build(pkg)
			if err != nil {
				modsErr = err
				return
			}
			if mods[name], err = modsRT.Compile(ctx, pkg, wasm); err != nil {
				modsErr = err
				return
			}
		}
	})
	if modsErr != nil {
		t.Fatalf("policies: %v", modsErr)
	}
	return modsRT, mods
}

// moreMods are built-in routers beyond modules' three, built and compiled
// on first use (only the benchmarks of every router need them).
var (
	moreModsMu sync.Mutex
	moreMods   = map[string]*policy.Module{}
)

// swapperModule is the built-in policy name in modules' runtime, built
// and compiled on first use if modules does not compile it.
func swapperModule(t testing.TB, name string) *policy.Module {
	t.Helper()
	rt, ms := modules(t)
	if m := ms[name]; m != nil {
		return m
	}
	moreModsMu.Lock()
	defer moreModsMu.Unlock()
	if m := moreMods[name]; m != nil {
		return m
	}
	pkg := "github.com/loadout-dev/loadout/policies/" + name
	wasm, err := wasmbuild.Build(pkg)
	if err != nil {
		t.Fatalf("policies: %v", err)
	}
	m, err := rt.Compile(context.Background(), pkg, wasm)
	if err != nil {
		t.Fatalf("policies: %v", err)
	}
	moreMods[name] = m
	return m
}

// setup is a replay of trace over models with fifo and the named swapper
// (settings as JSON), on the given GPUs (none: no VRAM accounting).
func setup(t testing.TB, swapper, settings string, models map[string]Model, gpus []uint64, trace []Request) Setup {
	rt, ms := modules(t)
	ctx := context.Background()
	sw := swapperModule(t, swapper)
	cfg := router.Config{
		SchedulerName: "fifo", SwapperName: swapper, Logger: slog.New(slog.DiscardHandler),
		NewScheduler: func(fx sdk.Effects) (router.SchedulerPolicy, error) {
			return rt.NewScheduler(ctx, ms["fifo"], []byte("{}"), fx)
		},
		NewSwapper: func(h sdk.Host) (router.SwapperPolicy, error) {
			return rt.NewSwapper(ctx, sw, []byte(settings), h)
		},
	}
	if len(gpus) > 0 {
		var decl []gpu.DeclaredDevice
		for i, b := range gpus {
			decl = append(decl, gpu.DeclaredDevice{Name: fmt.Sprintf("sim%d", i), Memory: b})
		}
		cfg.Ledger = gpu.NewLedger(gpu.NewDeclared(decl), 0)
	}
	return Setup{Trace: trace, Models: models, Router: cfg, Clock: testClk}
}

const gib = 1 << 30

func simModel(vram uint64, load time.Duration, tps float64, maxBatch int) Model {
	return Model{
		Config: router.ModelConfig{VRAM: vram},
		Load:   load,
		Decode: decode.Model{TokensPerSecond: tps, MaxBatch: maxBatch},
	}
}

// randomTrace is n requests over models, Poisson arrivals at rate per
// second, from a seeded source.
func randomTrace(seed uint64, n int, rate float64, models ...string) []Request {
	rng := rand.New(rand.NewPCG(seed, 1))
	var out []Request
	t := 0.0
	for range n {
		t += rng.ExpFloat64() / rate
		out = append(out, Request{Arrival: round6(t), Model: models[rng.IntN(len(models))],
			PromptTokens: 100 + rng.IntN(400), OutputTokens: 20 + rng.IntN(200)})
	}
	return out
}

func TestRun_EveryRequestEndsAndTheReplayIsDeterministic(t *testing.T) {
	models := map[string]Model{
		"a": simModel(10*gib, 5*time.Second, 50, 8),
		"b": simModel(10*gib, 3*time.Second, 80, 8),
		"c": simModel(10*gib, 8*time.Second, 30, 8),
	}
	trace := randomTrace(7, 400, 2, "a", "b", "c")
	var results []*Result
	for range 2 {
		res, err := Run(setup(t, "prioritylru", "{}", models, []uint64{24 * gib}, trace))
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, res)
	}
	r := results[0]
	t.Logf("cold loads %d, evictions %d, wait %+v, ttft %+v", r.ColdLoads, r.Evictions, r.QueueWait, r.TTFT)
	if r.Completed != len(trace) || r.Errors != 0 {
		t.Fatalf("completed %d of %d, errors %d (%v)", r.Completed, len(trace), r.Errors, r.ErrorsByCode)
	}
	// Two of three 10 GiB models fit on 24 GiB: a cold load for each
	// model at least, and evictions once the third is wanted.
	if r.ColdLoads < 3 || r.Evictions < 1 || r.Evictions > r.ColdLoads {
		t.Fatalf("cold loads %d, evictions %d", r.ColdLoads, r.Evictions)
	}
	if !(r.QueueWait.P99 >= r.QueueWait.P50 && r.TTFT.P50 > 0 && r.E2E.P50 > r.TTFT.P50) {
		t.Fatalf("implausible quantiles: wait %+v ttft %+v e2e %+v", r.QueueWait, r.TTFT, r.E2E)
	}
	if !(r.GPUBusyFraction > 0 && r.GPUBusyFraction <= 1) {
		t.Fatalf("gpu busy fraction %v", r.GPUBusyFraction)
	}
	if !reflect.DeepEqual(results[0], results[1]) {
		t.Fatalf("two replays of the same inputs differ:\n%+v\n%+v", *results[0], *results[1])
	}
}

// The seed acceptance of the simulate issue, in virtual time: continuous
// batching as package decode describes it.
func TestRun_ContinuousBatching(t *testing.T) {
	one := func(maxBatch int) map[string]Model {
		return map[string]Model{"m": simModel(0, 0, 10, maxBatch)}
	}
	step := func(b int) float64 { return decode.Model{TokensPerSecond: 10, MaxBatch: 8}.Step(b).Seconds() }
	run := func(t *testing.T, models map[string]Model, trace []Request) *Result {
		t.Helper()
		res, err := Run(setup(t, "group", "{}", models, nil, trace))
		if err != nil {
			t.Fatal(err)
		}
		if res.Completed != len(trace) {
			t.Fatalf("completed %d of %d: %v", res.Completed, len(trace), res.ErrorsByCode)
		}
		return res
	}
	t.Run("three concurrent requests decode together", func(t *testing.T) {
		trace := []Request{{0, "m", 10, 10, 0, ""}, {0, "m", 10, 10, 0, ""}, {0, "m", 10, 10, 0, ""}}
		res := run(t, one(8), trace)
		want := round6(10 * step(3)) // one after another would end at 1, 2 and 3 s
		if res.E2E.P50 != want || res.E2E.P99 != want {
			t.Fatalf("e2e %+v, want all %v", res.E2E, want)
		}
	})
	t.Run("a request two seconds into another's generation starts at once", func(t *testing.T) {
		trace := []Request{{0, "m", 10, 100, 0, ""}, {2, "m", 10, 5, 0, ""}}
		res := run(t, one(8), trace)
		// Its first token comes at the end of the step after the one in
		// progress when it arrived: within two steps of a batch of two.
		if res.TTFT.P99 > round6(2*step(2)) {
			t.Fatalf("ttft %+v: the second request waited for the first", res.TTFT)
		}
	})
	t.Run("eight concurrent requests with max batch 4", func(t *testing.T) {
		var trace []Request
		for range 8 {
			trace = append(trace, Request{0, "m", 10, 20, 0, ""})
		}
		res := run(t, one(4), trace)
		serial := 8 * 20 * step(1)
		span := res.SpanS
		t.Logf("8 × 20 tokens, max_batch 4: %.3f s, serially %.3f s: %.2f× the serial throughput", span, serial, serial/span)
		if want := round6(2 * 20 * step(4)); span != want {
			t.Fatalf("span %v, want two batches of four: %v", span, want)
		}
	})
}

func TestRun_UnknownModelInTrace(t *testing.T) {
	_, err := Run(setup(t, "group", "{}", map[string]Model{"m": simModel(0, 0, 10, 1)}, nil,
		[]Request{{0, "m", 1, 1, 0, ""}, {1, "nope", 1, 1, 0, ""}}))
	if err == nil {
		t.Fatal("a trace naming a model the config lacks replayed")
	}
	t.Log(err)
}

func TestRun_ModelThatCannotFitIsErroredRequests(t *testing.T) {
	models := map[string]Model{"big": simModel(40*gib, time.Second, 10, 1), "small": simModel(gib, time.Second, 10, 1)}
	trace := []Request{{0, "big", 1, 1, 0, ""}, {0.5, "small", 1, 3, 0, ""}}
	res, err := Run(setup(t, "prioritylru", "{}", models, []uint64{24 * gib}, trace))
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 1 || res.Completed != 1 {
		t.Fatalf("errors %d (%v), completed %d: want the big model's request failed and the small one served", res.Errors, res.ErrorsByCode, res.Completed)
	}
}

// A backlog being served is not cut at the drain bound: with Drain one
// minute, 40 requests arriving together, each decoding for 20 minutes in
// batches of four on two models that swap, all end (hours after the last
// arrival), as does one request that decodes for two hours alone. Before,
// the replay stopped Drain after the last arrival and counted the rest as
// errors. A policy that holds requests forever still ends at the bound:
// TestReplay_TickInThePastOrNever_ClampedLoggedOnceAndEnds.
func TestRun_ABacklogBeingServedOutlastsTheDrainBound(t *testing.T) {
	models := map[string]Model{
		"a": simModel(16*gib, 5*time.Second, 10, 4),
		"b": simModel(16*gib, 5*time.Second, 10, 4),
	}
	var trace []Request
	for i := range 40 {
		trace = append(trace, Request{Arrival: float64(i) / 10, Model: []string{"a", "b"}[i%2], PromptTokens: 10, OutputTokens: 12000})
	}
	long := []Request{{Model: "a", PromptTokens: 10, OutputTokens: 72000}}
	for name, tr := range map[string][]Request{"backlog": trace, "one long request": long} {
		s := setup(t, "prioritylru", "{}", models, []uint64{24 * gib}, tr)
		s.Drain = time.Minute
		res, err := Run(s)
		if err != nil {
			t.Fatal(err)
		}
		if res.Completed != len(tr) || res.Errors != 0 {
			t.Errorf("%s: completed %d of %d, errors %v", name, res.Completed, len(tr), res.ErrorsByCode)
		}
	}
}
