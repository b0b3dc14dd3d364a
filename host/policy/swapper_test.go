package policy

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/sdk"
)

func TestSwapper_Plan(t *testing.T) {
	r, _ := newTestRuntime(t, Options{})
	h := newFakeEffects()
	s := newSwapper(t, r, `{"max_running": 2}`, h)
	p, err := s.Plan(sdk.PlanRequest{Now: 1, Target: "d", Running: []string{"a", "b", "c"}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.Evict, []string{"a", "b"}) || p.Devices != nil {
		t.Errorf("plan %+v", p)
	}
	if err := s.OnSwapStart(sdk.SwapStartEvent{Now: 2, Target: "d", Running: []string{"a", "b", "c"}, Evict: p.Evict}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(h.logs, []string{"INFO: swap d evicting [a b]"}) {
		t.Errorf("logs %q", h.logs)
	}
}

// TestSwapper_PlanError: a plan error (status 1) is an ordinary error; the
// instance stays.
func TestSwapper_PlanError(t *testing.T) {
	r, _ := newTestRuntime(t, Options{})
	s := newSwapper(t, r, `{"fail_target": "huge"}`, newFakeEffects())
	_, err := s.Plan(sdk.PlanRequest{Target: "huge"})
	var ce *CrashError
	if err == nil || errors.As(err, &ce) || err.Error() != "policy swapper.wasm: plan: cannot place huge" {
		t.Fatalf("got %v", err)
	}
	if _, err := s.Plan(sdk.PlanRequest{Target: "small"}); err != nil {
		t.Fatal(err)
	}
	if st := s.Status(); st.Instantiations != 1 || st.Crashes != 0 {
		t.Errorf("status %+v", st)
	}
}

// TestSwapper_EffectsNotAllowed: a swapper may only log and read; every
// effect import answers ErrNotAllowed and reaches nothing.
func TestSwapper_EffectsNotAllowed(t *testing.T) {
	r, _ := newTestRuntime(t, Options{})
	h := newFakeEffects(model("m", sdk.StateReady))
	s := newSwapper(t, r, `{"probe": true}`, h)
	if err := s.OnSwapStart(sdk.SwapStartEvent{Target: "m"}); err != nil {
		t.Fatal(err)
	}
	want := "INFO: probe grant_serve=-4 grant_error=-4 start_swap=-4 stop_processes=-4 set_queue_position=-4 plan=-4"
	if !slices.Contains(h.logs, want) {
		t.Errorf("logs %q, want %q", h.logs, want)
	}
	if len(h.calls) != 0 {
		t.Errorf("a swapper's effects reached the host: %q", h.calls)
	}
}

// TestSwapper_LoopInNestedPlan: a swapper that loops inside a scheduler's
// plan is killed at its own deadline; the scheduler, whose clock is paused
// while it waits, survives and sees ErrSwapperFailed.
func TestSwapper_LoopInNestedPlan(t *testing.T) {
	timeout := 250 * time.Millisecond
	r, logs := newTestRuntime(t, Options{CallTimeout: timeout})
	fx := newFakeEffects(model("a", sdk.StateReady), model("x", sdk.StateStopped), model("y", sdk.StateStopped))
	fx.swapper = newSwapper(t, r, `{"loop_target": "x"}`, fx)
	s := newScheduler(t, r, "echo", "", fx)

	start := time.Now()
	if err := s.OnRequest(sdk.RequestEvent{ID: 1, Model: "x"}); err != nil {
		t.Fatal(err)
	}
	t.Logf("first request %s", time.Since(start))
	if elapsed := time.Since(start); elapsed < timeout {
		t.Errorf("the swapper's deadline fired after only %s", elapsed)
	}
	// Had the scheduler's clock run while it waited, it would have died
	// too: its deadline started before the swapper's.
	if err := s.OnRequest(sdk.RequestEvent{ID: 2, Model: "x"}); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, fx,
		"grant_error 1 4 cannot place x: swapper failed",
		"grant_error 2 4 cannot place x: swapper failed")
	if st := s.Status(); st.Crashes != 0 || st.Instantiations != 1 {
		t.Errorf("scheduler status %+v", st)
	}
	if st := fx.swapper.Status(); st.Crashes != 2 || st.Instantiations != 3 || !st.Healthy {
		t.Errorf("swapper status %+v", st)
	}
	if got := logs.find("swapper failed to plan", "policy=echo.wasm", "deadline of 250ms exceeded"); len(got) != 2 {
		t.Errorf("log lines %q", got)
	}
	// The swapper's fresh instance plans again.
	if err := s.OnRequest(sdk.RequestEvent{ID: 3, Model: "y"}); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, fx, "start_swap y evict=[] devices=[]", "set_queue_position 3 0")
}

// TestSwapper_PlanJob_Unsupported: a swapper that does not plan for GPU
// jobs answers a JobPlanRequest with an error wrapping
// sdk.ErrJobPlanUnsupported, not a crash, and goes on planning for models:
// a Go guest whose swapper is no sdk.JobPlanner (status 4), and a module
// built before JobPlanRequest existed, which cannot decode it (status 3).
// Neither is the policy's error: its last error stays as it was.
func TestSwapper_PlanJob_Unsupported(t *testing.T) {
	r, _ := newTestRuntime(t, Options{})
	q := sdk.JobPlanRequest{Now: 1, Job: "sft-1", GPUs: 1, Candidates: []int32{0}, Running: []string{"a"}}

	s := newSwapper(t, r, `{"max_running": 2}`, newFakeEffects())
	if _, err := s.PlanJob(q); !errors.Is(err, sdk.ErrJobPlanUnsupported) {
		t.Fatalf("Go guest without sdk.JobPlanner: %v, want ErrJobPlanUnsupported", err)
	}
	if _, err := s.Plan(sdk.PlanRequest{Now: 2, Target: "d", Running: []string{"a"}}); err != nil {
		t.Fatalf("Plan after an unsupported PlanJob: %v", err)
	}

	old := miniPolicy()
	old.kind = int32(sdk.KindSwapper)
	old.bodies["plan"] = statusBody(3) // "malformed: kind 17, want 9"
	m := compile(t, r, "old.wasm", old.bytes())
	olds, err := r.NewSwapper(context.Background(), m, nil, newFakeEffects())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { olds.Close(context.Background()) })
	if _, err := olds.PlanJob(q); !errors.Is(err, sdk.ErrJobPlanUnsupported) {
		t.Fatalf("module that cannot decode a JobPlanRequest: %v, want ErrJobPlanUnsupported", err)
	}
	for _, st := range []Status{s.Status(), olds.Status()} {
		if st.Crashes != 0 || st.Instantiations != 1 {
			t.Errorf("%s: status %+v, want no crash", st.Name, st)
		}
		if st.LastError != "" { // shown in /api/policies as the policy's error
			t.Errorf("%s: last error %q after a job plan it does not make, want none", st.Name, st.LastError)
		}
	}
}

// TestSwapper_ErrorsNameThePolicy: every error of a call into a policy
// names it through a PolicyName method, found with errors.As by a caller
// that does not import this package (the run loop's failure counters):
// an error status, a crash, a disabled policy and a closed one.
func TestSwapper_ErrorsNameThePolicy(t *testing.T) {
	r, _ := newTestRuntime(t, Options{MaxCrashes: 1})
	named := func(what, want string, err error) {
		t.Helper()
		var n interface{ PolicyName() string }
		if err == nil || !errors.As(err, &n) || n.PolicyName() != want {
			t.Errorf("%s: %v does not name its policy %s", what, err, want)
		}
	}
	s := newSwapper(t, r, `{"fail_target": "huge"}`, newFakeEffects())
	_, err := s.Plan(sdk.PlanRequest{Target: "huge"})
	named("error status", "swapper.wasm", err)
	s.Close(context.Background())
	_, err = s.Plan(sdk.PlanRequest{Target: "small"})
	named("closed", "swapper.wasm", err)

	evil := newScheduler(t, r, "evil", `{"misbehave": "panic"}`, newFakeEffects(model("good", sdk.StateReady)))
	for i := range 3 { // crashes, then disabled
		named("crash or disabled", "evil.wasm", evil.OnRequest(sdk.RequestEvent{ID: sdk.RequestID(i), Model: "good"}))
	}
	if err := evil.OnRequest(sdk.RequestEvent{ID: 9, Model: "good"}); !errors.Is(err, ErrUnhealthy) {
		t.Errorf("disabled: %v", err)
	}
}

// TestSwapper_MalformedPlanIsACrash: a plan answer that is not a Plan
// message (testdata/guests/badplan) is a crash, as a status outside the
// ABI is: the instance is discarded, and a module that answers so every
// time is disabled (ErrUnhealthy), so its fallback plans rather than every
// load failing.
func TestSwapper_MalformedPlanIsACrash(t *testing.T) {
	r, logs := newTestRuntime(t, Options{MaxCrashes: 2, CrashWindow: time.Hour})
	m := compile(t, r, "badplan.wasm", guest(t, "badplan"))
	s, err := r.NewSwapper(context.Background(), m, nil, newFakeEffects())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	_, err = s.Plan(sdk.PlanRequest{Target: "m"})
	var ce *CrashError
	if !errors.As(err, &ce) || ce.Event != "plan" || !strings.Contains(ce.Reason, "not the ABI's") {
		t.Fatalf("first plan: %v, want a crash in plan naming the malformed answer", err)
	}
	if st := s.Status(); st.Crashes != 1 || st.Instantiations != 2 {
		t.Errorf("status after one malformed plan: %+v, want 1 crash and a fresh instance", st)
	}
	if got := logs.find("policy crashed; instance discarded", "event=plan"); len(got) != 1 {
		t.Errorf("crash log lines %q, want 1", got)
	}
	for range 2 {
		s.Plan(sdk.PlanRequest{Target: "m"})
	}
	if _, err := s.Plan(sdk.PlanRequest{Target: "m"}); !errors.Is(err, ErrUnhealthy) {
		t.Fatalf("after 3 malformed plans: %v, want the swapper disabled (ErrUnhealthy)", err)
	}
}
