package router

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/gpu"
	"github.com/loadout-dev/loadout/host/policy"
	"github.com/loadout-dev/loadout/internal/wasmbuild"
	"github.com/loadout-dev/loadout/sdk"
)

// noJobPlans hides a swapper's sdk.JobPlanner: the router then chooses for
// jobs by its own rule.
type noJobPlans struct{ SwapperPolicy }

// jobPlans gives a swapper a PlanJob of the test's.
type jobPlans struct {
	SwapperPolicy
	plan func(sdk.JobPlanRequest) (sdk.Plan, error)
}

func (s jobPlans) PlanJob(q sdk.JobPlanRequest) (sdk.Plan, error) { return s.plan(q) }

const gib = 1 << 30

// sim3 is three 8 GiB simulated GPUs.
func sim3() *gpu.Ledger {
	return gpu.NewLedger(gpu.NewDeclared([]gpu.DeclaredDevice{
		{Name: "sim0", Memory: 8 * gib}, {Name: "sim1", Memory: 8 * gib}, {Name: "sim2", Memory: 8 * gib}}), 0)
}

// onGPU returns the one GPU model m holds a lease on.
func onGPU(t *testing.T, l *gpu.Ledger, m string) int {
	t.Helper()
	lease, ok := l.Lease(m)
	if d := gpu.SortedDevices(lease); ok && len(d) == 1 {
		return d[0]
	}
	t.Fatalf("%s holds %v, want one GPU", m, lease)
	return -1
}

// Which idle model a job evicts is the swapper's decision: prioritylru
// evicts the least recently used one, where the host's own rule would
// take the lowest GPU; the job gets the GPU in the same step as the model
// loses it, and the model is stopped before EvictForJob returns.
func TestRouter_JobEvictsTheSwappersChoice(t *testing.T) {
	ledger, clock := sim3(), newManualClock()
	h := newHarness(t, harnessOpts{
		ledger: ledger, clock: clock, tick: time.Hour, newSwap: prioritylru(t),
		models: map[string]ModelConfig{"a": {VRAM: 6 * gib}, "b": {VRAM: 6 * gib}, "c": {VRAM: 6 * gib, Pinned: true}},
	})
	for _, m := range []string{"b", "a", "c", "b"} { // a is the least recently used
		clock.advance(time.Minute)
		h.acquire(m).wait(t).Release()
	}
	da, db := onGPU(t, ledger, "a"), onGPU(t, ledger, "b")
	if da < db {
		t.Fatalf("a on GPU %d, b on %d: the test wants the host's lowest-index rule to pick b", da, db)
	}
	planned, err := h.r.PlanJob(1, 0)
	if err != nil || !slices.Equal(planned, []int{da}) {
		t.Fatalf("PlanJob = %v, %v; want a's GPU %d", planned, err, da)
	}
	h.expectState("a", "ready") // PlanJob changes nothing
	devices, stopped, err := h.r.EvictForJob(context.Background(), "job-1", 1, 0)
	if err != nil || !slices.Equal(devices, []int{da}) || !slices.Equal(stopped, []string{"a"}) {
		t.Fatalf("EvictForJob = %v, %v, %v; want GPU %d, a stopped", devices, stopped, err, da)
	}
	h.expectState("a", "stopped")
	h.expectState("b", "ready")
	if lease, _ := ledger.Lease("job-1"); !slices.Equal(gpu.SortedDevices(lease), []int{da}) {
		t.Fatalf("job lease %v, want GPU %d", lease, da)
	}
}

// A job never evicts a model with requests in flight (rule 6), nor a
// pinned one, whoever plans: prioritylru, or the host's rule for a swapper
// that does not plan for jobs. Nothing is stopped or leased by a refusal;
// once the busy model is idle, it goes.
func TestRouter_Rule6_AJobNeverEvictsABusyOrPinnedModel(t *testing.T) {
	for _, planner := range []string{"prioritylru", "host"} {
		t.Run(planner, func(t *testing.T) {
			ledger := gpu.NewLedger(gpu.NewDeclared([]gpu.DeclaredDevice{{Name: "sim0", Memory: 8 * gib}, {Name: "sim1", Memory: 8 * gib}}), 0)
			newSwap := prioritylru(t)
			if planner == "host" {
				prio := newSwap
				newSwap = func(host sdk.Host) (SwapperPolicy, error) {
					sw, err := prio(host)
					return noJobPlans{sw}, err
				}
			}
			h := newHarness(t, harnessOpts{
				ledger: ledger, tick: time.Hour, newSwap: newSwap,
				models: map[string]ModelConfig{"a": {VRAM: 6 * gib}, "c": {VRAM: 6 * gib, Pinned: true}},
			})
			busy := h.acquire("a").wait(t)
			h.acquire("c").wait(t).Release()
			if _, err := h.r.PlanJob(1, 0); err == nil {
				t.Fatal("PlanJob found a GPU with a busy and a pinned model on them")
			}
			_, _, err := h.r.EvictForJob(context.Background(), "job-1", 1, 0)
			var re *Error
			if !errors.As(err, &re) || re.Code != sdk.CodeUnavailable {
				t.Fatalf("EvictForJob: %v, want a refusal", err)
			}
			h.expectState("a", "ready")
			h.expectState("c", "ready")
			if _, held := ledger.Lease("job-1"); held {
				t.Fatal("a refused job holds a lease")
			}
			busy.Release()
			devices, stopped, err := h.r.EvictForJob(context.Background(), "job-1", 1, 0)
			if err != nil || !slices.Equal(stopped, []string{"a"}) || len(devices) != 1 {
				t.Fatalf("EvictForJob once a is idle = %v, %v, %v; want a evicted", devices, stopped, err)
			}
			if c := h.r.Counters()["swapper"]; c.RefusedEffects != 0 {
				t.Fatalf("a swapper's refusal counted as a refused effect: %+v", c)
			}
		})
	}
}

// The router checks a swapper's job plan before it counts: a plan that
// evicts a busy or pinned model, leaves a model on a job's GPU, takes a
// GPU another job holds, or the wrong number of GPUs, is refused and
// counted, and nothing is stopped or leased. A swapper that answers
// sdk.ErrJobPlanUnsupported gets the host's rule.
func TestRouter_JobPlanChecked(t *testing.T) {
	ledger := sim3()
	var plan func(sdk.JobPlanRequest) (sdk.Plan, error)
	h := newHarness(t, harnessOpts{
		ledger: ledger, tick: time.Hour,
		groups: `{"groups": {"all": {"swap": false, "exclusive": false, "members": ["a", "b", "c", "e"]}}}`,
		wrapSwap: func(sw *policy.Swapper) SwapperPolicy {
			return jobPlans{sw, func(q sdk.JobPlanRequest) (sdk.Plan, error) { return plan(q) }}
		},
		models: map[string]ModelConfig{"a": {VRAM: 6 * gib}, "b": {VRAM: 6 * gib}, "c": {VRAM: 6 * gib, Pinned: true}},
	})
	if _, err := ledger.AcquireDevices("job-0", []int{2}); err != nil {
		t.Fatal(err)
	}
	busy := h.acquire("a").wait(t)
	h.acquire("b").wait(t).Release()
	da, db := onGPU(t, ledger, "a"), onGPU(t, ledger, "b")
	var asked sdk.JobPlanRequest
	for _, tc := range []struct {
		name string
		plan sdk.Plan
		why  string
	}{
		{"a busy model", sdk.Plan{Devices: []int32{int32(da)}, Evict: []string{"a"}}, `evicts "a", which is not a loaded, idle`},
		{"a model left on the GPU", sdk.Plan{Devices: []int32{int32(db)}}, `stays held by "b"`},
		{"a model on no GPU of the job", sdk.Plan{Devices: []int32{int32(db)}, Evict: []string{"b", "c"}}, `evicts "c"`},
		{"another job's GPU", sdk.Plan{Devices: []int32{2}}, "not a candidate"},
		{"too many GPUs", sdk.Plan{Devices: []int32{int32(db), int32(da)}, Evict: []string{"a", "b"}}, "2 devices for a job that needs 1"},
	} {
		plan = func(q sdk.JobPlanRequest) (sdk.Plan, error) { asked = q; return tc.plan, nil }
		before := h.r.Counters()["swapper"].RefusedEffects
		_, _, err := h.r.EvictForJob(context.Background(), "job-1", 1, 0)
		if err == nil || !strings.Contains(err.Error(), tc.why) {
			t.Fatalf("%s: EvictForJob: %v, want a refusal saying %q", tc.name, err, tc.why)
		}
		if h.r.Counters()["swapper"].RefusedEffects != before+1 {
			t.Fatalf("%s: the refusal was not counted against the swapper", tc.name)
		}
		h.expectState("a", "ready")
		h.expectState("b", "ready")
		if _, held := ledger.Lease("job-1"); held {
			t.Fatalf("%s: a refused plan left the job a lease", tc.name)
		}
	}
	if asked.Job != "job-1" || asked.GPUs != 1 || !slices.Equal(asked.Candidates, []int32{0, 1}) || !slices.Contains(asked.Running, "b") {
		t.Fatalf("the swapper was asked %+v; want job-1, 1 GPU, candidates [0 1] (job-0 holds 2), the running models", asked)
	}

	plan = func(sdk.JobPlanRequest) (sdk.Plan, error) {
		return sdk.Plan{}, fmt.Errorf("not mine: %w", sdk.ErrJobPlanUnsupported)
	}
	devices, stopped, err := h.r.EvictForJob(context.Background(), "job-1", 1, 0)
	if err != nil || !slices.Equal(devices, []int{db}) || !slices.Equal(stopped, []string{"b"}) {
		t.Fatalf("host rule: EvictForJob = %v, %v, %v; want b's GPU %d", devices, stopped, err, db)
	}
	busy.Release()
}

// prioritylruModule builds and compiles the built-in prioritylru swapper
// once per test binary, in the runtime the other policies use.
var (
	prioOnce sync.Once
	prioMod  *policy.Module
	prioErr  error
)

func prioritylru(t testing.TB) func(sdk.Host) (SwapperPolicy, error) {
	return prioritylruWith(t, "{}")
}

// prioritylruWith is prioritylru with its settings JSON.
func prioritylruWith(t testing.TB, settings string) func(sdk.Host) (SwapperPolicy, error) {
	t.Helper()
	rt, _, _ := policies(t)
	prioOnce.Do(func() {
		const pkg = "github.com/loadout-dev/loadout/policies/prioritylru"
		wasm, err := wasmbuild.Build(pkg)
		if err != nil {
			prioErr = err
			return
		}
		prioMod, prioErr = rt.Compile(context.Background(), pkg, wasm)
	})
	if prioErr != nil {
		t.Fatalf("prioritylru: %v", prioErr)
	}
	return func(h sdk.Host) (SwapperPolicy, error) {
		return rt.NewSwapper(context.Background(), prioMod, []byte(settings), h)
	}
}

// A model request that finds its GPU held by a job waits in the queue (the
// job will end) instead of failing, whichever swapper plans: group, which
// leaves placement to the host (the host's lease says "held by jobs"), or
// prioritylru, which places and whose plan fails while the job holds the
// memory (the host asks it what it would plan without the jobs). It loads
// as soon as the job's lease is released: the periodic tick is an hour
// away, so the release itself must wake the scheduler.
func TestRouter_RequestWaitsForAJobsGPU(t *testing.T) {
	for _, swapper := range []string{"group", "prioritylru"} {
		t.Run(swapper, func(t *testing.T) {
			ledger := gpu.NewLedger(gpu.NewDeclared([]gpu.DeclaredDevice{{Name: "sim0", Memory: 8 * gib}}), 0)
			o := harnessOpts{ledger: ledger, tick: time.Hour, models: map[string]ModelConfig{"a": {VRAM: 6 * gib}}}
			if swapper == "prioritylru" {
				o.newSwap = prioritylru(t)
			}
			h := newHarness(t, o)
			if _, err := ledger.AcquireDevices("job-1", []int{0}); err != nil {
				t.Fatal(err)
			}
			c := h.acquire("a")
			if p := c.held(t, false); p.Position < 1 {
				t.Fatalf("held at %+v, want queued", p)
			}
			h.world.expectNone(t)
			for kind, c := range h.r.Counters() {
				if c.RefusedEffects != 0 || c.Failures != 0 {
					t.Fatalf("a job holding the GPU counted against the %s policy: %+v", kind, c)
				}
			}
			ledger.Release("job-1")
			h.world.expect(t, "starting a", "ready a")
			c.wait(t).Release()
		})
	}
}

// With prioritylru, a request while a job holds one GPU goes to another
// where VRAM allows; one that could never fit, jobs or not, fails at once
// rather than waiting for the job.
func TestRouter_JobsGPU_PlacedElsewhereOrRefused(t *testing.T) {
	ledger := gpu.NewLedger(gpu.NewDeclared([]gpu.DeclaredDevice{{Name: "sim0", Memory: 8 * gib}, {Name: "sim1", Memory: 8 * gib}}), 0)
	h := newHarness(t, harnessOpts{
		ledger: ledger, tick: time.Hour, newSwap: prioritylru(t),
		groups: `{}`,
		models: map[string]ModelConfig{"a": {VRAM: 6 * gib}, "huge": {VRAM: 20 * gib}},
	})
	if _, err := ledger.AcquireDevices("job-1", []int{0}); err != nil {
		t.Fatal(err)
	}
	h.acquire("a").wait(t).Release()
	if d := h.status("a").Devices; !slices.Equal(d, []int{1}) {
		t.Fatalf("a placed on %v, want GPU 1 (the job holds 0)", d)
	}
	e := h.acquire("huge").waitErr(t)
	if e.Code != sdk.CodeUnavailable || strings.Contains(e.Message, "jobs hold") {
		t.Fatalf("huge: %+v, want the swapper's refusal, not a wait for the job", e)
	}
}

// A job whose wait for its evicted models ends early (its context done)
// keeps its lease until they have exited: until then no model is placed
// on their GPU beside a server still running there. Then the lease ends
// by itself.
func TestRouter_JobLeaseOutlivesEvictedModelsStopping(t *testing.T) {
	ledger := gpu.NewLedger(gpu.NewDeclared([]gpu.DeclaredDevice{{Name: "sim0", Memory: 8 * gib}}), 0)
	h := newHarness(t, harnessOpts{
		ledger: ledger, tick: time.Hour, newSwap: prioritylru(t),
		models: map[string]ModelConfig{"a": {VRAM: 6 * gib}},
	})
	h.acquire("a").wait(t).Release()
	release := h.procs["a"].holdStop()
	defer release()
	released := make(chan struct{}, 8)
	ledger.OnRelease(func() { released <- struct{}{} })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := h.r.EvictForJob(ctx, "job-1", 1, 0)
		done <- err
	}()
	h.world.expect(t, "starting a", "ready a", "stopping a")
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("EvictForJob = %v, want context.Canceled", err)
	}
	if _, held := ledger.Lease("job-1"); !held {
		t.Fatal("the job's lease ended while the model it evicted was still stopping")
	}
	if free, _ := ledger.UnheldDevices(); len(free) != 0 {
		t.Fatalf("GPUs %v unheld while a's server still runs", free)
	}
	release()
	<-released
	h.expectState("a", "stopped")
	if _, held := ledger.Lease("job-1"); held {
		t.Fatal("the job's lease outlived the stop of the model it evicted")
	}
}

// A model whose server crashed is started again on other devices when
// its own were taken in the meantime (here by a job's lease): the
// swapper places the restart like any load, on what is free now, and the
// router never reuses the old placement blindly (issue 15, rescheduling).
func TestRouter_CrashedModelRestartsOnOtherDevicesWhenItsOwnAreTaken(t *testing.T) {
	ledger := gpu.NewLedger(gpu.NewDeclared([]gpu.DeclaredDevice{{Name: "sim0", Memory: 8 * gib}, {Name: "sim1", Memory: 8 * gib}}), 0)
	h := newHarness(t, harnessOpts{
		ledger: ledger, tick: time.Hour, newSwap: prioritylru(t),
		groups: `{}`,
		models: map[string]ModelConfig{"a": {VRAM: 6 * gib}},
	})
	h.acquire("a").wait(t).Release()
	h.world.expect(t, "starting a", "ready a")
	first := h.status("a").Devices
	if len(first) != 1 {
		t.Fatalf("a placed on %v, want one GPU", first)
	}
	h.world.crash(t, "a")
	h.awaitState("a", "failed")
	if _, err := ledger.AcquireDevices("job-1", first); err != nil {
		t.Fatalf("the crashed model's GPU %v is still leased: %v", first, err)
	}
	h.acquire("a").wait(t).Release()
	h.world.expect(t, "starting a", "ready a")
	again := h.status("a").Devices
	if len(again) != 1 || again[0] == first[0] {
		t.Fatalf("a restarted on %v; GPU %v is the job's now", again, first)
	}
}

// A GPU job takes its devices whole: an asleep model whose server was
// started on one of them is stopped too (its process keeps a CUDA context
// there), and the job waits for it as for the models it evicts.
func TestRouter_JobStopsTheSleepersOnItsGPUs(t *testing.T) {
	ledger := gpu.NewLedger(gpu.NewDeclared([]gpu.DeclaredDevice{{Name: "sim0", Memory: 8 * gib}, {Name: "sim1", Memory: 8 * gib}}), 0)
	mc := ModelConfig{VRAM: 6 * gib, SleepLevels: 3}
	h := newHarness(t, harnessOpts{ledger: ledger, tick: time.Hour, hostMemory: 32 * gib, groups: `{}`, newSwap: prioritylru(t),
		models: map[string]ModelConfig{"a": mc, "b": mc, "c": mc}})
	for _, name := range []string{"a", "b", "c"} {
		h.procs[name].sleepLevels = 3
	}
	serveOnce(t, h, "a")
	serveOnce(t, h, "b")
	serveOnce(t, h, "c") // a, the least recently used, goes to sleep
	h.world.expect(t, "starting a", "ready a", "starting b", "ready b", "asleep a 1", "starting c", "ready c")
	devices, stopped, err := h.r.EvictForJob(context.Background(), "job-1", 2, 0)
	if err != nil || len(devices) != 2 || !slices.Equal(stopped, []string{"b", "c"}) {
		t.Fatalf("EvictForJob = %v, %v, %v; want both GPUs, b and c evicted", devices, stopped, err)
	}
	h.world.expectSet(t, "stopped a", "stopped b", "stopped c")
	if st := h.status("a"); st.State != "stopped" || st.HostBytes != 0 {
		t.Fatalf("a after the job took its GPU: %s holding %d host bytes; want stopped", st.State, st.HostBytes)
	}
}
