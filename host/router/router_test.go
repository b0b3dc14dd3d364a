package router

import (
	"context"
	"errors"
	"fmt"
	"github.com/loadout-dev/loadout/host/gpu"
	"github.com/loadout-dev/loadout/host/policy"
	"github.com/loadout-dev/loadout/internal/wasmbuild"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/sdk"
)

func TestRouter_ColdLoadThenFastPath(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	c := h.acquire("a")
	h.world.expect(t, "starting a", "ready a")
	g := c.wait(t)
	if g.Model != "a" || g.Upstream == nil {
		t.Fatalf("grant = %+v", g)
	}
	if st := h.status("a"); st.State != "ready" || st.InFlight != 1 {
		t.Fatalf("status = %+v, want ready with 1 in flight", st)
	}
	g.Release()
	g.Release() // idempotent
	h.acquire("a").wait(t).Release()
	if st := h.status("a"); st.InFlight != 0 {
		t.Fatalf("in flight = %d after releases", st.InFlight)
	}
	h.world.expectNone(t) // the second request needed no swap
}

// Rule 1: all scheduler state lives on the run loop. Many callers at once,
// under -race, would show any state touched elsewhere; with the warm path
// (warm.go) and without it.
func TestRouter_Rule1_ConcurrentCallers(t *testing.T) {
	for _, warm := range []bool{true, false} {
		t.Run(map[bool]string{true: "warm", false: "off"}[warm], func(t *testing.T) {
			testConcurrentCallers(t, newHarness(t, harnessOpts{noWarm: !warm}))
		})
	}
}

func testConcurrentCallers(t *testing.T, h *harness) {
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			model := []string{"a", "b", "c", "e"}[i%4]
			g, err := h.r.Acquire(context.Background(), Request{Model: model})
			if err != nil {
				t.Errorf("acquire %s: %v", model, err)
				return
			}
			_ = h.r.Models()
			g.Release()
		})
	}
	wg.Wait()
	for _, st := range h.r.Models() {
		if st.InFlight != 0 || st.Queued != 0 || st.Loading != 0 {
			t.Errorf("after all callers: %+v", st)
		}
	}
	if h.world.maxLive > 2 {
		t.Errorf("%d processes alive at once; exclusive groups allow at most 2 plus persistent e", h.world.maxLive)
	}
}

// Rule 2: a slow load never blocks the loop: while a loads, a request for a
// ready model in another (persistent) group is served.
func TestRouter_Rule2_SlowLoadDoesNotBlock(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.acquire("e").wait(t).Release()
	h.world.expect(t, "starting e", "ready e")

	release := h.procs["a"].hold()
	ca := h.acquire("a")
	h.world.expect(t, "starting a")
	ca.held(t, true)

	h.acquire("e").wait(t).Release() // served while a is still loading
	ca.pending(t)
	release()
	h.world.expect(t, "ready a")
	ca.wait(t).Release()
}

// Rule 3: in-flight goes up only when the caller took the grant. A grant to
// a caller that already left must not count, or the model could never be
// evicted again.
func TestRouter_Rule3_GrantToDepartedCallerNotCounted(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.acquire("a").wait(t).Release()
	h.world.expect(t, "starting a", "ready a")

	gone, cancel := context.WithCancel(context.Background())
	cancel()
	var granted bool
	var inFlight int
	h.r.query(func() {
		l := &h.r.loop
		l.nextID++
		id := l.nextID
		l.waiters[id] = &waiter{id: id, ctx: gone, req: Request{Model: "a"}, respond: make(chan result)}
		granted = l.fx.GrantServe(id, "a")
		inFlight = l.models["a"].inFlight
	})
	if granted || inFlight != 0 {
		t.Fatalf("GrantServe to a departed caller = %v with %d in flight, want false and 0", granted, inFlight)
	}
	// And so a can still be evicted.
	h.acquire("b").wait(t).Release()
	h.world.expect(t, "stopped a", "starting b", "ready b")
}

// Rule 3, end to end: a caller that leaves while its model loads is not
// counted when the load completes.
func TestRouter_Rule3_CallerLeavesDuringLoad(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	release := h.procs["a"].hold()
	c := h.acquire("a")
	h.world.expect(t, "starting a")
	c.held(t, true)
	c.cancel()
	c.waitDone(t)
	if !errors.Is(c.err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", c.err)
	}
	release()
	h.world.expect(t, "ready a")
	if st := h.status("a"); st.InFlight != 0 || st.Loading != 0 {
		t.Fatalf("status = %+v, want nothing in flight or waiting", st)
	}
	h.acquire("b").wait(t).Release()
	h.world.expect(t, "stopped a", "starting b", "ready b")
}

// Rule 4: the swapper's running set includes models still starting. b
// shares a's exclusive swap group; while a starts, b must wait rather than
// start beside it.
func TestRouter_Rule4_RunningSetIncludesStartingSwaps(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	release := h.procs["a"].hold()
	ca := h.acquire("a")
	h.world.expect(t, "starting a")
	ca.held(t, true)
	cb := h.acquire("b")
	cb.held(t, false)
	h.expectState("b", "stopped")
	release()
	h.world.expect(t, "ready a")
	ca.wait(t).Release()
	h.world.expect(t, "stopped a", "starting b", "ready b")
	cb.wait(t).Release()
	if h.world.maxLive != 1 {
		t.Fatalf("%d processes of one exclusive swap group alive at once", h.world.maxLive)
	}
}

// Rule 5: a queued caller that leaves is removed and never triggers a swap.
func TestRouter_Rule5_CancelledQueuedRequestNeverSwaps(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	ga := h.acquire("a").wait(t)
	h.world.expect(t, "starting a", "ready a")
	cb := h.acquire("b")
	if p := cb.held(t, false); p.Position != 1 {
		t.Fatalf("queue position = %d, want 1", p.Position)
	}
	cb.cancel()
	cb.waitDone(t)
	if st := h.status("b"); st.Queued != 0 {
		t.Fatalf("b still queued after its caller left: %+v", st)
	}
	ga.Release()
	h.expectState("b", "stopped")
	h.expectState("a", "ready")
	h.world.expectNone(t)
}

// silentScheduler answers nothing: the router must not let its requests
// wait forever (rule 5's host-side guard).
type silentScheduler struct{ fx sdk.Effects }

func (silentScheduler) OnRequest(sdk.RequestEvent) error     { return nil }
func (silentScheduler) OnSwapDone(sdk.SwapDoneEvent) error   { return nil }
func (silentScheduler) OnServeDone(sdk.ServeDoneEvent) error { return nil }
func (silentScheduler) OnCancel(sdk.CancelEvent) error       { return nil }
func (silentScheduler) OnUnload(sdk.UnloadEvent) error       { return nil }
func (silentScheduler) OnTick(sdk.TickEvent) error           { return nil }
func (silentScheduler) OnShutdown(sdk.ShutdownEvent) error   { return nil }

func TestRouter_Rule5_DroppedRequestIsFailed(t *testing.T) {
	h := newHarness(t, harnessOpts{newSched: func(fx sdk.Effects) (SchedulerPolicy, error) {
		return silentScheduler{fx}, nil
	}})
	e := h.acquire("a").waitErr(t)
	if e.Code != sdk.CodeInternal || !strings.Contains(e.Message, "dropped") {
		t.Fatalf("error = %v (code %d), want an internal 'dropped' error", e, e.Code)
	}
	if c := h.r.Counters()["scheduler"]; c.RefusedEffects != 1 {
		t.Fatalf("counters = %+v, want 1 refusal recorded", c)
	}
}

// Rule 6: a model with requests in flight is never evicted: b waits until
// a's request is done.
func TestRouter_Rule6_BusyModelNeverEvicted(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	ga := h.acquire("a").wait(t)
	h.world.expect(t, "starting a", "ready a")
	cb := h.acquire("b")
	cb.held(t, false)
	h.expectState("a", "ready")
	h.world.expectNone(t)
	ga.Release()
	h.world.expect(t, "stopped a", "starting b", "ready b")
	cb.wait(t).Release()
}

// A pinned model is never evicted, whatever the router plans: llama-swap's
// group semantics evict a swap group's other member, and the host keeps
// the pinned one, counts the dropped eviction against the policy and logs
// it; the target loads beside it.
func TestRouter_PinnedModelNeverEvicted(t *testing.T) {
	logs := &recordedLogs{}
	h := newHarness(t, harnessOpts{models: map[string]ModelConfig{"a": {Pinned: true}}, logger: slog.New(logs)})
	h.acquire("a").wait(t).Release()
	h.world.expect(t, "starting a", "ready a")
	before := h.r.Counters()["scheduler"].RefusedEffects
	h.acquire("b").wait(t).Release()
	h.world.expect(t, "starting b", "ready b")
	h.expectState("a", "ready")
	if got := h.r.Counters()["scheduler"].RefusedEffects - before; got != 1 {
		t.Errorf("%d refusals counted; want the dropped eviction", got)
	}
	if _, ok := logs.level("policy call refused", "what", `StartSwap("b"): evicts "a", which is pinned: kept`); !ok {
		t.Error("the dropped eviction of a pinned model was not logged")
	}
}

// Rule 6 in the host: a StartSwap that evicts a busy model is refused even
// if a policy asks for it. The refusal says "not now" (sdk.NotNow), which
// fifo meets at every tick while it waits: counted, and logged at debug
// level; a refusal that is the policy's mistake (an unknown model) is a
// warning.
func TestRouter_Rule6_StartSwapRefusesBusyEviction(t *testing.T) {
	logs := &recordedLogs{}
	h := newHarness(t, harnessOpts{logger: slog.New(logs)})
	ga := h.acquire("a").wait(t)
	defer ga.Release()
	h.world.expect(t, "starting a", "ready a")
	before := h.r.Counters()["scheduler"].RefusedEffects
	var err, unknown error
	h.r.query(func() {
		err = h.r.loop.fx.StartSwap(sdk.SwapRequest{Model: "b", Evict: []string{"a"}})
		unknown = h.r.loop.fx.StartSwap(sdk.SwapRequest{Model: "nope"})
	})
	if !errors.Is(err, sdk.ErrModelBusy) || !errors.Is(unknown, sdk.ErrUnknownModel) {
		t.Fatalf("StartSwap evicting a busy model: err = %v, want ErrModelBusy; of an unknown model: %v", err, unknown)
	}
	h.expectState("a", "ready")
	if got := h.r.Counters()["scheduler"].RefusedEffects - before; got != 2 {
		t.Errorf("%d refusals counted; want 2", got)
	}
	want := map[string]slog.Level{`StartSwap("b"): evicts "a", which has 1 requests in flight`: slog.LevelDebug, `StartSwap("nope"): unknown model`: slog.LevelWarn}
	for what, level := range want {
		if got, ok := logs.level("policy call refused", "what", what); !ok || got != level {
			t.Errorf("refusal %q logged at %v (found %v); want %v", what, got, ok, level)
		}
	}
}

// recordedLogs is a slog.Handler that keeps every record, at every level.
type recordedLogs struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *recordedLogs) Enabled(context.Context, slog.Level) bool { return true }
func (l *recordedLogs) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *recordedLogs) WithGroup(string) slog.Handler            { return l }
func (l *recordedLogs) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r.Clone())
	return nil
}

// level is the level of the first record with message msg and attribute
// key equal to value.
func (l *recordedLogs) level(msg, key, value string) (slog.Level, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.recs {
		if r.Message != msg {
			continue
		}
		found := false
		r.Attrs(func(a slog.Attr) bool {
			found = a.Key == key && a.Value.String() == value
			return !found
		})
		if found {
			return r.Level, true
		}
	}
	return 0, false
}

// failingScheduler holds every request until one for "boom", where it
// fails like a crashed Wasm policy does.
type failingScheduler struct{ fx sdk.Effects }

func (s failingScheduler) OnRequest(ev sdk.RequestEvent) error {
	if ev.Model == "boom" {
		return errors.New("wasm trap: unreachable")
	}
	s.fx.SetQueuePosition(ev.ID, 1)
	return nil
}
func (failingScheduler) OnSwapDone(sdk.SwapDoneEvent) error   { return nil }
func (failingScheduler) OnServeDone(sdk.ServeDoneEvent) error { return nil }
func (failingScheduler) OnCancel(sdk.CancelEvent) error       { return nil }
func (failingScheduler) OnUnload(sdk.UnloadEvent) error       { return nil }
func (failingScheduler) OnTick(sdk.TickEvent) error           { return nil }
func (failingScheduler) OnShutdown(sdk.ShutdownEvent) error   { return nil }

// Rule 7: a policy that fails loses the requests it held; each gets a clear
// error naming the policy, and the router keeps running.
func TestRouter_Rule7_PolicyFailureFailsHeldRequests(t *testing.T) {
	h := newHarness(t, harnessOpts{
		models: map[string]ModelConfig{"boom": {}},
		newSched: func(fx sdk.Effects) (SchedulerPolicy, error) {
			return failingScheduler{fx}, nil
		},
	})
	held := []*call{h.acquire("a"), h.acquire("b")}
	for _, c := range held {
		c.held(t, false)
	}
	boom := h.acquire("boom")
	for _, c := range append(held, boom) {
		e := c.waitErr(t)
		if e.Code != sdk.CodeUnavailable || !strings.Contains(e.Message, "scheduler policy test failed") || !strings.Contains(e.Message, "unreachable") {
			t.Fatalf("%s: error = %q (code %d)", c, e.Message, e.Code)
		}
	}
	if c := h.r.Counters()["scheduler"]; c.Failures != 1 {
		t.Fatalf("counters = %+v, want 1 failure", c)
	}
	later := h.acquire("c")
	later.held(t, false) // still running and taking requests
	later.cancel()
}

// llama-swap's collation: A B C A B C arriving while A loads is served
// A A B B C C.
func TestRouter_QueueCollation(t *testing.T) {
	h := newHarness(t, harnessOpts{groups: `{"groups": {"all": {"members": ["a","b","c","e"]}}}`})
	release := h.procs["a"].hold()
	var mu sync.Mutex
	var order []string
	var calls []*call
	for i, m := range []string{"a", "b", "c", "a", "b", "c"} {
		c := h.acquire(m)
		c.held(t, m == "a")
		if i == 0 {
			h.world.expect(t, "starting a")
		}
		calls = append(calls, c)
	}
	release()
	var wg sync.WaitGroup
	for _, c := range calls {
		wg.Go(func() {
			g := c.wait(t)
			mu.Lock()
			order = append(order, g.Model)
			mu.Unlock()
			g.Release()
		})
	}
	wg.Wait()
	if got := strings.Join(order, " "); got != "a a b b c c" {
		t.Fatalf("served %q, want \"a a b b c c\"", got)
	}
}

func TestRouter_SwapFailureFailsWaiters(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.procs["a"].fail = errors.New("llama-server exited with status 1: error loading model")
	release := h.procs["a"].hold() // both callers wait on the one start
	c1, c2 := h.acquire("a"), h.acquire("a")
	c1.held(t, true)
	c2.held(t, true)
	release()
	for _, c := range []*call{c1, c2} {
		e := c.waitErr(t)
		if e.Code != sdk.CodeSwapFailed || !strings.Contains(e.Message, "error loading model") {
			t.Fatalf("error = %q (code %d), want 502 with the start error", e.Message, e.Code)
		}
	}
	if st := h.status("a"); st.State != "failed" || !strings.Contains(st.LastError, "error loading model") {
		t.Fatalf("status = %+v", st)
	}
	h.procs["a"].fail = nil
	h.acquire("a").wait(t).Release() // the next request starts it again
}

func TestRouter_CrashedModelRestartsOnNextRequest(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.acquire("a").wait(t).Release()
	h.world.expect(t, "starting a", "ready a")
	h.world.crash(t, "a")
	for h.status("a").State != "failed" {
		h.r.query(func() {}) // let the exit event through
	}
	if st := h.status("a"); !strings.Contains(st.LastError, "segmentation fault") {
		t.Fatalf("last error = %q", st.LastError)
	}
	h.acquire("a").wait(t).Release()
	h.world.expect(t, "starting a", "ready a")
}

func TestRouter_UnloadStopsAndWaits(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.acquire("a").wait(t).Release()
	h.acquire("e").wait(t).Release()
	h.world.expect(t, "starting a", "ready a", "starting e", "ready e")
	if err := h.r.Unload(context.Background(), UnloadOptions{Models: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	h.world.expect(t, "stopped a")
	h.expectState("a", "stopped")
	h.expectState("e", "ready")
	if err := h.r.Unload(context.Background(), UnloadOptions{}); err != nil { // everything
		t.Fatal(err)
	}
	h.world.expect(t, "stopped e")
	var rerr *Error
	if err := h.r.Unload(context.Background(), UnloadOptions{Models: []string{"nope"}}); !errors.As(err, &rerr) || rerr.Code != sdk.CodeModelNotFound {
		t.Fatalf("unload of an unknown model: %v", err)
	}
}

func TestRouter_UnloadFailsCallersWaitingOnTheSwap(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	release := h.procs["a"].hold()
	c := h.acquire("a")
	h.world.expect(t, "starting a")
	c.held(t, true)
	unloaded := make(chan error, 1)
	go func() { unloaded <- h.r.Unload(context.Background(), UnloadOptions{Models: []string{"a"}}) }()
	if e := c.waitErr(t); e.Code != sdk.CodeUnavailable {
		t.Fatalf("waiter error = %v, want 503", e)
	}
	// The load is aborted, not waited for (TestRouter_UnloadAbortsALoad).
	h.world.expect(t, "aborted a")
	if err := <-unloaded; err != nil {
		t.Fatal(err)
	}
	release()
}

func TestRouter_TTLUnloadsIdleModel(t *testing.T) {
	h := newHarness(t, harnessOpts{
		tick:   5 * time.Millisecond,
		models: map[string]ModelConfig{"a": {TTL: 30 * time.Millisecond}},
	})
	g := h.acquire("a").wait(t)
	h.world.expect(t, "starting a", "ready a")
	h.expectState("a", "ready") // busy: the TTL does not apply
	g.Release()
	h.world.expect(t, "stopped a") // idle for its TTL
	h.awaitState("a", "stopped")
}

// A request's own TTL (Ollama's keep_alive) is the model's from its
// grant on: one with no configured TTL expires after the request's, a
// request without one brings the configured TTL back, and one of 0
// keeps the model however its configuration reads.
func TestRouter_RequestTTLReplacesTheModels(t *testing.T) {
	h := newHarness(t, harnessOpts{
		tick:   5 * time.Millisecond,
		models: map[string]ModelConfig{"a": {}, "b": {TTL: 30 * time.Millisecond}},
	})
	acquire := func(model string, ttl *time.Duration) *Grant {
		t.Helper()
		g, err := h.r.Acquire(context.Background(), Request{Model: model, TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	short, never := 30*time.Millisecond, time.Duration(0)

	acquire("a", &short).Release()
	h.world.expect(t, "starting a", "ready a")
	h.world.expect(t, "stopped a") // idle for the request's TTL
	h.awaitState("a", "stopped")

	// b's configured TTL would stop it; the request's 0 keeps it, with no
	// expiry shown, until a request without a TTL brings the 30 ms back.
	g := acquire("b", &never)
	h.world.expect(t, "starting b", "ready b")
	g.Release()
	h.await(func() string {
		st := h.status("b")
		if st.InFlight != 0 || !st.ExpiresAt.IsZero() || st.State != "ready" {
			return fmt.Sprintf("b kept by its request's TTL 0: %+v", st)
		}
		if idle := time.Since(st.LastUse); idle < 3*short {
			return fmt.Sprintf("b idle %v, past three times its configured TTL yet?", idle)
		}
		return ""
	})
	h.world.expectNone(t) // not stopped, though idle past its configured TTL
	acquire("b", nil).Release()
	h.world.expect(t, "stopped b")
	h.awaitState("b", "stopped")
}

// ExpiresAt (Ollama's ps "until") is last use plus TTL while the model is
// ready and idle, and zero while it serves or has no TTL.
func TestRouter_ExpiresAtWhileIdle(t *testing.T) {
	h := newHarness(t, harnessOpts{
		models: map[string]ModelConfig{"a": {TTL: time.Hour}, "b": {}},
	})
	h.acquire("b").wait(t).Release()
	h.world.expect(t, "starting b", "ready b")
	h.await(func() string {
		if st := h.status("b"); st.InFlight != 0 || !st.ExpiresAt.IsZero() {
			return fmt.Sprintf("a model with no TTL: in flight %d, expires at %v, want zero", st.InFlight, st.ExpiresAt)
		}
		return ""
	})
	g := h.acquire("a").wait(t)
	h.world.expect(t, "stopped b", "starting a", "ready a")
	if st := h.status("a"); !st.ExpiresAt.IsZero() {
		t.Errorf("busy model expires at %v, want zero", st.ExpiresAt)
	}
	g.Release()
	h.await(func() string {
		if st := h.status("a"); st.InFlight != 0 || !st.ExpiresAt.Equal(st.LastUse.Add(time.Hour)) {
			return fmt.Sprintf("idle model: in flight %d, expires at %v, want last use %v + 1h", st.InFlight, st.ExpiresAt, st.LastUse)
		}
		return ""
	})
}

func TestRouter_ShutdownDrainsAndStopsEverything(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	ga := h.acquire("a").wait(t)
	h.acquire("e").wait(t).Release()
	h.world.expect(t, "starting a", "ready a", "starting e", "ready e")
	queued := h.acquire("b")
	queued.held(t, false)

	shut := make(chan error, 1)
	go func() { shut <- h.r.Shutdown(context.Background()) }()
	if e := queued.waitErr(t); e.Code != sdk.CodeUnavailable || !strings.Contains(e.Message, "shutting down") {
		ga.Release()
		t.Fatalf("queued caller got %q (code %d), want 503 shutting down", e.Message, e.Code)
	}
	h.world.expect(t, "stopped e") // idle: stopped at once
	select {
	case err := <-shut:
		t.Fatalf("shutdown returned (%v) while a request was in flight", err)
	default:
	}
	ga.Release()
	h.world.expect(t, "stopped a")
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	if _, err := h.r.Acquire(context.Background(), Request{Model: "a"}); err != ErrShuttingDown {
		t.Fatalf("acquire after shutdown: %v", err)
	}
}

// Rule 7 through the real Wasm runtime: a scheduler that loops forever is
// stopped by its deadline, its request gets a clear error, and the host
// keeps running on a fresh instance. The same policy then grants a model
// that is not loaded, which the router refuses and turns into an error
// rather than a caller left waiting.
func TestRouter_Rule7_LoopingWasmPolicy(t *testing.T) {
	rt, _, _ := policies(t)
	wasm, err := wasmbuildEvil()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	mod, err := rt.Compile(ctx, "evil.wasm", wasm)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessOpts{
		models: map[string]ModelConfig{"boom": {}},
		newSched: func(fx sdk.Effects) (SchedulerPolicy, error) {
			return rt.NewScheduler(ctx, mod, []byte(`{"misbehave": "loop", "model": "boom"}`), fx)
		},
	})
	e := h.acquire("boom").waitErr(t)
	if e.Code != sdk.CodeUnavailable || !strings.Contains(e.Message, "scheduler policy test failed") {
		t.Fatalf("looping policy: error %q (code %d), want 503 naming the policy", e.Message, e.Code)
	}
	e = h.acquire("a").waitErr(t)
	if e.Code != sdk.CodeInternal || !strings.Contains(e.Message, `granted model "a", which is stopped`) {
		t.Fatalf("grant of a stopped model: error %q (code %d)", e.Message, e.Code)
	}
	if c := h.r.Counters()["scheduler"]; c.Failures != 1 || c.RefusedEffects != 1 {
		t.Fatalf("counters = %+v, want 1 failure and 1 refusal", c)
	}
}

func wasmbuildEvil() ([]byte, error) {
	return wasmbuild.Build("github.com/loadout-dev/loadout/host/policy/testdata/guests/evil")
}

// countingSwapper counts the plans the router asks the Wasm group swapper
// for. Embedding *policy.Swapper passes its PurePlan claim on.
type countingSwapper struct {
	*policy.Swapper
	plans int
}

func (c *countingSwapper) Plan(q sdk.PlanRequest) (sdk.Plan, error) {
	c.plans++
	return c.Swapper.Plan(q)
}

// impureSwapper hides PurePlan: every plan goes to the module.
type impureSwapper struct{ c *countingSwapper }

func (s impureSwapper) Plan(q sdk.PlanRequest) (sdk.Plan, error) { return s.c.Plan(q) }
func (s impureSwapper) OnSwapStart(ev sdk.SwapStartEvent) error  { return s.c.OnSwapStart(ev) }

// The group swapper claims sdk.PurePlanner, so the router asks it once per
// target and running set; a swapper that does not claim it is asked for
// every request.
func TestRouter_PurePlansAreCached(t *testing.T) {
	for _, tc := range []struct {
		name      string
		pure      bool
		wantPlans int
	}{
		{"pure", true, 1},
		{"impure", false, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c *countingSwapper
			h := newHarness(t, harnessOpts{wrapSwap: func(sw *policy.Swapper) SwapperPolicy {
				c = &countingSwapper{Swapper: sw}
				if tc.pure {
					return c
				}
				return impureSwapper{c}
			}})
			// Five plans for one target and running set, asked on the run
			// loop as a scheduler asks them. (Requests cannot drive this:
			// fifo asks no plan for a model that is ready.)
			var plans int
			h.r.query(func() {
				fx := &effects{r: h.r}
				for range 5 {
					if _, err := fx.Plan("e"); err != nil {
						t.Errorf("Plan: %v", err)
					}
				}
				plans = c.plans
			})
			if plans != tc.wantPlans {
				t.Fatalf("%d plans for 5 requests, want %d", plans, tc.wantPlans)
			}
		})
	}
}

// garbageScheduler makes every kind of call a buggy policy might, then
// fails the real request properly.
type garbageScheduler struct {
	silentScheduler
	results []error
	granted bool
}

func (g *garbageScheduler) OnRequest(ev sdk.RequestEvent) error {
	fx := g.fx
	g.granted = fx.GrantServe(ev.ID+1000, "a") // no such request
	fx.GrantError(ev.ID+1000, sdk.CodeInternal, "nobody")
	fx.SetQueuePosition(ev.ID+1000, 3)
	g.results = []error{
		fx.StartSwap(sdk.SwapRequest{Model: "nope"}),
		fx.StartSwap(sdk.SwapRequest{Model: "a", Evict: []string{"a"}}),
		fx.StartSwap(sdk.SwapRequest{Model: "a", Evict: []string{"ghost"}}),
		fx.StopProcesses([]string{"ghost"}),
	}
	fx.GrantError(ev.ID, sdk.CodeModelNotFound, "handled")
	return nil
}

func TestRouter_PolicyGarbageIsRefused(t *testing.T) {
	g := &garbageScheduler{}
	h := newHarness(t, harnessOpts{newSched: func(fx sdk.Effects) (SchedulerPolicy, error) {
		g.fx = fx
		return g, nil
	}})
	if e := h.acquire("a").waitErr(t); e.Message != "handled" || e.Code != sdk.CodeModelNotFound {
		t.Fatalf("the real request got %v", e)
	}
	want := []error{sdk.ErrUnknownModel, sdk.ErrBadArgument, sdk.ErrUnknownModel, sdk.ErrUnknownModel}
	for i, err := range g.results {
		if !errors.Is(err, want[i]) {
			t.Errorf("call %d: err = %v, want %v", i, err, want[i])
		}
	}
	if g.granted {
		t.Error("GrantServe of an unknown request returned true")
	}
	if c := h.r.Counters()["scheduler"]; c.RefusedEffects != 7 {
		t.Errorf("refused = %d, want 7 (3 unknown ids, 4 bad swaps or stops)", c.RefusedEffects)
	}
	h.expectState("a", "stopped")
	h.world.expectNone(t)
}

// A model that uses more GPU memory than its estimate is noticed once
// measured, and its lease is corrected to what it really uses.
func TestRouter_MeasuredMemoryCorrectsTheLease(t *testing.T) {
	const gib = 1 << 30
	ledger := gpu.NewLedger(gpu.NewDeclared([]gpu.DeclaredDevice{{Name: "sim0", Memory: 24 * gib}}), 0)
	h := newHarness(t, harnessOpts{
		ledger:  ledger,
		measure: 5 * time.Millisecond,
		models:  map[string]ModelConfig{"a": {VRAM: 4 * gib}},
	})
	h.procs["a"].memory = 7 * gib
	h.acquire("a").wait(t).Release()
	if lease, _ := ledger.Lease("a"); lease[0] != 4*gib && lease[0] != 7*gib {
		t.Fatalf("lease after load = %v", lease)
	}
	for h.status("a").Measured != 7*gib {
		h.r.query(func() {}) // measurements arrive as loop events
	}
	if lease, _ := ledger.Lease("a"); lease[0] != 7*gib {
		t.Fatalf("lease after measuring = %d bytes, want 7 GiB", lease[0])
	}
	if st := h.status("a"); !slices.Equal(st.Devices, []int{0}) {
		t.Fatalf("devices = %v, want [0]", st.Devices)
	}
	if err := h.r.Unload(context.Background(), UnloadOptions{Models: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	if _, held := ledger.Lease("a"); held {
		t.Fatal("an unloaded model still holds its lease")
	}
}

// Rule 7's fallback: a scheduler that crashes on every request is disabled
// after the crash limit, and the fallback scheduler takes over: requests are
// scheduled again instead of failing.
func TestRouter_Rule7_FallbackTakesOverFromCrashLoop(t *testing.T) {
	rt, _, _ := policies(t)
	wasm, err := wasmbuildEvil()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	mod, err := rt.Compile(ctx, "evil.wasm", wasm)
	if err != nil {
		t.Fatal(err)
	}
	_, fifo, _ := policies(t)
	h := newHarness(t, harnessOpts{
		newSched: func(fx sdk.Effects) (SchedulerPolicy, error) {
			primary, err := rt.NewScheduler(ctx, mod, []byte(`{"misbehave": "panic"}`), fx)
			if err != nil {
				return nil, err
			}
			return policy.NewFallbackScheduler(primary, func() (*policy.Scheduler, error) {
				return rt.NewScheduler(ctx, fifo, []byte("{}"), fx)
			}, policy.Backoff{Initial: time.Hour}), nil
		},
	})
	crashes := 0
	for ; crashes < 20; crashes++ {
		c := h.acquire("a")
		c.waitDone(t)
		if c.err == nil {
			c.grant.Release()
			break // served: the fallback has taken over
		}
		if e, ok := c.err.(*Error); !ok || e.Code != sdk.CodeUnavailable {
			t.Fatalf("request %d: %v, want a 503 from the crashing policy", crashes, c.err)
		}
	}
	if crashes == 0 || crashes >= 20 {
		t.Fatalf("served after %d failed requests; want some crashes, then the fallback", crashes)
	}
	h.world.expect(t, "starting a", "ready a") // the fallback scheduled a real load
	c := h.r.Counters()["scheduler"]
	if c.Failures != crashes {
		t.Fatalf("failures = %d, want %d", c.Failures, crashes)
	}
	// The failures are the disabled module's, not the fallback's that
	// serves now (GET /api/policies and the metrics read them so).
	if own := c.Of("evil.wasm", false); own.Failures != crashes || !strings.Contains(own.LastError, "evil.wasm") {
		t.Errorf("evil.wasm's counters %+v, want its %d failures", own, crashes)
	}
	if fb := c.Of(fifo.Name, true); fb.Failures != 0 || fb.LastError != "" {
		t.Errorf("the fallback's counters %+v, want no failures of its own", fb)
	}
}

// Grant.LoadWait is the part of a caller's wait its model spent loading:
// all of the wait of a caller that came while it loaded, nothing for one
// that came when it was ready. The router's clock is moved by hand.
func TestRouter_GrantLoadWait(t *testing.T) {
	clock := newManualClock()
	h := newHarness(t, harnessOpts{clock: clock})
	release := h.procs["a"].hold()
	c := h.acquire("a")
	h.world.expect(t, "starting a")
	clock.advance(50 * time.Millisecond)
	release()
	h.world.expect(t, "ready a")
	g := c.wait(t)
	if g.LoadWait != 50*time.Millisecond {
		t.Errorf("cold grant: LoadWait %v, want the 50 ms the load took", g.LoadWait)
	}
	g.Release()
	g = h.acquire("a").wait(t)
	g.Release()
	if g.LoadWait != 0 {
		t.Errorf("warm grant: LoadWait %v, want 0", g.LoadWait)
	}
}

// A model a running swap evicted is the swap's no longer once its stop
// has ended: a request for it starts its own load at once (evicting
// another idle model), rather than wait out the target's load and then
// its own; and when the first swap ends, the model it evicted and that
// loaded since stays ready and keeps its GPU lease.
func TestRouter_AnEvictedModelLoadsAgainWhileItsEvictorStillLoads(t *testing.T) {
	ledger, clock := gpu.NewLedger(gpu.NewDeclared([]gpu.DeclaredDevice{{Name: "sim0", Memory: 8 * gib}, {Name: "sim1", Memory: 8 * gib}}), 0), newManualClock()
	h := newHarness(t, harnessOpts{
		ledger: ledger, clock: clock, tick: time.Hour, newSwap: prioritylru(t),
		models: map[string]ModelConfig{"a": {VRAM: 6 * gib}, "b": {VRAM: 6 * gib}, "c": {VRAM: 6 * gib}},
	})
	for _, m := range []string{"a", "c"} { // a is the least recently used
		clock.advance(time.Minute)
		h.acquire(m).wait(t).Release()
	}
	h.world.expect(t, "starting a", "ready a", "starting c", "ready c")
	release := h.procs["b"].hold()
	defer release()
	clock.advance(time.Minute)
	b := h.acquire("b")
	h.world.expect(t, "stopped a", "starting b")
	h.awaitState("a", "stopped")
	a := h.acquire("a") // b still loading
	h.world.expect(t, "stopped c", "starting a", "ready a")
	a.wait(t).Release()
	h.expectState("b", "starting")
	release()
	b.wait(t).Release()
	h.world.expect(t, "ready b")
	h.expectState("a", "ready")
	h.expectState("c", "stopped")
	for _, m := range []string{"a", "b"} {
		if _, ok := ledger.Lease(m); !ok {
			t.Errorf("%s holds no GPU lease after both swaps", m)
		}
	}
	if _, ok := ledger.Lease("c"); ok {
		t.Error("c, stopped, still holds a GPU lease")
	}
}
