package router

import (
	"testing"
	"time"

	"github.com/loadout-dev/loadout/sdk"
)

// The record's percentile is simulate's nearest rank, Above counts only
// waits strictly longer than it (a plateau of equal waits at the
// percentile is room, not a cost), held requests that have already waited
// longer count as above, and the window forgets the oldest grant.
func TestWaitRecord_PercentileAboveHeldAndWindow(t *testing.T) {
	var w waitRecord
	if st := w.stats(nil); st.Granted != 0 || st.P95 != 0 || st.Slack() != 0 {
		t.Fatalf("empty record: %+v, slack %d", st, st.Slack())
	}
	// 100 grants: 80 served at once, 19 after a 10 s load, 1 after 30 s.
	for range 80 {
		w.add(0)
	}
	for range 19 {
		w.add(10 * time.Second)
	}
	w.add(30 * time.Second)
	st := w.stats(nil)
	if st.Granted != 100 || st.P95 != int64(10*time.Second) || st.Above != 1 {
		t.Fatalf("stats %+v, want 100 granted, p95 10 s, 1 above", st)
	}
	// The 95th of 100 may be 10 s with 5 above it: room for 4 more.
	if got := st.Slack(); got != 4 {
		t.Errorf("slack %d, want 4", got)
	}
	st = w.stats([]time.Duration{3 * time.Second, 11 * time.Second, 12 * time.Second})
	if st.Held != 3 || st.Above != 3 || st.Slack() != 2 {
		t.Errorf("with two held past the p95: %+v, slack %d; want 3 held, 3 above, slack 2", st, st.Slack())
	}
	// Fill the window with instant grants: the 10 s waits age out.
	for range waitWindow {
		w.add(0)
	}
	if st := w.stats(nil); st.Granted != waitWindow || st.P95 != 0 || st.Above != 0 {
		t.Errorf("after a window of instant grants: %+v", st)
	}
	if len(w.ring) != waitWindow || len(w.sorted) != waitWindow {
		t.Errorf("ring %d, sorted %d: want both %d", len(w.ring), len(w.sorted), waitWindow)
	}
}

// Waits as policies read it (the `waits` import): the box's grants and
// each model's, a cold load's wait among them; an unknown model is
// refused.
func TestRouter_WaitsRecordsGrants(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.acquire("a").wait(t).Release() // a cold load
	for range 3 {
		h.acquire("a").wait(t).Release()
	}
	var box, a, b waitsRead
	h.r.OnLoop(func() {
		box.st, box.ok = h.r.loop.fx.Waits("")
		a.st, a.ok = h.r.loop.fx.Waits("a")
		b.st, b.ok = h.r.loop.fx.Waits("b")
		_, unknownOK := h.r.loop.fx.Waits("nope")
		if unknownOK {
			t.Error("Waits of an unknown model: found")
		}
	})
	if !box.ok || box.st.Granted != 4 || !a.ok || a.st.Granted != 4 {
		t.Fatalf("box %+v, a %+v: want 4 grants each", box, a)
	}
	if box.st.P95 <= 0 || box.st.P95 != a.st.P95 {
		t.Errorf("p95 %d (box) and %d (a): want the cold load's wait, above 0", box.st.P95, a.st.P95)
	}
	if !b.ok || b.st.Granted != 0 || b.st.Held != 0 {
		t.Errorf("b, never asked for: %+v", b)
	}
}

type waitsRead struct {
	st sdk.WaitStats
	ok bool
}
