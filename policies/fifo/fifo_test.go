package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/policytest"
)

// The scenarios are written once, against policytest.Scheduler, and run
// natively here and as WebAssembly in wasm_test.go.

var nativeScheduler = policytest.NativeSchedulerOf(New)

type scenario struct {
	name     string
	settings string             // "" means "{}"
	models   []sdk.ModelInfo    // nil means a, b, c, d, all stopped
	swapper  policytest.Swapper // nil means policytest.EvictAll
	run      func(t *testing.T, h *policytest.Host)
}

func TestFIFO_Scenario(t *testing.T) { runScenarios(t, nativeScheduler) }

func runScenarios(t *testing.T, mk policytest.MakeScheduler) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			models := sc.models
			if models == nil {
				models = stopped("a", "b", "c", "d")
			}
			h := policytest.NewHost(t, models...)
			h.Swapper = sc.swapper
			if h.Swapper == nil {
				h.Swapper = policytest.EvictAll
			}
			settings := sc.settings
			if settings == "" {
				settings = "{}"
			}
			s, err := mk(t, h, settings)
			if err != nil {
				t.Fatalf("New(%s): %v", settings, err)
			}
			h.Scheduler = s
			sc.run(t, h)
			// The scheduler reads in-flight counts itself: it never relies
			// on the host refusing to evict a busy model.
			for _, c := range h.Calls.Of(policytest.OpStartSwap) {
				if errors.Is(c.Err, sdk.ErrModelBusy) {
					t.Errorf("%s: the scheduler tried to evict a busy model", c)
				}
			}
			if t.Failed() {
				t.Logf("calls:\n%s", h.Calls)
			}
		})
	}
}

// plansAsked counts the plans of the scenarios' counting swappers.
var plansAsked int

var scenarios = []scenario{
	{
		name:   "fast path serves a ready model at once",
		models: append(ready("a"), stopped("b")...),
		run: func(t *testing.T, h *policytest.Host) {
			h.Request(1, "a")
			wantGranted(t, h, 1)
			wantSwaps(t, h)
			if n := len(h.Calls); n != 1 {
				t.Errorf("got %d calls, want only the grant", n)
			}
		},
	},
	{
		name: "cold start: the request starts a swap and is served when it is done",
		run: func(t *testing.T, h *policytest.Host) {
			h.Request(1, "a")
			wantPos(t, h, 1, 0)
			wantSwaps(t, h, "a")
			h.CompleteSwap("a", "")
			wantGranted(t, h, 1)
			if logs := h.Calls.Of(policytest.OpLog); len(logs) != 1 || !strings.Contains(logs[0].Msg, "model=a") {
				t.Errorf("want one log line for the one swap, got %v", logs)
			}
		},
	},
	{
		name: "requests for a loading model join its swap",
		run: func(t *testing.T, h *policytest.Host) {
			h.Request(1, "a")
			h.Request(2, "a")
			h.Request(3, "a")
			wantPos(t, h, 2, 0)
			wantPos(t, h, 3, 0)
			wantSwaps(t, h, "a")
			h.CompleteSwap("a", "")
			wantGranted(t, h, 1, 2, 3)
			if n := len(h.Calls.Of(policytest.OpLog)); n != 1 {
				t.Errorf("got %d log lines, want 1 (joins are not logged)", n)
			}
		},
	},
	{
		name:    "a model a running swap evicted loads again at once once its stop has ended",
		models:  append(ready("a", "c"), stopped("b")...),
		swapper: evictFor(map[string]string{"b": "a", "a": "c"}),
		run: func(t *testing.T, h *policytest.Host) {
			h.Request(1, "b") // evicts a
			h.Request(2, "a")
			wantPos(t, h, 2, 1) // a is still stopping: b's swap is evicting it
			wantSwaps(t, h, "b")
			h.Models["a"].State = sdk.StateStopped // its stop ended; b still loads
			h.Tick()
			wantSwaps(t, h, "b", "a")
			wantPos(t, h, 2, 0)
			if got := h.SwapsStarted()[1].Evict; !slices.Equal(got, []string{"c"}) {
				t.Errorf("a's swap evicts %q, want [c]", got)
			}
			h.CompleteSwap("a", "")
			wantGranted(t, h, 2)
			h.CompleteSwap("b", "")
			wantGranted(t, h, 1)
			if st := h.Models["a"].State; st != sdk.StateReady {
				t.Errorf("a is %v after b's swap ended, want ready", st)
			}
		},
	},
	{
		name:     "reload_evicted: after_swap: a model a running swap evicted waits for that swap to end",
		settings: `{"reload_evicted": "after_swap"}`,
		models:   append(ready("a", "c"), stopped("b")...),
		swapper:  evictFor(map[string]string{"b": "a", "a": "c"}),
		run: func(t *testing.T, h *policytest.Host) {
			h.Request(1, "b")
			h.Request(2, "a")
			h.Models["a"].State = sdk.StateStopped
			h.Tick()
			wantSwaps(t, h, "b")
			wantPos(t, h, 2, 1)
			h.CompleteSwap("b", "")
			wantGranted(t, h, 1)
			wantSwaps(t, h, "b", "a")
			wantPos(t, h, 2, 0)
		},
	},
	{
		name: "a request that would evict a loading model is queued",
		run: func(t *testing.T, h *policytest.Host) {
			h.Request(1, "a")
			h.Request(2, "b")
			wantPos(t, h, 2, 1)
			wantSwaps(t, h, "a")
			h.CompleteSwap("a", "")
			wantGranted(t, h, 1)
			wantPos(t, h, 2, 1) // a is busy now
			wantSwaps(t, h, "a")
			h.ServeDone(1)
			wantPos(t, h, 2, 0)
			wantSwaps(t, h, "a", "b")
			if got := h.SwapsStarted()[1].Evict; !slices.Equal(got, []string{"a"}) {
				t.Errorf("b's swap evicts %q, want [a]", got)
			}
			h.CompleteSwap("b", "")
			wantGranted(t, h, 2)
		},
	},
	{
		name:   "a busy model is never evicted: queue until ServeDone",
		models: append(ready("a"), stopped("b")...),
		run: func(t *testing.T, h *policytest.Host) {
			h.Request(1, "a")
			h.Request(2, "a")
			h.Request(3, "b")
			wantGranted(t, h, 1, 2)
			wantPos(t, h, 3, 1)
			h.ServeDone(1)
			wantPos(t, h, 3, 1) // still one in flight
			wantSwaps(t, h)
			h.ServeDone(2)
			wantSwaps(t, h, "b")
			wantPos(t, h, 3, 0)
		},
	},
	{
		name: "the host's in-flight count counts, not the policy's (re-instantiation)",
		models: []sdk.ModelInfo{
			{Name: "a", State: sdk.StateReady, InFlight: 2}, // granted by an earlier instance
			{Name: "b"},
		},
		run: func(t *testing.T, h *policytest.Host) {
			h.Request(1, "b")
			wantPos(t, h, 1, 1)
			// a crashes: its requests end, the host's count drops, a Tick follows.
			h.Models["a"].State, h.Models["a"].InFlight = sdk.StateFailed, 0
			h.Tick()
			wantSwaps(t, h, "b")
			wantPos(t, h, 1, 0)
		},
	},
	{
		name:    "swaps of disjoint models run in parallel",
		models:  stopped("a1", "a2", "b1", "b2"),
		swapper: groups(false, []string{"a1", "a2"}, []string{"b1", "b2"}),
		run: func(t *testing.T, h *policytest.Host) {
			h.Request(1, "a1")
			h.Request(2, "b1")
			wantSwaps(t, h, "a1", "b1")
			if got := h.ActiveSwaps(); !slices.Equal(got, []string{"a1", "b1"}) {
				t.Errorf("active swaps %v, want both", got)
			}
			h.Request(3, "a2") // would evict a1, which is loading
			wantPos(t, h, 3, 1)
			h.CompleteSwap("b1", "")
			wantGranted(t, h, 2)
			wantPos(t, h, 3, 1)
			h.CompleteSwap("a1", "")
			wantGranted(t, h, 1)
			h.ServeDone(1)
			wantSwaps(t, h, "a1", "b1", "a2")
			if got := h.SwapsStarted()[2].Evict; !slices.Equal(got, []string{"a1"}) {
				t.Errorf("a2's swap evicts %q, want [a1] only", got)
			}
		},
	},
	{
		name: "collation: A B C A B C is served A A B B C C",
		run: func(t *testing.T, h *policytest.Host) {
			for i, m := range []string{"a", "b", "c", "a", "b", "c"} {
				h.Request(sdk.RequestID(i+1), m)
			}
			for _, m := range []string{"a", "b", "c"} {
				h.CompleteSwap(m, "")
				for _, id := range h.Serving() {
					h.ServeDone(id)
				}
			}
			var order []sdk.RequestID
			for _, c := range h.Calls.Of(policytest.OpGrantServe) {
				order = append(order, c.ID)
			}
			if want := []sdk.RequestID{1, 4, 2, 5, 3, 6}; !slices.Equal(order, want) {
				t.Errorf("served %v, want %v", order, want)
			}
			wantSwaps(t, h, "a", "b", "c")
		},
	},
	{
		name: "priority orders the queue; ties keep arrival order",
		run: func(t *testing.T, h *policytest.Host) {
			h.Request(1, "a")
			h.Submit(sdk.RequestEvent{ID: 2, Model: "b", Priority: 0})
			h.Submit(sdk.RequestEvent{ID: 3, Model: "c", Priority: 5})
			h.Submit(sdk.RequestEvent{ID: 4, Model: "b", Priority: 5})
			h.Submit(sdk.RequestEvent{ID: 5, Model: "c", Priority: 1})
			wantQueue(t, h, 3, 4, 5, 2)
			h.CompleteSwap("a", "")
			h.ServeDone(1)
			// 3 starts c; 4 (b) collides with it; 5 joins c; 2 stays behind 4.
			wantSwaps(t, h, "a", "c")
			wantPos(t, h, 3, 0)
			wantPos(t, h, 5, 0)
			wantQueue(t, h, 4, 2)
		},
	},
	{
		name:     "per-model priority setting (llama-swap's fifo.priority) and the model's own",
		settings: `{"fifo": {"priority": {"c": 10}}}`,
		models:   []sdk.ModelInfo{{Name: "a"}, {Name: "b"}, {Name: "c"}, {Name: "d", Priority: 20}},
		run: func(t *testing.T, h *policytest.Host) {
			h.Request(1, "a")
			h.Request(2, "b")
			h.Request(3, "c")                                           // 10 from the setting
			h.Submit(sdk.RequestEvent{ID: 4, Model: "b", Priority: 15}) // its own wins
			h.Request(5, "d")                                           // 20, the model's
			wantQueue(t, h, 5, 4, 3, 2)
		},
	},
	{
		name: "queue positions are sent when, and only when, they change",
		run: func(t *testing.T, h *policytest.Host) {
			h.Request(1, "a")
			h.Request(2, "b")
			h.Request(3, "c")
			mark := len(h.Calls)
			h.Submit(sdk.RequestEvent{ID: 4, Model: "d", Priority: 9})
			wantCalls(t, h.Calls[mark:],
				"SetQueuePosition(4, 1)",
				"SetQueuePosition(2, 2)",
				"SetQueuePosition(3, 3)")
			mark = len(h.Calls)
			h.Request(5, "b") // last: only its own position
			wantCalls(t, h.Calls[mark:], "SetQueuePosition(5, 4)")
			mark = len(h.Calls)
			h.Cancel(2)
			wantCalls(t, h.Calls[mark:],
				"SetQueuePosition(3, 2)",
				"SetQueuePosition(5, 3)")
			wantQueue(t, h, 4, 3, 5)
		},
	},
	{
		name: "cancel while queued never triggers a swap",
		run: func(t *testing.T, h *policytest.Host) {
			h.Request(1, "a")
			h.Request(2, "b")
			h.Cancel(2)
			h.CompleteSwap("a", "")
			h.ServeDone(1)
			h.Tick()
			wantSwaps(t, h, "a")
		},
	},
	{
		name: "cancel of a swap's last waiter: the swap completes with nobody to serve",
		run: func(t *testing.T, h *policytest.Host) {
			h.Request(1, "a")
			h.Cancel(1)
			h.CompleteSwap("a", "")
			if n := len(h.Calls.Of(policytest.OpGrantServe)); n != 0 {
				t.Errorf("got %d grants, want none", n)
			}
			h.Request(2, "a")
			wantGranted(t, h, 2)
			wantSwaps(t, h, "a")
		},
	},
	{
		name: "a caller that left before its grant is not counted in flight",
		run: func(t *testing.T, h *policytest.Host) {
			h.Request(1, "a")
			h.Request(2, "a")
			h.Leave(1)
			h.CompleteSwap("a", "")
			wantGranted(t, h, 2)
			if h.Granted(1) || h.Models["a"].InFlight != 1 {
				t.Errorf("a has %d in flight, want 1 (caller 1 left)", h.Models["a"].InFlight)
			}
		},
	},
	{
		name:     "max_queue: a request beyond it is refused with CodeQueueFull",
		settings: `{"max_queue": 2}`,
		run: func(t *testing.T, h *policytest.Host) {
			h.Request(1, "a")
			h.Request(2, "b")
			h.Request(3, "c")
			h.Request(4, "b")
			wantErrored(t, h, sdk.CodeQueueFull, 4)
			h.Request(5, "a") // joining a swap is not queueing
			wantPos(t, h, 5, 0)
			wantQueue(t, h, 2, 3)
		},
	},
	{
		name:     "max_queue 0 is unlimited",
		settings: `{"max_queue": 0}`,
		run: func(t *testing.T, h *policytest.Host) {
			h.Request(1, "a")
			for id := sdk.RequestID(2); id < 2000; id++ {
				h.Request(id, "b")
			}
			if pos, _ := h.QueuePosition(1999); pos != 1998 {
				t.Errorf("last request at %d, want 1998", pos)
			}
		},
	},
	{
		name:     "aging: a request queued longer than max_wait goes before newer higher-priority ones",
		settings: `{"max_wait": "30s"}`,
		run: func(t *testing.T, h *policytest.Host) {
			h.Request(1, "a")
			h.Request(2, "b")
			h.Advance(10 * time.Second)
			h.Submit(sdk.RequestEvent{ID: 3, Model: "c", Priority: 5})
			wantQueue(t, h, 3, 2)
			h.Advance(20 * time.Second) // 2 has waited exactly 30s: not longer
			h.Tick()
			wantQueue(t, h, 3, 2)
			h.Advance(time.Second)
			h.Tick()
			wantQueue(t, h, 2, 3)
			h.Submit(sdk.RequestEvent{ID: 4, Model: "d", Priority: 9})
			wantQueue(t, h, 2, 4, 3)
			h.CompleteSwap("a", "")
			h.ServeDone(1)
			wantSwaps(t, h, "a", "b") // the aged request goes first
		},
	},
	{
		name:     "max_wait as a number of seconds; aging without a tick",
		settings: `{"max_wait": 5}`,
		run: func(t *testing.T, h *policytest.Host) {
			h.Request(1, "a")
			h.Request(2, "b")
			h.Advance(6 * time.Second)
			h.Submit(sdk.RequestEvent{ID: 3, Model: "c", Priority: 5})
			wantQueue(t, h, 2, 3)
		},
	},
	{
		name:     "max_wait 0 disables aging",
		settings: `{"max_wait": "0s"}`,
		run: func(t *testing.T, h *policytest.Host) {
			h.Request(1, "a")
			h.Request(2, "b")
			h.Advance(time.Hour)
			h.Submit(sdk.RequestEvent{ID: 3, Model: "c", Priority: 5})
			h.Tick()
			wantQueue(t, h, 3, 2)
		},
	},
	{
		name: "concurrency limit: a request beyond it waits in the queue for a free slot",
		models: []sdk.ModelInfo{
			{Name: "a", State: sdk.StateReady, ConcurrencyLimit: 2},
			{Name: "b"},
		},
		run: func(t *testing.T, h *policytest.Host) {
			h.Request(1, "a")
			h.Request(2, "a")
			h.Request(3, "a")
			h.Request(4, "a")
			wantGranted(t, h, 1, 2)
			wantQueue(t, h, 3, 4)
			h.ServeDone(1) // a slot frees: the first in line takes it
			wantGranted(t, h, 3)
			wantQueue(t, h, 4)
			h.ServeDone(2)
			wantGranted(t, h, 4)
			if n := len(h.Calls.Of(policytest.OpGrantError)); n != 0 {
				t.Errorf("got %d refusals, want none", n)
			}
		},
	},
	{
		name: "concurrency limit: waiters of a swap beyond it are queued, not refused",
		models: []sdk.ModelInfo{
			{Name: "a", ConcurrencyLimit: 1},
			{Name: "b"},
		},
		settings: `{"max_queue": 1}`, // they were admitted: the bound does not refuse them
		run: func(t *testing.T, h *policytest.Host) {
			h.Request(1, "a")
			h.Request(2, "a")
			h.Request(3, "a")
			h.CompleteSwap("a", "")
			wantGranted(t, h, 1)
			wantQueue(t, h, 2, 3)
			h.ServeDone(1)
			wantGranted(t, h, 2)
			wantQueue(t, h, 3)
			h.ServeDone(2)
			wantGranted(t, h, 3)
			wantSwaps(t, h, "a")
		},
	},
	{
		name:     "concurrency limit: 429 only when the queue is full",
		settings: `{"max_queue": 1}`,
		models:   []sdk.ModelInfo{{Name: "a", State: sdk.StateReady, ConcurrencyLimit: 1}},
		run: func(t *testing.T, h *policytest.Host) {
			h.Request(1, "a")
			h.Request(2, "a")
			h.Request(3, "a")
			wantGranted(t, h, 1)
			wantQueue(t, h, 2)
			wantErrored(t, h, sdk.CodeQueueFull, 3)
		},
	},
	{
		name:     "concurrency limit: queued requests age like any other",
		settings: `{"max_wait": "30s"}`,
		models:   []sdk.ModelInfo{{Name: "a", State: sdk.StateReady, ConcurrencyLimit: 1}, {Name: "b"}},
		run: func(t *testing.T, h *policytest.Host) {
			h.Request(1, "a")
			h.Request(2, "a") // at the limit: queued
			h.Advance(31 * time.Second)
			h.Submit(sdk.RequestEvent{ID: 3, Model: "a", Priority: 9})
			wantQueue(t, h, 2, 3)
			h.ServeDone(1)
			wantGranted(t, h, 2)
			wantQueue(t, h, 3)
		},
	},
	{
		name:   "concurrency limit defaults to 10",
		models: ready("a"),
		run: func(t *testing.T, h *policytest.Host) {
			for id := sdk.RequestID(1); id <= 11; id++ {
				h.Request(id, "a")
			}
			wantGranted(t, h, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
			wantQueue(t, h, 11)
			h.ServeDone(1)
			wantGranted(t, h, 11)
		},
	},
	{
		name: "a swap of another model waits for a model at its limit, then evicts it",
		models: []sdk.ModelInfo{
			{Name: "a", State: sdk.StateReady, ConcurrencyLimit: 1},
			{Name: "b"},
		},
		run: func(t *testing.T, h *policytest.Host) {
			h.Request(1, "a")
			h.Request(2, "a") // the limit
			h.Request(3, "b") // would evict busy a
			wantQueue(t, h, 2, 3)
			h.ServeDone(1)
			wantGranted(t, h, 2) // a's slot goes first: 2 is ahead of 3
			wantQueue(t, h, 3)
			h.ServeDone(2)
			wantSwaps(t, h, "b")
		},
	},
	{
		name: "a slot freed on a model still busy drains its requests alone: the others' plans are not asked again",
		models: []sdk.ModelInfo{
			{Name: "a", State: sdk.StateReady, ConcurrencyLimit: 2},
			{Name: "b"}, {Name: "c"},
		},
		swapper: policytest.PlanFunc(func(q sdk.PlanRequest) (sdk.Plan, error) {
			plansAsked++
			return policytest.EvictAll.Plan(q)
		}),
		run: func(t *testing.T, h *policytest.Host) {
			h.Request(1, "a")
			h.Request(2, "a")
			h.Request(3, "b") // would evict busy a
			h.Request(4, "a") // the limit
			h.Request(5, "c") // would evict busy a
			wantQueue(t, h, 3, 4, 5)
			before := plansAsked
			h.ServeDone(1) // a is still busy with 2
			wantGranted(t, h, 2, 4)
			wantQueue(t, h, 3, 5)
			wantPos(t, h, 3, 1)
			wantPos(t, h, 5, 2)
			if n := plansAsked - before; n != 0 {
				t.Errorf("%d plans asked for b and c; a busy model's free slot changes nothing for them", n)
			}
			h.ServeDone(2)
			h.ServeDone(4) // a is idle: b evicts it
			wantSwaps(t, h, "b")
			wantQueue(t, h, 5)
		},
	},
	{
		name: "swap failure fails every waiter with CodeSwapFailed and the reason",
		run: func(t *testing.T, h *policytest.Host) {
			h.Request(1, "a")
			h.Request(2, "a")
			h.Request(3, "b")
			h.CompleteSwap("a", "exit status 1: CUDA out of memory")
			wantErrored(t, h, sdk.CodeSwapFailed, 1, 2)
			if msg := h.ErrorText(1); !strings.Contains(msg, "CUDA out of memory") {
				t.Errorf("error %q does not carry the swap's error", msg)
			}
			wantSwaps(t, h, "a", "b") // the queue drained after the failure
			h.Request(4, "a")         // a failed model is started again
			wantPos(t, h, 4, 1)       // …once b's swap is done
		},
	},
	{
		name:    "admin unload fails the models' waiters and queued requests and stops them",
		models:  append(ready("a"), stopped("b", "c")...),
		swapper: groups(false, []string{"a", "b"}, []string{"c"}),
		run: func(t *testing.T, h *policytest.Host) {
			h.Request(1, "a")
			wantGranted(t, h, 1)
			h.Request(2, "b") // would evict busy a: queued
			h.Request(3, "c") // its own group: swap
			wantPos(t, h, 2, 1)
			wantPos(t, h, 3, 0)
			h.Unload(sdk.UnloadAdmin, "b", "c")
			wantErrored(t, h, sdk.CodeUnavailable, 2, 3)
			if msg := h.ErrorText(3); !strings.Contains(msg, "unloaded") {
				t.Errorf("error %q, want it to say the model was unloaded", msg)
			}
			wantCalls(t, h.Calls.Of(policytest.OpStopProcesses), `StopProcesses(["b" "c"]) = <nil>`)
			h.Unload(sdk.UnloadAdmin, "a") // busy, stopped anyway
			wantCalls(t, h.Calls.Of(policytest.OpStopProcesses)[1:], `StopProcesses(["a"]) = <nil>`)
		},
	},
	{
		name:   "after an admin unload of a loading model, a new request waits for the host's swap",
		models: stopped("a"),
		run: func(t *testing.T, h *policytest.Host) {
			h.Request(1, "a")
			h.Unload(sdk.UnloadAdmin, "a")
			wantErrored(t, h, sdk.CodeUnavailable, 1)
			h.Request(2, "a") // the host still loads a: StartSwap is refused
			wantPos(t, h, 2, 1)
			h.CompleteSwap("a", "")
			wantGranted(t, h, 2)
		},
	},
	{
		name: "ttl unload stops only ready, idle, unwanted models",
		models: []sdk.ModelInfo{
			{Name: "busy", State: sdk.StateReady},
			{Name: "idle", State: sdk.StateReady},
			{Name: "wanted", State: sdk.StateReady, ConcurrencyLimit: 1},
			{Name: "loading"},
			{Name: "stopped"},
		},
		swapper: groups(false), // nothing evicts anything
		run: func(t *testing.T, h *policytest.Host) {
			h.Request(1, "busy")
			h.Request(2, "wanted")
			h.Request(3, "wanted") // at its limit: queued
			h.Request(4, "loading")
			wantPos(t, h, 3, 1)
			wantPos(t, h, 4, 0)
			// The host has counted request 2 out; its ServeDone, which
			// would grant 3, comes after the unload.
			h.Models["wanted"].InFlight = 0
			h.Unload(sdk.UnloadTTL, "busy", "idle", "wanted", "loading", "stopped")
			wantCalls(t, h.Calls.Of(policytest.OpStopProcesses), `StopProcesses(["idle"]) = <nil>`)
			wantPos(t, h, 3, 1)
		},
	},
	{
		name: "shutdown fails every waiter and queued request",
		run: func(t *testing.T, h *policytest.Host) {
			h.Request(1, "a")
			h.Request(2, "a")
			h.Request(3, "b")
			h.Shutdown("SIGTERM")
			wantErrored(t, h, sdk.CodeUnavailable, 1, 2, 3)
			if msg := h.ErrorText(3); !strings.Contains(msg, "SIGTERM") {
				t.Errorf("error %q does not say why", msg)
			}
		},
	},
	{
		name: "an unknown model is refused with CodeModelNotFound",
		run: func(t *testing.T, h *policytest.Host) {
			h.Request(1, "nope")
			wantErrored(t, h, sdk.CodeModelNotFound, 1)
		},
	},
	{
		name:   "a ready model is served without asking the swapper, even a failing one",
		models: []sdk.ModelInfo{{Name: "a", State: sdk.StateReady, ConcurrencyLimit: 1}, {Name: "b"}},
		run: func(t *testing.T, h *policytest.Host) {
			sw := &failingSwapper{}
			h.Swapper = sw
			h.Request(1, "a")
			h.Request(2, "a") // at the limit: queued, still without a plan
			wantGranted(t, h, 1)
			wantQueue(t, h, 2)
			h.ServeDone(1) // the drain grants it, again without a plan
			wantGranted(t, h, 2)
			if sw.calls != 0 {
				t.Errorf("the swapper was asked %d times for a ready model, want 0", sw.calls)
			}
			h.Request(3, "b") // a load needs the swapper: its failure fails only this one
			wantErrored(t, h, sdk.CodeUnavailable, 3)
			if sw.calls != 1 {
				t.Errorf("the swapper was asked %d times, want once, for b", sw.calls)
			}
		},
	},
	{
		name: "a failing swapper fails the request, not the scheduler",
		swapper: policytest.PlanFunc(func(sdk.PlanRequest) (sdk.Plan, error) {
			return sdk.Plan{}, fmt.Errorf("no room")
		}),
		run: func(t *testing.T, h *policytest.Host) {
			h.Request(1, "a")
			wantErrored(t, h, sdk.CodeUnavailable, 1)
			wantSwaps(t, h)
		},
	},
	{
		name:    "the swapper's devices reach StartSwap",
		swapper: policytest.PlanFunc(func(sdk.PlanRequest) (sdk.Plan, error) { return sdk.Plan{Devices: []int32{1, 3}}, nil }),
		run: func(t *testing.T, h *policytest.Host) {
			h.Request(1, "a")
			if s := h.SwapsStarted(); len(s) != 1 || !slices.Equal(s[0].Devices, []int32{1, 3}) {
				t.Errorf("swaps %+v, want a on devices [1 3]", s)
			}
		},
	},
}

// TestFIFO_BadSettings: every bad setting is an init error naming it.
func TestFIFO_BadSettings(t *testing.T) { runBadSettings(t, nativeScheduler) }

var badSettings = []struct{ settings, want string }{
	{`{"nope": 1}`, `settings: nope: unknown setting "nope" (known: fifo, max_queue, max_wait, load_order, scale_in_after, reload_evicted, drain_after)`},
	{`{"reload_evicted": "later"}`, `settings: reload_evicted: want at_once or after_swap, got "later"`},
	{`{"load_order": "lifo"}`, `settings: load_order: want arrival or queued_wait, got "lifo"`},
	{`{"load_order": 1}`, "settings: load_order: "},
	{`{"max_queue": -1}`, "settings: max_queue: "},
	{`{"max_queue": 1.5}`, "settings: max_queue: "},
	{`{"max_queue": "ten"}`, "settings: max_queue: "},
	{`{"max_wait": "soon"}`, "settings: max_wait: "},
	{`{"drain_after": "soon"}`, "settings: drain_after: "},
	{`{"max_wait": "-5s"}`, "settings: max_wait: "},
	{`{"max_wait": -1}`, "settings: max_wait: "},
	{`{"max_wait": true}`, "settings: max_wait: "},
	{`{"fifo": {"weight": {}}}`, `settings: fifo.weight: unknown setting`},
	{`{"fifo": {"priority": {"a": "high"}}}`, "settings: fifo.priority.a: want a whole number"},
	{`{"fifo": 3}`, "settings: fifo: want an object"},
	{`[1, 2]`, "settings: $: want an object"},
	{`{`, "settings: $: invalid JSON"},
}

func runBadSettings(t *testing.T, mk policytest.MakeScheduler) {
	for _, tc := range badSettings {
		h := policytest.NewHost(t, stopped("a")...)
		_, err := mk(t, h, tc.settings)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("settings %s: error %v, want one naming %s", tc.settings, err, tc.want)
		}
	}
}

func TestFIFO_Settings(t *testing.T) {
	for _, tc := range []struct {
		settings string
		want     settings
	}{
		{``, settings{maxQueue: 1024, maxWait: int64(60 * time.Second)}},
		{`{}`, settings{maxQueue: 1024, maxWait: int64(60 * time.Second)}},
		{`null`, settings{maxQueue: 1024, maxWait: int64(60 * time.Second)}},
		{`{"max_queue": 0, "max_wait": 0}`, settings{}},
		{`{"max_queue": 7, "max_wait": "1m30s"}`, settings{maxQueue: 7, maxWait: int64(90 * time.Second)}},
		{`{"max_wait": 2.5}`, settings{maxQueue: 1024, maxWait: int64(2500 * time.Millisecond)}},
		{`{"fifo": {"priority": {"a": 10, "b": -1}}}`, settings{maxQueue: 1024, maxWait: int64(60 * time.Second),
			priority: map[string]int32{"a": 10, "b": -1}}},
		{`{"load_order": "arrival"}`, settings{maxQueue: 1024, maxWait: int64(60 * time.Second)}},
		{`{"load_order": "queued_wait"}`, settings{maxQueue: 1024, maxWait: int64(60 * time.Second), loadOrder: byQueuedWait}},
		{`{"reload_evicted": "at_once"}`, settings{maxQueue: 1024, maxWait: int64(60 * time.Second)}},
		{`{"reload_evicted": "after_swap"}`, settings{maxQueue: 1024, maxWait: int64(60 * time.Second), afterSwap: true}},
	} {
		got, err := parseSettings([]byte(tc.settings))
		if err != nil {
			t.Errorf("%s: %v", tc.settings, err)
			continue
		}
		if got.maxQueue != tc.want.maxQueue || got.maxWait != tc.want.maxWait || got.loadOrder != tc.want.loadOrder || got.afterSwap != tc.want.afterSwap || fmt.Sprint(got.priority) != fmt.Sprint(tc.want.priority) {
			t.Errorf("%s: got %+v, want %+v", tc.settings, got, tc.want)
		}
	}
}

// ---- helpers ----

func stopped(names ...string) []sdk.ModelInfo {
	var ms []sdk.ModelInfo
	for _, n := range names {
		ms = append(ms, sdk.ModelInfo{Name: n})
	}
	return ms
}

func ready(names ...string) []sdk.ModelInfo {
	ms := stopped(names...)
	for i := range ms {
		ms[i].State = sdk.StateReady
	}
	return ms
}

// evictFor is a test swapper: a target evicts the one model victim names
// for it, when that model is running, and nothing else.
func evictFor(victim map[string]string) policytest.Swapper {
	return policytest.PlanFunc(func(q sdk.PlanRequest) (sdk.Plan, error) {
		if v, ok := victim[q.Target]; ok && slices.Contains(q.Running, v) {
			return sdk.Plan{Evict: []string{v}}, nil
		}
		return sdk.Plan{}, nil
	})
}

// groups is a test swapper: a target evicts the running members of its own
// group (a model in no group is alone in its own), and every other running
// model too when exclusive.
func groups(exclusive bool, members ...[]string) policytest.Swapper {
	groupOf := map[string]int{}
	for i, g := range members {
		for _, m := range g {
			groupOf[m] = i + 1
		}
	}
	return policytest.PlanFunc(func(q sdk.PlanRequest) (sdk.Plan, error) {
		var p sdk.Plan
		tg, ok := groupOf[q.Target]
		for _, m := range q.Running {
			if mg, in := groupOf[m]; exclusive || (ok && in && mg == tg) {
				p.Evict = append(p.Evict, m)
			}
		}
		return p, nil
	})
}

// failingSwapper fails every plan, as a crash-looping swapper does, and
// counts the calls. A scenario makes its own: the count is per run.
type failingSwapper struct{ calls int }

func (f *failingSwapper) Plan(sdk.PlanRequest) (sdk.Plan, error) {
	f.calls++
	return sdk.Plan{}, errors.New("swapper trapped")
}

func (f *failingSwapper) OnSwapStart(sdk.SwapStartEvent) error { return nil }

func wantGranted(t *testing.T, h *policytest.Host, ids ...sdk.RequestID) {
	t.Helper()
	for _, id := range ids {
		if !h.Granted(id) {
			t.Errorf("request %d: %s, want granted", id, h.Outcome(id))
		}
	}
}

func wantErrored(t *testing.T, h *policytest.Host, code sdk.ErrorCode, ids ...sdk.RequestID) {
	t.Helper()
	for _, id := range ids {
		if got, ok := h.Errored(id); !ok || got != code {
			t.Errorf("request %d: %s, want errored %s", id, h.Outcome(id), policytest.CodeName(code))
		}
	}
}

func wantPos(t *testing.T, h *policytest.Host, id sdk.RequestID, pos int) {
	t.Helper()
	if got, ok := h.QueuePosition(id); !ok || got != pos {
		want := fmt.Sprintf("queued at %d", pos)
		if pos == 0 {
			want = "waiting on a swap"
		}
		t.Errorf("request %d: %s, want %s", id, h.Outcome(id), want)
	}
}

// wantQueue checks the queue's order: ids at positions 1, 2, ….
func wantQueue(t *testing.T, h *policytest.Host, ids ...sdk.RequestID) {
	t.Helper()
	for i, id := range ids {
		wantPos(t, h, id, i+1)
	}
}

func wantSwaps(t *testing.T, h *policytest.Host, targets ...string) {
	t.Helper()
	var got []string
	for _, s := range h.SwapsStarted() {
		got = append(got, s.Model)
	}
	if !slices.Equal(got, targets) {
		t.Errorf("swaps started %q, want %q", got, targets)
	}
}

func wantCalls(t *testing.T, calls policytest.Calls, want ...string) {
	t.Helper()
	var got []string
	for _, c := range calls {
		got = append(got, c.String())
	}
	if !slices.Equal(got, want) {
		t.Errorf("calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
