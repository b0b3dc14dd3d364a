package router

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/loadout-dev/loadout/host/gpu"
	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/placement"
)

// gpuFigures is the ledger's view of the devices that snapshots carry,
// in fx's scratch (valid until the next call): as it is, or, while the
// swapper is asked what it would plan without the jobs
// (plansWithoutJobs), as it will be once every job's lease has ended.
func (fx *effects) gpuFigures() ([]gpu.DeviceFigures, error) {
	var err error
	fx.figures, err = fx.r.loop.ledger.AppendFigures(fx.figures[:0], fx.withoutJobs)
	return fx.figures, err
}

// plansWithoutJobs reports, for a plan the swapper refused with err,
// whether it would have planned had no GPU job held memory: it asks the
// swapper again with the same request, against snapshots that leave the
// jobs' leases out. A plan is a speculative, pure query (sdk.Swapper), so
// asking "what if" changes nothing; and it is asked only when a plan
// failed while jobs hold leases. If it would, the target is not a misfit
// but must wait for the jobs: the scheduler hears sdk.ErrHeldByJob (fifo
// queues the request, and the tick that follows a job's release tries it
// again). The reason is kept for an error the scheduler grants anyway.
func (fx *effects) plansWithoutJobs(q sdk.PlanRequest, err error) bool {
	l := &fx.r.loop
	if l.ledger == nil || !l.ledger.HasJobs() {
		return false
	}
	fx.withoutJobs = true
	_, werr := l.swapper.Plan(q)
	fx.withoutJobs = false
	if werr != nil {
		return false
	}
	l.planFailures[q.Target] = fmt.Sprintf("GPU jobs hold the memory it needs until they end (swapper %s: %v)", fx.r.cfg.SwapperName, err)
	return true
}

// watchJobLeases makes the end of a job's lease an event of the run loop:
// the scheduler gets a tick at once, so a request queued while jobs held
// its GPUs (sdk.ErrHeldByJob) is tried again when they are back, not at
// the next periodic tick. The ledger's hook runs on the releasing
// goroutine and must not block: the tick goes through a goroutine of its
// own, which returns at once after shutdown.
func (r *Router) watchJobLeases() {
	if r.cfg.Ledger == nil {
		return
	}
	r.cfg.Ledger.OnJobRelease(func() { go r.query(r.tickNow) })
}

// PlanJob says, changing nothing, which GPUs a job that needs gpus whole
// devices and may evict idle models would get now, in index order (see
// planJob); priority is the job's, higher first, for a swapper that
// weighs it against the models'. It is the admission check of host/jobs'
// local executor. Errors: *Error with CodeUnavailable saying why not (too few
// devices, the swapper's refusal, a plan the router refused), or
// ErrShuttingDown.
func (r *Router) PlanJob(gpus, priority int) ([]int, error) {
	var devices []int
	err := error(ErrShuttingDown)
	r.query(func() {
		var p jobPlan
		p, err = r.loop.fx.planJob("", gpus, priority)
		devices = p.devices
	})
	return devices, err
}

// EvictForJob makes room for GPU job id (a task id), which needs gpus whole
// devices and may evict idle models: in one turn of the run loop it plans
// (planJob), leases the devices to id in the ledger — releasing the
// evicted models' leases in the same step, so no model is placed there
// meanwhile — and starts stopping those models and the asleep models whose
// servers were started on those GPUs (stopSleepersOn); then it waits until
// they have stopped, so the job's process never starts beside them. A request
// for an evicted model meanwhile finds it stopping, and waits or goes
// elsewhere as the scheduler decides; the scheduler hears of the stops as
// ticks naming the models. It returns the devices leased, in index order,
// and the models evicted (not the sleepers); the caller owns the lease
// (gpu.Ledger.Release).
// Errors: *Error with CodeUnavailable saying why there is no room (nothing
// is leased or stopped); ctx.Err() while waiting (the stops go on, and the
// lease is released once they are done, so no model is placed beside a
// server still exiting); ErrShuttingDown.
func (r *Router) EvictForJob(ctx context.Context, id string, gpus, priority int) ([]int, []string, error) {
	var (
		p       jobPlan
		pending []chan struct{}
	)
	err := error(ErrShuttingDown)
	r.query(func() {
		p, err = r.loop.fx.planJob(id, gpus, priority)
		if err != nil {
			return
		}
		if _, aerr := r.loop.ledger.AcquireDevices(id, p.devices, p.evict...); aerr != nil {
			err = &Error{Code: sdk.CodeUnavailable, Message: fmt.Sprintf("job %s: %v", id, aerr)}
			return
		}
		pending = append(r.stopForJob(p.evict), r.stopSleepersOn(p.devices, "its GPU was taken by job "+id)...)
		if len(p.evict) > 0 {
			r.log.Info("GPU job evicts idle models", "job", id, "gpus", p.devices, "evict", p.evict, "planner", p.planner)
		}
	})
	if err != nil {
		return nil, nil, err
	}
	for i, ch := range pending {
		select {
		case <-ch:
		case <-ctx.Done():
			go r.releaseAfter(id, pending[i:])
			return nil, nil, ctx.Err()
		case <-r.done:
			r.cfg.Ledger.Release(id)
			return nil, nil, ErrShuttingDown
		}
	}
	return p.devices, p.evict, nil
}

// releaseAfter ends job id's lease once the models it evicted have
// stopped (each of pending is closed), or the router has shut down: until
// then their servers may still run on its GPUs, and no model may be
// placed there.
func (r *Router) releaseAfter(id string, pending []chan struct{}) {
	for _, ch := range pending {
		select {
		case <-ch:
		case <-r.done:
		}
	}
	r.cfg.Ledger.Release(id)
}

// stopForJob starts stopping models a job evicts (each checked by
// jobPlan: ready and idle) and returns a channel per model, closed when it
// has stopped. Runs on the loop.
func (r *Router) stopForJob(models []string) []chan struct{} {
	if len(models) == 0 {
		return nil
	}
	r.observer().Unloading(models, "job")
	var pending []chan struct{}
	for _, name := range models {
		m := r.loop.models[name]
		ch := make(chan struct{})
		m.unloadWaiters = append(m.unloadWaiters, ch)
		pending = append(pending, ch)
		r.stopModel(m)
	}
	return pending
}

// stopSleepersOn stops every asleep model whose server was started on one
// of devices and returns a channel per model, closed when its server has
// exited: a job takes its GPUs whole, and a sleeping server keeps a CUDA
// context on its GPU, which the ledger does not count. Runs on the loop.
func (r *Router) stopSleepersOn(devices []int, why string) []chan struct{} {
	l := &r.loop
	var pending []chan struct{}
	for _, name := range l.names {
		m := l.models[name]
		if !m.isAsleep() || !slices.ContainsFunc(m.startedOn, func(d int) bool { return slices.Contains(devices, d) }) {
			continue
		}
		ch := make(chan struct{})
		l.sleeperWaiters[name] = append(l.sleeperWaiters[name], ch)
		pending = append(pending, ch)
		r.stopSleeper(m, why)
	}
	return pending
}

// jobPlan is a plan for a GPU job that the router has checked.
type jobPlan struct {
	devices []int    // the GPUs the job takes, in index order
	evict   []string // the models to stop, sorted
	planner string   // who chose: the swapper's name, or "host" with why
}

// planJob plans for a job that needs gpus whole devices, on the loop. The
// swapper decides, as for a model (sdk.JobPlanner): it gets the devices no
// job holds as candidates. A swapper that does not plan for jobs
// (sdk.ErrJobPlanUnsupported; or not an sdk.JobPlanner at all) leaves it
// to the host's rule: free devices first, then those every holder of which
// is evictable, lowest index first (placement.Whole). Either way the plan
// is checked before it counts (checkJobPlan): a job never evicts a model
// with requests in flight (DESIGN.md rule 6), a pinned model, or one in a
// swap. id is empty for an admission check.
func (fx *effects) planJob(id string, gpus, priority int) (jobPlan, error) {
	r, l := fx.r, &fx.r.loop
	unavailable := func(format string, args ...any) (jobPlan, error) {
		return jobPlan{}, &Error{Code: sdk.CodeUnavailable, Message: fmt.Sprintf(format, args...)}
	}
	if l.ledger == nil {
		return unavailable("no GPUs are accounted")
	}
	if l.shuttingDown {
		return jobPlan{}, ErrShuttingDown
	}
	if gpus <= 0 {
		return unavailable("a job plan needs at least 1 GPU, not %d", gpus)
	}
	leases, err := l.ledger.Leases()
	if err != nil {
		return unavailable("reading the GPUs: %v", err)
	}
	var candidates []placement.WholeDevice
	holders := map[int][]string{}
	for _, d := range leases {
		if slices.ContainsFunc(d.Holders, func(h gpu.Holder) bool { return h.Kind == gpu.HolderJob }) {
			continue
		}
		wd := placement.WholeDevice{Index: int32(d.Index)}
		for _, h := range d.Holders {
			wd.Holders = append(wd.Holders, h.Owner)
		}
		holders[d.Index] = wd.Holders
		candidates = append(candidates, wd)
	}
	var plan sdk.Plan
	planner := "host (swapper " + r.cfg.SwapperName + " does not plan for jobs)"
	jp, ok := l.swapper.(sdk.JobPlanner)
	if ok {
		q := sdk.JobPlanRequest{Now: r.cfg.Clock().UnixNano(), Job: id, GPUs: uint32(gpus), Priority: int32(min(max(priority, math.MinInt32), math.MaxInt32)), Running: fx.runningSet("")}
		for _, c := range candidates {
			q.Candidates = append(q.Candidates, c.Index)
		}
		plan, err = jp.PlanJob(q)
		fx.afterSwapperCall()
		switch {
		case errors.Is(err, sdk.ErrJobPlanUnsupported):
			ok = false
			planner = fmt.Sprintf("host (%v)", err)
		case err != nil:
			return unavailable("evicting idle models for the job: %v", err)
		default:
			planner = r.cfg.SwapperName
		}
	}
	if !ok {
		chosen, evict, fits := placement.Whole(gpus, candidates, l.evictableForJob)
		if !fits {
			return unavailable("evicting idle models for the job: it needs %d whole GPU(s); %d are free or hold only idle, unpinned models", gpus, countWhole(candidates, l.evictableForJob))
		}
		plan = sdk.Plan{Devices: chosen, Evict: evict}
	}
	p, why := l.checkJobPlan(plan, gpus, holders)
	if why != "" {
		if ok {
			r.refused(&l.swapCounters, fmt.Sprintf("job plan %+v: %s", plan, why))
		}
		return unavailable("swapper %s's plan for the job was refused: %s", r.cfg.SwapperName, why)
	}
	p.planner = planner
	return p, nil
}

// countWhole counts the devices a job could have: free, or every holder
// evictable.
func countWhole(devices []placement.WholeDevice, evictable func(string) bool) int {
	n := 0
	for _, d := range devices {
		if !slices.ContainsFunc(d.Holders, func(h string) bool { return !evictable(h) }) {
			n++
		}
	}
	return n
}

// checkJobPlan checks a plan for a job that needs gpus whole devices
// against the rules (sdk.JobPlanRequest): gpus distinct candidates; every
// holder of each in Evict; every evicted model evictable (ready, idle,
// unpinned, outside any swap) and holding one of them. holders maps each
// candidate to its holders. It returns the checked plan, or why not.
func (l *loopState) checkJobPlan(plan sdk.Plan, gpus int, holders map[int][]string) (jobPlan, string) {
	if len(plan.Devices) != gpus {
		return jobPlan{}, fmt.Sprintf("%d devices for a job that needs %d", len(plan.Devices), gpus)
	}
	var p jobPlan
	for _, d := range plan.Devices {
		hs, ok := holders[int(d)]
		switch {
		case !ok:
			return jobPlan{}, fmt.Sprintf("GPU %d is not a candidate (unknown, or a job holds it)", d)
		case slices.Contains(p.devices, int(d)):
			return jobPlan{}, fmt.Sprintf("GPU %d is named twice", d)
		}
		for _, h := range hs {
			if !slices.Contains(plan.Evict, h) {
				return jobPlan{}, fmt.Sprintf("GPU %d stays held by %q, which the plan does not evict", d, h)
			}
		}
		p.devices = append(p.devices, int(d))
	}
	for _, name := range plan.Evict {
		switch {
		case slices.Contains(p.evict, name):
			return jobPlan{}, fmt.Sprintf("evicts %q twice", name)
		case !l.evictableForJob(name):
			return jobPlan{}, fmt.Sprintf("evicts %q, which is not a loaded, idle, unpinned model outside a swap", name)
		case !slices.ContainsFunc(p.devices, func(d int) bool { return slices.Contains(holders[d], name) }):
			return jobPlan{}, fmt.Sprintf("evicts %q, which holds none of the job's GPUs", name)
		}
		p.evict = append(p.evict, name)
	}
	slices.Sort(p.devices)
	slices.Sort(p.evict)
	return p, ""
}

// evictableForJob: a loaded, idle, unpinned model outside any swap
// (DESIGN.md rule 6: never a model with requests in flight).
func (l *loopState) evictableForJob(name string) bool {
	m, ok := l.models[name]
	if !ok || m.cfg.Pinned || m.state != sdk.StateReady || m.inFlight > 0 || m.stopWhenIdle || l.swaps[name] != nil {
		return false
	}
	return !l.evicting(name)
}
