package policy

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/wire"
)

// crashAndRecover sends a request for model "bad" to the evil guest set to
// misbehave, checks the *CrashError, then checks that a request for "good"
// succeeds on a fresh instance.
func crashAndRecover(t *testing.T, r *Runtime, settings, wantReason string) (*Scheduler, time.Duration) {
	t.Helper()
	fx := newFakeEffects(model("good", sdk.StateReady), model("bad", sdk.StateReady))
	s := newScheduler(t, r, "evil", settings, fx)
	start := time.Now()
	err := s.OnRequest(sdk.RequestEvent{ID: 1, Model: "bad"})
	elapsed := time.Since(start)
	var ce *CrashError
	if !errors.As(err, &ce) {
		t.Fatalf("got %v, want a *CrashError", err)
	}
	t.Logf("%v after %s", err, elapsed)
	if ce.Policy != "evil.wasm" || ce.Event != "on_request" || !strings.Contains(ce.Reason, wantReason) {
		t.Errorf("crash %+v, want reason containing %q", ce, wantReason)
	}
	if !strings.HasPrefix(err.Error(), "policy evil.wasm crashed in on_request: ") {
		t.Errorf("error %q", err)
	}
	if err := s.OnRequest(sdk.RequestEvent{ID: 2, Model: "good"}); err != nil {
		t.Fatalf("after the crash: %v", err)
	}
	if fx.calls[len(fx.calls)-1] != "grant_serve 2 good" {
		t.Errorf("effects %q", fx.calls)
	}
	st := s.Status()
	if st.Instantiations != 2 || st.Crashes != 1 || !st.Healthy || st.LastError != err.Error() && st.LastError != ce.Error() {
		t.Errorf("status %+v", st)
	}
	return s, elapsed
}

func TestSandbox_Panic(t *testing.T) {
	r, _ := newTestRuntime(t, Options{})
	crashAndRecover(t, r, `{"misbehave": "panic", "model": "bad"}`, "panic: evil: deliberate panic")
}

// TestSandbox_OnCrash checks that a module's OnCrash hook runs once per
// crash, and not for a call that did not crash.
func TestSandbox_OnCrash(t *testing.T) {
	r, _ := newTestRuntime(t, Options{})
	fx := newFakeEffects(model("good", sdk.StateReady), model("bad", sdk.StateReady))
	m := compile(t, r, "evil.wasm", guest(t, "evil"))
	crashes := 0
	m.OnCrash = func() { crashes++ }
	s, err := r.NewScheduler(context.Background(), m, []byte(`{"misbehave": "panic", "model": "bad"}`), fx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	for i, ev := range []struct {
		model string
		want  int
	}{{"good", 0}, {"bad", 1}, {"good", 1}, {"bad", 2}} {
		_ = s.OnRequest(sdk.RequestEvent{ID: sdk.RequestID(i + 1), Model: ev.model})
		if crashes != ev.want {
			t.Errorf("after a request for %s: OnCrash ran %d times, want %d", ev.model, crashes, ev.want)
		}
	}
}

func TestSandbox_PanicInGoroutine(t *testing.T) {
	r, _ := newTestRuntime(t, Options{})
	crashAndRecover(t, r, `{"misbehave": "goexit-panic", "model": "bad"}`, "panic: evil: panic in a goroutine")
}

func TestSandbox_InfiniteLoop(t *testing.T) {
	timeout := 100 * time.Millisecond
	r, logs := newTestRuntime(t, Options{CallTimeout: timeout})
	_, elapsed := crashAndRecover(t, r, `{"misbehave": "loop", "model": "bad"}`, "deadline of 100ms exceeded")
	// Interrupted once the budget is spent and the thread has run through
	// one more (a grace window: deadline), so after two budgets where the
	// thread's CPU clock is read, and not long after (the slack covers a
	// loaded CI machine).
	least := timeout
	if _, ok := threadCPU(threadID()); ok {
		least = 2 * timeout
	}
	if elapsed < least || elapsed > least+time.Second {
		t.Errorf("for {} was interrupted after %s; deadline %s, want it stopped after %s", elapsed, timeout, least)
	}
	if got := logs.find("WARN policy crashed; instance discarded", "policy=evil.wasm", "event=on_request", "reason=deadline of 100ms exceeded"); len(got) != 1 {
		t.Errorf("crash log lines %q", got)
	}
}

// A call whose thread is kept off a CPU past its budget — here blocked in
// a host call for three budgets, as a box whose cores are saturated or a
// container throttled by its CPU quota keeps it — is not stopped: once the
// budget is spent the deadline watches the thread's CPU time, and it did
// not run. A thread kept off for good is stopped at starvedFactor budgets.
func TestSandbox_StarvedCallIsNotStopped(t *testing.T) {
	if _, ok := threadCPU(threadID()); !ok {
		t.Skip("threads' CPU clocks are read on Linux only")
	}
	timeout := 20 * time.Millisecond
	r, _ := newTestRuntime(t, Options{CallTimeout: timeout})
	fx := newFakeEffects(model("good", sdk.StateReady), model("bad", sdk.StateReady))
	s := newScheduler(t, r, "evil", `{"model": "bad"}`, fx)
	fx.onGrant = func() { time.Sleep(3 * timeout) } // the thread off the CPU
	if err := s.OnRequest(sdk.RequestEvent{ID: 1, Model: "good"}); err != nil {
		t.Fatalf("a call kept off a CPU for three budgets: %v", err)
	}
	if st := s.Status(); st.Crashes != 0 || st.Instantiations != 1 || fx.calls[len(fx.calls)-1] != "grant_serve 1 good" {
		t.Errorf("status %+v, effects %q: want the call served by the first instance", st, fx.calls)
	}

	var once sync.Once
	fx.onGrant = func() { once.Do(func() { time.Sleep(2 * starvedFactor * timeout) }) }
	start := time.Now()
	err := s.OnRequest(sdk.RequestEvent{ID: 2, Model: "good"})
	var ce *CrashError
	if !errors.As(err, &ce) || !strings.Contains(ce.Reason, "deadline of 20ms exceeded") {
		t.Fatalf("a call kept off a CPU for good: %v, want the deadline's crash", err)
	}
	if elapsed := time.Since(start); elapsed < starvedFactor*timeout {
		t.Errorf("stopped after %s, want %d budgets at least", elapsed, starvedFactor)
	}
}

// TestSandbox_TrustedCatchesAnOverrunWhenItReturns: without the loop
// checks (Options.Trusted) a call that overruns its deadline runs to its
// end, and is caught then: a crash, the instance discarded and the next
// call served by a new one, as with the checks.
func TestSandbox_TrustedCatchesAnOverrunWhenItReturns(t *testing.T) {
	r, _ := newTestRuntime(t, Options{CallTimeout: 10 * time.Millisecond, Trusted: true})
	crashAndRecover(t, r, `{"misbehave": "spin", "model": "bad"}`, "deadline of 10ms exceeded")
}

func TestSandbox_UnboundedAllocation(t *testing.T) {
	// A generous deadline, so that it is the memory limit that stops it.
	r, _ := newTestRuntime(t, Options{CallTimeout: 20 * time.Second, MemoryLimitPages: 512})
	crashAndRecover(t, r, `{"misbehave": "alloc", "model": "bad"}`, "out of memory")
}

func TestSandbox_StackOverflow(t *testing.T) {
	r, _ := newTestRuntime(t, Options{CallTimeout: 20 * time.Second})
	crashAndRecover(t, r, `{"misbehave": "stack", "model": "bad"}`, "out of memory") // goroutine stacks live in linear memory
}

func TestSandbox_Exit(t *testing.T) {
	r, _ := newTestRuntime(t, Options{})
	crashAndRecover(t, r, `{"misbehave": "exit", "model": "bad"}`, "exited with code 3")
}

func TestSandbox_Traps(t *testing.T) {
	for _, tc := range []struct {
		name, reason string
		body         []byte
	}{
		{"unreachable", "wasm error: unreachable", opUnreachable},
		{"out of bounds", "wasm error: out of bounds memory access", ops(i32c(-16), opI32Load, opDrop, i64c(0))},
		{"unknown status", "unknown status 9: mini: deliberate error", statusBody(9)},
		{"status panic", "mini: deliberate error", statusBody(wire.StatusPanic)},
		{"loop", "deadline of 100ms exceeded", ops(opLoopForever, i64c(0))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := newTestRuntime(t, Options{})
			spec := miniPolicy()
			spec.bodies["on_request"] = tc.body
			m := compile(t, r, "mini.wasm", spec.bytes())
			s, err := r.NewScheduler(context.Background(), m, nil, newFakeEffects())
			if err != nil {
				t.Fatal(err)
			}
			err = s.OnRequest(sdk.RequestEvent{ID: 1, Model: "a"})
			var ce *CrashError
			if !errors.As(err, &ce) || ce.Reason != tc.reason {
				t.Fatalf("got %v, want a crash with reason %q", err, tc.reason)
			}
			if err := s.OnTick(sdk.TickEvent{}); err != nil {
				t.Fatal(err)
			}
			if st := s.Status(); st.Instantiations != 2 || st.Crashes != 1 {
				t.Errorf("status %+v", st)
			}
		})
	}
}

// TestSandbox_GarbagePointers: every import given pointers outside memory,
// absurd lengths or malformed messages answers ErrBadArgument (-8); the
// host does not panic and the instance lives on.
func TestSandbox_GarbagePointers(t *testing.T) {
	r, logs := newTestRuntime(t, Options{})
	fx := newFakeEffects(model("good", sdk.StateReady))
	s := newScheduler(t, r, "evil", `{"misbehave": "garbage"}`, fx)
	if err := s.OnRequest(sdk.RequestEvent{ID: 1, Model: "good"}); err != nil {
		t.Fatal(err)
	}
	want := "INFO: garbage grant_serve=-8 grant_serve_len=-8 grant_error=-8 grant_error_code=-8 start_swap=-8 start_swap_junk=-8 stop_processes=-8 set_queue_position=-8 model_state=-8 model_state_buf=-8 running_models=-8 snapshot=-8 plan=-8 plan_buf=-8 replicas=-8 demand=-8 waits=-8 waits_buf=-8"
	if len(fx.logs) != 1 || fx.logs[0] != want {
		t.Errorf("logs\n got %q\nwant %q", fx.logs, want)
	}
	if len(fx.calls) != 1 || fx.calls[0] != "grant_serve 1 good" {
		t.Errorf("effects %q", fx.calls)
	}
	if got := logs.find("policy passed an invalid pointer to log", "policy=evil.wasm"); len(got) != 1 {
		t.Errorf("log lines %q", got)
	}
	if st := s.Status(); st.Crashes != 0 || st.Instantiations != 1 {
		t.Errorf("status %+v", st)
	}
}

// TestSandbox_Spam: log lines are capped per call, and stdout goes to the
// runtime's logger, bounded. A generous deadline: a thousand log calls on a
// machine busy with other tests can take longer than the default 100 ms,
// and the deadline is not what this tests.
func TestSandbox_Spam(t *testing.T) {
	r, logs := newTestRuntime(t, Options{CallTimeout: 10 * time.Second})
	fx := newFakeEffects(model("good", sdk.StateReady))
	s := newScheduler(t, r, "evil", `{"misbehave": "spam"}`, fx)
	if err := s.OnRequest(sdk.RequestEvent{ID: 1, Model: "good"}); err != nil {
		t.Fatal(err)
	}
	if len(fx.logs) != maxLogsPerCall {
		t.Errorf("%d log lines reached the host, want %d", len(fx.logs), maxLogsPerCall)
	}
	if got := logs.find("policy log lines dropped", "dropped=936"); len(got) != 1 {
		t.Errorf("log lines %q", got)
	}
	out := logs.find("policy output", "stdout spam")
	if len(out) != 1 || len(out[0]) > maxOutput+200 || !strings.Contains(out[0], "more bytes") {
		t.Errorf("output log lines: %d, first %d bytes", len(out), len(strings.Join(out, "")))
	}
}

func TestSandbox_CrashInInit(t *testing.T) {
	r, _ := newTestRuntime(t, Options{})
	m := compile(t, r, "evil.wasm", guest(t, "evil"))
	for _, tc := range []struct{ settings, want string }{
		{`{"misbehave": "panic", "in": "init"}`, "policy evil.wasm: init: panic: evil: deliberate panic"},
		{`{"misbehave": "exit", "in": "init"}`, "policy evil.wasm: init: exited with code 3"},
	} {
		_, err := r.NewScheduler(context.Background(), m, []byte(tc.settings), newFakeEffects())
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: got %v, want %q", tc.settings, err, tc.want)
		}
	}
}

func TestSandbox_LoopInInit(t *testing.T) {
	r, _ := newTestRuntime(t, Options{})
	m := compile(t, r, "evil.wasm", guest(t, "evil"))
	r.startTimeout = 50 * time.Millisecond
	_, err := r.NewScheduler(context.Background(), m, []byte(`{"misbehave": "loop", "in": "init"}`), newFakeEffects())
	if err == nil || err.Error() != "policy evil.wasm: init: deadline of 50ms exceeded" {
		t.Errorf("got %v", err)
	}
}

// TestSandbox_CrashLoop: more than MaxCrashes crashes within CrashWindow
// disable the policy; from then on every call returns ErrUnhealthy at once,
// without allocating or instantiating.
func TestSandbox_CrashLoop(t *testing.T) {
	r, logs := newTestRuntime(t, Options{MaxCrashes: 2})
	fx := newFakeEffects(model("good", sdk.StateReady))
	s := newScheduler(t, r, "evil", `{"misbehave": "panic"}`, fx)
	for i := range 3 {
		err := s.OnRequest(sdk.RequestEvent{ID: sdk.RequestID(i), Model: "good"})
		var ce *CrashError
		if !errors.As(err, &ce) {
			t.Fatalf("call %d: %v", i, err)
		}
		if disabled := errors.Is(err, ErrUnhealthy); disabled != (i == 2) {
			t.Errorf("call %d: errors.Is(ErrUnhealthy) = %v", i, disabled)
		}
	}
	st := s.Status()
	if st.Healthy || st.Crashes != 3 || st.Instantiations != 3 {
		t.Errorf("status %+v", st)
	}
	err := s.OnRequest(sdk.RequestEvent{ID: 9, Model: "good"})
	if !errors.Is(err, ErrUnhealthy) || err.Error() != "policy evil.wasm: disabled after crashing repeatedly (3 crashes within 1m0s or 100 calls)" {
		t.Fatalf("got %v", err)
	}
	ev := sdk.RequestEvent{ID: 10, Model: "good"}
	if allocs := testing.AllocsPerRun(1000, func() { _ = s.OnRequest(ev) }); allocs != 0 {
		t.Errorf("a call to an unhealthy policy allocates %v times", allocs)
	}
	start := time.Now()
	for range 10000 {
		_ = s.OnTick(sdk.TickEvent{})
	}
	if per := time.Since(start) / 10000; per > 10*time.Microsecond {
		t.Errorf("a call to an unhealthy policy costs %s", per)
	}
	if st := s.Status(); st.Instantiations != 3 {
		t.Errorf("instantiated while unhealthy: %+v", st)
	}
	if got := logs.find("ERROR policy disabled: crash-looping", "policy=evil.wasm", "crashes=3"); len(got) != 1 {
		t.Errorf("log lines %q", got)
	}
}

// TestSandbox_CrashWindow: crashes older than the window, in time and in
// calls, do not count.
func TestSandbox_CrashWindow(t *testing.T) {
	r, _ := newTestRuntime(t, Options{MaxCrashes: 1, CrashWindow: time.Nanosecond, CrashCalls: 1})
	s := newScheduler(t, r, "evil", `{"misbehave": "panic"}`, newFakeEffects())
	for i := range 4 {
		err := s.OnRequest(sdk.RequestEvent{ID: sdk.RequestID(i), Model: "x"})
		var ce *CrashError
		if !errors.As(err, &ce) || errors.Is(err, ErrUnhealthy) {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if st := s.Status(); !st.Healthy || st.Crashes != 4 || st.Instantiations != 5 {
		t.Errorf("status %+v", st)
	}
}

// TestSandbox_CrashCallsWindow: a policy that crashes at every request,
// the requests further apart than the crash window, is disabled all the
// same once more than MaxCrashes of its last CrashCalls calls crashed
// (before, it was never disabled and every request failed).
func TestSandbox_CrashCallsWindow(t *testing.T) {
	r, _ := newTestRuntime(t, Options{MaxCrashes: 2, CrashWindow: time.Nanosecond, CrashCalls: 10})
	s := newScheduler(t, r, "evil", `{"misbehave": "panic"}`, newFakeEffects())
	for i := range 3 {
		if err := s.OnTick(sdk.TickEvent{}); err != nil { // other exports' calls do not move on_request's window
			t.Fatalf("tick %d: %v", i, err)
		}
		var ce *CrashError
		if err := s.OnRequest(sdk.RequestEvent{ID: sdk.RequestID(i), Model: "x"}); !errors.As(err, &ce) {
			t.Fatalf("request %d: %v, want a crash", i, err)
		}
	}
	if st := s.Status(); st.Healthy || st.Crashes != 3 {
		t.Errorf("status %+v, want disabled after 3 crashes in 6 calls", st)
	}
}

// TestSandbox_ModuleCallTimeout: a module's own deadline
// (Module.CallTimeout, as serve gives the built-in policies) replaces the
// runtime's: a call that overruns the runtime's 10 ms (caught when it
// returns: TestSandbox_TrustedCatchesAnOverrunWhenItReturns) is served,
// no crash counted. Trusted, so the spin takes a fraction of a second.
func TestSandbox_ModuleCallTimeout(t *testing.T) {
	r, _ := newTestRuntime(t, Options{CallTimeout: 10 * time.Millisecond, Trusted: true})
	m := compile(t, r, "evil.wasm", guest(t, "evil"))
	m.CallTimeout = time.Minute
	fx := newFakeEffects(model("bad", sdk.StateReady))
	s, err := r.NewScheduler(context.Background(), m, []byte(`{"misbehave": "spin", "model": "bad"}`), fx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	start := time.Now()
	if err := s.OnRequest(sdk.RequestEvent{ID: 1, Model: "bad"}); err != nil {
		t.Fatalf("a call that ran %s under a module deadline of a minute: %v", time.Since(start), err)
	}
	if st := s.Status(); st.Crashes != 0 || st.Instantiations != 1 {
		t.Errorf("status %+v, want no crash", st)
	}
}
