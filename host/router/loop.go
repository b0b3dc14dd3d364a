package router

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/loadout-dev/loadout/host/gpu"
	"github.com/loadout-dev/loadout/sdk"
)

// waiter is one caller between Acquire and its grant or error.
type waiter struct {
	id      sdk.RequestID
	ctx     context.Context
	req     Request
	respond chan result // unbuffered: a send proves the caller took it (rule 3)
	// take, when set, replaces respond: a virtual router's caller
	// (virtual.go) takes the result in a call, and reports whether it did.
	take    func(result) bool
	held    bool // the scheduler said it holds it (SetQueuePosition)
	pos     int
	arrived time.Time // when the loop took it, for Grant.LoadWait
	// asked is the model the caller asked for when route sent it to one
	// of its replicas (req.Model is then the replica's row); else "".
	asked string
}

type result struct {
	grant *Grant
	err   error
}

type serveDone struct {
	id    sdk.RequestID
	model string
}

type swapDone struct {
	target  string
	inst    Instance // nil on error
	err     error
	evicted []string
	// backoff: the start was not attempted, the model being in its
	// crash-loop backoff (err says until when); nothing changed.
	backoff bool
	// woke: inst is the target's sleeping server, woken (sleep.go);
	// wakeErr: a wake was tried and failed, so inst (if any) is a cold
	// start.
	woke    bool
	wakeErr error
}

type stopDone struct {
	model string
	gen   uint64
	swap  string // the target of the swap this stop was one of its evictions; "" for none
	// A sleep eviction (sleep.go): slept is the level the server sleeps
	// at and hostBytes what it says it holds; slept 0 with sleepErr: the
	// sleep failed and the server was stopped.
	slept     uint8
	hostBytes uint64
	sleepErr  error
	// sleeper: the stop of an asleep model's server.
	sleeper bool
}

// exitEvent is the exit of a server a watcher watched (watchExit): inst,
// the instance of model, whatever its generation now (a woken sleeper is
// the instance that was started, watched once).
type exitEvent struct {
	model string
	inst  Instance
}

type unloadRequest struct {
	models []string
	force  bool       // stop models with requests in flight too
	done   chan error // buffered 1
}

// model is one row of the process table.
type model struct {
	name     string
	cfg      ModelConfig
	ttl      *time.Duration // the last granted request's TTL (Request.TTL); nil: cfg.TTL
	waits    waitRecord     // its last grants' queueing delay (waits.go)
	state    sdk.ModelState
	inst     Instance // set while Ready or Stopping
	gen      uint64   // bumps with every instance, so stale exits are ignored
	inFlight int
	served   uint64 // requests granted to it
	// requests counts the requests that arrived for it (routed to it, for
	// a replica), loads its completed cold loads and loadTime the last
	// one's duration: sdk.ModelDemand's figures.
	requests uint64
	loads    uint32
	loadTime time.Duration
	lastUse  time.Time
	lastErr  string
	// loadStart and loadEnd span its last load (loadEnd zero while it
	// runs or when it failed), for Grant.LoadWait.
	loadStart, loadEnd time.Time
	measured           uint64 // bytes the running server uses, once measured
	// stopAfterStart: an unload arrived while a swap was starting the
	// model; stop it as soon as the swap ends.
	stopAfterStart bool
	// stopWhenIdle: an operator's unload arrived while the model had
	// requests in flight; it takes no new ones (policies see it Stopping)
	// and is stopped when the last one ends.
	stopWhenIdle bool
	// unloadWaiters are closed when the model reaches Stopped or Failed.
	unloadWaiters []chan struct{}
	// removed: a configuration reload took the model out; it leaves the
	// table once stopped (models.go).
	removed bool
	// startFailures counts its failed starts in a row (a successful start
	// or an operator's unload resets it); retryAt is when the next start
	// may be attempted (backoff.go).
	startFailures int
	retryAt       time.Time
	// admitLimit and admitFlags are the scheduler's warm-path admission
	// (warm.go): while admitLimit > 0 the loop grants new requests for
	// the model itself below admitLimit in flight. 0: none.
	admitLimit uint32
	admitFlags sdk.AdmitFlags
	// probing: a liveness probe of generation probeGen is out, started
	// at probeStart (one of an older generation does not hold back the
	// current instance's); probeFailures counts its failed probes in a
	// row; hung: the instance was declared hung and is being killed, so
	// its stop ends in Failed (liveness.go).
	probing       bool
	probeGen      uint64
	probeStart    time.Time
	probeFailures int
	hung          bool
	// Residency (sleep.go). asleep is its sleeping server while it is
	// Stopped (or being woken: Starting), sleepLevel that server's level
	// (0 when none); sleeping is the level of a sleep eviction in flight
	// (Stopping). weightBytes is its weights' size as last measured in
	// GPU memory, hostMeasured what a sleeper of it held at each level.
	asleep       Instance
	sleepLevel   uint8
	sleeping     uint8
	weightBytes  uint64
	hostMeasured [2]uint64
	// sleeps, wakes and wakeFailures count its sleeps, its wakes, and
	// the wakes that failed (each a cold start instead); wakeTime is the
	// last wake's duration from each level.
	sleeps, wakes, wakeFailures, sleepFailures uint32
	// ended is what the grants to its running instance read to learn why
	// the router killed it (Grant.Ended); replaced at each such kill.
	ended *atomic.Pointer[string]
	// sleepUnsupported: its server refused a sleep as one it cannot do
	// (ErrSleepUnsupported); it is stopped when evicted until its
	// configuration changes.
	sleepUnsupported bool
	wakeTime         [2]time.Duration
	lastWake         time.Duration
	lastLoadWoke     bool // its last load was a wake (Grant.Woke)
	// sleepStart is when its sleep in flight began; lastSleep the last
	// sleep's duration (ModelStatus.SleepSeconds).
	sleepStart time.Time
	lastSleep  time.Duration
	// stopAfterSleep: an unload arrived while it was being put to sleep;
	// its server is stopped once asleep. stoppingSleeper: its sleeping
	// server is being stopped (stopSleeper), not yet exited.
	stopAfterSleep, stoppingSleeper bool
	// cutSleep cancels the sleep in flight (eviction.ctx) with its
	// cause, so the executor kills the server instead: a server found
	// hung while being put to sleep (liveness.go). nil when none.
	cutSleep context.CancelCauseFunc
	// startedOn are the GPUs (indices, sorted) the model's server was
	// started on, its swap's placement: where a sleeping server can only
	// be woken (reserveTarget). Read only while asleep is set.
	startedOn []int
	// observed is what the Observer last heard of it (observer.go), once
	// it has heard (seen); heldQueued and heldLoading are observeModels'
	// scratch: its held callers, queued and waiting on a load.
	observed                observed
	seen                    bool
	heldQueued, heldLoading int
}

// visible is the state policies and the API see: a Ready model draining
// for an unload (stopWhenIdle) is already Stopping to them, so no policy
// grants it new requests or plans around it as loaded.
// expiresAt is when the model's TTL unloads it (the tick after): its
// last use plus its TTL while it is ready with no request in flight; zero
// when it has no TTL or is not idle.
func (m *model) expiresAt() time.Time {
	ttl := m.effectiveTTL()
	if ttl <= 0 || m.state != sdk.StateReady || m.inFlight != 0 {
		return time.Time{}
	}
	return m.lastUse.Add(ttl)
}

// effectiveTTL is the model's TTL now: the last granted request's
// (Request.TTL), else its configuration's.
func (m *model) effectiveTTL() time.Duration {
	if m.ttl != nil {
		return *m.ttl
	}
	return m.cfg.TTL
}

func (m *model) visible() sdk.ModelState {
	if m.state == sdk.StateReady && m.stopWhenIdle {
		return sdk.StateStopping
	}
	return m.state
}

// swap is one swap started by StartSwap and not yet done (swap.go): its
// evictions stopping (pendingStops > 0), then its target starting.
type swap struct {
	target       string
	evict        []string
	devices      []int32
	pendingStops int // evicted servers not yet stopped, and the target's old sleeper (afterSleeper)
	// afterSleeper: the target's sleeping server was being stopped when
	// the swap began; phase 2 waits for its exit too (onStopDone).
	afterSleeper bool
	job          startJob // phase 2, handed to the executor after the last stop
	// abort cancels the target's start (job.ctx) with its cause: an
	// operator's unload of a model being started (errStartAborted).
	abort context.CancelCauseFunc
	// cutWake cancels the wake of the target's sleeping server
	// (job.wakeCtx) with its cause, leaving the swap to cold-start it: a
	// waking server found hung (liveness.go). nil when there is no wake
	// to cut.
	cutWake context.CancelCauseFunc
	// stopped are the evicted models whose stop (or sleep) has ended:
	// this swap no longer evicts them, so another swap may start them
	// while this one loads (evicting).
	stopped []string
}

// loopState is everything the run loop owns. No other goroutine touches it
// (DESIGN.md rule 1): the API reaches it through channels and queries.
type loopState struct {
	sched   SchedulerPolicy
	swapper SwapperPolicy
	fx      *effects

	models   map[string]*model
	names    []string               // sorted model ids
	replicas map[string]*replicaSet // by model id, for models with replicas (replicas.go)
	waiters  map[sdk.RequestID]*waiter
	swaps    map[string]*swap
	nextID   sdk.RequestID
	changed  []string   // models whose state changed outside a swap since the last tick
	ticks    tickState  // periodic, or on demand (ticks.go)
	waits    waitRecord // the last grants' queueing delay (waits.go)
	removing int        // models removed by UpdateModels and not yet out of the table
	now      time.Time
	// expired names, during the scheduler's OnUnload for them, the
	// models whose TTL has passed: its StopProcesses of one evicts it as
	// a swap would (sleep.go, expire).
	expired []string

	shuttingDown bool

	// profile is the active profile's name, "" for none (profile.go).
	profile string

	schedCounters PolicyCounters
	swapCounters  PolicyCounters

	// purePlans: the swapper claims sdk.PurePlanner, so plans are cached
	// by target and running set (effects.Plan).
	purePlans bool
	planCache map[string]sdk.Plan

	// schedHandover and swapHandover are the policies' decorators, if they
	// are ones (host/policy's fallbacks): after a call they say whether the
	// policy behind them changed.
	schedHandover, swapHandover handover

	ledger *gpu.Ledger // nil: no VRAM accounting
	// host accounts host memory for sleepers (sleep.go); sleeperStops
	// counts sleepers' stops not yet done (shutdown waits for them);
	// saidHostTooSmall: the log said once that no sleeper fits.
	host hostLedger
	// sleeperWaiters are unloads waiting for a sleeper's server to exit,
	// by model, closed by its stopDone.
	sleeperWaiters   map[string][]chan struct{}
	warm             []string // models whose weights are read ahead, oldest first (pagecache.go)
	sleeperStops     int
	saidHostTooSmall bool
	// planFailures holds, during one event, why the swapper could not plan
	// for a target, so an error the scheduler grants for it can say why.
	planFailures map[string]string
	measuring    bool
	// observeOnly names the one model the event just handled changed, when
	// it was a warm-path event (warm.go); "" means any may have.
	observeOnly string
}

func (l *loopState) init(cfg Config) {
	l.models = make(map[string]*model, len(cfg.Models))
	for name, mc := range cfg.Models {
		l.models[name] = &model{name: name, cfg: mc}
		l.names = append(l.names, name)
	}
	slices.Sort(l.names)
	l.indexReplicas()
	l.waiters = map[sdk.RequestID]*waiter{}
	l.swaps = map[string]*swap{}
	l.sleeperWaiters = map[string][]chan struct{}{}
	l.planCache = map[string]sdk.Plan{}
	l.planFailures = map[string]string{}
	l.ledger = cfg.Ledger
	l.host.total = cfg.HostMemory
	l.ticks.last = cfg.Clock()
}

func (r *Router) run() {
	defer close(r.done)
	tick := time.NewTicker(r.cfg.TickInterval)
	defer tick.Stop()
	measure := time.NewTicker(r.cfg.MeasureInterval)
	defer measure.Stop()
	probe := time.NewTicker(r.cfg.Liveness.Interval)
	defer probe.Stop()
	l := &r.loop
	// wake fires at the tick the scheduler asked for (ticks.go), between
	// the periodic ticks that look at TTLs; re-armed only when it changes.
	var wake <-chan time.Time
	wakeTimer := time.NewTimer(time.Hour)
	wakeTimer.Stop()
	defer wakeTimer.Stop()
	var armed time.Time
	for {
		select {
		case w := <-r.requests:
			r.onRequest(w)
		case w := <-r.cancels:
			r.onCancel(w)
		case ev := <-r.serveDones:
			r.onServeDone(ev)
		case ev := <-r.swapDones:
			r.onSwapDone(ev)
		case ev := <-r.stopDones:
			r.onStopDone(ev)
		case ev := <-r.exits:
			r.onExit(ev)
		case req := <-r.unloads:
			r.onUnload(req)
		case fn := <-r.queries:
			fn()
		case <-tick.C:
			r.onTick()
		case <-wake:
			armed, wake = time.Time{}, nil
			r.onTick()
		case <-measure.C:
			r.startMeasuring()
		case ms := <-r.measured:
			r.onMeasured(ms)
		case <-probe.C:
			r.startProbing()
		case p := <-r.probes:
			r.onProbe(p)
		case s := <-r.stalls:
			r.onStall(s)
		case <-r.shutdown:
			r.onShutdown()
		}
		r.reapRemoved()
		r.observeModels()
		if at := l.ticks.at; !at.Equal(armed) {
			armed, wake = at, nil
			wakeTimer.Stop()
			if !at.IsZero() {
				wakeTimer.Reset(at.Sub(r.cfg.Clock()))
				wake = wakeTimer.C
			}
		}
		if l.shuttingDown && r.quiet() {
			r.procCancel()
			return
		}
	}
}

func (r *Router) stamp() int64 {
	clear(r.loop.planFailures)
	r.loop.now = r.cfg.Clock()
	return r.loop.now.UnixNano()
}

func (r *Router) onRequest(w *waiter) {
	l := &r.loop
	if l.shuttingDown {
		r.deliver(w, result{err: ErrShuttingDown})
		return
	}
	l.nextID++
	w.id = l.nextID
	w.arrived = r.cfg.Clock()
	r.selectModel(w)
	r.route(w)
	if m, ok := l.models[w.req.Model]; ok {
		m.requests++
	}
	if r.admitWarm(w) {
		return
	}
	l.waiters[w.id] = w
	r.offer(w)
}

// offer delivers a waiting caller to the scheduler as an OnRequest event.
func (r *Router) offer(w *waiter) {
	l := &r.loop
	prio := w.req.Priority
	if m, ok := l.models[w.req.Model]; ok && prio == 0 {
		prio = m.cfg.Priority
	}
	err := l.sched.OnRequest(sdk.RequestEvent{
		Now: r.stamp(), ID: w.id, Model: w.req.Model, Priority: prio, Client: w.req.Client,
	})
	if r.schedulerFailed("on_request", err) {
		return
	}
	// Rule 5: every request ends granted, errored, or held (queued or
	// waiting on a swap). A request the policy said nothing about would
	// wait forever; fail it instead.
	if w2, ok := l.waiters[w.id]; ok && !w2.held {
		r.refused(&l.schedCounters, fmt.Sprintf("neither granted, failed nor queued request %d for %q", w.id, w.req.Model))
		r.fail(w2, sdk.CodeInternal, fmt.Sprintf("scheduler %s dropped the request (policy bug)", r.cfg.SchedulerName))
	}
}

// reoffer hands the callers the scheduler held to the policy now in charge
// behind it (a fallback decorator switched), as fresh OnRequest events in
// arrival order: nothing the old policy held is lost.
func (r *Router) reoffer() {
	l := &r.loop
	held := make([]*waiter, 0, len(l.waiters))
	for _, w := range l.waiters {
		if w.held {
			held = append(held, w)
		}
	}
	slices.SortFunc(held, func(a, b *waiter) int { return cmp.Compare(a.id, b.id) })
	r.log.Info("scheduler policy changed; handing over the requests it held", "requests", len(held))
	for _, w := range held {
		if _, ok := l.waiters[w.id]; ok {
			w.held = false
			r.offer(w)
		}
	}
}

func (r *Router) onCancel(w *waiter) {
	l := &r.loop
	if _, ok := l.waiters[w.id]; !ok {
		return // already granted or failed: nothing to tell
	}
	delete(l.waiters, w.id)
	err := l.sched.OnCancel(sdk.CancelEvent{Now: r.stamp(), ID: w.id, Model: w.req.Model})
	r.schedulerFailed("on_cancel", err)
}

func (r *Router) onServeDone(ev serveDone) {
	l := &r.loop
	if m, ok := l.models[ev.model]; ok {
		m.inFlight--
		m.lastUse = r.cfg.Clock()
		if m.stopWhenIdle && m.inFlight == 0 {
			r.stopModel(m)
		}
		if r.quietServeDone(m) {
			l.observeOnly = m.name // nothing else changed
			return
		}
	}
	err := l.sched.OnServeDone(sdk.ServeDoneEvent{Now: r.stamp(), ID: ev.id, Model: ev.model})
	r.schedulerFailed("on_serve_done", err)
}

func (r *Router) onSwapDone(ev swapDone) {
	l := &r.loop
	sw := l.swaps[ev.target]
	if sw != nil && sw.abort != nil {
		sw.abort(nil) // its start is over: release the context
	}
	delete(l.swaps, ev.target)
	if ev.backoff {
		r.onBackoffRefused(ev)
		return
	}
	r.observer().SwapEnded(r.swapEnded(ev))
	for _, name := range ev.evicted {
		if sw != nil && slices.Contains(sw.stopped, name) {
			continue // stopped when its stop ended, and maybe started again since
		}
		r.setStopped(l.models[name])
	}
	m := l.models[ev.target]
	r.wakeDone(m, ev)
	if m != nil {
		r.readAheadDone(m)
	}
	errText := ""
	switch {
	case errors.Is(ev.err, errStartAborted), errors.Is(ev.err, errStopped):
		// The operator's unload, or shutdown: the model is stopped, not
		// failed.
		errText = ev.err.Error()
		r.setState(m, sdk.StateStopped)
		by := "shutdown"
		if errors.Is(ev.err, errStartAborted) {
			by = "an unload"
		}
		r.log.Info("model start aborted", "model", ev.target, "by", by)
		r.releaseLease(m)
		r.releaseUnloadWaiters(m)
	case ev.err != nil:
		errText = ev.err.Error()
		m.lastErr = errText
		r.setState(m, sdk.StateFailed)
		r.log.Error("model failed to start", "model", ev.target, "err", ev.err)
		r.startFailed(m, ev.err)
		r.releaseLease(m)
		r.releaseUnloadWaiters(m)
	case m.inst == ev.inst:
		// The target was already ready; the swap only evicted.
	default:
		m.gen++
		m.inst = ev.inst
		m.startedOn = m.startedOn[:0]
		if sw != nil {
			for _, d := range sw.devices {
				m.startedOn = append(m.startedOn, int(d))
			}
		}
		m.startFailures, m.retryAt = 0, time.Time{}
		m.loadEnd = r.cfg.Clock() // before setState: the scheduler may grant in it
		if !ev.woke {
			m.loads++
			m.loadTime = m.loadEnd.Sub(m.loadStart)
		}
		m.lastLoadWoke = ev.woke
		r.setState(m, sdk.StateReady)
		m.lastUse = r.cfg.Clock() // the TTL counts from the load
		m.ttl = nil               // a new instance: its requests give theirs
		r.log.Info("model ready", "model", ev.target, "upstream", ev.inst.Upstream().String())
		if !ev.woke { // a woken server is the one started before, watched since
			r.exec.watch(m.name, ev.inst)
		}
	}
	if m.stopAfterStart {
		m.stopAfterStart = false
		r.stopModel(m)
	}
	err := l.sched.OnSwapDone(sdk.SwapDoneEvent{Now: r.stamp(), Model: ev.target, Err: errText})
	r.schedulerFailed("on_swap_done", err)
}

func (r *Router) onStopDone(ev stopDone) {
	if ev.sleeper {
		r.loop.sleeperStops--
		if m := r.loop.models[ev.model]; m != nil {
			m.stoppingSleeper = false
		}
		if sw := r.loop.swaps[ev.model]; sw != nil && sw.afterSleeper {
			sw.afterSleeper = false
			r.stopPhaseDone(ev.model)
		}
		for _, ch := range r.loop.sleeperWaiters[ev.model] {
			close(ch)
		}
		delete(r.loop.sleeperWaiters, ev.model)
		return
	}
	m := r.loop.models[ev.model]
	current := m != nil && m.gen == ev.gen && m.state == sdk.StateStopping
	if ev.swap != "" {
		if sw := r.loop.swaps[ev.swap]; sw != nil && current && slices.Contains(sw.evict, ev.model) {
			// Stopped (or asleep) below: the swap evicts it no longer.
			sw.stopped = append(sw.stopped, ev.model)
		}
		r.stopPhaseDone(ev.swap)
	}
	if !current {
		return // removed from the table since, an old instance, or already stopped
	}
	if m.sleeping != 0 {
		r.onSlept(m, ev)
		if ev.slept != 0 {
			r.loop.changed = append(r.loop.changed, m.name)
			r.tickNow()
			return
		}
	}
	if m.hung {
		r.setState(m, sdk.StateFailed)
		r.startFailed(m, nil)
		r.setStopped(m)
		r.log.Info("hung model server killed", "model", m.name)
		r.loop.changed = append(r.loop.changed, m.name)
		r.tickNow()
		return
	}
	r.setStopped(m)
	r.log.Info("model stopped", "model", m.name)
	r.loop.changed = append(r.loop.changed, m.name)
	r.tickNow()
}

// onExit handles a model server that exited on its own.
func (r *Router) onExit(ev exitEvent) {
	m := r.loop.models[ev.model]
	if m != nil && m.isAsleep() && m.asleep == ev.inst {
		r.onSleeperExit(m)
		return
	}
	if m == nil || m.inst != ev.inst || m.state != sdk.StateReady {
		return // an expected exit (stop, eviction), an old instance, or a removed model
	}
	reason := "exited"
	if err := m.inst.Err(); err != nil {
		reason = err.Error()
	}
	r.log.Error("model server exited unexpectedly", "model", m.name, "in_flight", m.inFlight, "err", reason)
	m.lastErr = "exited unexpectedly: " + reason
	r.setState(m, sdk.StateFailed)
	r.releaseLease(m)
	r.releaseUnloadWaiters(m)
	r.loop.changed = append(r.loop.changed, m.name)
	r.tickNow()
}

// onUnload carries out an operator's unload. The scheduler is told first
// (so it fails what it holds for the models), but the stop is the host's
// own: an operator's unload is not the policy's to refuse. A model with
// requests in flight stops when the last one ends, unless the unload is
// forced; one being started has its start aborted (a load that would take
// minutes, or hang in its backend, is not waited for).
func (r *Router) onUnload(req unloadRequest) {
	l := &r.loop
	targets := req.models
	if len(targets) == 0 {
		for _, name := range l.names {
			m := l.models[name]
			if m.state.Running() || m.isAsleep() {
				targets = append(targets, name)
				continue
			}
			m.startFailures, m.retryAt = 0, time.Time{} // a failed one's backoff ends too (below for the targets)
		}
	}
	for _, name := range targets {
		if _, ok := l.models[name]; !ok {
			req.done <- &Error{Code: sdk.CodeModelNotFound, Message: fmt.Sprintf("unload: unknown model %q", name)}
			return
		}
	}
	targets = l.withReplicas(targets)
	for _, name := range targets {
		r.revoke(l.models[name])
	}
	if len(targets) == 0 {
		req.done <- nil
		return
	}
	r.observer().Unloading(targets, "unload")
	err := l.sched.OnUnload(sdk.UnloadEvent{Now: r.stamp(), Models: targets, Reason: sdk.UnloadAdmin})
	r.schedulerFailed("on_unload", err)
	var pending []chan struct{}
	for _, name := range targets {
		m := l.models[name]
		m.startFailures, m.retryAt = 0, time.Time{} // the operator's say: try again at once
		switch {
		case m.isAsleep() || m.stoppingSleeper:
			r.stopSleeper(m, "unload") // unless the scheduler's OnUnload stopped it already
			ch := make(chan struct{})
			l.sleeperWaiters[name] = append(l.sleeperWaiters[name], ch)
			pending = append(pending, ch)
			continue
		case m.sleeping != 0:
			m.stopAfterSleep = true // its sleep ends, then its server is stopped
		case m.state == sdk.StateReady && m.inFlight > 0 && !req.force:
			m.stopWhenIdle = true
		case m.state == sdk.StateReady:
			r.stopModel(m)
		case l.swaps[name] != nil:
			m.stopAfterStart = true
			if sw := l.swaps[name]; sw.abort != nil && m.state == sdk.StateStarting {
				// Do not wait for a load, however long (or hung): end it.
				sw.abort(errStartAborted)
			}
		}
		if m.state == sdk.StateStopped || m.state == sdk.StateFailed {
			continue
		}
		ch := make(chan struct{})
		m.unloadWaiters = append(m.unloadWaiters, ch)
		pending = append(pending, ch)
	}
	go func() {
		for _, ch := range pending {
			<-ch
		}
		req.done <- nil
	}()
}

// stillStopping describes, for an unload that timed out, each of models
// (every model when empty) that has not stopped yet and what it waits for.
func (l *loopState) stillStopping(models []string) []string {
	if len(models) == 0 {
		models = l.names
	}
	var out []string
	for _, name := range models {
		m, ok := l.models[name]
		if !ok || !m.state.Running() {
			continue
		}
		switch {
		case m.stopWhenIdle:
			out = append(out, fmt.Sprintf("%s (%d requests in flight; they finish first unless the unload is forced)", name, m.inFlight))
		case m.state == sdk.StateStarting:
			out = append(out, name+" (still starting: its backend has not answered the abort)")
		default:
			out = append(out, name+" ("+m.visible().String()+")")
		}
	}
	return out
}

func (r *Router) onTick() {
	l := &r.loop
	now := r.cfg.Clock()
	var expired []string
	if !l.shuttingDown {
		for _, name := range l.names {
			m := l.models[name]
			if e := m.expiresAt(); !e.IsZero() && !now.Before(e) {
				expired = append(expired, name)
			}
		}
	}
	l.ticks.last = now
	if len(expired) > 0 {
		r.observer().Unloading(expired, "ttl")
		l.expired = expired // the scheduler's stops of these are evictions (expire)
		err := l.sched.OnUnload(sdk.UnloadEvent{Now: r.stamp(), Models: expired, Reason: sdk.UnloadTTL})
		l.expired = nil
		if r.schedulerFailed("on_unload", err) {
			return
		}
	} else if !r.tickDue(now) {
		return // ticked on demand, and nothing is due: no policy call
	}
	r.tickNow()
}

// tickNow delivers a TickEvent with the models changed since the last one.
func (r *Router) tickNow() {
	l := &r.loop
	changed := l.changed
	l.changed = nil
	now := r.stamp()
	if !l.ticks.at.IsZero() && l.ticks.at.UnixNano() <= now {
		l.ticks.at = time.Time{} // this tick is the one asked for
	}
	err := l.sched.OnTick(sdk.TickEvent{Now: now, Changed: changed})
	r.schedulerFailed("on_tick", err)
}

func (r *Router) onShutdown() {
	l := &r.loop
	if l.shuttingDown {
		return
	}
	l.shuttingDown = true
	r.revokeAll()
	r.log.Info("shutting down: failing waiting requests, ending loads, stopping models after in-flight requests finish")
	err := l.sched.OnShutdown(sdk.ShutdownEvent{Now: r.stamp(), Reason: "shutting down"})
	r.schedulerFailed("on_shutdown", err)
	// Whatever the policy still holds gets the error anyway.
	for _, w := range l.waiters {
		r.deliver(w, result{err: ErrShuttingDown})
	}
	clear(l.waiters)
	// Nothing waits for a load now: end it rather than wait for it, however
	// long (the rest of a large model's load, up to the shutdown timeout).
	for name, sw := range l.swaps {
		if m := l.models[name]; m != nil && m.state == sdk.StateStarting && sw.abort != nil {
			sw.abort(errStopped)
		}
	}
	r.stopIdle()
}

// quiet reports, during shutdown, whether the loop may exit: no swap
// running, no request in flight, every process stopped. Along the way it
// stops models that have become idle.
func (r *Router) quiet() bool {
	l := &r.loop
	r.stopIdle()
	if len(l.swaps) > 0 || l.sleeperStops > 0 {
		return false
	}
	for _, m := range l.models {
		if m.inFlight > 0 || m.state == sdk.StateStarting || m.state == sdk.StateStopping || m.state == sdk.StateReady {
			return false
		}
	}
	return true
}

// stopIdle, during shutdown, stops every ready model with nothing in flight.
func (r *Router) stopIdle() {
	for _, m := range r.loop.models {
		switch {
		case m.isAsleep():
			r.stopSleeper(m, "shutdown")
		case m.state == sdk.StateReady && m.inFlight == 0:
			r.stopModel(m)
		}
	}
}

// schedulerFailed handles the end of a scheduler call. An error means the
// policy lost its state (crashed, timed out, disabled), so every caller it
// held gets a clear error now instead of waiting forever (rule 7). A
// scheduler that changed behind a decorator (a fallback taking over or
// giving back) gets the callers the old one held. It reports whether err
// was non-nil.
func (r *Router) schedulerFailed(event string, err error) bool {
	l := &r.loop
	if err == nil {
		if l.schedHandover != nil && l.schedHandover.HandedOver() {
			r.observer().PolicyHandedOver("scheduler")
			r.revokeAll()
			r.reoffer()
		}
		return false
	}
	r.revokeAll()
	name := failedPolicy(err, r.cfg.SchedulerName)
	l.schedCounters.failed(name, err)
	r.observer().PolicyFailed("scheduler", name, event, err)
	r.log.Error("scheduler policy failed; failing the requests it held", "policy", r.cfg.SchedulerName, "event", event, "waiting", len(l.waiters), "err", err)
	msg := fmt.Sprintf("scheduler policy %s failed: %v", r.cfg.SchedulerName, err)
	for id, w := range l.waiters {
		delete(l.waiters, id)
		r.deliver(w, result{err: &Error{Code: sdk.CodeUnavailable, Message: msg}})
	}
	if l.schedHandover != nil {
		l.schedHandover.HandedOver() // nothing is held any more
	}
	return true
}

// refused records a policy call the router would not carry out.
func (r *Router) refused(c *PolicyCounters, what string) {
	r.refusedWith(c, nil, what)
}

// refusedWith is refused for a call refused with err: a warning, unless
// err says "not now" (sdk.NotNow: a swap or a stop under way, a busy
// eviction, memory held by jobs), which schedulers meet as a matter of
// course — fifo tries its queue's head again at every tick while its
// model stops — and which is logged at debug level, still counted.
func (r *Router) refusedWith(c *PolicyCounters, err error, what string) {
	c.RefusedEffects++
	c.LastError, c.lastRefused = what, what
	level := slog.LevelWarn
	if sdk.NotNow(err) {
		level = slog.LevelDebug
	}
	r.log.Log(context.Background(), level, "policy call refused", "what", what)
}

// deliver hands res to w's caller and reports whether the caller took it.
// It never blocks past the caller's departure (rule 3's proof of life).
func (r *Router) deliver(w *waiter, res result) bool {
	if w.take != nil {
		return w.take(res)
	}
	select {
	case w.respond <- res:
		return true
	case <-w.ctx.Done():
		return false
	}
}

// fail errors one waiting caller and forgets it.
func (r *Router) fail(w *waiter, code sdk.ErrorCode, msg string) {
	delete(r.loop.waiters, w.id)
	r.deliver(w, result{err: &Error{Code: code, Message: msg}})
}

// setState is the one place a model's state changes, and it keeps what
// goes with each state: an instance only while Ready or Stopping (the
// caller sets m.inst before entering Ready), a drain for an unload
// (stopWhenIdle) only while Ready, and lastErr (set by the caller before
// entering Failed) cleared once the model is Ready again, and no warm-path
// admission survives a change (warm.go). Whether a swap is
// active is not a state: it is l.swaps, and a Starting model always has one.
func (r *Router) setState(m *model, to sdk.ModelState) {
	m.state = to
	r.revoke(m) // the policy re-admits after it has seen the change
	m.probeFailures = 0
	switch to {
	case sdk.StateReady:
		m.lastErr = ""
		m.hung = false
	case sdk.StateStopped, sdk.StateFailed:
		m.inst = nil
	}
	if to != sdk.StateReady {
		m.stopWhenIdle = false
	}
}

func (r *Router) setStopped(m *model) {
	m.hung = false
	if m.state == sdk.StateStopping || m.state == sdk.StateReady {
		r.setState(m, sdk.StateStopped)
	}
	r.releaseLease(m)
	r.releaseUnloadWaiters(m)
}

// releaseLease gives back a model's GPU memory once its process is gone
// (stopped, failed to start, crashed). Releasing twice is harmless.
func (r *Router) releaseLease(m *model) {
	m.measured = 0
	if r.cfg.Ledger != nil {
		r.cfg.Ledger.Release(m.name)
	}
}

func (r *Router) releaseUnloadWaiters(m *model) {
	for _, ch := range m.unloadWaiters {
		close(ch)
	}
	m.unloadWaiters = nil
}

// stopModel begins stopping a model in the background; a Starting model is
// stopped as soon as its swap ends.
func (r *Router) stopModel(m *model) {
	switch m.state {
	case sdk.StateReady:
		r.setState(m, sdk.StateStopping)
		r.exec.stop(m.eviction(""))
	case sdk.StateStarting:
		m.stopAfterStart = true
	}
}

// stopTimeout bounds a model's Stop (or Kill) as a backstop: its grace
// before SIGKILL (StopTimeout, else the backends' 10 s) and stopBackstop.
// A backend plugin bounds its own calls more tightly (plugins.CallLimits)
// and is killed when it misses that deadline, which ends its servers too;
// this bound only catches an Instance that does not.
func stopTimeout(mc ModelConfig) time.Duration {
	if mc.StopTimeout > 0 {
		return mc.StopTimeout + stopBackstop
	}
	return 10*time.Second + stopBackstop
}

// stopBackstop is what a Stop may take beyond its grace before SIGKILL.
const stopBackstop = 30 * time.Second

// watchExit reports when a ready instance's server exits, for whatever
// reason, asleep or awake; the loop ignores exits it caused. One watcher
// per started instance: sleeping and waking do not start another.
func (r *Router) watchExit(name string, inst Instance) {
	select {
	case <-inst.Exited():
	case <-r.done:
		return
	}
	select {
	case r.exits <- exitEvent{model: name, inst: inst}:
	case <-r.done:
	}
}

// devices returns the GPUs a model holds leases on, in index order.
func (l *loopState) devices(name string) []int {
	if l.ledger == nil {
		return nil
	}
	lease, ok := l.ledger.Lease(name)
	if !ok {
		return nil
	}
	return gpu.SortedDevices(lease)
}

func (l *loopState) modelStatuses() []ModelStatus {
	queued, loading := l.heldCounts()
	out := make([]ModelStatus, 0, len(l.names))
	for _, name := range l.names {
		out = append(out, l.status(name, queued[name], loading[name]))
	}
	return l.foldReplicas(out)
}

// status is one model as the API and the Observer see it, with the counts
// of callers queued for it and waiting on its load.
func (l *loopState) status(name string, queued, loading int) ModelStatus {
	m := l.models[name]
	st := ModelStatus{
		Model: name, State: m.apiState(), InFlight: m.inFlight, Queued: queued, Loading: loading,
		LastUse: m.lastUse, LastError: m.lastErr, Group: m.cfg.Group, VRAM: m.cfg.VRAM,
		Measured: m.measured, Devices: l.devices(name), StartFailures: m.startFailures,
		ExpiresAt: m.expiresAt(),
	}
	if m.state == sdk.StateReady {
		st.TTL = m.effectiveTTL()
	}
	if backoffAfter(m.startFailures) > 0 {
		st.RetryAt = m.retryAt
	}
	l.residencyStatus(m, &st)
	if m.inst != nil {
		st.Upstream = m.inst.Upstream().String()
	}
	return st
}

// heldCounts counts the callers the scheduler holds, per model: queued
// (position ≥ 1) and waiting on a load (position 0). Nil maps when none
// are held.
func (l *loopState) heldCounts() (queued, loading map[string]int) {
	for _, w := range l.waiters {
		if !w.held {
			continue
		}
		if queued == nil {
			queued, loading = map[string]int{}, map[string]int{}
		}
		if w.pos == 0 {
			loading[w.req.Model]++
		} else {
			queued[w.req.Model]++
		}
	}
	return queued, loading
}

// errStopped marks a swap's target start that was aborted by shutdown.
var errStopped = errors.New("aborted: loadout is shutting down")

// errStartAborted marks a swap's target start that an operator's unload
// cut short: not the model's failure.
var errStartAborted = errors.New("start aborted: the model was unloaded while it loaded")

// measurement is one loaded model's measured memory use.
type measurement struct {
	model string
	gen   uint64
	bytes uint64
}

// startMeasuring asks every ready server that can report its memory, off
// the loop, and hands the figures back as one event.
func (r *Router) startMeasuring() {
	l := &r.loop
	if l.measuring || l.shuttingDown {
		return
	}
	type target struct {
		name string
		gen  uint64
		rep  MemoryReporter
	}
	var targets []target
	for _, name := range l.names {
		m := l.models[name]
		if rep, ok := m.inst.(MemoryReporter); ok && m.state == sdk.StateReady {
			targets = append(targets, target{name, m.gen, rep})
		}
	}
	if len(targets) == 0 {
		return
	}
	l.measuring = true
	var inv gpu.Inventory
	if l.ledger != nil {
		inv = l.ledger.Inventory()
	}
	go func() {
		var byPid map[int]uint64
		if inv != nil && inv.Source() == gpu.SourceNVML {
			byPid, _ = inv.ProcessMemory()
		}
		out := make([]measurement, 0, len(targets))
		for _, t := range targets {
			// A backstop: a plugin bounds its own calls, and is killed
			// when it misses that bound (plugins.CallLimits).
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			pids, reported, err := t.rep.Memory(ctx)
			cancel()
			if err != nil {
				continue
			}
			bytes := reported
			if byPid != nil { // the driver's figure wins over the backend's
				var sum uint64
				for _, pid := range pids {
					sum += byPid[pid]
				}
				bytes = sum
			}
			out = append(out, measurement{model: t.name, gen: t.gen, bytes: bytes})
		}
		select {
		case r.measured <- out:
		case <-r.done:
		}
	}()
}

// onMeasured records measured memory use and corrects the model's lease
// to it: a model that uses more (or less) than its estimate is noticed.
func (r *Router) onMeasured(ms []measurement) {
	l := &r.loop
	l.measuring = false
	for _, me := range ms {
		m := l.models[me.model]
		if m == nil || m.gen != me.gen || m.state != sdk.StateReady || me.bytes == 0 {
			continue
		}
		if m.measured != me.bytes && m.cfg.VRAM > 0 && me.bytes > m.cfg.VRAM+m.cfg.VRAM/10 {
			r.log.Warn("model uses more GPU memory than its estimate", "model", m.name, "estimate", m.cfg.VRAM, "measured", me.bytes)
		}
		m.measured = me.bytes
		if l.ledger == nil {
			continue
		}
		if lease, ok := l.ledger.Lease(m.name); ok && len(lease) > 0 {
			if err := l.ledger.Resize(m.name, gpu.Rescale(lease, me.bytes)); err != nil {
				r.log.Warn("correcting the lease to the measured use", "model", m.name, "err", err)
			}
		}
	}
}
