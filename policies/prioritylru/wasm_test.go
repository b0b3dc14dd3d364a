package main

import (
	"testing"

	"github.com/loadout-dev/loadout/host/policy"
	"github.com/loadout-dev/loadout/internal/policywasm"
	"github.com/loadout-dev/loadout/sdk/policytest"
)

// The same cases as prioritylru_test.go, with the policy built to
// WebAssembly and run by the real runtime (host/policy).

const pkgPath = "github.com/loadout-dev/loadout/policies/prioritylru"

// wasmModule builds and compiles the policy once per test binary.
func wasmModule(tb testing.TB) (*policy.Runtime, *policy.Module) {
	tb.Helper()
	return policywasm.Module(tb, pkgPath)
}

var wasmSwapper = policywasm.MakeSwapper(pkgPath)

func TestPriorityLRU_ScenarioWasm(t *testing.T) { runPlanCases(t, wasmSwapper) }

func TestPriorityLRU_PackingWasm(t *testing.T) { runPacking(t, wasmSwapper) }

func TestPriorityLRU_BadSettingsWasm(t *testing.T) { runBadSettings(t, wasmSwapper) }

func TestPriorityLRU_ScenarioFilesWasm(t *testing.T) {
	policytest.RunScenarioFiles(t, policywasm.Policy(t, pkgPath), "testdata/scenarios/*.yaml")
}
