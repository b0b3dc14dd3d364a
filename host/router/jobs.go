package router

import (
	"context"
	"fmt"
	"slices"

	"github.com/loadout-dev/loadout/host/gpu"
	"github.com/loadout-dev/loadout/sdk"
)

// gpuLeases is the ledger's view of the devices that snapshots carry: as
// it is, or, while the swapper is asked what it would plan without the
// jobs (plansWithoutJobs), as it will be once every job's lease has ended.
func (fx *effects) gpuLeases() ([]gpu.DeviceLeases, error) {
	if fx.withoutJobs {
		return fx.r.loop.ledger.LeasesWithoutJobs()
	}
	return fx.r.loop.ledger.Leases()
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

// IdleDevices returns, in index order, the GPUs whose every lease holder
// is a loaded model that is idle (no request in flight, none queued for a
// swap), unpinned and not part of a swap: the devices a GPU job that may
// evict idle models could free (host/jobs' Evictor). A device held by
// nothing, or by a job, is not in it. Without a ledger: none.
func (r *Router) IdleDevices() []int {
	var out []int
	r.query(func() { out = r.loop.idleDevices() })
	return out
}

// idleDevices runs on the loop.
func (l *loopState) idleDevices() []int {
	if l.ledger == nil {
		return nil
	}
	leases, err := l.ledger.Leases()
	if err != nil {
		return nil
	}
	var out []int
	for _, d := range leases {
		if len(d.Holders) == 0 {
			continue
		}
		ok := true
		for _, h := range d.Holders {
			if !l.evictableForJob(h.Owner) {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, d.Index)
		}
	}
	return out
}

// evictableForJob: a loaded, idle, unpinned model outside any swap
// (DESIGN.md rule 6: never a model with requests in flight).
func (l *loopState) evictableForJob(name string) bool {
	m, ok := l.models[name]
	if !ok || m.cfg.Pinned || m.state != sdk.StateReady || m.inFlight > 0 || m.stopWhenIdle || l.swaps[name] != nil {
		return false
	}
	for _, sw := range l.swaps {
		if slices.Contains(sw.evict, name) {
			return false
		}
	}
	return true
}

// EvictIdle stops, for a GPU job, the models holding leases on devices,
// and waits until they have stopped (their leases are then released). The
// check and the stop happen in one turn of the run loop, so a request that
// arrives meanwhile finds the models stopping and waits or goes elsewhere,
// as the scheduler decides; the scheduler hears an OnUnload for them. It
// returns the models stopped. Errors: *Error with CodeUnavailable naming a
// model that is not evictable (busy, pinned, swapping; nothing is
// stopped), ctx.Err(), ErrShuttingDown.
func (r *Router) EvictIdle(ctx context.Context, devices []int) ([]string, error) {
	req := unloadRequest{done: make(chan error, 1)}
	var refuse error
	r.query(func() {
		l := &r.loop
		if l.ledger == nil {
			return
		}
		for _, name := range l.names {
			lease, ok := l.ledger.Lease(name)
			if !ok || !slices.ContainsFunc(gpu.SortedDevices(lease), func(d int) bool { return slices.Contains(devices, d) }) {
				continue
			}
			if !l.evictableForJob(name) {
				refuse = &Error{Code: sdk.CodeUnavailable, Message: fmt.Sprintf("model %q on GPUs %v is busy, pinned or swapping: a job does not evict it", name, gpu.SortedDevices(lease))}
				return
			}
			req.models = append(req.models, name)
		}
		if len(req.models) > 0 {
			r.log.Info("evicting idle models for a GPU job", "models", req.models, "gpus", devices)
			r.onUnload(req)
		}
	})
	if refuse != nil || len(req.models) == 0 {
		return nil, refuse
	}
	select {
	case err := <-req.done:
		return req.models, err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-r.done:
		return nil, ErrShuttingDown
	}
}
