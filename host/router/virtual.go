package router

import (
	"context"
	"time"
)

// Virtual is a Router whose run loop is driven by its caller, one event per
// call on the caller's goroutine, with no goroutine of its own: `loadout
// simulate` (host/sim) replays a trace through it in virtual time. The
// handlers, the Effects checks and the policies are the ones a Router runs
// for `serve`; only the slow work — stopping and starting servers — goes to
// a VirtualWork instead of goroutines, and Config.Clock is the simulator's.
// Its methods must not be called concurrently, nor from a take or done
// function while the router is in a call (VirtualWork.Later defers work
// that must be).
type Virtual struct {
	r    *Router
	work VirtualWork
}

// VirtualWork is where a Virtual router's slow work goes: a simulator
// that schedules each piece on its virtual clock and, when it ends, calls
// the done function it was given (from its own event loop, never during
// the call that handed the work over).
type VirtualWork interface {
	// Stop stops inst, model's running server; done reports it stopped.
	Stop(model string, inst Instance, done func())
	// Start loads model's server p with spec; done reports the ready
	// instance or why it failed.
	Start(model string, p Process, spec StartSpec, done func(Instance, error))
	// Later runs fn as an event of its own after the current one, at the
	// same virtual time.
	Later(fn func())
	// Sleep puts inst, model's running server, to sleep at level (1 or
	// 2); done reports the host memory in bytes it then holds (0:
	// unknown), or why it did not sleep (the server is then stopped).
	Sleep(model string, inst Instance, level uint8, done func(hostBytes uint64, err error))
	// Wake wakes inst, model's sleeping server; done reports it serving,
	// or why it did not wake (the server is then gone).
	Wake(model string, inst Instance, done func(error))
}

// NewVirtual makes a virtual router: cfg as for New (Clock should be the
// simulator's; Logger nil means slog's default), work the simulator.
// Errors: as New's.
func NewVirtual(cfg Config, work VirtualWork) (*Virtual, error) {
	v := &Virtual{work: work}
	r, err := newRouter(cfg, func(r *Router) executor { return virtualExecutor{v} })
	if err != nil {
		return nil, err
	}
	v.r = r
	return v, nil
}

// turn runs one event's handler as the run loop does, with what follows
// every event.
func (v *Virtual) turn(fn func()) {
	fn()
	v.r.reapRemoved()
	v.r.observeModels()
}

// Acquire submits req, as Router.Acquire does; take receives the grant or
// the error exactly once, possibly before Acquire returns (a ready model),
// possibly from a later event (after a load, or a queue). A virtual
// caller never leaves: every request ends granted or failed.
func (v *Virtual) Acquire(req Request, take func(*Grant, error)) {
	w := &waiter{ctx: context.Background(), req: req, take: func(res result) bool {
		take(res.grant, res.err)
		return true
	}}
	v.turn(func() { v.r.onRequest(w) })
}

// Tick is the run loop's tick (TTL checks, OnTick when due); the
// simulator calls it at the times NextTick gives.
func (v *Virtual) Tick() { v.turn(v.r.onTick) }

// NextTick is when the simulator must call Tick next, read after every
// event: Config.TickInterval after the last tick for a scheduler ticked
// periodically; for one ticked on demand (sdk.TickRequester), the
// earliest of the tick it asked for and the TTL deadlines the router
// keeps. false: no tick is needed until an event.
func (v *Virtual) NextTick() (time.Time, bool) {
	t := v.r.nextTick()
	return t, !t.IsZero()
}

// Models returns every model's status, sorted by id, as Router.Models.
func (v *Virtual) Models() []ModelStatus { return v.r.loop.modelStatuses() }

// Counters returns the policies' failure counts, as Router.Counters.
func (v *Virtual) Counters() map[string]PolicyCounters {
	return map[string]PolicyCounters{"scheduler": v.r.loop.schedCounters.clone(), "swapper": v.r.loop.swapCounters.clone()}
}

// virtualExecutor hands a virtual router's work to its VirtualWork and
// runs each end as an event of the loop.
type virtualExecutor struct{ v *Virtual }

func (x virtualExecutor) stop(ev eviction) {
	if ev.sleep != 0 {
		x.v.work.Sleep(ev.model, ev.inst, ev.sleep, func(hostBytes uint64, err error) {
			done := stopDone{model: ev.model, gen: ev.gen, swap: ev.swap, slept: ev.sleep, hostBytes: hostBytes}
			if err != nil {
				done.slept, done.sleepErr = 0, err
			}
			x.v.turn(func() { x.v.r.onStopDone(done) })
		})
		return
	}
	x.v.work.Stop(ev.model, ev.inst, func() {
		x.v.turn(func() {
			x.v.r.onStopDone(stopDone{model: ev.model, gen: ev.gen, swap: ev.swap, sleeper: ev.sleeper})
		})
	})
}

func (x virtualExecutor) start(job startJob) {
	r := x.v.r
	if job.ready != nil || job.refuse != nil {
		x.v.work.Later(func() { x.v.turn(func() { r.onSwapDone(startTarget(context.Background(), job)) }) })
		return
	}
	// coldStart starts the target's server; wakeErr is why a sleeper
	// was not woken instead (nil: there was none).
	coldStart := func(wakeErr error) {
		x.v.work.Start(job.target, job.mc.Process, StartSpec{Devices: job.devices, StopTimeout: job.mc.StopTimeout}, func(inst Instance, err error) {
			x.v.turn(func() {
				r.onSwapDone(swapDone{target: job.target, evicted: job.evicted, inst: inst, err: err, wakeErr: wakeErr})
			})
		})
	}
	switch {
	case job.wake != nil && job.wakeMoved: // placed off its sleeper's GPUs: stop it first
		x.v.work.Stop(job.target, job.wake, func() { coldStart(errWakeMoved) })
	case job.wake != nil:
		x.v.work.Wake(job.target, job.wake, func(err error) {
			if err != nil { // a failed wake: the server is gone
				coldStart(err)
				return
			}
			x.v.turn(func() {
				r.onSwapDone(swapDone{target: job.target, evicted: job.evicted, inst: job.wake, woke: true})
			})
		})
	default:
		coldStart(nil)
	}
}

func (x virtualExecutor) release(ev serveDone) {
	x.v.turn(func() { x.v.r.onServeDone(ev) })
}

// watch does nothing: a simulated server exits only when stopped.
func (virtualExecutor) watch(string, Instance) {}

// pageCache does nothing: a simulated load reads no file.
func (virtualExecutor) pageCache(string, []string, bool) {}
