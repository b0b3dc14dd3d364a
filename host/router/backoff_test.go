package router

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/sdk"
)

// A model that keeps failing to start backs off: the second failure in a
// row holds its next start back for crashBackoffBase; meanwhile a request
// for it fails at once, saying why and until when, and neither starts it
// nor evicts the model that runs in its place. After the wait a start is
// tried again, and a success resets the count.
func TestRouter_StartCrashLoopBacksOff(t *testing.T) {
	clock := newManualClock()
	h := newHarness(t, harnessOpts{clock: clock})
	h.procs["a"].fail = errors.New("error loading model")
	for i := 1; i <= 2; i++ {
		if e := h.acquire("a").waitErr(t); e.Code != sdk.CodeSwapFailed || !strings.Contains(e.Message, "error loading model") {
			t.Fatalf("start %d: %q (code %d), want the start error", i, e.Message, e.Code)
		}
		h.world.expect(t, "starting a", "failed a")
	}
	st := h.status("a")
	if st.StartFailures != 2 || !st.RetryAt.Equal(clock.now().Add(crashBackoffBase)) {
		t.Fatalf("status after two failed starts: failures %d, retry at %v; want 2 and now+%s", st.StartFailures, st.RetryAt, crashBackoffBase)
	}

	// b runs in a's exclusive group; a request for a during the backoff
	// must not evict it.
	h.acquire("b").wait(t).Release()
	h.world.expect(t, "starting b", "ready b")
	h.procs["a"].fail = nil
	clock.advance(crashBackoffBase - time.Second)
	e := h.acquire("a").waitErr(t)
	if e.Code != sdk.CodeSwapFailed || !strings.Contains(e.Message, "backing off after 2 failed starts") ||
		!strings.Contains(e.Message, "allowed in 1s") || !strings.Contains(e.Message, "error loading model") {
		t.Fatalf("request during the backoff: %q (code %d)", e.Message, e.Code)
	}
	h.expectState("b", "ready")
	h.world.expectNone(t)

	clock.advance(time.Second)
	h.acquire("a").wait(t).Release()
	h.world.expect(t, "stopped b", "starting a", "ready a")
	if st := h.status("a"); st.StartFailures != 0 || !st.RetryAt.IsZero() {
		t.Fatalf("after a good start: failures %d, retry at %v; want none", st.StartFailures, st.RetryAt)
	}
}

// An operator's unload of a model in its backoff lets the next request
// start it at once (the operator has fixed what made it fail) — an unload
// of every model too, which named only the running ones and left a failed
// model's backoff in place.
func TestRouter_UnloadEndsTheStartBackoff(t *testing.T) {
	for _, tc := range []struct {
		name   string
		models []string
	}{{"the model", []string{"a"}}, {"every model", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newManualClock()
			h := newHarness(t, harnessOpts{clock: clock})
			h.procs["a"].fail = errors.New("error loading model")
			for range 2 {
				h.acquire("a").waitErr(t)
				h.world.expect(t, "starting a", "failed a")
			}
			h.procs["a"].fail = nil
			if err := h.r.Unload(t.Context(), UnloadOptions{Models: tc.models}); err != nil {
				t.Fatal(err)
			}
			h.acquire("a").wait(t).Release()
			h.world.expect(t, "starting a", "ready a")
		})
	}
}

func TestBackoffAfter_DoublesToTheCap(t *testing.T) {
	want := []time.Duration{0, 0, crashBackoffBase, 2 * crashBackoffBase, 4 * crashBackoffBase}
	for n, w := range want {
		if got := backoffAfter(n); got != w {
			t.Errorf("backoffAfter(%d) = %s, want %s", n, got, w)
		}
	}
	if got := backoffAfter(100); got != crashBackoffMax {
		t.Errorf("backoffAfter(100) = %s, want the cap %s", got, crashBackoffMax)
	}
}

// A model server that crashes while requests are queued for it (here
// behind its concurrency limit of 1): the request in flight ends with the
// crash, and the queued ones are not failed — the model is started again
// and serves them (issue 15's rescheduling, one replica).
func TestRouter_CrashRestartsForQueuedRequests(t *testing.T) {
	h := newHarness(t, harnessOpts{models: map[string]ModelConfig{"a": {ConcurrencyLimit: 1}}})
	first := h.acquire("a").wait(t)
	h.world.expect(t, "starting a", "ready a")
	queued := []*call{h.acquire("a"), h.acquire("a")}
	for _, c := range queued {
		if p := c.held(t, false); p.Position < 1 {
			t.Fatalf("%v: position %d, want queued behind the limit", c, p.Position)
		}
	}
	h.world.crash(t, "a")
	first.Release() // the proxy's stream ended with the crash
	h.world.expect(t, "starting a", "ready a")
	// Served one at a time (the limit), in either order.
	ended := make(chan *call, len(queued))
	for _, c := range queued {
		go func() { <-c.done; ended <- c }()
	}
	for range queued {
		select {
		case c := <-ended:
			c.wait(t).Release()
		case <-time.After(10 * time.Second):
			t.Fatal("a queued request was not served after the restart")
		}
	}
	if st := h.status("a"); st.State != "ready" || st.StartFailures != 0 {
		t.Fatalf("after the restart: %+v", st)
	}
}
