package main

import (
	"context"
	"testing"

	"github.com/loadout-dev/loadout/host/policy"
	"github.com/loadout-dev/loadout/internal/policywasm"
	"github.com/loadout-dev/loadout/sdk/policytest"
)

// The same cases as matrix_test.go, with the policy built to WebAssembly
// and run by the real runtime (host/policy).

const pkgPath = "github.com/loadout-dev/loadout/policies/matrix"

// wasmModule builds and compiles the policy once per test binary.
func wasmModule(tb testing.TB) (*policy.Runtime, *policy.Module) {
	tb.Helper()
	return policywasm.Module(tb, pkgPath)
}

var wasmSwapper = policywasm.MakeSwapper(pkgPath)

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
