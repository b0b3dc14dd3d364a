package router

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/policy"
	"github.com/loadout-dev/loadout/internal/wasmbuild"
	"github.com/loadout-dev/loadout/sdk"
)

// The faults a hostile tester found (issue 9), each held by a test that
// failed before its fix.

// until asks the loop until cond holds, for at most 10 s: each OnLoop is
// answered after every event sent before it, so this waits on the loop's
// progress, not on time.
func (h *harness) until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		h.r.OnLoop(func() {})
	}
}

// wasmFIFO returns the built-in fifo scheduler through the Wasm runtime,
// bound to fx.
func wasmFIFO(t *testing.T, fx sdk.Effects) *policy.Scheduler {
	t.Helper()
	rt, fifo, _ := policies(t)
	s, err := rt.NewScheduler(context.Background(), fifo, []byte("{}"), fx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// crossGranter grants model "a" to every request for "b" once "a" is
// ready, and loads "a" for requests for "a": a scheduler that confuses
// models.
type crossGranter struct {
	silentScheduler
	waiting []sdk.RequestID
}

func (c *crossGranter) OnRequest(ev sdk.RequestEvent) error {
	if ev.Model == "b" {
		c.fx.GrantServe(ev.ID, "a")
		return nil
	}
	if info, _ := c.fx.ModelState("a"); info.State == sdk.StateReady {
		c.fx.GrantServe(ev.ID, "a")
		return nil
	}
	if err := c.fx.StartSwap(sdk.SwapRequest{Model: "a"}); err != nil {
		c.fx.GrantError(ev.ID, sdk.CodeInternal, err.Error())
		return nil
	}
	c.fx.SetQueuePosition(ev.ID, 0)
	c.waiting = append(c.waiting, ev.ID)
	return nil
}

func (c *crossGranter) OnSwapDone(sdk.SwapDoneEvent) error {
	for _, id := range c.waiting {
		c.fx.GrantServe(id, "a")
	}
	c.waiting = nil
	return nil
}

// A grant of model a for a request that asked for b is refused: a's server
// never answers a request for b, and a's in-flight count is not touched.
func TestRouter_GrantOfAnotherModelIsRefused(t *testing.T) {
	cg := &crossGranter{}
	h := newHarness(t, harnessOpts{newSched: func(fx sdk.Effects) (SchedulerPolicy, error) {
		cg.fx = fx
		return cg, nil
	}})
	h.acquire("a").wait(t).Release()
	h.world.expect(t, "starting a", "ready a")
	e := h.acquire("b").waitErr(t)
	if e.Code != sdk.CodeInternal || !strings.Contains(e.Message, `granted model "a" to a request for "b"`) {
		t.Fatalf("error = %v (code %d), want the refused cross-model grant", e, e.Code)
	}
	if st := h.status("a"); st.InFlight != 0 {
		t.Fatalf("a's in-flight = %d after a refused grant", st.InFlight)
	}
	if c := h.r.Counters()["scheduler"]; c.RefusedEffects != 1 || !strings.Contains(c.LastError, "asked for model") {
		t.Fatalf("counters = %+v, want the refusal counted", c)
	}
}

// badArgs holds every request at a negative position and fails every
// request for "b" with an error code that does not exist.
type badArgs struct{ silentScheduler }

func (b badArgs) OnRequest(ev sdk.RequestEvent) error {
	if ev.Model == "b" {
		b.fx.GrantError(ev.ID, sdk.ErrorCode(99), "made-up code")
		return nil
	}
	b.fx.SetQueuePosition(ev.ID, -1)
	return nil
}

func (b badArgs) OnShutdown(sdk.ShutdownEvent) error { return nil }

// Effects with bad arguments are refused out loud (logged and counted) like
// every other refused effect, and the request still ends cleanly.
func TestRouter_EffectsWithBadArgumentsAreCounted(t *testing.T) {
	h := newHarness(t, harnessOpts{newSched: func(fx sdk.Effects) (SchedulerPolicy, error) {
		return badArgs{silentScheduler{fx}}, nil
	}})
	e := h.acquire("b").waitErr(t)
	if e.Code != sdk.CodeInternal || e.Message != "made-up code" {
		t.Fatalf("error = %v (code %d), want the message with an internal error code", e, e.Code)
	}
	c := h.acquire("a")
	if p := c.held(t, true); p.Position != 0 {
		t.Fatalf("held at %d, want 0", p.Position)
	}
	if got := h.r.Counters()["scheduler"]; got.RefusedEffects != 2 || !strings.Contains(got.LastError, "negative position") {
		t.Fatalf("counters = %+v, want both refusals counted", got)
	}
	c.cancel()
	c.waitDone(t)
}

// garbageSwapper plans to evict a model that is not running.
type garbageSwapper struct{ *policy.Swapper }

func (g garbageSwapper) Plan(q sdk.PlanRequest) (sdk.Plan, error) {
	return sdk.Plan{Evict: []string{"ghost"}}, nil
}

// A client whose load failed because the swapper returned garbage is told
// what the garbage was, not only "swapper failed".
func TestRouter_SwapperGarbageReasonReachesTheClient(t *testing.T) {
	h := newHarness(t, harnessOpts{wrapSwap: func(sw *policy.Swapper) SwapperPolicy { return garbageSwapper{sw} }})
	e := h.acquire("a").waitErr(t)
	if !strings.Contains(e.Message, `planned to evict "ghost", which is not running`) {
		t.Fatalf("error = %q, want the swapper's garbage named", e.Message)
	}
	h.world.expectNone(t)
}

// During a swap, an evicted model shows as stopped as soon as its process
// has exited, not when the target finishes loading.
func TestRouter_EvictedModelIsStoppedBeforeTheTargetIsReady(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.acquire("a").wait(t).Release()
	h.world.expect(t, "starting a", "ready a")
	release := h.procs["b"].hold()
	cb := h.acquire("b")
	h.world.expect(t, "stopped a", "starting b")
	h.until(t, "a to show as stopped", func() bool { return h.status("a").State == "stopped" })
	h.expectState("b", "starting")
	release()
	cb.wait(t).Release()
	h.world.expect(t, "ready b")
}

// ignoresUnload is the fifo scheduler with OnUnload swallowed, as a buggy
// or hostile policy might.
type ignoresUnload struct{ *policy.Scheduler }

func (ignoresUnload) OnUnload(sdk.UnloadEvent) error { return nil }

// An operator's unload is not the policy's to refuse: it answers, and the
// models stop, even when the scheduler ignores OnUnload.
func TestRouter_UnloadStopsModelsTheSchedulerIgnores(t *testing.T) {
	h := newHarness(t, harnessOpts{newSched: func(fx sdk.Effects) (SchedulerPolicy, error) {
		return ignoresUnload{wasmFIFO(t, fx)}, nil
	}})
	h.acquire("a").wait(t).Release()
	h.acquire("e").wait(t).Release()
	h.world.expect(t, "starting a", "ready a", "starting e", "ready e")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.r.Unload(ctx, UnloadOptions{Models: []string{"a"}}); err != nil {
		t.Fatalf("unload a: %v", err)
	}
	h.world.expect(t, "stopped a")
	if err := h.r.Unload(ctx, UnloadOptions{}); err != nil {
		t.Fatalf("unload all: %v", err)
	}
	h.world.expect(t, "stopped e")
}

// An unload never cuts a request in flight unless forced: the model takes
// no new request, stops when the last one ends, and a request that came
// meanwhile loads it again afterwards.
func TestRouter_UnloadDrainsInFlightRequests(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	g := h.acquire("a").wait(t)
	h.world.expect(t, "starting a", "ready a")
	unloaded := make(chan error, 1)
	go func() { unloaded <- h.r.Unload(context.Background(), UnloadOptions{Models: []string{"a"}}) }()
	h.until(t, "a to drain", func() bool { return h.status("a").State == "stopping" })
	h.world.expectNone(t)
	next := h.acquire("a")
	next.held(t, false) // queued behind the stop, not granted the draining server
	g.Release()
	h.world.expect(t, "stopped a")
	if err := <-unloaded; err != nil {
		t.Fatalf("unload: %v", err)
	}
	h.world.expect(t, "starting a", "ready a")
	next.wait(t).Release()
}

// A forced unload stops a model with requests in flight at once.
func TestRouter_ForcedUnloadStopsABusyModel(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	g := h.acquire("a").wait(t)
	defer g.Release()
	h.world.expect(t, "starting a", "ready a")
	if err := h.r.Unload(context.Background(), UnloadOptions{Models: []string{"a"}, Force: true}); err != nil {
		t.Fatalf("forced unload: %v", err)
	}
	h.world.expect(t, "stopped a")
}

// An unload that cannot finish in time answers with what it still waits
// for; the model still stops once its request ends.
func TestRouter_UnloadTimeoutSaysWhatIsPending(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	g := h.acquire("a").wait(t)
	h.world.expect(t, "starting a", "ready a")
	err := h.r.Unload(context.Background(), UnloadOptions{Models: []string{"a"}, Timeout: 20 * time.Millisecond})
	e, ok := err.(*Error)
	if !ok || e.Code != sdk.CodeTimeout || !strings.Contains(e.Message, "a (1 requests in flight") {
		t.Fatalf("unload = %v, want a timeout naming a's request in flight", err)
	}
	g.Release()
	h.world.expect(t, "stopped a")
}

// buildGuest compiles a test guest policy with the shared runtime.
func buildGuest(t *testing.T, pkg string) *policy.Module {
	t.Helper()
	rt, _, _ := policies(t)
	wasm, err := wasmbuild.Build(pkg)
	if err != nil {
		t.Fatal(err)
	}
	mod, err := rt.Compile(context.Background(), pkg, wasm)
	if err != nil {
		t.Fatal(err)
	}
	return mod
}

// A swapper that crash-loops on one target does not take the other models
// down: once it is disabled, the built-in group swapper plans in its place
// (the plan whose crash disabled it included), ready models serve, and the
// admin status says which policy is in charge and why.
func TestRouter_Rule7_SwapperFallbackKeepsServing(t *testing.T) {
	rt, _, group := policies(t)
	mod := buildGuest(t, "github.com/loadout-dev/loadout/host/policy/testdata/guests/swapper")
	var fs *policy.FallbackSwapper
	h := newHarness(t, harnessOpts{newSwap: func(host sdk.Host) (SwapperPolicy, error) {
		primary, err := rt.NewSwapper(context.Background(), mod, []byte(`{"panic_target": "b"}`), host)
		if err != nil {
			return nil, err
		}
		fs = policy.NewFallbackSwapper(primary, func() (*policy.Swapper, error) {
			return rt.NewSwapper(context.Background(), group, []byte(groupsExclusiveAB), host)
		}, policy.Backoff{Initial: time.Hour})
		return fs, nil
	}})
	h.acquire("a").wait(t).Release()
	h.world.expect(t, "starting a", "ready a")
	crashes := 0
	for ; crashes < 20; crashes++ {
		c := h.acquire("b")
		c.waitDone(t)
		if c.err == nil {
			c.grant.Release()
			break
		}
		if e, ok := c.err.(*Error); !ok || !strings.Contains(e.Message, "panic_target b") {
			t.Fatalf("request %d for b: %v, want the swapper's panic named", crashes, c.err)
		}
	}
	if crashes < policy.DefaultMaxCrashes || crashes >= 20 {
		t.Fatalf("b served after %d failures; want the crash loop, then the fallback", crashes)
	}
	h.world.expect(t, "stopped a", "starting b", "ready b") // the group fallback's plan
	h.acquire("b").wait(t).Release()                        // ready: served
	h.acquire("a").wait(t).Release()                        // and the others load
	h.world.expect(t, "stopped b", "starting a", "ready a")
	var st []policy.Status
	h.r.OnLoop(func() { st = fs.Statuses() })
	if len(st) != 2 || st[0].Active || st[0].Healthy || !strings.Contains(st[0].DisabledReason, "crash") ||
		st[0].RetryAt.IsZero() || !st[1].Fallback || !st[1].Active {
		t.Fatalf("statuses = %+v, want the primary disabled with a reason and retry time, the fallback active", st)
	}
}

// A scheduler disabled for crash-looping is replaced by the fallback, then
// tried again after its cool-down; the requests the fallback held then are
// handed to it rather than stranded.
func TestRouter_Rule7_DisabledSchedulerIsRetriedAfterCoolDown(t *testing.T) {
	rt, fifo, _ := policies(t)
	evil := buildGuest(t, "github.com/loadout-dev/loadout/host/policy/testdata/guests/evil")
	var fs *policy.FallbackScheduler
	h := newHarness(t, harnessOpts{
		tick: 5 * time.Millisecond,
		newSched: func(fx sdk.Effects) (SchedulerPolicy, error) {
			primary, err := rt.NewScheduler(context.Background(), evil, []byte(`{"misbehave": "panic", "model": "c"}`), fx)
			if err != nil {
				return nil, err
			}
			fs = policy.NewFallbackScheduler(primary, func() (*policy.Scheduler, error) {
				return rt.NewScheduler(context.Background(), fifo, []byte("{}"), fx)
			}, policy.Backoff{Initial: 200 * time.Millisecond})
			return fs, nil
		},
	})
	active := func() (primary bool) {
		h.r.OnLoop(func() { primary = fs.Statuses()[0].Active })
		return primary
	}
	for i := 0; active(); i++ {
		if i > 20 {
			t.Fatal("the primary was never disabled")
		}
		if e := h.acquire("c").waitErr(t); e.Code != sdk.CodeUnavailable {
			t.Fatalf("request for c: %v, want a 503 from the crash", e)
		}
	}
	// The fallback schedules: it loads a, and queues b behind a's request.
	ga := h.acquire("a").wait(t)
	h.world.expect(t, "starting a", "ready a")
	cb := h.acquire("b")
	cb.held(t, false)
	ga.Release()
	h.world.expect(t, "stopped a", "starting b", "ready b")
	gb := cb.wait(t)
	cb2 := h.acquire("a") // held by the fallback while b is busy
	cb2.held(t, false)
	h.until(t, "the primary to be retried", active)
	// Handed over to the primary, which grants without loading: a is not
	// ready, so the host refuses the grant and the caller hears why.
	if e := cb2.waitErr(t); !strings.Contains(e.Message, `granted model "a", which is stopped`) {
		t.Fatalf("handed-over request: %v, want the primary's decision", e)
	}
	gb.Release()
	h.acquire("b").wait(t).Release() // the primary serves a ready model
}
