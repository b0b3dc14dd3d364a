package main

import (
	"testing"

	"github.com/loadout-dev/loadout/internal/policywasm"
)

// The same cases as adaptive_test.go, with the policy built to
// WebAssembly and run by the real runtime (host/policy): the counts then
// come through the `demand` import.

const pkgPath = "github.com/loadout-dev/loadout/policies/adaptive"

var wasmSwapper = policywasm.MakeSwapper(pkgPath)

func TestAdaptive_LearnsFrequencyWasm(t *testing.T) { runLearnsFrequency(t, wasmSwapper) }

func TestAdaptive_FollowsMovingWorkingSetsWasm(t *testing.T) {
	runFollowsMovingWorkingSets(t, wasmSwapper)
}

func TestAdaptive_PlanIsPureWasm(t *testing.T) { runPlanIsPure(t, wasmSwapper) }

func TestAdaptive_BadSettingsWasm(t *testing.T) { runBadSettings(t, wasmSwapper) }
