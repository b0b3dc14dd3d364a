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

func wasmScheduler(tb testing.TB, h *policytest.Host, settings string) (policytest.Scheduler, error) {
	s, err := policywasm.Scheduler(tb, pkgPath, h, settings)
	if err != nil {
		return nil, err // not a nil *policy.Scheduler in the interface
	}
	return s, nil
}

func TestFIFO_ScenarioWasm(t *testing.T) { runScenarios(t, wasmScheduler) }

func TestFIFO_BadSettingsWasm(t *testing.T) { runBadSettings(t, wasmScheduler) }

func TestFIFO_ScenarioFilesWasm(t *testing.T) {
	policytest.RunScenarioFiles(t, policywasm.Policy(t, pkgPath), "testdata/scenarios/*.yaml")
}
