package main

import (
	"testing"

	"github.com/loadout-dev/loadout/internal/policywasm"
	"github.com/loadout-dev/loadout/sdk/policytest"
)

// The same scenarios with the policy built to WebAssembly and run by the
// real runtime (host/policy).
func TestGDSF_ScenarioFilesWasm(t *testing.T) {
	policytest.RunScenarioFiles(t, policywasm.Policy(t, "github.com/loadout-dev/loadout/policies/gdsf"), "testdata/scenarios/*.yaml")
}
