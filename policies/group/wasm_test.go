package main

import (
	"testing"

	"github.com/loadout-dev/loadout/internal/policywasm"
	"github.com/loadout-dev/loadout/sdk/policytest"
)

// The same cases as group_test.go, with the policy built to WebAssembly and
// run by the real runtime (host/policy).

const pkgPath = "github.com/loadout-dev/loadout/policies/group"

var wasmSwapper = policywasm.MakeSwapper(pkgPath)

func TestGroup_ScenarioWasm(t *testing.T) { runGroupCases(t, wasmSwapper) }

func TestGroup_SwapStartWasm(t *testing.T) { runSwapStart(t, wasmSwapper) }

func TestGroup_BadSettingsWasm(t *testing.T) { runBadGroupSettings(t, wasmSwapper) }

func TestGroup_ScenarioFilesWasm(t *testing.T) {
	policytest.RunScenarioFiles(t, policywasm.Policy(t, pkgPath), "testdata/scenarios/*.yaml")
}
