package policy

import (
	"testing"
	"time"
)

// A disabled policy's cool-down doubles with each disable that follows a
// retry, stops at Max, and starts over once the retried policy has run for
// Max without being disabled again.
func TestCooldown_ExponentialBackoff(t *testing.T) {
	c := cooldown{backoff: Backoff{Initial: time.Second, Max: 5 * time.Second}.withDefaults()}
	now := int64(0)
	var waits []time.Duration
	for range 5 {
		c.disable(now, "crash")
		waits = append(waits, time.Duration(c.retryAt-now))
		if c.due(c.retryAt - 1) {
			t.Fatal("due before its retry time")
		}
		now = c.retryAt
		if !c.due(now) {
			t.Fatal("not due at its retry time")
		}
		c.onFallback, c.revivedAt = false, now // retried; disabled again at once
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	for i := range want {
		if waits[i] != want[i] {
			t.Fatalf("cool-downs = %v, want %v", waits, want)
		}
	}
	now += int64(5 * time.Second) // ran for Max since its retry
	c.disable(now, "crash")
	if got := time.Duration(c.retryAt - now); got != time.Second {
		t.Fatalf("cool-down after a long healthy run = %v, want Initial", got)
	}
}
