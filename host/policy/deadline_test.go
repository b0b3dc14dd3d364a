package policy

import (
	"context"
	"testing"
	"time"
)

// A stretch that ends past its limit of wall time (starvedFactor budgets,
// the time paused added) is an overrun even when the timer never got to
// judge it — a timer starved with the rest of the process, as on a loaded
// CI machine, where a trusted replay's spin returned uncaught — and one
// that ends before its limit is not. The timer is stopped by hand to stand
// for the one that did not run; the limit is read, not waited for.
func TestDeadline_AnOverrunTheTimerDidNotJudge(t *testing.T) {
	_, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := newDeadline(cancel)
	const budget = time.Hour

	d.start(budget)
	d.timer.Stop()
	if want := d.due.Add((starvedFactor - 1) * budget); !d.limit.Equal(want) {
		t.Errorf("limit %v after the start, want starvedFactor budgets: %v", d.limit, want)
	}
	if d.stop() {
		t.Error("a stretch ended well before its limit: overran, want not")
	}

	d.start(budget)
	d.timer.Stop()
	before := d.limit
	d.pause()
	d.pausedAt = d.pausedAt.Add(-time.Minute) // as if paused a minute ago
	d.resume()
	d.timer.Stop()
	if moved := d.limit.Sub(before); moved < time.Minute || moved > time.Minute+time.Second {
		t.Errorf("limit moved on by %s after a pause of a minute, want a minute", moved)
	}
	d.limit = time.Now().Add(-time.Millisecond) // as if the stretch had run past it
	if !d.stop() {
		t.Error("a stretch ended past its limit, its timer's verdict pending: not overran, want overran")
	}
}
