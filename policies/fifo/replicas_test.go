package main

import (
	"slices"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/policytest"
)

// noEvictions plans every load without evictions: there is room.
var noEvictions = policytest.PlanFunc(func(sdk.PlanRequest) (sdk.Plan, error) { return sdk.Plan{}, nil })

// replicaBox is model r with replicas r and r@2 (one request at a time
// each; min lo, max 2) and another model x, r ready with one request in
// flight unless idle.
func replicaBox(h *policytest.Host, lo uint32) {
	h.ReplicaSets = map[string]sdk.ReplicaSet{"r": {Model: "r", Min: lo, Max: 2, Replicas: []string{"r", "r@2"}}}
}

func replicaModels(r2 sdk.ModelState) []sdk.ModelInfo {
	return []sdk.ModelInfo{
		{Name: "r", State: sdk.StateReady, ConcurrencyLimit: 1, InFlight: 1},
		{Name: "r@2", State: r2, ConcurrencyLimit: 1},
		{Name: "x"},
	}
}

// stoppedReplicas is model r's replicas r and r@2, both stopped, one
// request at a time each.
func stoppedReplicas() []sdk.ModelInfo {
	return []sdk.ModelInfo{{Name: "r", ConcurrencyLimit: 1}, {Name: "r@2", ConcurrencyLimit: 1}}
}

func grantedOn(h *policytest.Host, id sdk.RequestID) string {
	for _, c := range h.Calls.Of(policytest.OpGrantServe) {
		if c.ID == id && c.OK {
			return c.Model
		}
	}
	return ""
}

func init() {
	scenarios = append(scenarios,
		scenario{
			name:    "replicas: the waiters of a replica's failed load go to a sibling being loaded",
			models:  stoppedReplicas(),
			swapper: noEvictions,
			run: func(t *testing.T, h *policytest.Host) {
				replicaBox(h, 2)
				h.Request(1, "r")
				if got := h.ActiveSwaps(); !slices.Equal(got, []string{"r", "r@2"}) {
					t.Fatalf("swaps %v, want r and r@2 started together (min_replicas 2)", got)
				}
				h.CompleteSwap("r", "exit status 1")
				if _, failed := h.Errored(1); failed || h.Granted(1) {
					t.Fatalf("request 1 after r failed to load: %s, want it waiting on r@2", h.Outcome(1))
				}
				h.CompleteSwap("r@2", "")
				if got := grantedOn(h, 1); got != "r@2" {
					t.Fatalf("request 1: %s, want granted on r@2", h.Outcome(1))
				}
			},
		},
		scenario{
			name:    "replicas: a replica's failed start is its model's to the waiters, naming the replica",
			models:  stoppedReplicas(),
			swapper: noEvictions,
			run: func(t *testing.T, h *policytest.Host) {
				replicaBox(h, 1)
				h.Request(1, "r@2") // the host routed a request for r to r@2
				h.CompleteSwap("r@2", "exit status 1")
				want := `model "r" failed to start (its replica r@2): exit status 1`
				if code, ok := h.Errored(1); !ok || code != sdk.CodeSwapFailed || h.ErrorText(1) != want {
					t.Fatalf("request 1: %s %q, want CodeSwapFailed %q", h.Outcome(1), h.ErrorText(1), want)
				}
			},
		},
		scenario{
			name:    "replicas: a request at a full replica is served on a ready sibling",
			models:  replicaModels(sdk.StateReady),
			swapper: noEvictions,
			run: func(t *testing.T, h *policytest.Host) {
				replicaBox(h, 1)
				h.Request(1, "r")
				if got := grantedOn(h, 1); got != "r@2" {
					t.Fatalf("request 1 granted on %q, want r@2", got)
				}
			},
		},
		scenario{
			name:    "replicas: every replica full starts one more, and the queue drains onto it",
			models:  replicaModels(sdk.StateStopped),
			swapper: noEvictions,
			run: func(t *testing.T, h *policytest.Host) {
				replicaBox(h, 1)
				h.Request(1, "r")
				if pos, ok := h.QueuePosition(1); !ok || pos != 1 {
					t.Fatalf("request 1: %s, want queued", h.Outcome(1))
				}
				if got := h.ActiveSwaps(); !slices.Equal(got, []string{"r@2"}) {
					t.Fatalf("swaps %v, want r@2 started", got)
				}
				h.CompleteSwap("r@2", "")
				if got := grantedOn(h, 1); got != "r@2" {
					t.Fatalf("request 1 granted on %q once r@2 is ready, want r@2", got)
				}
			},
		},
		scenario{
			name:    "replicas: a slot freed on one replica serves a request queued on its sibling",
			models:  []sdk.ModelInfo{{Name: "r", State: sdk.StateReady, ConcurrencyLimit: 1}, {Name: "r@2", State: sdk.StateReady, ConcurrencyLimit: 2}, {Name: "x"}},
			swapper: noEvictions,
			run: func(t *testing.T, h *policytest.Host) {
				replicaBox(h, 1)
				h.Request(1, "r@2")
				h.Request(2, "r@2")
				h.Request(3, "r")
				h.Request(4, "r") // r and r@2 full: queued
				if pos, ok := h.QueuePosition(4); !ok || pos != 1 {
					t.Fatalf("request 4: %s, want queued", h.Outcome(4))
				}
				h.ServeDone(1) // r@2 has a free slot, and is not idle
				if got := grantedOn(h, 4); got != "r@2" {
					t.Fatalf("request 4 granted on %q after r@2 freed a slot, want r@2", got)
				}
			},
		},
		scenario{
			name:    "replicas: no scale-out that would evict another model",
			models:  replicaModels(sdk.StateStopped),
			swapper: policytest.EvictAll,
			run: func(t *testing.T, h *policytest.Host) {
				replicaBox(h, 1)
				h.Request(1, "r")
				if got := h.SwapsStarted(); len(got) != 0 {
					t.Fatalf("swaps %v, want none: scaling out would evict r", got)
				}
				h.Models["r"].InFlight = 0 // its request (from before) ended
				h.Tick()
				if got := grantedOn(h, 1); got != "r" {
					t.Fatalf("request 1 granted on %q when r freed up, want r", got)
				}
			},
		},
		scenario{
			name:    "replicas: no replica is started by evicting another replica",
			models:  []sdk.ModelInfo{{Name: "r"}, {Name: "r@2"}, {Name: "x"}},
			swapper: policytest.EvictAll, // knows nothing of replicas: would evict r for r@2
			run: func(t *testing.T, h *policytest.Host) {
				replicaBox(h, 2)
				h.Request(1, "r")
				h.CompleteSwap("r", "")
				h.ServeDone(1)
				h.Models["r@2"].State = sdk.StateFailed // crashed: the tick would start it again
				h.Tick()
				if got := h.ActiveSwaps(); len(got) != 0 {
					t.Fatalf("swaps %v, want none: r@2 fits only by evicting r", got)
				}
			},
		},
		scenario{
			name:    "replicas: min_replicas are started once the model is ready",
			models:  []sdk.ModelInfo{{Name: "r"}, {Name: "r@2"}, {Name: "x"}},
			swapper: noEvictions,
			run: func(t *testing.T, h *policytest.Host) {
				replicaBox(h, 2)
				h.Request(1, "r")
				h.CompleteSwap("r", "")
				if !h.Granted(1) {
					t.Fatalf("request 1: %s", h.Outcome(1))
				}
				if got := h.ActiveSwaps(); !slices.Equal(got, []string{"r@2"}) {
					t.Fatalf("swaps %v, want r@2 for min_replicas 2", got)
				}
			},
		},
	)
}

func init() {
	scenarios = append(scenarios,
		scenario{
			name:     "ticks on demand: a replica beyond min_replicas is looked at when it will have idled scale_in_after, and stopped then",
			settings: `{"scale_in_after": "2m"}`,
			models: []sdk.ModelInfo{
				{Name: "r", State: sdk.StateReady, ConcurrencyLimit: 1},
				{Name: "r@2", State: sdk.StateReady, ConcurrencyLimit: 1},
			},
			swapper: noEvictions,
			run: func(t *testing.T, h *policytest.Host) {
				h.ReplicaSets = map[string]sdk.ReplicaSet{"r": {Model: "r", Min: 1, Max: 2, Replicas: []string{"r", "r@2"}}}
				h.TicksOnDemand = true
				h.Models["r"].LastUse = h.Now
				h.Models["r@2"].LastUse = h.Now - int64(30*time.Second)
				h.Tick()
				want := h.Now + int64(90*time.Second) // r@2's last use + scale_in_after
				if !h.OnDemand || h.NextTick != want {
					t.Fatalf("after the first tick: on demand %v, next tick %+d ns from now; want on demand, r@2's idle deadline (+90s)", h.OnDemand, h.NextTick-h.Now)
				}
				if stops := h.Calls.Of(policytest.OpStopProcesses); len(stops) != 0 {
					t.Fatalf("stopped %v before scale_in_after", stops)
				}
				h.Advance(90 * time.Second)
				h.Tick()
				if stops := h.Calls.Of(policytest.OpStopProcesses); len(stops) != 1 || !slices.Equal(stops[0].Models, []string{"r@2"}) {
					t.Fatalf("stops at the requested tick: %v, want r@2 scaled in", stops)
				}
			},
		},
	)
}

func init() {
	scenarios = append(scenarios,
		scenario{
			name: "replicas: a replica drained for a request that waits to evict it sends its model's new request to a sibling, not to the queue",
			models: []sdk.ModelInfo{
				{Name: "r", State: sdk.StateReady, ConcurrencyLimit: 2},
				{Name: "r@2", State: sdk.StateReady, ConcurrencyLimit: 2},
				{Name: "x"},
			},
			swapper: policytest.PlanFunc(func(pr sdk.PlanRequest) (sdk.Plan, error) {
				return sdk.Plan{Evict: []string{"r@2"}}, nil // x takes r@2's place
			}),
			run: func(t *testing.T, h *policytest.Host) {
				replicaBox(h, 1)
				h.Request(10, "r@2") // r@2 busy when x's request comes
				h.Request(1, "x")
				if pos, ok := h.QueuePosition(1); !ok || pos != 1 {
					t.Fatalf("x's request: %s, want queued (r@2 is busy)", h.Outcome(1))
				}
				h.Request(11, "r@2") // a new request keeps r@2 busy
				h.ServeDone(10)
				h.Advance(11 * time.Second) // past drain_after (10 s) since r@2's old request ended
				h.Request(2, "r@2")         // the host's routing sent it to r@2
				if got := grantedOn(h, 2); got != "r" {
					t.Fatalf("r's request on the drained r@2: %s (served on %q), want it served on r", h.Outcome(2), got)
				}
			},
		})
}

func init() {
	scenarios = append(scenarios,
		scenario{
			name: "replicas: a request served on an awaited replica as its sibling's stand-in is one of its new requests, not one it was serving when the wait began: its end does not start drain_after's count",
			models: []sdk.ModelInfo{
				{Name: "r", State: sdk.StateReady, ConcurrencyLimit: 1, InFlight: 1},
				{Name: "r@2", State: sdk.StateReady, ConcurrencyLimit: 4},
				{Name: "x"},
			},
			swapper: policytest.PlanFunc(func(pr sdk.PlanRequest) (sdk.Plan, error) {
				return sdk.Plan{Evict: []string{"r@2"}}, nil // x takes r@2's place
			}),
			run: func(t *testing.T, h *policytest.Host) {
				replicaBox(h, 1)
				h.Request(10, "r@2") // r@2 is serving it when x's request comes
				h.Request(1, "x")
				if pos, ok := h.QueuePosition(1); !ok || pos != 1 {
					t.Fatalf("x's request: %s, want queued (r@2 is busy)", h.Outcome(1))
				}
				h.Request(20, "r") // r is at its limit: served on r@2
				if got := grantedOn(h, 20); got != "r@2" {
					t.Fatalf("r's request: %s (served on %q), want it on r@2", h.Outcome(20), got)
				}
				h.ServeDone(20)
				h.Advance(11 * time.Second) // past drain_after, but request 10 has not ended
				h.Request(2, "r@2")
				if got := grantedOn(h, 2); got != "r@2" {
					t.Fatalf("a new request on r@2 while its old one runs: %s (served on %q), want r@2 (not drained)", h.Outcome(2), got)
				}
			},
		})
}
