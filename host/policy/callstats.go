package policy

import "time"

// CallBuckets are the upper bounds, in seconds, of the call-latency
// histogram kept per policy and event: from a microsecond (a cached
// native call) to a second (past any sane call timeout).
var CallBuckets = [...]float64{1e-6, 5e-6, 1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2, 0.1, 0.5, 1}

// CallStats counts one event export's calls into a policy and how long
// they took. Calls refused before reaching the policy (it is disabled or
// closed) are not counted; calls that failed or crashed are.
type CallStats struct {
	Event   string  // the export, e.g. "on_request", "plan"
	Count   uint64  // calls
	Seconds float64 // their total duration
	// Buckets[i] counts the calls that took at most CallBuckets[i] and more
	// than CallBuckets[i-1] (not cumulative); calls over the last bound
	// are in Count only.
	Buckets [len(CallBuckets)]uint64
}

// callStats is the supervisor's per-event tally; only the run loop
// touches it, so it needs no lock.
type callStats [numEvents]struct {
	count   uint64
	sum     time.Duration
	buckets [len(CallBuckets)]uint64
}

// record adds one call of ev that took d.
func (c *callStats) record(ev event, d time.Duration) {
	e := &c[ev]
	e.count++
	e.sum += d
	s := d.Seconds()
	for i, le := range CallBuckets {
		if s <= le {
			e.buckets[i]++
			return
		}
	}
}

// stats lists the events called at least once, in export order.
func (c *callStats) stats() []CallStats {
	var out []CallStats
	for ev := range numEvents {
		e := &c[ev]
		if e.count == 0 {
			continue
		}
		out = append(out, CallStats{Event: ev.String(), Count: e.count, Seconds: e.sum.Seconds(), Buckets: e.buckets})
	}
	return out
}
