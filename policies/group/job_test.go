package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/internal/policywasm"
	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/policytest"
)

// A GPU job takes free GPUs first, then those only idle, unpinned models
// outside persistent groups hold, lowest index first; run natively and as
// WebAssembly.
func TestGroup_PlanJob(t *testing.T) {
	runJobCases(t, func(t testing.TB, h *policytest.Host) sdk.JobPlanner {
		s, err := New(h, []byte(mixed))
		if err != nil {
			t.Fatal(err)
		}
		return s.(sdk.JobPlanner)
	})
}

func TestGroup_PlanJobWasm(t *testing.T) {
	runJobCases(t, func(t testing.TB, h *policytest.Host) sdk.JobPlanner {
		s, err := policywasm.Swapper(t, pkgPath, h, mixed)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func runJobCases(t *testing.T, mk func(testing.TB, *policytest.Host) sdk.JobPlanner) {
	on := func(name string, st sdk.ModelState, devices ...int32) sdk.ModelInfo {
		return sdk.ModelInfo{Name: name, State: st, Devices: devices}
	}
	for _, tc := range []struct {
		name    string
		models  []sdk.ModelInfo
		need    uint32
		evict   []string
		devices []int32
		err     string
	}{
		{"free GPUs first", []sdk.ModelInfo{on("llama", sdk.StateReady, 0)}, 1, nil, []int32{1}, ""},
		{"then idle models, lowest GPU first", []sdk.ModelInfo{on("llama", sdk.StateReady, 1), on("s1", sdk.StateReady, 0), on("z", sdk.StateReady, 2)},
			2, []string{"llama", "s1"}, []int32{0, 1}, ""},
		{"never a persistent group", []sdk.ModelInfo{on("bge", sdk.StateReady, 0), on("k1", sdk.StateReady, 1), on("z", sdk.StateReady, 2)},
			1, []string{"z"}, []int32{2}, ""},
		{"never a busy, pinned or loading model", []sdk.ModelInfo{
			{Name: "llama", State: sdk.StateReady, InFlight: 1, Devices: []int32{0}},
			{Name: "s1", State: sdk.StateReady, Pinned: true, Devices: []int32{1}},
			on("z", sdk.StateStarting, 2)}, 1, nil, nil, "too few of the 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := policytest.NewHost(t, tc.models...)
			h.GPUs = []sdk.GPUInfo{{Index: 0}, {Index: 1}, {Index: 2}}
			p, err := mk(t, h).PlanJob(sdk.JobPlanRequest{Now: h.Now, Job: "sft-1", GPUs: tc.need, Candidates: []int32{0, 1, 2}, Running: h.Running("")})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("PlanJob = %+v, %v; want an error containing %q", p, err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(p.Evict, tc.evict) || !slices.Equal(p.Devices, tc.devices) {
				t.Fatalf("PlanJob = %+v, %v; want evict %q devices %v", p, err, tc.evict, tc.devices)
			}
		})
	}
}
