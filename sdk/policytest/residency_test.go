package policytest_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/policytest"
)

const gib = uint64(1) << 30

// startRecorder is a swapper that records the SwapStartEvents it gets.
type startRecorder struct{ starts []sdk.SwapStartEvent }

func (r *startRecorder) Plan(sdk.PlanRequest) (sdk.Plan, error) { return sdk.Plan{}, nil }
func (r *startRecorder) OnSwapStart(ev sdk.SwapStartEvent) error {
	r.starts = append(r.starts, ev)
	return nil
}

// sleepy is a ready model whose backend sleeps at the given levels.
func sleepy(name string, canSleep uint8, host1, host2 uint64) sdk.ModelInfo {
	return sdk.ModelInfo{Name: name, State: sdk.StateReady, EstimatedVRAM: 8 * gib, CanSleep: canSleep, HostBytes1: host1, HostBytes2: host2}
}

// TestHost_EvictionModes holds the Host to the eviction-mode rules of
// docs/ABI.md: what each requested mode is carried out as, told to the
// swapper in OnSwapStart, and what the victim is once the swap is done.
func TestHost_EvictionModes(t *testing.T) {
	for _, tc := range []struct {
		name       string
		hostMemory uint64
		config     sdk.EvictMode // the victim's evict: (EvictDefault: auto)
		victim     sdk.ModelInfo
		mode       []sdk.EvictMode
		want       sdk.EvictMode
		refused    int
	}{
		{"auto sleeps at level 1 when host memory holds it", 64 * gib, sdk.EvictDefault, sleepy("v", 3, 16*gib, gib), nil, sdk.EvictSleep1, 0},
		{"auto sleeps at level 2 when only that fits", 4 * gib, sdk.EvictDefault, sleepy("v", 3, 16*gib, gib), nil, sdk.EvictSleep2, 0},
		{"auto stops when nothing fits", 512 << 20, sdk.EvictDefault, sleepy("v", 3, 16*gib, gib), nil, sdk.EvictStop, 0},
		{"auto stops a model whose backend cannot sleep", 64 * gib, sdk.EvictDefault, sleepy("v", 0, 16*gib, gib), nil, sdk.EvictStop, 0},
		{"no host memory accounted: nothing sleeps", 0, sdk.EvictDefault, sleepy("v", 3, 16*gib, gib), nil, sdk.EvictStop, 0},
		{"evict: stop configured", 64 * gib, sdk.EvictStop, sleepy("v", 3, 16*gib, gib), nil, sdk.EvictStop, 0},
		{"evict: sleep2 configured", 64 * gib, sdk.EvictSleep2, sleepy("v", 3, 16*gib, gib), nil, sdk.EvictSleep2, 0},
		{"an explicit stop", 64 * gib, sdk.EvictDefault, sleepy("v", 3, 16*gib, gib), []sdk.EvictMode{sdk.EvictStop}, sdk.EvictStop, 0},
		{"an explicit sleep2", 64 * gib, sdk.EvictDefault, sleepy("v", 3, 16*gib, gib), []sdk.EvictMode{sdk.EvictSleep2}, sdk.EvictSleep2, 0},
		{"sleep2 on a level-1 backend sleeps at 1", 64 * gib, sdk.EvictDefault, sleepy("v", 1, 16*gib, gib), []sdk.EvictMode{sdk.EvictSleep2}, sdk.EvictSleep1, 0},
		{"sleep on a backend that cannot: a stop", 64 * gib, sdk.EvictDefault, sleepy("v", 0, 16*gib, gib), []sdk.EvictMode{sdk.EvictSleep1}, sdk.EvictStop, 0},
		{"an explicit sleep host memory cannot hold: a stop, refused", 8 * gib, sdk.EvictDefault, sleepy("v", 3, 16*gib, gib), []sdk.EvictMode{sdk.EvictSleep1}, sdk.EvictStop, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := policytest.NewHost(t, tc.victim, sdk.ModelInfo{Name: "t", EstimatedVRAM: 8 * gib})
			rec := &startRecorder{}
			h.Swapper, h.Scheduler, h.HostMemory = rec, nopScheduler{}, tc.hostMemory
			h.Evict = map[string]sdk.EvictMode{"v": tc.config}
			if err := h.StartSwap(sdk.SwapRequest{Model: "t", Evict: []string{"v"}, Modes: tc.mode}); err != nil {
				t.Fatal(err)
			}
			if len(rec.starts) != 1 || !slices.Equal(rec.starts[0].Modes, []sdk.EvictMode{tc.want}) {
				t.Fatalf("OnSwapStart got %+v; want modes [%s]", rec.starts, tc.want)
			}
			if h.SleepsRefused != tc.refused {
				t.Errorf("SleepsRefused = %d, want %d", h.SleepsRefused, tc.refused)
			}
			h.CompleteSwap("t", "")
			v := h.Models["v"]
			wantLeased := map[sdk.EvictMode]uint64{sdk.EvictSleep1: tc.victim.HostBytes1, sdk.EvictSleep2: tc.victim.HostBytes2}[tc.want]
			if v.State != sdk.StateStopped || v.SleepLevel != tc.want.SleepLevel() || v.HostLeased != wantLeased {
				t.Errorf("the victim is %s at sleep level %d leasing %d; want stopped at %d leasing %d", v.State, v.SleepLevel, v.HostLeased, tc.want.SleepLevel(), wantLeased)
			}
			if got := h.Snapshot().Host; got.Total != tc.hostMemory || got.Leased != wantLeased {
				t.Errorf("Snapshot().Host = %+v", got)
			}
		})
	}
}

// TestHost_AsleepModels: an asleep victim is stopped at once (its host
// memory free for the same swap's sleeps), a sleep mode for it and modes
// longer than Evict are refused, an asleep target is woken, and asleep
// models are not running.
func TestHost_AsleepModels(t *testing.T) {
	sleeper := sdk.ModelInfo{Name: "s", EstimatedVRAM: 8 * gib, CanSleep: 1, HostBytes1: 16 * gib, SleepLevel: 1, HostLeased: 16 * gib}
	h := policytest.NewHost(t, sleeper, sleepy("r", 1, 16*gib, 0), sdk.ModelInfo{Name: "t", EstimatedVRAM: 8 * gib})
	rec := &startRecorder{}
	h.Swapper, h.Scheduler, h.HostMemory = rec, nopScheduler{}, 20*gib
	if got := h.Running("t"); !slices.Equal(got, []string{"r"}) {
		t.Fatalf("Running = %v; an asleep model is not running", got)
	}
	for _, bad := range []sdk.SwapRequest{
		{Model: "t", Evict: []string{"s"}, Modes: []sdk.EvictMode{sdk.EvictSleep1}},
		{Model: "t", Evict: []string{"r"}, Modes: []sdk.EvictMode{sdk.EvictStop, sdk.EvictStop}},
		{Model: "t", Evict: []string{"r"}, Modes: []sdk.EvictMode{sdk.EvictSleep2 + 1}},
	} {
		if err := h.StartSwap(bad); !errors.Is(err, sdk.ErrBadArgument) {
			t.Errorf("StartSwap(%+v) = %v, want ErrBadArgument", bad, err)
		}
	}
	// Stopping the sleeper frees 16 GiB, so r can sleep at level 1 in the
	// same swap (only 4 GiB were free before).
	if err := h.StartSwap(sdk.SwapRequest{Model: "t", Evict: []string{"r", "s"}, Modes: []sdk.EvictMode{sdk.EvictSleep1}}); err != nil {
		t.Fatal(err)
	}
	if got := rec.starts[0].Modes; !slices.Equal(got, []sdk.EvictMode{sdk.EvictSleep1, sdk.EvictStop}) {
		t.Errorf("modes %v, want [sleep stop]", got)
	}
	if s := h.Models["s"]; s.Asleep() || s.HostLeased != 0 {
		t.Errorf("the evicted sleeper is %+v, want stopped", s)
	}
	h.CompleteSwap("t", "")
	if r := h.Models["r"]; !r.Asleep() || r.HostLeased != 16*gib || h.SleepsRefused != 0 {
		t.Errorf("r is %+v, %d refused; want asleep at level 1", r, h.SleepsRefused)
	}
	// Waking r: being woken it is starting at its level; then awake.
	if err := h.StartSwap(sdk.SwapRequest{Model: "r"}); err != nil {
		t.Fatal(err)
	}
	if r := h.Models["r"]; r.State != sdk.StateStarting || r.SleepLevel != 1 {
		t.Errorf("r being woken is %s at level %d", r.State, r.SleepLevel)
	}
	h.CompleteSwap("r", "")
	if r := h.Models["r"]; r.State != sdk.StateReady || r.SleepLevel != 0 || r.HostLeased != 0 || h.Snapshot().Host.Leased != 0 {
		t.Errorf("r woken is %+v, host %+v", r, h.Snapshot().Host)
	}
}

type nopScheduler struct{}

func (nopScheduler) OnRequest(sdk.RequestEvent) error     { return nil }
func (nopScheduler) OnSwapDone(sdk.SwapDoneEvent) error   { return nil }
func (nopScheduler) OnServeDone(sdk.ServeDoneEvent) error { return nil }
func (nopScheduler) OnCancel(sdk.CancelEvent) error       { return nil }
func (nopScheduler) OnUnload(sdk.UnloadEvent) error       { return nil }
func (nopScheduler) OnTick(sdk.TickEvent) error           { return nil }
func (nopScheduler) OnShutdown(sdk.ShutdownEvent) error   { return nil }

// A scheduler scenario states residency and host memory, and expects the
// modes the swapper planned in the swap the scheduler starts.
const residencyScenario = `name: sleep the old model, wake the sleeper
kind: scheduler
swapper: {rule: plans, plans: {a: {evict: [b], modes: [sleep]}, s: {evict: [a], modes: [stop]}}}
host_memory: 64GiB
models:
  - {name: a}
  - {name: b, state: ready, can_sleep: [1, 2], host_bytes: 16GiB, host_bytes2: 1GiB, load_time: 40s, wake_time: 600ms}
  - {name: s, asleep: 2, can_sleep: [2], host_bytes2: 2GiB, evict: stop}
steps:
  - request: {id: 1, model: a}
    expect:
      - start_swap: {model: a, evict: [b], modes: [sleep]}
      - queue: {id: 1, pos: 0}
  - swap_done: a
    expect: [grant: 1]
  - serve_done: 1
  - request: {id: 2, model: s}
    expect:
      - start_swap: {model: s, evict: [a], modes: [stop]}
      - queue: {id: 2, pos: 0}
`

func TestScenario_Residency(t *testing.T) {
	sc := parse(t, residencyScenario)
	var trace strings.Builder
	if err := sc.Run(policytest.SchedulerPolicy(newSimple), &trace); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(trace.String(), "start_swap: {model: a, evict: [b], modes: [sleep]}") {
		t.Errorf("the trace does not write the modes:\n%s", trace.String())
	}
	for _, tc := range []struct{ from, to, want string }{
		{"modes: [sleep]}\n      - queue", "}\n      - queue", "want: start_swap: {model: a, evict: [b]}\n  got:  start_swap: {model: a, evict: [b], modes: [sleep]}"},
		{"evict: [b], modes: [sleep]}\n", "evict: [b], modes: [sleep2]}\n", "got:  start_swap: {model: a, evict: [b], modes: [sleep]}"},
	} {
		text := strings.Replace(residencyScenario, tc.from, tc.to, 1)
		if text == residencyScenario {
			t.Fatalf("%q is not in the scenario", tc.from)
		}
		if err := parse(t, text).Run(policytest.SchedulerPolicy(newSimple), nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("with %q: error %v; want one containing %q", tc.to, err, tc.want)
		}
	}
}

// A swapper scenario: a plan with modes, and a swap_start that passes
// them; trailing defaults are the same as none.
func TestScenario_SwapperModes(t *testing.T) {
	const text = `kind: swapper
host_memory: 64GiB
models:
  - {name: a, state: ready, last_use: -5s}
  - {name: b, state: ready, last_use: -9s}
  - {name: t}
steps:
  - plan: {target: t}
    expect: [plan: {evict: [b], modes: [sleep, default]}]
  - swap_start: {target: t, evict: [b], modes: [sleep]}
    logs: ["swap to t evicts [b]"]
`
	sleeping := func(h sdk.Host, _ []byte) (sdk.Swapper, error) { return sleepOldest{oldest{h}}, nil }
	if err := parse(t, text).Run(policytest.SwapperPolicy(sleeping), nil); err != nil {
		t.Fatal(err)
	}
}

// sleepOldest is oldest, putting its victim to sleep.
type sleepOldest struct{ oldest }

func (s sleepOldest) Plan(q sdk.PlanRequest) (sdk.Plan, error) {
	p, err := s.oldest.Plan(q)
	p.Devices = nil
	p.Modes = []sdk.EvictMode{sdk.EvictSleep1}
	return p, err
}

// TestScenario_ResidencyErrors: residency fields that no host could
// report are parse errors naming the line.
func TestScenario_ResidencyErrors(t *testing.T) {
	for _, tc := range []struct{ model, want string }{
		{"{name: a, asleep: 3}", `x.yaml:3: model "a": asleep is a sleep level, 1 or 2`},
		{"{name: a, state: ready, asleep: 1}", `x.yaml:3: model "a": asleep: 1 needs state stopped (asleep) or starting (being woken), not ready`},
		{"{name: a, can_sleep: [3]}", `x.yaml:3: model "a": can_sleep lists sleep levels, 1 and 2; got 3`},
		{"{name: a, evict: nap}", `unknown evict setting "nap" (known: auto, stop, sleep, sleep2)`},
	} {
		_, err := policytest.ParseScenario("x.yaml", []byte("kind: scheduler\nmodels:\n  - "+tc.model+"\nsteps: [tick: ]\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v; want %q", tc.model, err, tc.want)
		}
	}
	_, err := policytest.ParseScenario("x.yaml", []byte("kind: scheduler\nmodels: [{name: a}]\nsteps:\n  - request: {id: 1, model: a}\n    expect: [start_swap: {model: a, modes: [nap]}]\n"))
	if err == nil || !strings.Contains(err.Error(), `unknown eviction mode "nap" (known: default, stop, sleep, sleep2)`) {
		t.Errorf("an unknown mode: %v", err)
	}
}
