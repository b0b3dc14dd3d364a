package main

import (
	"testing"

	"github.com/loadout-dev/loadout/sdk/policytest"
)

// The scenario files under testdata/scenarios are data: they run here
// natively, in wasm_test.go through the real sandbox, and with
// `loadout policy test fifo.wasm testdata/scenarios/*.yaml`.
func TestFIFO_ScenarioFiles(t *testing.T) {
	policytest.RunScenarioFiles(t, policytest.SchedulerPolicy(New), "testdata/scenarios/*.yaml")
}
