package policytest_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/policytest"
)

// recorder is a testing.TB that records Errorf and Fatalf instead of
// failing, so the Host's breach reports can be tested.
type recorder struct {
	testing.TB
	errs []string
}

type fatal struct{}

func (r *recorder) Helper()             {}
func (r *recorder) Logf(string, ...any) {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	panic(fatal{})
}

// run calls f, swallowing the panic of a recorded Fatalf.
func (r *recorder) run(f func()) {
	defer func() {
		if p := recover(); p != nil {
			if _, ok := p.(fatal); !ok {
				panic(p)
			}
		}
	}()
	f()
}

func (r *recorder) want(t *testing.T, substr string) {
	t.Helper()
	for _, e := range r.errs {
		if strings.Contains(e, substr) {
			return
		}
	}
	t.Errorf("no breach reported containing %q; got %q", substr, r.errs)
}

// sched is a Scheduler made of optional functions.
type sched struct {
	request  func(sdk.RequestEvent)
	swapDone func(sdk.SwapDoneEvent)
	shutdown func(sdk.ShutdownEvent)
	events   []string
}

func (s *sched) OnRequest(ev sdk.RequestEvent) error {
	s.events = append(s.events, fmt.Sprintf("request %d %s prio %d", ev.ID, ev.Model, ev.Priority))
	if s.request != nil {
		s.request(ev)
	}
	return nil
}
func (s *sched) OnSwapDone(ev sdk.SwapDoneEvent) error {
	s.events = append(s.events, fmt.Sprintf("swap done %s %q", ev.Model, ev.Err))
	if s.swapDone != nil {
		s.swapDone(ev)
	}
	return nil
}
func (s *sched) OnServeDone(ev sdk.ServeDoneEvent) error {
	s.events = append(s.events, fmt.Sprintf("serve done %d %s", ev.ID, ev.Model))
	return nil
}
func (s *sched) OnCancel(ev sdk.CancelEvent) error {
	s.events = append(s.events, fmt.Sprintf("cancel %d %s", ev.ID, ev.Model))
	return nil
}
func (s *sched) OnUnload(ev sdk.UnloadEvent) error {
	s.events = append(s.events, fmt.Sprintf("unload %v %d", ev.Models, ev.Reason))
	return nil
}
func (s *sched) OnTick(ev sdk.TickEvent) error {
	s.events = append(s.events, fmt.Sprintf("tick %v", ev.Changed))
	return nil
}
func (s *sched) OnShutdown(ev sdk.ShutdownEvent) error {
	s.events = append(s.events, "shutdown "+ev.Reason)
	if s.shutdown != nil {
		s.shutdown(ev)
	}
	return nil
}

func TestHost_RunningSet(t *testing.T) {
	h := policytest.NewHost(t,
		sdk.ModelInfo{Name: "c", State: sdk.StateReady},
		sdk.ModelInfo{Name: "a", State: sdk.StateStopping},
		sdk.ModelInfo{Name: "b"},
		sdk.ModelInfo{Name: "d", State: sdk.StateFailed},
		sdk.ModelInfo{Name: "e"})
	var got []sdk.PlanRequest
	var starts []sdk.SwapStartEvent
	h.Swapper = swapper{
		plan:  func(q sdk.PlanRequest) { got = append(got, q) },
		start: func(ev sdk.SwapStartEvent) { starts = append(starts, ev) },
	}
	if _, err := h.Plan("c"); err != nil {
		t.Fatal(err)
	}
	if err := h.StartSwap(sdk.SwapRequest{Model: "b"}); err != nil {
		t.Fatal(err)
	}
	// b is starting: it is running twice over (state and active swap), once in the set.
	if _, err := h.Plan("e"); err != nil {
		t.Fatal(err)
	}
	if want := []string{"a"}; !slices.Equal(got[0].Running, want) {
		t.Errorf("Plan(c) running %q, want %q (sorted, no target, no stopped or failed)", got[0].Running, want)
	}
	if want := []string{"a", "b", "c"}; !slices.Equal(got[1].Running, want) {
		t.Errorf("Plan(e) running %q, want %q", got[1].Running, want)
	}
	if len(starts) != 1 || starts[0].Target != "b" || !slices.Equal(starts[0].Running, []string{"a", "c"}) {
		t.Errorf("OnSwapStart got %+v, want one for b with the running set before it", starts)
	}
	if _, err := h.Plan("nope"); !errors.Is(err, sdk.ErrUnknownModel) {
		t.Errorf("Plan(nope) = %v, want ErrUnknownModel", err)
	}
	if got := h.RunningModels(); len(got) != 3 || got[0].Name != "a" || got[2].Name != "c" {
		t.Errorf("RunningModels() = %+v", got)
	}
}

type swapper struct {
	plan  func(sdk.PlanRequest)
	start func(sdk.SwapStartEvent)
}

func (s swapper) Plan(q sdk.PlanRequest) (sdk.Plan, error) { s.plan(q); return sdk.Plan{}, nil }
func (s swapper) OnSwapStart(ev sdk.SwapStartEvent) error  { s.start(ev); return nil }

func TestHost_StartSwap(t *testing.T) {
	h := policytest.NewHost(t,
		sdk.ModelInfo{Name: "busy", State: sdk.StateReady, InFlight: 1},
		sdk.ModelInfo{Name: "idle", State: sdk.StateReady},
		sdk.ModelInfo{Name: "b"}, sdk.ModelInfo{Name: "c"})
	s := &sched{}
	h.Scheduler = s
	for _, tc := range []struct {
		req  sdk.SwapRequest
		want error
	}{
		{sdk.SwapRequest{Model: "nope"}, sdk.ErrUnknownModel},
		{sdk.SwapRequest{Model: "b", Evict: []string{"busy"}}, sdk.ErrModelBusy},
		{sdk.SwapRequest{Model: "b", Evict: []string{"idle"}}, nil},
		{sdk.SwapRequest{Model: "b"}, sdk.ErrSwapActive},
	} {
		if err := h.StartSwap(tc.req); !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
			t.Errorf("StartSwap(%+v) = %v, want %v", tc.req, err, tc.want)
		}
	}
	if h.Models["b"].State != sdk.StateStarting || h.Models["idle"].State != sdk.StateStopping {
		t.Errorf("after the swap: b %s, idle %s; want starting, stopping", h.Models["b"].State, h.Models["idle"].State)
	}
	if got := h.ActiveSwaps(); !slices.Equal(got, []string{"b"}) {
		t.Errorf("ActiveSwaps() = %v", got)
	}
	h.CompleteSwap("b", "")
	if h.Models["b"].State != sdk.StateReady || h.Models["idle"].State != sdk.StateStopped || len(h.ActiveSwaps()) != 0 {
		t.Errorf("after CompleteSwap: b %s, idle %s", h.Models["b"].State, h.Models["idle"].State)
	}
	if err := h.StartSwap(sdk.SwapRequest{Model: "c"}); err != nil {
		t.Fatal(err)
	}
	h.CompleteSwap("c", "exit status 1")
	if h.Models["c"].State != sdk.StateFailed {
		t.Errorf("c is %s after a failed swap, want failed", h.Models["c"].State)
	}
	want := []string{`swap done b ""`, `swap done c "exit status 1"`}
	if !slices.Equal(s.events, want) {
		t.Errorf("events %q, want %q", s.events, want)
	}
	if got := len(h.SwapsStarted()); got != 2 {
		t.Errorf("%d swaps started, want 2", got)
	}
}

func TestHost_Grants(t *testing.T) {
	h := policytest.NewHost(t, sdk.ModelInfo{Name: "a", State: sdk.StateReady, Priority: 3})
	s := &sched{request: func(ev sdk.RequestEvent) {
		if ev.ID == 2 {
			h.SetQueuePosition(ev.ID, 1)
			return
		}
		h.GrantServe(ev.ID, ev.Model)
	}}
	h.Scheduler = s
	h.Request(1, "a")
	h.Request(2, "a")
	if !h.Granted(1) || h.Models["a"].InFlight != 1 {
		t.Errorf("request 1: %s, a in flight %d", h.Outcome(1), h.Models["a"].InFlight)
	}
	if pos, ok := h.QueuePosition(2); !ok || pos != 1 {
		t.Errorf("request 2: %s", h.Outcome(2))
	}
	if s.events[0] != "request 1 a prio 3" {
		t.Errorf("event %q: want the model's priority filled in", s.events[0])
	}
	h.Leave(2)
	if h.GrantServe(2, "a") || h.Models["a"].InFlight != 1 {
		t.Errorf("GrantServe to a caller that left: %s, a in flight %d", h.Outcome(2), h.Models["a"].InFlight)
	}
	h.Advance(5e9)
	h.ServeDone(1)
	if h.Models["a"].InFlight != 0 || h.Models["a"].LastUse != h.Now {
		t.Errorf("after ServeDone: %+v", *h.Models["a"])
	}
	if got := h.Serving(); len(got) != 0 {
		t.Errorf("Serving() = %v", got)
	}
	want := policytest.Calls{
		{Op: policytest.OpGrantServe, ID: 1, Model: "a", OK: true},
		{Op: policytest.OpSetQueuePosition, ID: 2, Pos: 1},
		{Op: policytest.OpGrantServe, ID: 2, Model: "a"},
	}
	if got := h.Calls.String(); got != want.String() {
		t.Errorf("calls:\n%s\nwant:\n%s", got, want)
	}
}

func TestHost_Breaches(t *testing.T) {
	cases := []struct {
		name   string
		models []sdk.ModelInfo
		run    func(h *policytest.Host, s *sched)
		want   string
	}{
		{"a request left without an outcome", []sdk.ModelInfo{{Name: "a"}},
			func(h *policytest.Host, s *sched) { h.Request(1, "a") },
			"returned without granting, failing or holding"},
		{"granting a model that is not ready", []sdk.ModelInfo{{Name: "a"}},
			func(h *policytest.Host, s *sched) {
				s.request = func(ev sdk.RequestEvent) { h.GrantServe(ev.ID, "a") }
				h.Request(1, "a")
			}, "not ready"},
		{"granting twice", []sdk.ModelInfo{{Name: "a", State: sdk.StateReady}},
			func(h *policytest.Host, s *sched) {
				s.request = func(ev sdk.RequestEvent) { h.GrantServe(ev.ID, "a"); h.GrantError(ev.ID, 0, "x") }
				h.Request(1, "a")
			}, "already ended (granted a)"},
		{"acting on a cancelled request", []sdk.ModelInfo{{Name: "a"}},
			func(h *policytest.Host, s *sched) {
				s.request = func(ev sdk.RequestEvent) { h.SetQueuePosition(ev.ID, 1) }
				h.Request(1, "a")
				h.Cancel(1)
				h.SetQueuePosition(1, 1)
			}, "cancelled"},
		{"granting another model than the request asked for", []sdk.ModelInfo{{Name: "a", State: sdk.StateReady}, {Name: "b", State: sdk.StateReady}},
			func(h *policytest.Host, s *sched) {
				s.request = func(ev sdk.RequestEvent) { h.GrantServe(ev.ID, "a") }
				h.Request(1, "b")
			}, `the request asked for model "b"`},
		{"an unknown error code", []sdk.ModelInfo{{Name: "a"}},
			func(h *policytest.Host, s *sched) {
				s.request = func(ev sdk.RequestEvent) { h.GrantError(ev.ID, sdk.ErrorCode(99), "x") }
				h.Request(1, "a")
			}, "unknown error code"},
		{"an unknown request", nil,
			func(h *policytest.Host, s *sched) { h.GrantError(9, 0, "x") }, "unknown request"},
		{"a request still held after shutdown", []sdk.ModelInfo{{Name: "a"}},
			func(h *policytest.Host, s *sched) {
				s.request = func(ev sdk.RequestEvent) { h.SetQueuePosition(ev.ID, 1) }
				h.Request(1, "a")
				h.Shutdown("bye")
			}, "request 1 (\"a\") was not failed"},
		{"completing a swap that is not active", []sdk.ModelInfo{{Name: "a"}},
			func(h *policytest.Host, s *sched) { h.CompleteSwap("a", "") }, "no swap for it is active"},
		{"no scheduler", nil,
			func(h *policytest.Host, s *sched) { h.Scheduler = nil; h.Tick() }, "Host.Scheduler is not set"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{TB: t}
			h := policytest.NewHost(rec, tc.models...)
			s := &sched{}
			h.Scheduler = s
			rec.run(func() { tc.run(h, s) })
			rec.want(t, tc.want)
		})
	}
}

func TestHost_StopsAndTick(t *testing.T) {
	h := policytest.NewHost(t,
		sdk.ModelInfo{Name: "a", State: sdk.StateReady},
		sdk.ModelInfo{Name: "b"})
	s := &sched{}
	h.Scheduler = s
	if err := h.StopProcesses([]string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	if h.Models["a"].State != sdk.StateStopping {
		t.Errorf("a is %s, want stopping", h.Models["a"].State)
	}
	h.Tick()
	h.Tick()
	if want := []string{"tick [a]", "tick []"}; !slices.Equal(s.events, want) {
		t.Errorf("events %q, want %q", s.events, want)
	}
	if err := h.StopProcesses([]string{"nope"}); !errors.Is(err, sdk.ErrUnknownModel) {
		t.Errorf("StopProcesses(nope) = %v", err)
	}
}

func TestCall_String(t *testing.T) {
	for _, tc := range []struct {
		c    policytest.Call
		want string
	}{
		{policytest.Call{Op: policytest.OpGrantServe, ID: 3, Model: "a", OK: true}, `GrantServe(3, "a") = true`},
		{policytest.Call{Op: policytest.OpGrantError, ID: 4, Code: sdk.CodeQueueFull, Msg: "full"}, `GrantError(4, CodeQueueFull, "full")`},
		{policytest.Call{Op: policytest.OpStartSwap, Model: "b", Models: []string{"a"}, Err: sdk.ErrSwapActive},
			`StartSwap("b", evict ["a"]) = model already has a swap in progress`},
		{policytest.Call{Op: policytest.OpStartSwap, Model: "b", Devices: []int32{0, 1}}, `StartSwap("b", evict [], devices [0 1]) = <nil>`},
		{policytest.Call{Op: policytest.OpStopProcesses, Models: []string{"a", "b"}}, `StopProcesses(["a" "b"]) = <nil>`},
		{policytest.Call{Op: policytest.OpSetQueuePosition, ID: 5, Pos: 2}, `SetQueuePosition(5, 2)`},
		{policytest.Call{Op: policytest.OpLog, Level: sdk.LevelInfo, Msg: "swap"}, `Log(info, "swap")`},
	} {
		if got := tc.c.String(); got != tc.want {
			t.Errorf("got %s, want %s", got, tc.want)
		}
	}
}

// The Host's warm path: an admission it accepts grants later requests
// without the scheduler, keeps their ends quiet unless the scheduler holds
// a request or asked for them, and is refused or revoked as the run loop
// does it.
func TestHost_WarmPath(t *testing.T) {
	h := policytest.NewHost(t, sdk.ModelInfo{Name: "a", State: sdk.StateReady}, sdk.ModelInfo{Name: "b"})
	s := &sched{}
	h.Scheduler = s
	if err := h.Admit("a", 2, 0); !errors.Is(err, sdk.ErrNotAllowed) || len(h.Calls) != 0 {
		t.Fatalf("Admit without WarmPath = %v, calls %v; want ErrNotAllowed and nothing recorded", err, h.Calls)
	}
	h.WarmPath = true
	if err := h.Admit("b", 2, 0); !errors.Is(err, sdk.ErrNotReady) {
		t.Fatalf("Admit of a stopped model = %v, want ErrNotReady", err)
	}
	if err := h.Admit("a", 2, 1<<5); !errors.Is(err, sdk.ErrBadArgument) {
		t.Fatalf("Admit with undefined flags = %v, want ErrBadArgument", err)
	}
	if err := h.Admit("a", 2, 0); err != nil {
		t.Fatal(err)
	}
	h.Request(1, "a")
	h.Request(2, "a")
	if !h.Granted(1) || !h.Granted(2) || len(s.events) != 0 {
		t.Fatalf("requests under the limit: granted %v %v, scheduler heard %q; want both granted by the host", h.Granted(1), h.Granted(2), s.events)
	}
	s.request = func(ev sdk.RequestEvent) { h.SetQueuePosition(ev.ID, 1) }
	h.Request(3, "a") // at the limit: the scheduler's, which holds it
	if h.Admitted("a") != 0 {
		t.Fatal("admission survived a held request for the model")
	}
	if err := h.Admit("a", 2, 0); !errors.Is(err, sdk.ErrNotReady) {
		t.Fatalf("Admit while a request is held = %v, want ErrNotReady", err)
	}
	h.ServeDone(1)
	if got := s.events[len(s.events)-1]; got != "serve done 1 a" {
		t.Fatalf("last event %q, want the end delivered once the admission is gone", got)
	}
	h.Cancel(3)
	if err := h.Admit("a", 2, 0); err != nil {
		t.Fatal(err)
	}
	n := len(s.events)
	h.ServeDone(2)
	if len(s.events) != n {
		t.Fatalf("scheduler heard %q; an admitted model's end with nothing held is the host's", s.events[n:])
	}
	if err := h.Admit("a", 2, sdk.AdmitServeDone); err != nil {
		t.Fatal(err)
	}
	h.Request(4, "a")
	h.ServeDone(4)
	if got := s.events[len(s.events)-1]; got != "serve done 4 a" {
		t.Fatalf("last event %q, want the end delivered with AdmitServeDone", got)
	}
	want := []policytest.Op{policytest.OpAdmit, policytest.OpAdmit, policytest.OpAdmit, policytest.OpWarmGrant, policytest.OpWarmGrant,
		policytest.OpSetQueuePosition, policytest.OpAdmit, policytest.OpAdmit, policytest.OpAdmit, policytest.OpWarmGrant}
	var got []policytest.Op
	for _, c := range h.Calls {
		got = append(got, c.Op)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("calls:\n%v", h.Calls)
	}
}
