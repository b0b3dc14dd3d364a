package main

import (
	"testing"

	"github.com/loadout-dev/loadout/sdk/policytest"
)

// The scenario files under testdata/scenarios run here natively, in
// wasm_test.go through the real sandbox (the record of waits then comes
// through the `waits` import), and with
// `loadout policy test foresight.wasm testdata/scenarios/*.yaml`.
func TestForesight_ScenarioFiles(t *testing.T) {
	policytest.RunScenarioFiles(t, policytest.SwapperPolicy(New), "testdata/scenarios/*.yaml")
}
