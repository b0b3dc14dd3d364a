package router

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/internal/proctest"
)

// quickLiveness probes often and gives up after two failures, so a hung
// server is found in tens of milliseconds.
var quickLiveness = Liveness{Interval: 10 * time.Millisecond, Timeout: 50 * time.Millisecond, Failures: 2}

// A server that stops answering its health check while a request is in
// flight is killed, its model failed with the reason, and the next
// request starts it again.
func TestRouter_Liveness_UnansweredProbesKillTheServer(t *testing.T) {
	h := newHarness(t, harnessOpts{liveness: quickLiveness})
	c := h.acquire("a")
	h.world.expect(t, "starting a", "ready a")
	g := c.wait(t)

	h.procs["a"].hang()
	h.world.expect(t, "killed a")
	h.awaitState("a", "failed")
	if st := h.status("a"); !strings.Contains(st.LastError, "hung: its health check failed 2 times") {
		t.Fatalf("last error %q does not say it hung", st.LastError)
	}
	g.Release()

	h.procs["a"].mu.Lock()
	h.procs["a"].unhealthy = nil
	h.procs["a"].mu.Unlock()
	c = h.acquire("a")
	h.world.expect(t, "starting a", "ready a")
	c.wait(t).Release()
	h.awaitState("a", "ready")
}

// A server that answers nothing is probed again as soon as a probe that
// waited out its timeout ends, not at the periodic tick after it (which
// that probe's answer, coming a moment after it, missed): its failed
// probes start max(Interval, Timeout) apart, so it is found hung within
// Interval + Failures × max(Interval, Timeout) of its hang (20 s with the
// defaults), not up to twice that; and never more often than Interval.
func TestRouter_Liveness_TimedOutProbesFollowEachOther(t *testing.T) {
	lv := Liveness{Interval: 500 * time.Millisecond, Timeout: 500 * time.Millisecond, Failures: 4}
	h := newHarness(t, harnessOpts{liveness: lv})
	c := h.acquire("a")
	h.world.expect(t, "starting a", "ready a")
	g := c.wait(t)
	p := h.procs["a"]
	p.mu.Lock()
	p.wedged = true
	p.mu.Unlock()
	h.world.expect(t, "killed a")
	g.Release()

	p.mu.Lock()
	probes := slices.Clone(p.probes)
	p.mu.Unlock()
	if len(probes) < lv.Failures {
		t.Fatalf("%d probes before the kill; want at least %d", len(probes), lv.Failures)
	}
	failed := probes[len(probes)-lv.Failures:] // the probes that failed in a row
	// A probe's answer and the tick it misses are a moment apart; a wait
	// for the next tick would make the gaps 2 × Interval. Their mean is
	// asserted, not each one: a probe started late on a loaded machine
	// shortens the next gap by what it lengthened its own.
	n := len(failed) - 1
	if mean := failed[n].Sub(failed[0]) / time.Duration(n); mean < lv.Timeout*9/10 || mean >= lv.Timeout+lv.Interval/2 {
		t.Errorf("failed probes started %s apart on average (%d gaps); want the timeout (%s), give or take scheduling", mean, n, lv.Timeout)
	}
}

// A probe still out when its instance goes (here it crashes, and the
// next request starts another) does not stop the new instance from being
// probed: the old probe's late answer is dropped, and the new instance,
// hung, is found and killed. Before, the late answer left the model
// marked as probed for as long as it lived, so a hung server with
// requests in flight was never found (the soak's stopped server, held
// by ten requests for minutes).
func TestRouter_Liveness_AProbeOfAGoneInstanceDoesNotBlockTheNext(t *testing.T) {
	lv := Liveness{Interval: 20 * time.Millisecond, Timeout: 500 * time.Millisecond, Failures: 2}
	h := newHarness(t, harnessOpts{liveness: lv})
	p := h.procs["a"]
	p.mu.Lock()
	p.wedged, p.probed = true, make(chan struct{}, 1)
	p.mu.Unlock()
	c := h.acquire("a")
	h.world.expect(t, "starting a", "ready a")
	g := c.wait(t)
	select {
	case <-p.probed: // a probe of the first instance is out, and stays out for its Timeout
	case <-time.After(10 * time.Second):
		t.Fatal("the serving instance was not probed")
	}
	h.world.crash(t, "a")
	h.awaitState("a", "failed")
	g.Release()

	p.mu.Lock()
	p.wedged, p.probed = false, nil
	p.mu.Unlock()
	p.hang() // the next instance fails its checks at once
	c = h.acquire("a")
	h.world.expect(t, "starting a", "ready a")
	g = c.wait(t)
	h.world.expect(t, "killed a")
	g.Release()
}

// An idle server is not probed: one that would fail its health check
// stays ready while nothing is in flight, and is found as soon as
// something is.
func TestRouter_Liveness_OnlyBusyServersAreProbed(t *testing.T) {
	h := newHarness(t, harnessOpts{liveness: quickLiveness})
	c := h.acquire("a")
	h.world.expect(t, "starting a", "ready a")
	c.wait(t).Release()
	h.procs["a"].hang()
	// Let many probe intervals pass on the run loop: each query is an
	// event it handles in order with its ticks.
	deadline := time.Now().Add(20 * quickLiveness.Interval)
	for time.Now().Before(deadline) {
		h.expectState("a", "ready")
	}
	h.world.expectNone(t)

	c = h.acquire("a")
	g := c.wait(t)
	h.world.expect(t, "killed a")
	h.awaitState("a", "failed")
	g.Release()
}

// A stream the proxy reports stalled (Grant.Stalled) kills its server at
// once; a report about an instance that is gone changes nothing.
func TestRouter_Liveness_StalledGrantKillsTheServer(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	c := h.acquire("a")
	h.world.expect(t, "starting a", "ready a")
	g := c.wait(t)
	g.Stalled("no bytes for 2m0s")
	h.world.expect(t, "killed a")
	h.awaitState("a", "failed")
	if st := h.status("a"); st.LastError != "hung: no bytes for 2m0s" {
		t.Fatalf("last error %q", st.LastError)
	}
	g.Release()

	c = h.acquire("a")
	h.world.expect(t, "starting a", "ready a")
	g2 := c.wait(t)
	g.Stalled("late report about the old instance")
	h.expectState("a", "ready")
	h.world.expectNone(t)
	g2.Release()
}

// An operator's unload of a model that is loading ends the load at once
// instead of waiting for it, however long (or hung) it is; the model is
// stopped, not failed, and may be started again at once.
func TestRouter_UnloadAbortsALoad(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	release := h.procs["a"].hold() // a load that never ends by itself
	defer release()
	c := h.acquire("a")
	h.world.expect(t, "starting a")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.r.Unload(ctx, UnloadOptions{Models: []string{"a"}}); err != nil {
		t.Fatalf("unload of a loading model: %v", err)
	}
	h.world.expect(t, "aborted a")
	h.expectState("a", "stopped")
	if err := c.waitErr(t); !strings.Contains(err.Message, "a") {
		t.Fatalf("the waiter's error %q", err.Message)
	}
	release()
	c = h.acquire("a")
	h.world.expect(t, "starting a", "ready a")
	c.wait(t).Release()
}

// Shutdown ends a load that nothing waits for any more (its request got
// the shutdown's error) instead of waiting for it, however long (or hung)
// it is, and returns without its deadline: the model is stopped, not
// failed. Before, a large model's load held shutdown until it ended or
// the shutdown timeout ran out.
func TestRouter_ShutdownAbortsALoad(t *testing.T) {
	var logged proctest.LockedBuffer
	h := newHarness(t, harnessOpts{logger: slog.New(slog.NewTextHandler(&logged, nil))})
	release := h.procs["a"].hold() // a load that never ends by itself
	defer release()
	c := h.acquire("a")
	h.world.expect(t, "starting a")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := h.r.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown while a model loads: %v, want it done before its deadline", err)
	}
	h.world.expect(t, "aborted a")
	if e := c.waitErr(t); !strings.Contains(e.Message, "shutting down") {
		t.Errorf("the waiter's error %q, want shutting down", e.Message)
	}
	if out := logged.String(); !strings.Contains(out, `msg="model start aborted" model=a by=shutdown`) || strings.Contains(out, "failed to start") {
		t.Errorf("the log of a load ended by shutdown, want it aborted, not failed:\n%s", out)
	}
}

// A server that hangs while shutdown waits for its requests in flight is
// still found hung and killed, so the requests end with the hang's error
// and the shutdown goes on: probing stopped at shutdown, and the shutdown
// waited out its timeout (or the stream's idle limit) with its clients.
func TestRouter_Liveness_ProbesDuringShutdown(t *testing.T) {
	h := newHarness(t, harnessOpts{liveness: quickLiveness})
	c := h.acquire("a")
	h.world.expect(t, "starting a", "ready a")
	g := c.wait(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- h.r.Shutdown(ctx) }()
	h.procs["a"].hang()
	h.world.expect(t, "killed a")
	if why := g.Ended(); !strings.Contains(why, "hung") {
		t.Errorf("the grant's server ended for %q, want its hang", why)
	}
	g.Release() // the proxy ends the request when its server is killed
	if err := <-shut; err != nil {
		t.Fatalf("shutdown: %v, want it done once the hung server was killed", err)
	}
}
