package router

import (
	"errors"
	"fmt"
	"time"

	"github.com/loadout-dev/loadout/sdk"
)

// A model that keeps failing to start backs off, as Kubernetes backs off a
// crash-looping container: the first failed start may be retried at once
// (a transient fault, a port race), the second and later ones wait
// crashBackoffBase, doubling with each failure, at most crashBackoffMax.
// Meanwhile a StartSwap for it starts nothing and evicts nothing: its swap
// ends at once with an error that says why and until when, so its callers
// fail fast instead of each waiting for a load that will fail. A
// successful start, an operator's unload of the model or a changed
// configuration resets the count. The times are the router's clock
// (virtual in `loadout simulate`).
const (
	crashBackoffBase = 5 * time.Second
	crashBackoffMax  = 5 * time.Minute
)

// backoffAfter is the wait before the next start after failures failed
// starts in a row.
func backoffAfter(failures int) time.Duration {
	if failures < 2 {
		return 0
	}
	d := crashBackoffBase
	for i := 2; i < failures && d < crashBackoffMax; i++ {
		d *= 2
	}
	return min(d, crashBackoffMax)
}

// startFailed counts a failed start of m and sets when the next may be
// attempted. A start aborted by shutdown is not the model's failure.
func (r *Router) startFailed(m *model, err error) {
	if errors.Is(err, errStopped) {
		return
	}
	m.startFailures++
	wait := backoffAfter(m.startFailures)
	m.retryAt = r.cfg.Clock().Add(wait)
	if wait > 0 {
		r.log.Warn("model keeps failing to start; backing off", "model", m.name,
			"failures", m.startFailures, "next_start_in", wait)
	}
}

// inBackoff says whether m may not be started now.
func (r *Router) inBackoff(m *model) bool {
	return r.cfg.Clock().Before(m.retryAt)
}

// backoffError is the error a start refused by the backoff ends with.
func (r *Router) backoffError(m *model) error {
	left := m.retryAt.Sub(r.cfg.Clock()).Round(100 * time.Millisecond)
	return fmt.Errorf("backing off after %d failed starts in a row; the next start is allowed in %s (last error: %s)",
		m.startFailures, left, m.lastErr)
}

// onBackoffRefused ends a swap that StartSwap refused for the backoff:
// nothing was stopped or started, so only the scheduler hears of it.
func (r *Router) onBackoffRefused(ev swapDone) {
	if m := r.loop.models[ev.target]; m != nil {
		m.stopAfterStart = false // an unload during it: nothing runs
		r.releaseUnloadWaiters(m)
	}
	err := r.loop.sched.OnSwapDone(sdk.SwapDoneEvent{Now: r.stamp(), Model: ev.target, Err: ev.err.Error()})
	r.schedulerFailed("on_swap_done", err)
}
