package policy

import (
	"context"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/wire"
)

// TestCallStats_CountsEveryCallThatReachesThePolicy: each event export's
// calls are counted with their latency, failed ones included; calls
// refused before the policy (closed) are not.
func TestCallStats_CountsEveryCallThatReachesThePolicy(t *testing.T) {
	r, _ := newTestRuntime(t, Options{})
	spec := miniPolicy()
	spec.bodies["on_request"] = statusBody(wire.StatusError)
	m := compile(t, r, "mini.wasm", spec.bytes())
	s, err := r.NewScheduler(context.Background(), m, nil, newFakeEffects())
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_ = s.OnRequest(sdk.RequestEvent{ID: 1, Model: "a"}) // fails: still a call
	}
	if err := s.OnTick(sdk.TickEvent{}); err != nil {
		t.Fatal(err)
	}
	calls := s.Status().Calls
	if len(calls) != 2 || calls[0].Event != "on_request" || calls[0].Count != 3 || calls[1].Event != "on_tick" || calls[1].Count != 1 {
		t.Fatalf("calls %+v, want on_request ×3 then on_tick ×1", calls)
	}
	for _, c := range calls {
		var inBuckets uint64
		for _, n := range c.Buckets {
			inBuckets += n
		}
		if c.Seconds <= 0 || inBuckets > c.Count {
			t.Errorf("%s: %v s, %d in buckets of %d calls", c.Event, c.Seconds, inBuckets, c.Count)
		}
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	_ = s.OnTick(sdk.TickEvent{})
	if got := s.Status().Calls[1].Count; got != 1 {
		t.Errorf("on_tick after Close counted: %d calls, want 1", got)
	}
}

// TestCallStats_BucketBounds: a duration lands in the first bucket whose
// bound it does not exceed; one over every bound is counted only.
func TestCallStats_BucketBounds(t *testing.T) {
	var c callStats
	c.record(evTick, time.Microsecond)      // ≤ 1e-6: bucket 0
	c.record(evTick, 2*time.Microsecond)    // ≤ 5e-6: bucket 1
	c.record(evTick, 1500*time.Millisecond) // over 1 s: no bucket
	c.record(evPlan, 50*time.Millisecond)   // ≤ 5e-2
	st := c.stats()
	if len(st) != 2 || st[0].Event != "on_tick" || st[1].Event != "plan" {
		t.Fatalf("stats %+v", st)
	}
	if b := st[0].Buckets; st[0].Count != 3 || b[0] != 1 || b[1] != 1 || sum(b[:]) != 2 {
		t.Errorf("on_tick %+v", st[0])
	}
	if b := st[1].Buckets; b[9] != 1 || sum(b[:]) != 1 || st[1].Seconds != 0.05 {
		t.Errorf("plan %+v", st[1])
	}
}

func sum(xs []uint64) uint64 {
	var n uint64
	for _, x := range xs {
		n += x
	}
	return n
}
