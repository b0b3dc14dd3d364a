package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/policytest"
)

// A job planner under test: the native swapper or its Wasm build.
type makeJobPlanner func(t testing.TB, h *policytest.Host) sdk.JobPlanner

func nativeJobPlanner(t testing.TB, h *policytest.Host) sdk.JobPlanner {
	s, err := New(h, []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	return s.(sdk.JobPlanner)
}

var jobCases = []struct {
	name       string
	gpus       int // GPUs on the box, 24 GiB each
	models     []sdk.ModelInfo
	need       uint32
	priority   int32
	candidates []int32 // nil: every GPU
	evict      []string
	devices    []int32
	err        string
}{
	{name: "a free GPU first", gpus: 2, models: models(model("a", 8*gib).on(0).used(1)),
		need: 1, devices: []int32{1}},
	{name: "the least recently used idle model goes, not the lowest GPU", gpus: 3,
		models: models(model("a", 8*gib).on(0).used(5), model("b", 8*gib).on(1).used(2), model("c", 8*gib).on(2).used(9)),
		need:   1, evict: []string{"b"}, devices: []int32{1}},
	{name: "a GPU's worth is its most valuable model", gpus: 2,
		models: models(model("a", 8*gib).on(0).used(1), model("b", 8*gib).on(0).used(8), model("c", 8*gib).on(1).used(5)),
		need:   1, evict: []string{"c"}, devices: []int32{1}},
	{name: "lower priority goes before less recently used", gpus: 2,
		models: models(model("a", 8*gib).on(0).used(1).prio(2), model("b", 8*gib).on(1).used(9)),
		need:   1, priority: 5, evict: []string{"b"}, devices: []int32{1}},
	{name: "never a model of higher priority than the job", gpus: 1,
		models: models(model("a", 8*gib).on(0).prio(3)),
		need:   1, priority: 2, err: "0 of the 1 it may take"},
	{name: "never a busy model", gpus: 2,
		models: models(model("a", 8*gib).on(0).busy(), model("b", 8*gib).on(1)),
		need:   2, err: "needs 2 whole GPU(s); 1 of the 2"},
	{name: "never a pinned model", gpus: 1, models: models(model("a", 8*gib).on(0).pinned()),
		need: 1, err: "0 of the 1"},
	{name: "never a loading or stopping model", gpus: 2,
		models: models(model("a", 8*gib).on(0).state(sdk.StateStarting), model("b", 8*gib).on(1).state(sdk.StateStopping)),
		need:   1, err: "0 of the 2"},
	{name: "only the candidates (a job holds GPU 0)", gpus: 2, candidates: []int32{1},
		models: models(model("a", 8*gib).on(1).used(3)),
		need:   1, evict: []string{"a"}, devices: []int32{1}},
	{name: "a split model frees both its GPUs", gpus: 3,
		models: models(model("x", 40*gib).on(0, 1).used(5), model("y", 8*gib).on(2).used(1)),
		need:   2, evict: []string{"x"}, devices: []int32{0, 1}},
}

func runJobCases(t *testing.T, mk makeJobPlanner) {
	for _, tc := range jobCases {
		t.Run(tc.name, func(t *testing.T) {
			h := policytest.NewHost(t, tc.models...)
			totals := make([]uint64, tc.gpus)
			for i := range totals {
				totals[i] = 24 * gib
			}
			account(h, totals...)
			candidates := tc.candidates
			if candidates == nil {
				for i := range tc.gpus {
					candidates = append(candidates, int32(i))
				}
			}
			q := sdk.JobPlanRequest{Now: h.Now, Job: "sft-1", GPUs: tc.need, Priority: tc.priority, Candidates: candidates, Running: h.Running("")}
			p, err := mk(t, h).PlanJob(q)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("PlanJob = %+v, %v; want an error containing %q", p, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(p.Evict, tc.evict) || !slices.Equal(p.Devices, tc.devices) {
				t.Errorf("PlanJob = evict %q devices %v; want evict %q devices %v", p.Evict, p.Devices, tc.evict, tc.devices)
			}
			if len(h.Calls) != 0 {
				t.Errorf("PlanJob must not log or act; got:\n%s", h.Calls)
			}
		})
	}
}

func TestPriorityLRU_PlanJob(t *testing.T) { runJobCases(t, nativeJobPlanner) }

func TestPriorityLRU_PlanJobWasm(t *testing.T) {
	runJobCases(t, func(t testing.TB, h *policytest.Host) sdk.JobPlanner {
		s, err := wasmSwapper(t, h, "{}")
		if err != nil {
			t.Fatal(err)
		}
		return s.(sdk.JobPlanner)
	})
}
