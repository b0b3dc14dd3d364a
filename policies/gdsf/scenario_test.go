package main

import (
	"testing"

	"github.com/loadout-dev/loadout/sdk/policytest"
)

// The scenario files under testdata/scenarios run here natively, in
// wasm_test.go through the real sandbox, and with
// `loadout policy test gdsf.wasm testdata/scenarios/*.yaml`.
func TestGDSF_ScenarioFiles(t *testing.T) {
	policytest.RunScenarioFiles(t, policytest.SwapperPolicy(New), "testdata/scenarios/*.yaml")
}
