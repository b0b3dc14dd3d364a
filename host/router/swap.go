package router

import (
	"context"
	"errors"
	"time"

	"github.com/loadout-dev/loadout/host/gpu"
	"github.com/loadout-dev/loadout/host/pagecache"
)

// A swap is a phase machine on the run loop: StartSwap hands every evicted
// server to the executor to stop (phase 1: stops pending); each stop comes
// back as a stopDone, and when the last one has, the loop hands the target
// to the executor to start (phase 2: starting); its swapDone ends the
// swap. The slow work — stopping and starting servers — is the executor's:
// goroutines on a real box (goExecutor), the simulator's event queue in
// virtual time (virtual.go). The decisions, checks and state changes are
// the loop's in both, so `loadout simulate` runs the code `serve` runs.

// freeMemoryWait bounds how long a swap waits for evicted models' memory to
// show as free in the driver before starting its target anyway.
const freeMemoryWait = 10 * time.Second

// eviction is one running server to stop, handed to the executor by value.
type eviction struct {
	model   string
	gen     uint64
	inst    Instance
	timeout time.Duration // how long its Stop may take
	kill    bool          // no grace: the server is hung (liveness.go)
	swap    string        // the target of the swap waiting for this stop; "" for none
	// sleep: put the server to sleep at this level instead (sleep.go);
	// sleeper: the server is an asleep model's.
	sleep   uint8
	sleeper bool
	// sleepTimeout bounds the sleep (ModelConfig.wakeTimeout); timeout
	// then bounds the stop that follows a sleep that failed.
	sleepTimeout time.Duration
	// ctx cancels the sleep early (model.cutSleep); nil: never.
	ctx context.Context
}

// startJob is phase 2 of a swap, handed to the executor by value: start
// the target (unless ready is its running instance), after waiting for the
// evicted models' memory when waitFree.
type startJob struct {
	target    string
	evicted   []string
	devices   []int
	mc        ModelConfig
	ready     Instance // the target's instance when it was already up: nothing to start
	inv       gpu.Inventory
	placement map[int]uint64
	waitFree  bool
	loadStart time.Time
	// refuse: start nothing; the swap ends with this error at once (the
	// target is in its crash-loop backoff).
	refuse error
	// ctx bounds the start: cancelled with a cause (errStartAborted) by an
	// unload, and at the end of shutdown. nil: the executor's own.
	ctx context.Context
	// wake is the target's sleeping server: phase 2 wakes it, and
	// cold-starts the model only when the wake fails (sleep.go).
	wake Instance
	// wakeCtx cancels the wake alone (swap.cutWake), under ctx: the
	// swap then cold-starts the model.
	wakeCtx context.Context
	// wakeMoved: the target is placed off its sleeper's GPUs, so wake is
	// stopped, not woken, and the model cold-started (reserveTarget).
	wakeMoved bool
}

// executor carries out what the run loop hands off and reports each end
// back as an event on the loop. It never touches loop state.
type executor interface {
	// stop stops ev's server; the loop then handles a stopDone.
	stop(ev eviction)
	// start runs phase 2 of a swap; the loop then handles its swapDone.
	start(job startJob)
	// release reports a Grant's release; the loop then handles a serveDone.
	release(ev serveDone)
	// watch reports, as an exitEvent, when a ready instance's server
	// exits; called once per started instance.
	watch(name string, inst Instance)
	// pageCache reads files ahead into the page cache (drop false) or
	// drops them from it, in the background; nothing reports back.
	pageCache(model string, files []string, drop bool)
}

// stopPhaseDone counts one of a swap's evictions stopped and, after the
// last, starts phase 2.
func (r *Router) stopPhaseDone(target string) {
	sw := r.loop.swaps[target]
	if sw == nil || sw.pendingStops == 0 {
		return
	}
	sw.pendingStops--
	if sw.pendingStops == 0 {
		r.exec.start(sw.job)
	}
}

// goExecutor is the executor of a real box: one goroutine per piece of
// work, reporting on the loop's channels.
type goExecutor struct{ r *Router }

func (x goExecutor) stop(ev eviction) {
	r := x.r
	go func() {
		if ev.sleep != 0 {
			done := sleepEviction(ev.sleepCtx(), r.log, ev) // its steps bound themselves
			select {
			case r.stopDones <- done:
			case <-r.done:
			}
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), ev.timeout)
		defer cancel()
		stop := ev.inst.Stop
		if k, ok := ev.inst.(Killer); ok && ev.kill {
			stop = k.Kill
		}
		if err := stop(ctx); err != nil {
			r.log.Warn("stopping model", "model", ev.model, "err", err)
		}
		select {
		case r.stopDones <- stopDone{model: ev.model, gen: ev.gen, swap: ev.swap, sleeper: ev.sleeper}:
		case <-r.done:
		}
	}()
}

func (x goExecutor) start(job startJob) {
	r := x.r
	ctx := job.ctx
	if ctx == nil {
		ctx = r.procCtx
	}
	go func() {
		// Drivers report freed memory late: wait until it is back (bounded)
		// rather than start into an out-of-memory, or sleep a fixed time.
		if job.waitFree && job.inv != nil {
			for _, d := range gpu.SortedDevices(job.placement) {
				ctx, cancel := context.WithTimeout(ctx, freeMemoryWait)
				if _, err := gpu.WaitFree(ctx, job.inv, d, job.placement[d]); err != nil {
					r.log.Warn("GPU memory not back after eviction; starting anyway", "model", job.target, "gpu", d, "err", err)
				}
				cancel()
			}
		}
		res := startTarget(ctx, job)
		switch {
		case res.woke:
			r.log.Info("model woken", "model", job.target, "wake_time", r.cfg.Clock().Sub(job.loadStart).Round(time.Millisecond))
		case res.err == nil && job.ready == nil:
			r.log.Info("model loaded", "model", job.target, "load_time", r.cfg.Clock().Sub(job.loadStart).Round(time.Millisecond))
		}
		select {
		case r.swapDones <- res:
		case <-r.done:
			if res.inst != nil && res.inst != job.ready {
				_ = res.inst.Stop(context.Background())
			}
		}
	}()
}

// startTarget starts job's target, unless it is already up, and describes
// the end of the swap.
func startTarget(ctx context.Context, job startJob) swapDone {
	res := swapDone{target: job.target, evicted: job.evicted, inst: job.ready}
	if job.refuse != nil {
		res.err, res.backoff = job.refuse, true
		return res
	}
	if job.ready != nil {
		return res
	}
	if job.wake != nil {
		inst, err := wakeTarget(ctx, job)
		if err == nil {
			res.inst, res.woke = inst, true
			return res
		}
		res.wakeErr = err
		if ctx.Err() != nil {
			res.err = errStopped
			if errors.Is(context.Cause(ctx), errStartAborted) {
				res.err = errStartAborted
			}
			return res
		}
	}
	inst, err := job.mc.Process.Start(ctx, StartSpec{Devices: job.devices, StopTimeout: job.mc.StopTimeout})
	switch {
	case err != nil && errors.Is(context.Cause(ctx), errStartAborted):
		res.err = errStartAborted
	case err != nil && ctx.Err() != nil:
		res.err = errStopped
	case err != nil:
		res.err = err
	default:
		res.inst = inst
	}
	return res
}

func (x goExecutor) release(ev serveDone) {
	select {
	case x.r.serveDones <- ev:
	case <-x.r.done:
	}
}

func (x goExecutor) watch(name string, inst Instance) {
	go x.r.watchExit(name, inst)
}

func (x goExecutor) pageCache(model string, files []string, drop bool) {
	go func() {
		advise, what := pagecache.Warm, "reading weights ahead into the page cache"
		if drop {
			advise, what = pagecache.Drop, "dropping read-ahead weights from the page cache"
		}
		if _, err := advise(files); err != nil {
			x.r.log.Warn(what, "model", model, "err", err)
		}
	}()
}
