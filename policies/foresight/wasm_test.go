package main

import (
	"testing"

	"github.com/loadout-dev/loadout/internal/policywasm"
	"github.com/loadout-dev/loadout/sdk/policytest"
)

// The same cases as foresight_test.go, with the policy built to
// WebAssembly and run by the real runtime (host/policy): the counts then
// come through the `demand` import.

const pkgPath = "github.com/loadout-dev/loadout/policies/foresight"

var wasmSwapper = policywasm.MakeSwapper(pkgPath)

func TestForesight_KeepsThePopularModelWasm(t *testing.T) { runKeepsThePopularModel(t, wasmSwapper) }

func TestForesight_ForgetsWhatTrafficLeftWasm(t *testing.T) {
	runForgetsWhatTrafficLeft(t, wasmSwapper)
}

func TestForesight_BurstsCountOnceWasm(t *testing.T) { runBurstsCountOnce(t, wasmSwapper) }

func TestForesight_WeighsLoadTimeWasm(t *testing.T) { runWeighsLoadTime(t, wasmSwapper) }

func TestForesight_PlanIsPureWasm(t *testing.T) { runPlanIsPure(t, wasmSwapper) }

func TestForesight_BadSettingsWasm(t *testing.T) { runBadSettings(t, wasmSwapper) }

func TestForesight_PatienceWasm(t *testing.T) { runPatience(t, wasmSwapper) }

func TestForesight_FreeWaitWasm(t *testing.T) { runFreeWait(t, wasmSwapper) }

func TestForesight_ScenarioFilesWasm(t *testing.T) {
	policytest.RunScenarioFiles(t, policywasm.Policy(t, pkgPath), "testdata/scenarios/*.yaml")
}

func TestForesight_CycleLargerThanTheBoxWasm(t *testing.T) {
	runCycleLargerThanTheBox(t, wasmSwapper)
}
