package main

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/policy"
	"github.com/loadout-dev/loadout/internal/wasmbuild"
	"github.com/loadout-dev/loadout/sdk/policytest"
)

// The same cases as matrix_test.go, with the policy built to WebAssembly
// and run by the real runtime (host/policy).

const pkgPath = "github.com/loadout-dev/loadout/policies/matrix"

var wasm struct {
	once sync.Once
	rt   *policy.Runtime
	mod  *policy.Module
	err  error
}

// wasmModule builds and compiles the policy once per test binary.
func wasmModule(tb testing.TB) (*policy.Runtime, *policy.Module) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("builds the policy to WebAssembly; skipped with -short")
	}
	wasm.once.Do(func() {
		ctx := context.Background()
		var b []byte
		if b, wasm.err = wasmbuild.Build(pkgPath); wasm.err != nil {
			return
		}
		// A generous per-call deadline: these tests check behaviour, and a
		// loaded CI machine must not turn a slow call into a crash.
		opts := policy.Options{CallTimeout: 10 * time.Second}
		if wasm.rt, wasm.err = policy.NewRuntime(ctx, opts); wasm.err != nil {
			return
		}
		wasm.mod, wasm.err = wasm.rt.Compile(ctx, "matrix", b)
	})
	if wasm.err != nil {
		tb.Fatalf("%v", wasm.err)
	}
	return wasm.rt, wasm.mod
}

func wasmSwapper(tb testing.TB, h *policytest.Host, settings string) (policytest.Swapper, error) {
	rt, mod := wasmModule(tb)
	ctx := context.Background()
	s, err := rt.NewSwapper(ctx, mod, []byte(settings), h)
	if err != nil {
		return nil, err
	}
	tb.Cleanup(func() { _ = s.Close(ctx) })
	return s, nil
}

func TestMatrix_PlanWasm(t *testing.T) { runPlanCases(t, wasmSwapper) }

func TestMatrix_SwapStartWasm(t *testing.T) { runSwapStart(t, wasmSwapper) }

func TestMatrix_BadSettingsWasm(t *testing.T) { runBadSettings(t, wasmSwapper) }

// TestMatrix_PurePlanWasm: the module's plan_is_pure export says 1.
func TestMatrix_PurePlanWasm(t *testing.T) {
	rt, mod := wasmModule(t)
	ctx := context.Background()
	s, err := rt.NewSwapper(ctx, mod, []byte(example), policytest.NewHost(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	if !s.PurePlan() {
		t.Error("the matrix module must claim plan_is_pure")
	}
}
