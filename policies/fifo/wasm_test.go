package main

import (
	"testing"

	"github.com/loadout-dev/loadout/host/policy"
	"github.com/loadout-dev/loadout/internal/policywasm"
	"github.com/loadout-dev/loadout/sdk/policytest"
)

// The same scenarios as fifo_test.go, with the policy built to WebAssembly
// and run by the real runtime (host/policy) against the same fake host.

const pkgPath = "github.com/loadout-dev/loadout/policies/fifo"

// wasmModule builds and compiles the policy once per test binary.
func wasmModule(tb testing.TB) (*policy.Runtime, *policy.Module) {
	tb.Helper()
	return policywasm.Module(tb, pkgPath)
}

var wasmScheduler = policywasm.MakeScheduler(pkgPath)

func TestFIFO_ScenarioWasm(t *testing.T) { runScenarios(t, wasmScheduler) }

func TestFIFO_BadSettingsWasm(t *testing.T) { runBadSettings(t, wasmScheduler) }

func TestFIFO_ScenarioFilesWasm(t *testing.T) {
	policytest.RunScenarioFiles(t, policywasm.Policy(t, pkgPath), "testdata/scenarios/*.yaml")
}
