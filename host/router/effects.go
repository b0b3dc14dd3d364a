package router

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/loadout-dev/loadout/host/gpu"
	"github.com/loadout-dev/loadout/sdk"
)

// effects implements sdk.Effects for the scheduler. Its methods run only
// inside a policy call, on the run-loop goroutine. Every call is checked: a
// policy may be buggy or hostile, and the run-loop rules hold regardless.
type effects struct {
	r *Router
	// withoutJobs: the swapper is being asked what it would plan were no
	// job holding GPUs (jobs.go), so snapshots leave the jobs' leases out.
	withoutJobs bool
	// figures is gpuFigures' scratch.
	figures []gpu.DeviceFigures
}

// maxCachedPlans bounds the plan cache: a target and running set per entry,
// and a box swaps between few of them.
const maxCachedPlans = 1024

// readOnlyHost is what the swapper gets: reads and logs only.
type readOnlyHost struct{ fx *effects }

func (h readOnlyHost) Log(level sdk.LogLevel, msg string) {
	h.fx.logAs(h.fx.r.cfg.SwapperName, level, msg)
}
func (h readOnlyHost) ModelState(name string) (sdk.ModelInfo, bool) { return h.fx.ModelState(name) }
func (h readOnlyHost) RunningModels() []sdk.ModelInfo               { return h.fx.RunningModels() }
func (h readOnlyHost) Snapshot() sdk.Snapshot                       { return h.fx.Snapshot() }
func (h readOnlyHost) SnapshotInto(dst *sdk.Snapshot)               { h.fx.SnapshotInto(dst) }

func (fx *effects) Log(level sdk.LogLevel, msg string) {
	fx.logAs(fx.r.cfg.SchedulerName, level, msg)
}

func (fx *effects) logAs(policy string, level sdk.LogLevel, msg string) {
	fx.r.log.Log(context.Background(), slogLevel(level), msg, "policy", policy)
}

func (fx *effects) info(m *model) sdk.ModelInfo {
	var info sdk.ModelInfo
	fx.infoInto(m, &info)
	return info
}

// infoInto writes m as policies see it into *info, reusing the storage of
// its Devices and Leased.
func (fx *effects) infoInto(m *model, info *sdk.ModelInfo) {
	devices, leased := info.Devices[:0], info.Leased[:0]
	*info = sdk.ModelInfo{
		Name:             m.name,
		State:            m.visible(),
		InFlight:         uint32(m.inFlight),
		ConcurrencyLimit: m.cfg.ConcurrencyLimit,
		Priority:         m.cfg.Priority,
		Pinned:           m.cfg.Pinned,
		Group:            m.cfg.Group,
		TTL:              int64(m.effectiveTTL()),
		EstimatedVRAM:    m.cfg.VRAM,
		MeasuredVRAM:     m.measured,
	}
	if l := fx.r.loop.ledger; l != nil {
		devices, leased, _ = l.AppendLease(m.name, devices, leased)
		if len(devices) == 0 && m.isAsleep() {
			// The GPUs its sleeping server is bound to, holding nothing
			// the ledger counts: where it can be woken (reserveTarget).
			for _, d := range m.startedOn {
				devices, leased = append(devices, int32(d)), append(leased, 0)
			}
		}
	}
	if len(devices) > 0 {
		info.Devices, info.Leased = devices, leased
	}
	if !m.lastUse.IsZero() {
		info.LastUse = m.lastUse.UnixNano()
	}
	fx.r.residencyInto(m, info)
}

func (fx *effects) ModelState(name string) (sdk.ModelInfo, bool) {
	m, ok := fx.r.loop.models[name]
	if !ok {
		return sdk.ModelInfo{}, false
	}
	return fx.info(m), true
}

func (fx *effects) RunningModels() []sdk.ModelInfo {
	l := &fx.r.loop
	var out []sdk.ModelInfo
	for _, name := range l.names {
		if m := l.models[name]; m.state.Running() {
			out = append(out, fx.info(m))
		}
	}
	return out
}

func (fx *effects) Snapshot() sdk.Snapshot {
	var s sdk.Snapshot
	fx.SnapshotInto(&s)
	return s
}

// SnapshotInto is Snapshot written into dst's storage (sdk.SnapshotReader):
// the Wasm host's snapshot import keeps one and encodes it at once, so a
// swapper that reads the snapshot on every plan costs no allocation per
// model on the host either.
func (fx *effects) SnapshotInto(dst *sdk.Snapshot) {
	l := &fx.r.loop
	models, gpus := dst.Models, dst.GPUs[:0]
	if cap(models) < len(l.names) {
		models = make([]sdk.ModelInfo, len(l.names))
	}
	models = models[:len(l.names)]
	for i, name := range l.names {
		fx.infoInto(l.models[name], &models[i])
	}
	if l.ledger != nil {
		devices, err := fx.gpuFigures()
		if err != nil {
			fx.r.log.Warn("reading GPU memory for a snapshot", "err", err)
		}
		for _, d := range devices {
			gpus = append(gpus, sdk.GPUInfo{Index: int32(d.Index), Name: d.Name, Total: d.Total, Free: d.Free, Leased: d.Leased})
		}
	}
	*dst = sdk.Snapshot{Now: l.now.UnixNano(), Models: models, GPUs: gpus,
		Host: sdk.HostMemoryInfo{Total: l.host.total, Leased: l.host.leased}}
}

// GrantServe hands the caller the model's upstream. In-flight goes up only
// if the caller took it (DESIGN.md rule 3). A grant the router refuses (a
// model that is not ready) fails the caller rather than stranding it.
func (fx *effects) GrantServe(id sdk.RequestID, name string) bool {
	r, l := fx.r, &fx.r.loop
	w, ok := l.waiters[id]
	if !ok {
		r.refused(&l.schedCounters, fmt.Sprintf("GrantServe(%d, %q): unknown request id", id, name))
		return false
	}
	if name != w.req.Model && !l.siblings(name, w.req.Model) { // any replica of the model asked for serves it
		r.refused(&l.schedCounters, fmt.Sprintf("GrantServe(%d, %q): the request asked for model %q", id, name, w.req.Model))
		r.fail(w, sdk.CodeInternal, fmt.Sprintf("scheduler %s granted model %q to a request for %q (policy bug)", r.cfg.SchedulerName, name, w.req.Model))
		return false
	}
	m, ok := l.models[name]
	if !ok || m.visible() != sdk.StateReady {
		state := "unknown"
		if ok {
			state = m.visible().String()
		}
		r.refused(&l.schedCounters, fmt.Sprintf("GrantServe(%d, %q): model is %s", id, name, state))
		r.fail(w, sdk.CodeInternal, fmt.Sprintf("scheduler %s granted model %q, which is %s (policy bug)", r.cfg.SchedulerName, name, state))
		return false
	}
	delete(l.waiters, id)
	return r.serve(w, m)
}

// serve hands w the upstream of m, which is ready, and reports whether the
// caller took it; in-flight goes up only then (rule 3). The scheduler's
// grants and the warm path (warm.go) both end here.
func (r *Router) serve(w *waiter, m *model) bool {
	id, name := w.id, m.name
	g := &Grant{Model: name, Upstream: m.inst.Upstream(), LoadWait: loadWait(w.arrived, r.cfg.Clock(), m)}
	g.Woke = g.LoadWait > 0 && m.lastLoadWoke
	if w.asked != "" { // routed to one of the model's replicas
		g.Model, g.Replica = w.asked, name
	}
	g.release = func() { r.exec.release(serveDone{id: id, model: name}) }
	if m.ended == nil {
		m.ended = new(atomic.Pointer[string])
	}
	g.ended = m.ended
	gen := m.gen
	g.stalled = func(reason string) {
		select {
		case r.stalls <- stall{model: name, gen: gen, reason: reason}:
		case <-r.done:
		}
	}
	if !r.deliver(w, result{grant: g}) {
		return false
	}
	m.inFlight++
	m.served++
	m.lastUse = r.loop.now
	m.ttl = w.req.TTL
	wait := r.cfg.Clock().Sub(w.arrived)
	r.loop.waits.add(wait)
	m.waits.add(wait)
	return true
}

// loadWait is how much of a wait from arrived to now m's last load
// covered.
func loadWait(arrived, now time.Time, m *model) time.Duration {
	if m.loadEnd.IsZero() {
		return 0
	}
	from, to := arrived, now
	if m.loadStart.After(from) {
		from = m.loadStart
	}
	if m.loadEnd.Before(to) {
		to = m.loadEnd
	}
	return max(to.Sub(from), 0)
}

func (fx *effects) GrantError(id sdk.RequestID, code sdk.ErrorCode, msg string) {
	r, l := fx.r, &fx.r.loop
	w, ok := l.waiters[id]
	if !ok {
		r.refused(&l.schedCounters, fmt.Sprintf("GrantError(%d): unknown request id", id))
		return
	}
	if !code.Valid() {
		r.refused(&l.schedCounters, fmt.Sprintf("GrantError(%d, %d): unknown error code; failing the request with %d", id, code, sdk.CodeInternal))
		code = sdk.CodeInternal
	}
	if msg == "" {
		msg = "request failed"
	}
	if why, ok := l.planFailures[w.req.Model]; ok {
		msg += ": " + why // the swapper's reason, which the scheduler only saw as a code
	}
	r.fail(w, code, msg)
}

func (fx *effects) SetQueuePosition(id sdk.RequestID, pos int) {
	r, l := fx.r, &fx.r.loop
	w, ok := l.waiters[id]
	if !ok {
		r.refused(&l.schedCounters, fmt.Sprintf("SetQueuePosition(%d): unknown request id", id))
		return
	}
	if pos < 0 {
		r.refused(&l.schedCounters, fmt.Sprintf("SetQueuePosition(%d, %d): negative position; holding the request at 0", id, pos))
		pos = 0
	}
	w.held, w.pos = true, pos
	if m := l.models[w.req.Model]; m != nil {
		r.revoke(m) // a held request for the model ends its warm path
		r.readAhead(m)
	}
	if w.req.Progress == nil {
		return
	}
	p := Progress{Model: cmp.Or(w.asked, w.req.Model), Position: pos, Loading: pos == 0}
	// Latest wins; the loop is the only sender, so this cannot block.
	select {
	case w.req.Progress <- p:
	default:
		select {
		case <-w.req.Progress:
		default:
		}
		select {
		case w.req.Progress <- p:
		default:
		}
	}
}

// runningSet is what a swapper sees: every model whose process is not
// stopped, together with the targets of swaps already started (rule 4),
// sorted, without target.
func (fx *effects) runningSet(target string) []string {
	l := &fx.r.loop
	var out []string
	for _, name := range l.names {
		if name == target {
			continue
		}
		if _, swapping := l.swaps[name]; swapping || l.models[name].state.Running() {
			out = append(out, name)
		}
	}
	return out
}

func (fx *effects) Plan(target string) (sdk.Plan, error) {
	r, l := fx.r, &fx.r.loop
	if _, ok := l.models[target]; !ok {
		return sdk.Plan{}, sdk.ErrUnknownModel
	}
	running := fx.runningSet(target)
	var key string
	if l.purePlans {
		// The swapper claimed sdk.PurePlanner: its plan is a function of
		// the target and the running set, which is exactly the key.
		key = target + "\x00" + strings.Join(running, "\x00")
		if p, ok := l.planCache[key]; ok {
			return p, nil
		}
	}
	q := sdk.PlanRequest{Now: l.now.UnixNano(), Target: target, Running: running}
	plan, err := l.swapper.Plan(q)
	fx.afterSwapperCall()
	if err != nil && fx.plansWithoutJobs(q, err) {
		return sdk.Plan{}, sdk.ErrHeldByJob // a wait, not the policy's failure
	}
	if err != nil {
		l.planFailures[target] = err.Error()
		if m := l.models[target]; m != nil && !m.state.Running() && l.replicaSetOf(target) != nil {
			// A replica a scheduler tried to start with no request
			// waiting on it: its status is where an operator sees why.
			m.lastErr = "cannot be placed: " + err.Error()
		}
		name := failedPolicy(err, r.cfg.SwapperName)
		l.swapCounters.failed(name, err)
		r.observer().PolicyFailed("swapper", name, "plan", err)
		r.log.Error("swapper policy failed", "policy", r.cfg.SwapperName, "target", target, "err", err)
		return sdk.Plan{}, sdk.ErrSwapperFailed
	}
	if len(plan.Modes) > len(plan.Evict) {
		why := fmt.Sprintf("swapper %s planned %d eviction modes for %d evictions", r.cfg.SwapperName, len(plan.Modes), len(plan.Evict))
		r.refused(&l.swapCounters, fmt.Sprintf("plan for %q: %d modes for %d evictions", target, len(plan.Modes), len(plan.Evict)))
		l.planFailures[target] = why
		return sdk.Plan{}, sdk.ErrSwapperFailed
	}
	for _, name := range plan.Evict {
		if m := l.models[name]; !slices.Contains(running, name) && (m == nil || !m.isAsleep()) {
			why := fmt.Sprintf("swapper %s planned to evict %q, which is not running", r.cfg.SwapperName, name)
			r.refused(&l.swapCounters, fmt.Sprintf("plan for %q evicts %q, which is not running", target, name))
			l.planFailures[target] = why
			return sdk.Plan{}, sdk.ErrSwapperFailed
		}
	}
	if l.purePlans && key != "" {
		if len(l.planCache) >= maxCachedPlans {
			clear(l.planCache)
		}
		l.planCache[key] = plan
	}
	return plan, nil
}

// afterSwapperCall follows every plan call: if another swapper answers now
// (a fallback took over or gave back), what the old one planned no longer
// holds, and the new one may not be pure.
func (fx *effects) afterSwapperCall() {
	l := &fx.r.loop
	if l.swapHandover != nil && l.swapHandover.HandedOver() {
		clear(l.planCache)
		l.purePlans = purePlanner(l.swapper)
		fx.r.observer().PolicyHandedOver("swapper")
	}
}

// StartSwap checks the request against the run-loop rules and launches the
// swap goroutine. The scheduler hears the result as OnSwapDone.
// keepPinned returns s without its evictions of pinned models: a pinned
// model is never evicted (ModelConfig.Pinned, README's "never evict"),
// whatever the router policy planned — llama-swap's group semantics evict
// every other member of a swap group, and a third-party module may evict
// anything. Each dropped eviction is counted against the scheduler's
// policy counters and logged; the swap goes on without it, and the
// ledger refuses it if the target then does not fit.
func (r *Router) keepPinned(s sdk.SwapRequest) sdk.SwapRequest {
	l := &r.loop
	pinned := func(name string) bool { m, ok := l.models[name]; return ok && m.cfg.Pinned }
	if !slices.ContainsFunc(s.Evict, pinned) {
		return s // the usual plan: nothing to drop, nothing allocated
	}
	var kept []string
	var modes []sdk.EvictMode
	for i, name := range s.Evict {
		if pinned(name) {
			r.refused(&l.schedCounters, fmt.Sprintf("StartSwap(%q): evicts %q, which is pinned: kept", s.Model, name))
			continue
		}
		kept = append(kept, name)
		if i < len(s.Modes) {
			modes = append(modes, s.Modes[i])
		}
	}
	s.Evict = kept
	if len(s.Modes) > 0 {
		s.Modes = modes
	}
	return s
}

func (fx *effects) StartSwap(s sdk.SwapRequest) error {
	r, l := fx.r, &fx.r.loop
	refuse := func(err error, why string) error {
		r.refusedWith(&l.schedCounters, err, fmt.Sprintf("StartSwap(%q): %s", s.Model, why))
		return err
	}
	target, ok := l.models[s.Model]
	if !ok {
		return refuse(sdk.ErrUnknownModel, "unknown model")
	}
	if l.shuttingDown {
		return refuse(sdk.ErrNotAllowed, "shutting down")
	}
	if _, active := l.swaps[s.Model]; active { // a Starting model always has its swap
		return refuse(sdk.ErrSwapActive, "a swap for it is already running")
	}
	if target.visible() == sdk.StateStopping {
		return refuse(sdk.ErrSwapActive, "it is being stopped; retry when the stop is done")
	}
	for _, sw := range l.swaps {
		if sw.evicting(s.Model) {
			return refuse(sdk.ErrSwapActive, fmt.Sprintf("the swap for %q is evicting it", sw.target))
		}
	}
	s = r.keepPinned(s)
	var evicted []*model
	for _, name := range s.Evict {
		m, ok := l.models[name]
		switch {
		case !ok:
			return refuse(sdk.ErrUnknownModel, fmt.Sprintf("evicts unknown model %q", name))
		case name == s.Model:
			return refuse(sdk.ErrBadArgument, "evicts its own target")
		case m.inFlight > 0: // rule 6
			return refuse(sdk.ErrModelBusy, fmt.Sprintf("evicts %q, which has %d requests in flight", name, m.inFlight))
		case l.swaps[name] != nil:
			return refuse(sdk.ErrSwapActive, fmt.Sprintf("evicts %q, which is being started", name))
		}
		evicted = append(evicted, m)
	}
	for _, sw := range l.swaps {
		for _, name := range s.Evict {
			if sw.evicting(name) {
				return refuse(sdk.ErrSwapActive, fmt.Sprintf("the swap for %q is already evicting %q", sw.target, name))
			}
		}
	}

	if len(s.Modes) > len(s.Evict) {
		return refuse(sdk.ErrBadArgument, fmt.Sprintf("%d eviction modes for %d evictions", len(s.Modes), len(s.Evict)))
	}
	evictions, err := r.resolveEvictions(s, evicted)
	if err != nil {
		return refuse(sdk.ErrBadArgument, err.Error())
	}

	already := target.state == sdk.StateReady
	if !already && r.inBackoff(target) {
		// No eviction and no start: the swap ends at once with the
		// backoff's error, as an event (backoff.go).
		sw := &swap{target: s.Model}
		sw.job = startJob{target: s.Model, refuse: r.backoffError(target)}
		l.swaps[s.Model] = sw
		r.exec.start(sw.job)
		return nil
	}
	sw := &swap{target: s.Model, evict: slices.Clone(s.Evict), devices: slices.Clone(s.Devices)}
	var placement map[int]uint64
	moved := false // an asleep target placed off its sleeper's GPUs (reserveTarget)
	if l.ledger != nil && !already {
		// A load that does not fit is never started: lease the memory now,
		// in the same step that gives back what the evicted models hold.
		r.releaseLease(target) // a lease left by a failed start or a crash
		var want []int
		for _, d := range s.Devices {
			want = append(want, int(d))
		}
		p, off, err := r.reserveTarget(target, want, s.Evict)
		if err != nil {
			if errors.Is(err, gpu.ErrHeldByJob) {
				// Not the policy's mistake: jobs hold the GPUs for now.
				return sdk.ErrHeldByJob
			}
			return refuse(sdk.ErrDoesNotFit, err.Error())
		}
		placement, moved = p, off
		sw.devices = sw.devices[:0]
		for _, d := range gpu.SortedDevices(p) {
			sw.devices = append(sw.devices, int32(d))
		}
	}

	running := fx.runningSet(s.Model)
	l.swaps[s.Model] = sw
	r.revoke(target)
	for _, m := range evicted {
		r.revoke(m)
	}
	if !already {
		target.loadStart, target.loadEnd = r.cfg.Clock(), time.Time{}
	}
	modes := make([]sdk.EvictMode, len(evictions))
	for i, e := range evictions {
		modes[i] = e.mode
	}
	if err := l.swapper.OnSwapStart(sdk.SwapStartEvent{
		Now: l.now.UnixNano(), Target: s.Model, Running: running, Evict: sw.evict, Devices: sw.devices, Modes: modes,
	}); err != nil {
		name := failedPolicy(err, r.cfg.SwapperName)
		l.swapCounters.failed(name, err)
		r.observer().PolicyFailed("swapper", name, "on_swap_start", err)
		r.log.Warn("swapper on_swap_start failed", "policy", r.cfg.SwapperName, "err", err)
	}

	// Hand the goroutine everything it needs by value: it must not touch
	// loop state.
	r.applyEvictions(evictions)
	var stops []eviction
	for _, m := range evicted {
		if m.state == sdk.StateReady {
			stops = append(stops, m.eviction(s.Model))
		}
		if m.state.Running() {
			r.setState(m, sdk.StateStopping)
		}
	}
	sw.job = startJob{target: s.Model, evicted: sw.evict, mc: target.cfg, placement: placement,
		waitFree: len(stops) > 0, loadStart: target.loadStart}
	for _, d := range sw.devices {
		sw.job.devices = append(sw.job.devices, int(d))
	}
	if already {
		sw.job.ready = target.inst
	} else {
		sw.job.wake, sw.job.wakeMoved = target.asleep, moved && target.asleep != nil
		r.setState(target, sdk.StateStarting)
	}
	if l.ledger != nil {
		sw.job.inv = l.ledger.Inventory()
	}
	sw.job.ctx, sw.abort = context.WithCancelCause(r.procCtx)
	if sw.job.wake != nil && !sw.job.wakeMoved {
		sw.job.wakeCtx, sw.cutWake = context.WithCancelCause(sw.job.ctx)
	}
	r.log.Info("swap", "model", s.Model, "evict", s.Evict, "devices", sw.devices)
	r.observer().SwapStarted(r.swapInfo(sw, !already))
	// Phase 1 (swap.go): stop the evicted servers in parallel; each
	// reports its stop as it ends, so the table shows it stopped while
	// the target still loads. Phase 2 starts after the last.
	// A target whose sleeping server is still being stopped starts only
	// once it has exited too: a backend runs one server per model.
	sw.pendingStops = len(stops)
	if target.stoppingSleeper {
		sw.afterSleeper = true
		sw.pendingStops++
	}
	for _, ev := range stops {
		r.exec.stop(ev)
	}
	if sw.pendingStops == 0 {
		r.exec.start(sw.job)
	}
	return nil
}

func (fx *effects) StopProcesses(names []string) error {
	r, l := fx.r, &fx.r.loop
	for _, name := range names {
		if _, ok := l.models[name]; !ok {
			r.refused(&l.schedCounters, fmt.Sprintf("StopProcesses: unknown model %q", name))
			return sdk.ErrUnknownModel
		}
	}
	for _, name := range names {
		m := l.models[name]
		r.revoke(m)
		switch {
		case m.isAsleep(): // stopping a sleeper frees its host memory
			r.stopSleeper(m, "stop_processes")
		case l.swaps[name] != nil:
			m.stopAfterStart = true
		case m.state == sdk.StateReady && m.inFlight > 0: // rule 6: drain first
			m.stopWhenIdle = true
		case slices.Contains(l.expired, name):
			r.expire(m)
		default:
			r.stopModel(m)
		}
	}
	return nil
}
