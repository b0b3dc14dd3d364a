package main

import (
	"testing"

	"github.com/loadout-dev/loadout/internal/policywasm"
	"github.com/loadout-dev/loadout/sdk/policytest"
)

// The same scenarios with the policy built to WebAssembly and run by the
// real runtime (host/policy).
func TestSIEVE_ScenarioFilesWasm(t *testing.T) {
	policytest.RunScenarioFiles(t, policywasm.Policy(t, "github.com/loadout-dev/loadout/policies/sieve"), "testdata/scenarios/*.yaml")
}
