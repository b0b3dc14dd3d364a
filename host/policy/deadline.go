package policy

import (
	"context"
	"math"
	"runtime"
	"sync"
	"time"
)

// starvedFactor bounds how far a call kept off a CPU may stretch its
// deadline: its stretch of guest time ends, whatever the thread did, at
// starvedFactor × its budget of wall time (1 s for a module from disk, 10 s
// for a built-in).
const starvedFactor = 10

// ranShare is the share of a grace window the call's thread must have
// spent on a CPU for the call to count as running (and be stopped): below
// it, the thread was kept off the CPUs — a box whose cores its model
// servers saturate, a container throttled by its CPU quota — and the
// window is granted again.
const ranShare = 4 // a quarter

// deadline is an instance's call clock: a budget of wall time for a
// stretch of guest execution (start … stop), paused while the guest waits
// on the host for another policy (pause, resume). When the budget is
// spent, the call is not stopped at once: the clock reads how much CPU
// time the call's thread (the call is locked to it) then gets over one
// more budget, a grace window, and stops the call (cancels its context,
// which wazero's loop checks obey) if the thread ran for at least a
// quarter of it; if it did not, the thread was kept off a CPU and the
// window is granted again, up to starvedFactor × the budget in all. So a
// `for {}` is stopped after about two budgets, and a call that is merely
// starved is not declared crashed — which a deadline of wall time alone
// did on a busy box (docs/RATIONALE.md, "Per-call deadline mechanism").
// Reading the thread's clock costs a system call, made only when a budget
// runs out; a call pays for the thread's id (one system call, ~0.1 µs),
// two uncontended locks, and a read of the wall clock at stop (limit).
// Where the thread's clock cannot be read (not Linux), the call is stopped
// when its budget runs out.
//
// The timer runs fire in its own goroutine; every field is guarded by mu.
// A fire that finds the clock stopped, or due later than now (it was
// re-armed since), does nothing.
type deadline struct {
	mu     sync.Mutex
	timer  *time.Timer
	cancel context.CancelFunc

	armed   bool          // the timer is pending
	expired bool          // the call was stopped: it overran
	due     time.Time     // when the pending timer is due
	left    time.Duration // while paused: what was left until due
	tid     int           // the thread the call runs on; 0 where unknown
	// limit is when the stretch ends whatever the thread did (starvedFactor
	// budgets after start, moved on by the time paused); pausedAt is when
	// the clock was paused.
	limit, pausedAt time.Time

	window time.Duration // the budget, and the length of a grace window
	grace  bool          // the budget is spent: grace windows are being watched
	spare  time.Duration // the grace left (starvedFactor − 1 budgets, less the windows granted)
	cpu    time.Duration // the thread's CPU time when the current window began
	paused time.Duration // the thread's CPU time when the clock was paused in grace
}

// newDeadline is a stopped deadline that calls cancel when a call overruns.
func newDeadline(cancel context.CancelFunc) *deadline {
	d := &deadline{cancel: cancel}
	d.timer = time.AfterFunc(math.MaxInt64, d.fire)
	d.timer.Stop()
	return d
}

// start begins a stretch of guest time with budget b on the calling
// goroutine, which stays on its thread until stop.
func (d *deadline) start(b time.Duration) {
	runtime.LockOSThread()
	tid := threadID()
	d.mu.Lock()
	d.tid, d.window, d.spare, d.grace = tid, b, (starvedFactor-1)*b, false
	d.armLocked(b)
	d.limit = d.due.Add((starvedFactor - 1) * b)
	d.mu.Unlock()
}

// armLocked sets the timer to fire after w; d.mu is held.
func (d *deadline) armLocked(w time.Duration) {
	w = max(w, 0)
	d.due = time.Now().Add(w)
	d.armed = true
	d.timer.Reset(w)
}

// fire runs when the timer is due: it begins a grace window when the
// budget is spent, grants another where the thread was kept off a CPU in
// the last one, and stops the call otherwise.
func (d *deadline) fire() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.armed || time.Now().Before(d.due) {
		return // stopped, paused or re-armed since the timer was set
	}
	if d.spare > 0 {
		if cpu, ok := threadCPU(d.tid); ok && (!d.grace || cpu-d.cpu < d.window/ranShare) {
			w := min(d.window, d.spare)
			d.grace, d.cpu, d.spare = true, cpu, d.spare-w
			d.armLocked(w)
			return
		}
	}
	d.armed, d.expired = false, true
	d.cancel()
}

// pause stops the clock while the guest waits on the host for something
// that is not its fault (a nested swapper plan, which runs on this thread
// under a clock of its own): neither its wall time nor its CPU time is
// charged to this call.
func (d *deadline) pause() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.armed {
		return
	}
	d.armed = false
	d.timer.Stop()
	d.pausedAt = time.Now()
	d.left = d.due.Sub(d.pausedAt)
	if d.grace {
		d.paused, _ = threadCPU(d.tid)
	}
}

// resume restarts the clock stopped by pause with what was left.
func (d *deadline) resume() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.expired || d.armed {
		return
	}
	if d.grace {
		if cpu, ok := threadCPU(d.tid); ok {
			d.cpu += cpu - d.paused
		}
	}
	d.armLocked(d.left) // fires at once if nothing is left
	// The time paused, read from the clock armLocked read (due is now +
	// left, or now where nothing was left), not from one more read of it.
	d.limit = d.limit.Add(d.due.Sub(d.pausedAt) - max(d.left, 0))
}

// stop ends the stretch, releases the thread and reports whether the
// call overran: it was stopped, or it ends past the stretch's limit of
// wall time with the timer's verdict still pending — a timer kept from
// running (its goroutine starved with the rest of the process, or a
// guest that, without the loop checks, cannot be stopped) does not let
// an overrun pass.
func (d *deadline) stop() (overran bool) {
	d.mu.Lock()
	if d.armed {
		d.armed = false
		d.timer.Stop()
		d.expired = !time.Now().Before(d.limit)
	}
	overran = d.expired
	d.mu.Unlock()
	runtime.UnlockOSThread()
	return overran
}

// close stops the clock for good and cancels the context.
func (d *deadline) close() {
	d.mu.Lock()
	d.armed = false
	d.timer.Stop()
	d.mu.Unlock()
	d.cancel()
}
