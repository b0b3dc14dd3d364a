package main

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"

	"github.com/loadout-dev/loadout/host/events"
	"github.com/loadout-dev/loadout/host/gpu"
	"github.com/loadout-dev/loadout/host/jobs"
	"github.com/loadout-dev/loadout/host/logs"
	"github.com/loadout-dev/loadout/host/observe"
	"github.com/loadout-dev/loadout/host/policy"
	"github.com/loadout-dev/loadout/host/proxy"
	"github.com/loadout-dev/loadout/host/router"
)

// observability is what serve builds to be seen: the event ring behind
// /api/events, the run loop's observer (metrics and events), and the
// model servers' log rings. serve calls it at four places: newObservability
// before the router, pluginLog for the launchers, the proxy config fields,
// and attach once the proxy and HTTP server exist.
type observability struct {
	bus      *events.Bus
	observer *observe.Observer
	logs     *logs.Store
	models   []string
}

func newObservability(models []string, ring int, store *logs.Store) *observability {
	bus := events.New(ring)
	return &observability{bus: bus, observer: observe.New(models, bus), logs: store, models: models}
}

// pluginLog is log, also feeding model server output into the log rings.
func (o *observability) pluginLog(log *slog.Logger) *slog.Logger {
	return slog.New(logs.Handler(log.Handler(), o.logs))
}

// jobTransition publishes a job's change of state as a "job" event (the
// job runner's OnTransition).
func (o *observability) jobTransition(tr jobs.Transition) { o.bus.Publish(events.TypeJob, tr) }

// attach registers the metrics on the proxy's registry and ends the event
// and log streams when srv begins its shutdown, so long-lived streams do
// not hold it up. policies returns the policies in charge (a hot reload
// replaces them); runner is the job queue's, nil when jobs are off.
func (o *observability) attach(srv *http.Server, h *proxy.Server, r *router.Router, ledger *gpu.Ledger,
	policies func() *policySet, runner *jobs.Runner) error {
	reg := h.Registry()
	if err := o.observer.Register(reg); err != nil {
		return err
	}
	// loadout_build_info{version,revision,goversion,...} 1: Prometheus's
	// own build-info collector (version.go sets what it reads).
	if err := reg.Register(versioncollector.NewCollector("loadout")); err != nil {
		return err
	}
	if ps := policies(); ps != nil {
		o.observer.AddPolicy("scheduler", ps.sched.Name)
		o.observer.AddPolicy("swapper", ps.swap.Name)
	}
	if runner != nil {
		states := make([]string, len(jobs.States))
		for i, st := range jobs.States {
			states[i] = string(st)
		}
		if err := reg.Register(observe.NewJobCollector(states, func() (map[string]int, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			counts, err := runner.Store().CountByState(ctx)
			out := make(map[string]int, len(counts))
			for st, n := range counts {
				out[string(st)] = n
			}
			return out, err
		})); err != nil {
			return err
		}
	}
	if ledger != nil {
		if err := reg.Register(observe.NewDeviceCollector(ledger, o.models)); err != nil {
			return err
		}
	}
	if err := reg.Register(observe.NewPolicyCollector(func() []observe.PolicyStat {
		var out []observe.PolicyStat
		counters := r.Counters()
		r.OnLoop(func() { // the policies live on the run loop (rule 1)
			ps := policies()
			for _, st := range ps.Scheduler.Statuses() {
				out = append(out, policyStat("scheduler", st, counters["scheduler"]))
			}
			for _, st := range ps.Swapper.Statuses() {
				out = append(out, policyStat("swapper", st, counters["swapper"]))
			}
		})
		return out
	})); err != nil {
		return err
	}
	srv.RegisterOnShutdown(func() {
		o.bus.Close()
		o.logs.Close()
	})
	return nil
}

func policyStat(role string, s policy.Status, c router.PolicyCounters) observe.PolicyStat {
	st := observe.PolicyStat{Role: role, Name: s.Name, Healthy: s.Healthy, Active: s.Active,
		Fallback: s.Fallback, Crashes: s.Crashes, Refused: c.Of(s.Name, s.Active).RefusedEffects}
	for _, call := range s.Calls {
		st.Calls = append(st.Calls, observe.PolicyCalls{Event: call.Event, Count: call.Count, Seconds: call.Seconds,
			Bounds: policy.CallBuckets[:], Buckets: call.Buckets[:]})
	}
	return st
}
