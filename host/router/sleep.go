package router

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/host/gpu"
	"github.com/loadout-dev/loadout/sdk"
)

// Residency (DESIGN.md, "Residency"): an evicted model need not be
// stopped. Put to sleep, its server keeps its process and gives back its
// GPU memory: at level 1 its weights move to host RAM, at level 2 they are
// dropped. On the run loop an asleep model is Stopped (it holds no GPU
// memory, so every rule about running models leaves it out) with its
// sleeping instance kept in model.asleep and a lease on host memory; a
// request for it starts a swap as for a stopped model, whose phase 2
// wakes the instance instead of starting a server, and falls back to a
// cold start when the wake fails. A sleep is an eviction whose executor
// calls Sleep instead of Stop, and falls back to Stop when the sleep
// fails.

// A simulated server (host/sim) marks itself with a Virtual() method: its
// sleeps are the simulator's (VirtualWork), so its model's configured
// SleepLevels hold.

// ErrSleepUnsupported is a SleepInstance's Sleep error for a model whose
// server cannot sleep though its backend offers sleep (the cmd backend's
// model whose options configure no sleep steps): the router stops it when
// evicted from then on, until its configuration changes.
var ErrSleepUnsupported = errors.New("this model's server cannot sleep")

// SleepInstance is an Instance whose server can sleep (plugins.Sleeper,
// vLLM's sleep mode). Its methods are called from the executor's
// goroutines, never concurrently for one instance.
type SleepInstance interface {
	Instance
	// SleepLevels is the set of levels its backend offers: bit 1 level 1,
	// bit 2 level 2; 0 none.
	SleepLevels() uint8
	// Sleep releases the server's GPU memory at level (1 or 2) and keeps
	// its process; it returns once the memory is released. An error
	// leaves the server as it was or dead; the host then stops it. One
	// that is ErrSleepUnsupported says this model's server cannot sleep
	// at all (its backend sleeps others): it is not asked again.
	Sleep(ctx context.Context, level uint8) error
	// Wake brings the sleeping server back and returns once it serves.
	Wake(ctx context.Context) error
	// HostBytes is the host memory in bytes the sleeping server holds
	// (level 1: its weights in RAM; level 2: its process's overhead), as
	// its backend reports it, else the resident size of its processes
	// (0: unknown).
	HostBytes(ctx context.Context) (uint64, error)
}

// defaultSleepOverhead is a level-2 sleeper's host memory until measured
// (ModelConfig.SleepOverhead).
const defaultSleepOverhead = 1 << 30

// defaultWakeTimeout bounds a wake, and a sleep (ModelConfig.WakeTimeout):
// the configuration's default.
const defaultWakeTimeout = config.DefaultWakeTimeout

// wakeTimeout bounds a wake and a sleep of the model's server: both move
// its weights, and a sleep may wait on the server (llama-server sleeps
// only after --sleep-idle-seconds). Past it the server is taken for hung
// and killed.
func (mc ModelConfig) wakeTimeout() time.Duration {
	if mc.WakeTimeout > 0 {
		return mc.WakeTimeout
	}
	return defaultWakeTimeout
}

// hostLedger accounts host memory for sleepers, on the run loop: a sleep
// leases its bytes before it starts, and a sleep that does not fit is
// never started (it becomes a stop), so sleepers never push the machine
// into swap.
type hostLedger struct {
	total  uint64
	leased uint64
	leases map[string]uint64
}

func (h *hostLedger) free() uint64 {
	if h.leased >= h.total {
		return 0
	}
	return h.total - h.leased
}

func (h *hostLedger) lease(name string, n uint64) {
	h.release(name)
	if h.leases == nil {
		h.leases = map[string]uint64{}
	}
	h.leases[name] = n
	h.leased += n
}

func (h *hostLedger) release(name string) {
	if n, ok := h.leases[name]; ok {
		h.leased -= n
		delete(h.leases, name)
	}
}

// sleepLevels is what m may sleep at: what its server can (its running
// or asleep instance's answer, else what its backend claims), narrowed by
// its evict: (stop: none, sleep: level 1, sleep2: level 2) — the
// operator's word holds against a policy's too; 0 when the host accounts
// no host memory.
func (r *Router) sleepLevels(m *model) uint8 {
	if r.loop.host.total == 0 {
		return 0
	}
	switch m.cfg.Evict {
	case config.EvictStop:
		return 0
	case config.EvictSleep:
		return r.serverSleepLevels(m) & 1
	case config.EvictSleep2:
		return r.serverSleepLevels(m) & 2
	}
	return r.serverSleepLevels(m)
}

// serverSleepLevels is what m's server can sleep at.
func (r *Router) serverSleepLevels(m *model) uint8 {
	if m.sleepUnsupported {
		return 0
	}
	for _, inst := range []Instance{m.inst, m.asleep} {
		if inst == nil {
			continue
		}
		if si, ok := inst.(SleepInstance); ok {
			return si.SleepLevels()
		}
		if _, virtual := inst.(interface{ Virtual() }); !virtual {
			return 0 // a server whose backend has no sleep
		}
	}
	return m.cfg.SleepLevels
}

// hostBytes is the host memory a sleeper of m holds at level: its weights
// (measured in GPU memory, else declared; 0 unknown, so level 1 is not
// offered) or its process's overhead (measured asleep, else configured).
func (m *model) hostBytes(level uint8) uint64 {
	if level == 1 {
		return max(m.measured, m.weightBytes, m.cfg.VRAM, m.hostMeasured[0])
	}
	if m.hostMeasured[1] > 0 {
		return m.hostMeasured[1]
	}
	if m.cfg.SleepOverhead > 0 {
		return m.cfg.SleepOverhead
	}
	return defaultSleepOverhead
}

// isAsleep reports whether m is asleep now (not being woken).
func (m *model) isAsleep() bool { return m.asleep != nil && m.state == sdk.StateStopped }

// reserveTarget leases the GPU memory of a swap's target, on exactly
// want when the plan names devices (Ledger.Reserve). A sleeping server
// can only be woken on the GPUs it was started on (its CUDA context and
// CUDA_VISIBLE_DEVICES stay with the process): an asleep target is placed
// there when the plan names no devices and it fits; placed anywhere else,
// moved is true, and the swap stops its sleeper and cold-starts it where
// the lease is (wakeTarget) — never a wake on GPUs the ledger gave to
// others.
func (r *Router) reserveTarget(m *model, want []int, evict []string) (placement map[int]uint64, moved bool, err error) {
	l := &r.loop
	name, need := m.name, m.cfg.VRAM
	on := m.startedOn
	if m.asleep == nil || len(on) == 0 {
		placement, err = l.ledger.Reserve(name, need, want, evict)
		return placement, false, err
	}
	if len(want) == 0 {
		if p, err := l.ledger.Reserve(name, need, on, evict); err == nil {
			return p, false, nil
		}
	}
	placement, err = l.ledger.Reserve(name, need, want, evict)
	if err == nil && !slices.Equal(gpu.SortedDevices(placement), on) {
		r.log.Info("asleep model placed on other GPUs than its sleeping server's; stopping that server and cold-loading it there",
			"model", name, "asleep_on", on, "placed_on", gpu.SortedDevices(placement))
		moved = true
	}
	return placement, moved, err
}

// errWakeMoved is why a swap did not wake its asleep target: the plan put
// it on other GPUs than its sleeping server's (reserveTarget).
var errWakeMoved = errors.New("placed on other GPUs than its sleeping server's")

// isSleeping reports whether m's server is being put to sleep.
func (m *model) isSleeping() bool { return m.sleeping != 0 && m.state == sdk.StateStopping }

// isWaking reports whether m's sleeping server is being woken.
func (m *model) isWaking() bool { return m.asleep != nil && m.state == sdk.StateStarting }

// evictPlan is how StartSwap carries out one eviction.
type evictPlan struct {
	m       *model
	mode    sdk.EvictMode // EvictStop, EvictSleep1 or EvictSleep2, resolved
	sleeper bool          // m is asleep: stopping it frees host memory only
}

// resolveEvictions decides how each of s.Evict is evicted: the plan's
// modes, defaults from the config, and host memory's say — a sleep that
// host memory cannot hold is a stop. It changes nothing; an error is a
// refusal of the swap (a sleep asked of an asleep model).
func (r *Router) resolveEvictions(s sdk.SwapRequest, evicted []*model) ([]evictPlan, error) {
	l := &r.loop
	out := make([]evictPlan, len(evicted))
	free := l.host.free() + l.reclaimable()
	for i, m := range evicted {
		out[i] = evictPlan{m: m, mode: sdk.EvictStop}
		if m.isAsleep() {
			if want := sdk.ModeOf(s.Modes, i); want.SleepLevel() != 0 {
				return nil, fmt.Errorf("evicts %q with %s, but it is asleep already (only a stop frees its host memory)", m.name, want)
			}
			out[i].sleeper = true
			free += l.host.leases[m.name]
		}
	}
	for i, m := range evicted {
		if out[i].sleeper || m.state != sdk.StateReady {
			continue
		}
		want := sdk.ModeOf(s.Modes, i)
		levels := r.sleepLevels(m)
		var try []uint8 // the levels to try, in order
		switch want {
		case sdk.EvictStop:
		case sdk.EvictSleep1:
			try = []uint8{1}
		case sdk.EvictSleep2:
			try = []uint8{2, 1} // a backend with level 1 only sleeps at 1
		default:
			switch m.cfg.Evict {
			case config.EvictAuto:
				try = []uint8{1, 2}
			case config.EvictSleep:
				try = []uint8{1}
			case config.EvictSleep2:
				try = []uint8{2}
			}
		}
		why := ""
		for _, level := range try {
			if levels&level == 0 {
				why = fmt.Sprintf("its backend cannot sleep at level %d", level)
				continue
			}
			n := m.hostBytes(level)
			if n == 0 || n > free {
				why = fmt.Sprintf("host memory cannot hold a level-%d sleeper of it (%d MiB, %d MiB free of %d MiB)",
					level, n>>20, free>>20, l.host.total>>20)
				if n > l.host.total && !l.saidHostTooSmall && l.host.total > 0 {
					l.saidHostTooSmall = true
					r.log.Warn("host memory is too small for a sleeper: such evictions are stops", "model", m.name,
						"need_mib", n>>20, "host_memory_mib", l.host.total>>20)
				}
				continue
			}
			free -= n
			out[i].mode = sdk.EvictSleep1
			if level == 2 {
				out[i].mode = sdk.EvictSleep2
			}
			why = ""
			break
		}
		if out[i].mode == sdk.EvictStop && want.SleepLevel() != 0 {
			// The policy asked for a sleep the host cannot give: a stop,
			// counted against it (it saw the snapshot's host memory).
			r.refused(&l.schedCounters, fmt.Sprintf("StartSwap(%q): %s of %q is a stop: %s", s.Model, want, m.name, why))
		}
	}
	return out, nil
}

// applyEvictions leases host memory for the sleeps of plan and stops its
// sleepers (freeing theirs), once the swap is accepted.
func (r *Router) applyEvictions(plan []evictPlan) {
	var need uint64
	for _, p := range plan {
		if p.sleeper {
			r.stopSleeper(p.m, "evicted")
		}
	}
	for _, p := range plan {
		if level := p.mode.SleepLevel(); level != 0 {
			need += p.m.hostBytes(level)
		}
	}
	r.makeRoom(need)
	for _, p := range plan {
		if level := p.mode.SleepLevel(); level != 0 {
			p.m.sleeping, p.m.sleepStart = level, r.cfg.Clock()
			r.loop.host.lease(p.m.name, p.m.hostBytes(level))
		}
	}
}

// eviction is how the executor ends m's ready server for the swap whose
// target is swap ("" for none): put to sleep at m.sleeping's level when
// applyEvictions leased a sleep for it, else stopped.
// A sleep can be cut (m.cutSleep) until it ends.
func (m *model) eviction(swap string) eviction {
	ev := eviction{model: m.name, gen: m.gen, inst: m.inst, timeout: stopTimeout(m.cfg), swap: swap,
		sleep: m.sleeping, sleepTimeout: m.cfg.wakeTimeout()}
	if m.sleeping != 0 {
		ev.ctx, m.cutSleep = context.WithCancelCause(context.Background())
	}
	return ev
}

// sleepCtx is what ev's sleep runs under: ev.ctx, else a context never
// cancelled.
func (ev eviction) sleepCtx() context.Context {
	if ev.ctx != nil {
		return ev.ctx
	}
	return context.Background()
}

// expire ends a ready, idle model whose TTL has passed as a swap would
// evict it when its plan says nothing: put to sleep when its evict: and
// host memory allow (resolveEvictions), else stopped. A TTL gives back
// the model's GPU memory; like an eviction's, its sleeper keeps the
// server for a wake until host memory is needed or it is unloaded.
func (r *Router) expire(m *model) {
	if m.state != sdk.StateReady || m.inFlight > 0 {
		r.stopModel(m)
		return
	}
	plan, err := r.resolveEvictions(sdk.SwapRequest{}, []*model{m})
	if err != nil || plan[0].mode == sdk.EvictStop {
		r.stopModel(m)
		return
	}
	r.applyEvictions(plan)
	r.log.Info("model idle past its ttl; putting it to sleep", "model", m.name, "level", m.sleeping)
	r.setState(m, sdk.StateStopping)
	r.exec.stop(m.eviction(""))
}

// stopSleeper stops m's sleeping server and gives back its host memory at
// once (the process is going; its stop is not waited for by anything but
// shutdown).
func (r *Router) stopSleeper(m *model, why string) {
	if !m.isAsleep() {
		return
	}
	inst := m.asleep
	m.asleep, m.sleepLevel = nil, 0
	m.gen++ // its exit is expected now
	r.loop.host.release(m.name)
	r.loop.sleeperStops++
	m.stoppingSleeper = true
	r.log.Info("stopping sleeping model", "model", m.name, "why", why)
	r.exec.stop(eviction{model: m.name, gen: m.gen, inst: inst, timeout: stopTimeout(m.cfg), sleeper: true})
	r.loop.changed = append(r.loop.changed, m.name)
}

// onSlept ends a sleep eviction on the loop: the model is asleep (its
// GPU lease given back, its host lease kept, corrected to what the server
// says it holds), or, when the sleep failed and the executor stopped it
// instead, stopped.
func (r *Router) onSlept(m *model, ev stopDone) {
	l := &r.loop
	level := m.sleeping
	m.sleeping = 0
	if m.cutSleep != nil {
		m.cutSleep(nil) // the sleep has ended: release its context
		m.cutSleep = nil
	}
	if ev.slept == 0 {
		m.stopAfterSleep = false
		l.host.release(m.name)
		if errors.Is(ev.sleepErr, ErrSleepUnsupported) {
			m.sleepUnsupported = true
			r.log.Info("model's server cannot sleep; it is stopped when evicted from now on", "model", m.name, "why", ev.sleepErr)
			return
		}
		m.sleepFailures++
		r.log.Warn("model could not sleep; it was stopped instead", "model", m.name, "level", level, "err", ev.sleepErr)
		return
	}
	m.weightBytes = max(m.weightBytes, m.measured)
	inst := m.inst
	if m.stopAfterSleep { // the unload waits for the server's exit, not for the sleep
		l.sleeperWaiters[m.name] = append(l.sleeperWaiters[m.name], m.unloadWaiters...)
		m.unloadWaiters = nil
	}
	r.setStopped(m) // releases the GPU lease, clears m.inst
	m.asleep, m.sleepLevel = inst, ev.slept
	m.sleeps++
	m.lastSleep = r.cfg.Clock().Sub(m.sleepStart)
	if ev.hostBytes > 0 {
		m.hostMeasured[ev.slept-1] = ev.hostBytes
		l.host.lease(m.name, ev.hostBytes)
	}
	if l.host.leased > l.host.total { // it measured larger than estimated, or hostMemory shrank meanwhile
		r.log.Warn("host memory cannot hold the new sleeper; stopping it", "model", m.name,
			"host_mib", l.host.leases[m.name]>>20, "host_memory_mib", l.host.total>>20)
		r.stopSleeper(m, "host memory over-committed")
		return
	}
	r.log.Info("model asleep", "model", m.name, "level", ev.slept, "host_mib", l.host.leases[m.name]>>20)
	if m.stopAfterSleep {
		m.stopAfterSleep = false
		r.stopSleeper(m, "unload")
	}
}

// onSleeperExit handles a sleeping server that exited on its own: its
// host memory is given back and the model is stopped; the next request
// cold-loads it.
func (r *Router) onSleeperExit(m *model) {
	reason := "exited"
	if err := m.asleep.Err(); err != nil {
		reason = err.Error()
	}
	r.log.Warn("sleeping model server exited; it will be cold-loaded", "model", m.name, "err", reason)
	m.asleep, m.sleepLevel = nil, 0
	r.loop.host.release(m.name)
	r.loop.changed = append(r.loop.changed, m.name)
	r.tickNow()
}

// sleepEviction puts ev's server to sleep, or stops it when the sleep
// fails, and describes the end; for the executors. Each step has a
// deadline of its own: the sleep ev.sleepTimeout, under ctx's
// cancellation (a cut: model.cutSleep), the size query and a stop
// ev.timeout, under neither.
func sleepEviction(ctx context.Context, log interface {
	Warn(string, ...any)
}, ev eviction) stopDone {
	done := stopDone{model: ev.model, gen: ev.gen, swap: ev.swap}
	// A stop's deadline: after a sleep that hung or was cut, never the
	// sleep's, used up — a kill under an expired deadline is never sent,
	// and the server would live on, holding the GPU memory the swap goes
	// on to use.
	stopCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), ev.timeout)
	}
	si, ok := ev.inst.(SleepInstance)
	if !ok {
		done.sleepErr = fmt.Errorf("the server cannot sleep")
		sctx, cancel := stopCtx()
		defer cancel()
		_ = ev.inst.Stop(sctx)
		return done
	}
	sctx, cancel := context.WithTimeout(ctx, ev.sleepTimeout)
	err := si.Sleep(sctx, ev.sleep)
	timedOut := errors.Is(sctx.Err(), context.DeadlineExceeded) // read before cancel, which sets Err too
	cancel()
	if err != nil {
		switch {
		case ctx.Err() != nil:
			err = fmt.Errorf("sleep cut: %w (%v)", context.Cause(ctx), err)
		case timedOut:
			err = fmt.Errorf("sleep timed out after %s (the model's wakeTimeout): %w", ev.sleepTimeout, err)
		}
		done.sleepErr = err
	} else {
		done.slept = ev.sleep
		hctx, cancel := stopCtx()
		defer cancel()
		if n, err := si.HostBytes(hctx); err == nil {
			done.hostBytes = n
		}
		return done
	}
	// A server that cannot sleep is stopped as any is: its grace, its
	// cmdStop. onSlept says once that it cannot.
	stop := ev.inst.Stop
	if !errors.Is(done.sleepErr, ErrSleepUnsupported) {
		log.Warn("model server did not sleep; stopping it", "model", ev.model, "level", ev.sleep, "err", done.sleepErr)
		if k, ok := ev.inst.(Killer); ok {
			stop = k.Kill // a server that failed to sleep may be hung
		}
	}
	kctx, kcancel := stopCtx()
	defer kcancel()
	if err := stop(kctx); err != nil {
		log.Warn("stopping model", "model", ev.model, "err", err)
	}
	return done
}

// wakeTarget wakes job's sleeping instance, bounded by the model's wake
// timeout; on failure it kills the instance and reports why, so the
// caller cold-starts the model.
func wakeTarget(ctx context.Context, job startJob) (Instance, error) {
	if job.wakeMoved {
		// Not woken: stopped, and gone before the cold start (a backend
		// starts one server per model) — killed when a stop with grace
		// does not end it (a stopped process ignores SIGTERM).
		sctx, cancel := context.WithTimeout(context.Background(), stopTimeout(job.mc))
		err := job.wake.Stop(sctx)
		cancel()
		if k, ok := job.wake.(Killer); ok && err != nil {
			kctx, kcancel := context.WithTimeout(context.Background(), stopTimeout(job.mc))
			defer kcancel()
			_ = k.Kill(kctx)
		}
		return nil, errWakeMoved
	}
	si, ok := job.wake.(SleepInstance)
	if !ok {
		return nil, fmt.Errorf("the server cannot wake")
	}
	cut := ctx
	if job.wakeCtx != nil {
		cut = job.wakeCtx
	}
	wctx, cancel := context.WithTimeout(cut, job.mc.wakeTimeout())
	err := si.Wake(wctx)
	timedOut := errors.Is(wctx.Err(), context.DeadlineExceeded) // read before cancel, which sets Err too
	cancel()
	if err == nil {
		return job.wake, nil
	}
	switch {
	case ctx.Err() != nil:
	case cut.Err() != nil:
		err = fmt.Errorf("wake cut: %w (%v)", context.Cause(cut), err)
	case timedOut:
		err = fmt.Errorf("wake timed out after %s: %w", job.mc.wakeTimeout(), err)
	}
	kctx, kcancel := context.WithTimeout(context.Background(), stopTimeout(job.mc))
	defer kcancel()
	if k, ok := job.wake.(Killer); ok {
		_ = k.Kill(kctx)
	} else {
		_ = job.wake.Stop(kctx)
	}
	return nil, err
}

// wakeDone ends the residency side of a swap whose target was asleep: its
// host lease is given back whatever happened (a woken server holds GPU
// memory again; a failed wake killed it), and the wake is counted.
func (r *Router) wakeDone(m *model, ev swapDone) {
	if m == nil || m.asleep == nil {
		return
	}
	level := m.sleepLevel
	r.loop.host.release(m.name)
	m.asleep, m.sleepLevel = nil, 0
	switch {
	case ev.woke:
		m.wakes++
		m.wakeTime[level-1] = r.cfg.Clock().Sub(m.loadStart)
		m.lastWake = m.wakeTime[level-1]
	case errors.Is(ev.wakeErr, errWakeMoved): // not a failure; reserveTarget said why
	case ev.wakeErr != nil:
		m.wakeFailures++
		r.log.Warn("wake failed; the model was cold-loaded instead", "model", m.name, "level", level, "err", ev.wakeErr)
	}
}

// apiState is m's state as the API shows it: the visible state, with the
// residency of a sleeper ("asleep"), a sleep in flight ("sleeping") and a
// wake in flight ("waking").
func (m *model) apiState() string {
	switch {
	case m.isAsleep():
		return "asleep"
	case m.isSleeping():
		return "sleeping"
	case m.isWaking():
		return "waking"
	}
	return m.visible().String()
}

// residencyInto writes m's residency fields (ABI version 3) into info.
func (r *Router) residencyInto(m *model, info *sdk.ModelInfo) {
	if m.asleep != nil {
		info.SleepLevel = m.sleepLevel
	}
	info.CanSleep = r.sleepLevels(m)
	info.LoadTime = int64(m.cfg.LoadTime)
	if m.loadTime > 0 {
		info.LoadTime = int64(m.loadTime)
	}
	for i := range 2 {
		wake := m.cfg.WakeTime[i]
		if m.wakeTime[i] > 0 {
			wake = m.wakeTime[i]
		}
		switch i {
		case 0:
			info.WakeTime1 = int64(wake)
		default:
			info.WakeTime2 = int64(wake)
		}
	}
	if info.CanSleep&1 != 0 {
		info.HostBytes1 = m.hostBytes(1)
	}
	if info.CanSleep&2 != 0 {
		info.HostBytes2 = m.hostBytes(2)
	}
	info.HostLeased = r.loop.host.leases[m.name]
}

// residencyStatus fills st's residency fields from m.
func (l *loopState) residencyStatus(m *model, st *ModelStatus) {
	if m.asleep != nil {
		st.SleepLevel = int(m.sleepLevel)
	}
	st.HostBytes = l.host.leases[m.name]
	st.ReadAheadBytes = l.host.leases[warmKey(m.name)]
	st.ColdLoads, st.Wakes, st.WakeFailures = m.loads, m.wakes, m.wakeFailures
	st.LoadSeconds = m.loadTime.Seconds()
	st.WakeSeconds = m.lastWake.Seconds()
	st.SleepSeconds = m.lastSleep.Seconds()
}

// HostMemory is the host memory ledger's figures in bytes: Total is what
// sleepers may lease (Config.HostMemory, or the last SetHostMemory),
// Sleepers what sleeping and sleeping-to-be models lease now, ReadAhead
// what weights read ahead into the page cache lease.
type HostMemory struct {
	Total, Sleepers, ReadAhead uint64
}

// HostMemory returns the host memory ledger's figures now. Errors:
// ErrShuttingDown.
func (r *Router) HostMemory() (HostMemory, error) {
	var hm HostMemory
	ran := false
	r.query(func() {
		ran = true
		l := &r.loop
		ahead := l.reclaimable()
		hm = HostMemory{Total: l.host.total, Sleepers: l.host.leased - ahead, ReadAhead: ahead}
	})
	if !ran {
		return hm, ErrShuttingDown
	}
	return hm, nil
}

// SetHostMemory changes the host memory in bytes that sleepers may lease
// (a reload's hostMemory:) while requests flow. When what is leased no
// longer fits, read-ahead is dropped first (the oldest first), then
// sleepers are stopped, the least recently used first, until it does; a
// sleep under way keeps its lease until it ends (then it is stopped if
// host memory is over-committed, as onSlept does for any sleeper). 0
// turns sleeping off: every sleeper is stopped, and every eviction is a
// stop from then on. Errors: ErrShuttingDown.
func (r *Router) SetHostMemory(total uint64) error {
	ran := false
	r.query(func() {
		ran = true
		r.setHostMemory(total)
	})
	if !ran {
		return ErrShuttingDown
	}
	return nil
}

func (r *Router) setHostMemory(total uint64) {
	l := &r.loop
	if total == l.host.total {
		return
	}
	r.log.Info("host memory for sleeping models changed", "was_mib", l.host.total>>20, "now_mib", total>>20)
	l.host.total = total
	r.makeRoom(0)
	if l.host.leased <= total {
		return
	}
	var sleepers []*model
	for _, name := range l.names {
		if m := l.models[name]; m.isAsleep() {
			sleepers = append(sleepers, m)
		}
	}
	slices.SortStableFunc(sleepers, func(a, b *model) int { return a.lastUse.Compare(b.lastUse) })
	for _, m := range sleepers {
		if l.host.leased <= total {
			break
		}
		r.stopSleeper(m, "host memory reduced")
	}
	r.tickNow()
}
