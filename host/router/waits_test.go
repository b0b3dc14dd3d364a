package router

import (
	"math/rand/v2"
	"slices"
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
	if len(w.ring) != waitWindow || len(w.vals) != 1 || w.counts[0] != waitWindow {
		t.Errorf("ring %d, waits %v counted %v: want %d instant grants", len(w.ring), w.vals, w.counts, waitWindow)
	}
}

// The distinct waits and their counts stay the ring's waits, through a
// window and a half of grants with many equal waits and some distinct
// ones (every count above 0, the waits ascending), and waits are kept to
// the microsecond.
func TestWaitRecord_CountsFollowTheRing(t *testing.T) {
	var w waitRecord
	r := rand.New(rand.NewPCG(1, 2))
	for i := range waitWindow * 3 / 2 {
		d := time.Duration(r.IntN(4)) * time.Second // long runs of equals
		if r.IntN(10) == 0 {
			d = time.Duration(r.Int64N(int64(time.Minute))) // distinct, to the ns
		}
		w.add(d)
		if i%509 != 0 && i != waitWindow*3/2-1 {
			continue
		}
		want := slices.Clone(w.ring)
		slices.Sort(want)
		var got []time.Duration
		for j, v := range w.vals {
			if w.counts[j] == 0 || j > 0 && w.vals[j-1] >= v {
				t.Fatalf("after %d grants: waits %v with counts %v", i+1, w.vals, w.counts)
			}
			for range w.counts[j] {
				got = append(got, v)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("after %d grants the counted waits are not the ring's", i+1)
		}
	}
	for _, d := range w.ring {
		if d%time.Microsecond != 0 {
			t.Fatalf("wait %v kept finer than the microsecond", d)
		}
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
