package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/internal/policywasm"
	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/policytest"
)

// A GPU job takes free GPUs first, then the cheapest to evict by the evict
// costs, only idle, unpinned models; run natively and as WebAssembly.
func TestMatrix_PlanJob(t *testing.T) {
	runJobCases(t, func(t testing.TB, h *policytest.Host) sdk.JobPlanner {
		s, err := New(h, []byte(example))
		if err != nil {
			t.Fatal(err)
		}
		return s.(sdk.JobPlanner)
	})
}

func TestMatrix_PlanJobWasm(t *testing.T) {
	runJobCases(t, func(t testing.TB, h *policytest.Host) sdk.JobPlanner {
		s, err := policywasm.Swapper(t, pkgPath, h, example)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func runJobCases(t *testing.T, mk func(testing.TB, *policytest.Host) sdk.JobPlanner) {
	on := func(name string, devices ...int32) sdk.ModelInfo {
		return sdk.ModelInfo{Name: name, State: sdk.StateReady, Devices: devices}
	}
	for _, tc := range []struct {
		name    string
		models  []sdk.ModelInfo
		need    uint32
		evict   []string
		devices []int32
		err     string
	}{
		{"free GPUs first", []sdk.ModelInfo{on("voxtral-model", 0)}, 1, nil, []int32{1}, ""},
		{"the cheapest GPU to evict", []sdk.ModelInfo{on("voxtral-model", 0), on("llama-70B", 1), on("gemma-model", 2), on("qwen-model", 2)},
			1, []string{"gemma-model", "qwen-model"}, []int32{2}, ""},
		{"ties to the lowest GPU", []sdk.ModelInfo{on("qwen-model", 1), on("gemma-model", 0), on("llama-70B", 2)},
			2, []string{"gemma-model", "qwen-model"}, []int32{0, 1}, ""},
		{"never a busy or pinned model", []sdk.ModelInfo{
			{Name: "gemma-model", State: sdk.StateReady, InFlight: 1, Devices: []int32{0}},
			{Name: "qwen-model", State: sdk.StateReady, Pinned: true, Devices: []int32{1}},
			{Name: "llama-70B", State: sdk.StateStopping, Devices: []int32{2}}}, 1, nil, nil, "too few of the 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			models := slices.Clone(tc.models)
			for _, name := range []string{"gemma-model", "qwen-model", "mistral-model", "voxtral-model", "reranker-model", "llama-70B", "stable-diffusion"} {
				if !slices.ContainsFunc(models, func(m sdk.ModelInfo) bool { return m.Name == name }) {
					models = append(models, sdk.ModelInfo{Name: name}) // stopped: the matrix names every var's model
				}
			}
			h := policytest.NewHost(t, models...)
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
