package router

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/loadout-dev/loadout/sdk"
)

// countingScheduler counts the events the loop delivers to the scheduler
// it wraps. Its counters are touched on the run loop only; tests read them
// through the loop (count).
type countingScheduler struct {
	SchedulerPolicy
	requests, serveDones int
}

func (c *countingScheduler) OnRequest(ev sdk.RequestEvent) error {
	c.requests++
	return c.SchedulerPolicy.OnRequest(ev)
}

func (c *countingScheduler) OnServeDone(ev sdk.ServeDoneEvent) error {
	c.serveDones++
	return c.SchedulerPolicy.OnServeDone(ev)
}

// countingHarness is the usual harness with the Wasm fifo wrapped in a
// countingScheduler, the warm path on or off.
func countingHarness(t *testing.T, warm bool, models map[string]ModelConfig) (*harness, *countingScheduler) {
	t.Helper()
	cs := &countingScheduler{}
	h := newHarness(t, harnessOpts{noWarm: !warm, models: models, newSched: func(fx sdk.Effects) (SchedulerPolicy, error) {
		cs.SchedulerPolicy = wasmFIFO(t, fx)
		return cs, nil
	}})
	return h, cs
}

// count reads the scheduler's counters on the loop.
func (h *harness) count(cs *countingScheduler) (requests, serveDones int) {
	h.r.query(func() { requests, serveDones = cs.requests, cs.serveDones })
	return
}

// idle waits until model has nothing in flight: every release processed.
func (h *harness) idle(t *testing.T, model string) {
	t.Helper()
	h.until(t, model+" idle", func() bool { return h.status(model).InFlight == 0 })
}

// admitted reads model's warm-path admission limit on the loop.
func (h *harness) admitted(model string) (limit uint32) {
	h.r.query(func() { limit = h.r.loop.models[model].admitLimit })
	return
}

// The warm path: once fifo has served a request for a ready model at once
// and admitted it, further requests for it cost no OnRequest and their
// ends no OnServeDone; with the warm path off, every one does.
func TestRouter_WarmPath_ReadyModelCostsNoPolicyCall(t *testing.T) {
	const n = 7
	for _, warm := range []bool{true, false} {
		t.Run(map[bool]string{true: "warm", false: "off"}[warm], func(t *testing.T) {
			h, cs := countingHarness(t, warm, nil)
			for range n {
				h.acquire("a").wait(t).Release()
				h.idle(t, "a")
			}
			h.world.expect(t, "starting a", "ready a")
			requests, serveDones := h.count(cs)
			wantReq, wantDone := n, n
			if warm {
				// The first request loads a (a swap: no admission); the
				// second is served at once and admits a; its end and
				// every later request are the host's.
				wantReq, wantDone = 2, 1
			}
			if requests != wantReq || serveDones != wantDone {
				t.Fatalf("OnRequest ×%d, OnServeDone ×%d; want ×%d, ×%d", requests, serveDones, wantReq, wantDone)
			}
			if got, want := h.admitted("a"), map[bool]uint32{true: 10, false: 0}[warm]; got != want {
				t.Fatalf("admission limit %d, want %d (fifo's default concurrency limit, or none)", got, want)
			}
		})
	}
}

// admit makes model ready and admitted: a cold load, then one request
// served at once.
func (h *harness) admit(t *testing.T, model string) {
	t.Helper()
	h.acquire(model).wait(t).Release()
	h.world.expect(t, "starting "+model, "ready "+model)
	h.idle(t, model)
	h.acquire(model).wait(t).Release()
	h.idle(t, model)
	if h.admitted(model) == 0 {
		t.Fatalf("%s not admitted after a request served at once", model)
	}
}

// Rule 3 on the warm path: a grant the host makes itself to a caller that
// already left does not count in flight, so the model can still be
// evicted.
func TestRouter_Rule3_WarmGrantToDepartedCallerNotCounted(t *testing.T) {
	h, _ := countingHarness(t, true, nil)
	h.admit(t, "a")
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	var ended bool
	var inFlight int
	h.r.query(func() {
		l := &h.r.loop
		l.nextID++
		w := &waiter{id: l.nextID, ctx: gone, req: Request{Model: "a"}, respond: make(chan result)}
		ended = h.r.admitWarm(w)
		inFlight = l.models["a"].inFlight
	})
	if !ended || inFlight != 0 {
		t.Fatalf("warm grant to a departed caller: ended=%v with %d in flight, want true and 0", ended, inFlight)
	}
	h.acquire("b").wait(t).Release()
	h.world.expect(t, "stopped a", "starting b", "ready b")
}

// Rule 6 and rule 5 on the warm path: while a request for b waits for a
// (its exclusive group mate) to become idle, a's warm requests go on, the
// scheduler hears their ends (it holds a request), and a is evicted only
// once idle; every request ends once.
func TestRouter_Rule6_WarmPathNeverEvictsBusyModel(t *testing.T) {
	h, cs := countingHarness(t, true, nil)
	h.admit(t, "a")
	busy := h.acquire("a").wait(t)
	cb := h.acquire("b")
	cb.held(t, false) // queued: loading b would evict a, which is busy
	_, before := h.count(cs)
	h.acquire("a").wait(t).Release() // still served while b waits
	h.until(t, "the scheduler hears a's end", func() bool { _, d := h.count(cs); return d > before })
	h.world.expectNone(t)
	busy.Release()
	h.world.expect(t, "stopped a", "starting b", "ready b")
	cb.wait(t).Release()
}

// A request beyond the admitted limit goes to the scheduler, which queues
// it; holding it revokes the admission, which the host then refuses to
// give back while the request is held; the freed slot serves it.
func TestRouter_WarmPath_LimitAndHeldRequestRevoke(t *testing.T) {
	h, _ := countingHarness(t, true, map[string]ModelConfig{"a": {ConcurrencyLimit: 2}})
	h.admit(t, "a")
	if got := h.admitted("a"); got != 2 {
		t.Fatalf("admission limit %d, want the model's concurrency limit 2", got)
	}
	g1, g2 := h.acquire("a").wait(t), h.acquire("a").wait(t)
	third := h.acquire("a")
	if p := third.held(t, false); p.Position != 1 {
		t.Fatalf("third request at %+v, want queued first", p)
	}
	if got := h.admitted("a"); got != 0 {
		t.Fatalf("admission %d while the scheduler holds a request for a, want revoked", got)
	}
	var err error
	h.r.query(func() { err = h.r.loop.fx.Admit("a", 2, 0) })
	if !errors.Is(err, sdk.ErrNotReady) {
		t.Fatalf("Admit while a request is held = %v, want ErrNotReady", err)
	}
	g1.Release()
	third.wait(t).Release()
	g2.Release()
	h.idle(t, "a")
}

// Anything the policy must see takes the admission back: an unload, a
// swap that evicts the model, a failed policy.
func TestRouter_WarmPath_Revoked(t *testing.T) {
	t.Run("unload", func(t *testing.T) {
		h, _ := countingHarness(t, true, nil)
		h.admit(t, "a")
		if err := h.r.Unload(context.Background(), UnloadOptions{Models: []string{"a"}}); err != nil {
			t.Fatal(err)
		}
		h.world.expect(t, "stopped a")
		if h.admitted("a") != 0 {
			t.Fatal("admission survived an unload")
		}
	})
	t.Run("eviction", func(t *testing.T) {
		h, _ := countingHarness(t, true, nil)
		h.admit(t, "a")
		h.acquire("b").wait(t).Release()
		h.world.expect(t, "stopped a", "starting b", "ready b")
		if h.admitted("a") != 0 {
			t.Fatal("admission survived the model's eviction")
		}
	})
	t.Run("policy failure", func(t *testing.T) {
		h, _ := countingHarness(t, true, nil)
		h.admit(t, "a")
		h.r.query(func() { h.r.schedulerFailed("test", errors.New("boom")) })
		if h.admitted("a") != 0 {
			t.Fatal("admission survived the policy's failure")
		}
	})
	t.Run("bad flags", func(t *testing.T) {
		h, _ := countingHarness(t, true, nil)
		h.admit(t, "a")
		var err error
		h.r.query(func() { err = h.r.loop.fx.Admit("a", 1, 1<<7) })
		if !errors.Is(err, sdk.ErrBadArgument) {
			t.Fatalf("Admit with undefined flags = %v, want ErrBadArgument", err)
		}
	})
}

// SnapshotInto (what the Wasm snapshot import uses) gives what Snapshot
// gives, in the storage of the snapshot it is handed.
func TestEffects_SnapshotIntoReusesStorage(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.acquire("a").wait(t).Release()
	h.world.expect(t, "starting a", "ready a")
	h.r.query(func() {
		fx := h.r.loop.fx
		var dst sdk.Snapshot
		fx.SnapshotInto(&dst)
		first := &dst.Models[0]
		fx.SnapshotInto(&dst)
		if want := fx.Snapshot(); !reflect.DeepEqual(dst, want) {
			t.Errorf("SnapshotInto = %+v, want %+v", dst, want)
		}
		if &dst.Models[0] != first {
			t.Error("SnapshotInto allocated new storage for the models")
		}
	})
}

// A reload that lowers a running model's concurrencyLimit (no restart)
// takes effect at once: the warm path's admission, made under the old
// limit, is revoked, and the scheduler admits again under the new one
// (the old admission kept granting up to the old limit).
func TestRouter_WarmPath_ReloadedLimitRevokes(t *testing.T) {
	h, _ := countingHarness(t, true, map[string]ModelConfig{"a": {ConcurrencyLimit: 4}})
	h.admit(t, "a")
	if got := h.admitted("a"); got != 4 {
		t.Fatalf("admission limit %d, want 4", got)
	}
	models := map[string]ModelConfig{}
	for _, name := range []string{"a", "b", "c", "e"} {
		models[name] = ModelConfig{}
	}
	models["a"] = ModelConfig{ConcurrencyLimit: 1}
	if err := h.r.UpdateModels(models, nil); err != nil {
		t.Fatal(err)
	}
	if got := h.admitted("a"); got != 0 {
		t.Fatalf("admission %d after the limit was lowered to 1, want revoked", got)
	}
	g1 := h.acquire("a").wait(t)
	second := h.acquire("a")
	second.held(t, false) // the new limit: one at a time
	g1.Release()
	second.wait(t).Release()
	h.idle(t, "a")
}
