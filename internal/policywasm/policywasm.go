// Package policywasm loads a policy package as WebAssembly through the real
// runtime (host/policy), for the tests and benchmarks that run a policy's
// native scenarios again through Wasm. It builds each package once per test
// binary and compiles it in one shared runtime. ModulePolicy, which binds a
// compiled module to sdk/policytest's scenario runner, is also what
// `loadout policy test` runs scenario files with.
package policywasm

import (
	"context"
	"log/slog"
	"os"
	"path"
	"sync"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/policy"
	"github.com/loadout-dev/loadout/internal/wasmbuild"
	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/policytest"
)

var (
	mu      sync.Mutex
	rt      *policy.Runtime
	modules = map[string]*policy.Module{}
)

// Module builds the policy package pkg (an import path) to WebAssembly and
// compiles it, once per test binary, in a runtime with a generous per-call
// deadline (10 s: these tests check behaviour, and a loaded CI machine must
// not turn a slow call into a crash). Tests of the deadline itself need a
// runtime of their own. With -short it skips tb: the build
// takes seconds.
func Module(tb testing.TB, pkg string) (*policy.Runtime, *policy.Module) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("builds the policy to WebAssembly; skipped with -short")
	}
	mu.Lock()
	defer mu.Unlock()
	ctx := context.Background()
	if rt == nil {
		r, err := policy.NewRuntime(ctx, policy.Options{CallTimeout: 10 * time.Second, Logger: logger()})
		if err != nil {
			tb.Fatalf("policy runtime: %v", err)
		}
		rt = r
	}
	if m, ok := modules[pkg]; ok {
		return rt, m
	}
	b, err := wasmbuild.Build(pkg)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	m, err := rt.Compile(ctx, path.Base(pkg), b)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	modules[pkg] = m
	return rt, m
}

// Swapper instantiates the swapper policy pkg (built and compiled by
// Module) with settings against h, and closes it when tb ends: the factory
// a policy's Wasm scenario tests pass where the native tests pass their
// own. The error is the policy's init error (bad settings).
func Swapper(tb testing.TB, pkg string, h sdk.Host, settings string) (*policy.Swapper, error) {
	tb.Helper()
	r, mod := Module(tb, pkg)
	ctx := context.Background()
	s, err := r.NewSwapper(ctx, mod, []byte(settings), h)
	if err != nil {
		return nil, err
	}
	tb.Cleanup(func() { _ = s.Close(ctx) })
	return s, nil
}

// Scheduler is Swapper for a scheduler policy, bound to fx.
func Scheduler(tb testing.TB, pkg string, fx sdk.Effects, settings string) (*policy.Scheduler, error) {
	tb.Helper()
	r, mod := Module(tb, pkg)
	ctx := context.Background()
	s, err := r.NewScheduler(ctx, mod, []byte(settings), fx)
	if err != nil {
		return nil, err
	}
	tb.Cleanup(func() { _ = s.Close(ctx) })
	return s, nil
}

// MakeSwapper is the policytest.MakeSwapper of the swapper package pkg
// (an import path) built to WebAssembly (Swapper).
func MakeSwapper(pkg string) policytest.MakeSwapper {
	return func(tb testing.TB, h *policytest.Host, settings string) (policytest.Swapper, error) {
		s, err := Swapper(tb, pkg, h, settings)
		if err != nil {
			return nil, err // not a nil *policy.Swapper in the interface
		}
		return s, nil
	}
}

// MakeScheduler is the policytest.MakeScheduler of the scheduler package
// pkg built to WebAssembly (Scheduler).
func MakeScheduler(pkg string) policytest.MakeScheduler {
	return func(tb testing.TB, h *policytest.Host, settings string) (policytest.Scheduler, error) {
		s, err := Scheduler(tb, pkg, h, settings)
		if err != nil {
			return nil, err // not a nil *policy.Scheduler in the interface
		}
		return s, nil
	}
}

// logger discards the runtime's own lines (guest output, crash reports)
// unless LOADOUT_TEST_LOG is set.
func logger() *slog.Logger {
	if os.Getenv("LOADOUT_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// Policy is the policytest.Policy of the policy package pkg built to
// WebAssembly (by Module): every scenario gets a fresh instance in the
// real sandbox, closed when tb ends. It is what a policy's Wasm test hands
// policytest.RunScenarioFiles where its native test hands
// policytest.SchedulerPolicy(New) or policytest.SwapperPolicy(New).
func Policy(tb testing.TB, pkg string) policytest.Policy {
	tb.Helper()
	r, mod := Module(tb, pkg)
	return ModulePolicy(r, mod, func(close func()) { tb.Cleanup(close) })
}

// ModulePolicy is the policytest.Policy of a module compiled in r, of
// either kind: each call of its factory instantiates mod, and hands
// onClose the function that closes that instance, to call when the
// scenario is over (`loadout policy test` after each file, Policy when
// the test ends).
func ModulePolicy(r *policy.Runtime, mod *policy.Module, onClose func(close func())) policytest.Policy {
	ctx := context.Background()
	if mod.Kind == sdk.KindSwapper {
		return policytest.Policy{NewSwapper: func(h sdk.Host, settings []byte) (policytest.Swapper, error) {
			s, err := r.NewSwapper(ctx, mod, settings, h)
			if err != nil {
				return nil, err // not a nil *policy.Swapper in the interface
			}
			onClose(func() { _ = s.Close(ctx) })
			return s, nil
		}}
	}
	return policytest.Policy{NewScheduler: func(fx sdk.Effects, settings []byte) (policytest.Scheduler, error) {
		s, err := r.NewScheduler(ctx, mod, settings, fx)
		if err != nil {
			return nil, err
		}
		onClose(func() { _ = s.Close(ctx) })
		return s, nil
	}}
}
