package router

import (
	"errors"
	"slices"
	"time"

	"github.com/loadout-dev/loadout/sdk"
)

// Observer hears what the run loop does, for metrics, the event stream and
// the web UI. Its methods are called on the run-loop goroutine, so they
// must return at once and never block nor call the Router: an observer
// that has work to do hands it off (a non-blocking ring, a counter). The
// run loop never waits for an observer (DESIGN.md, Observability).
type Observer interface {
	// ModelChanged reports a model whose visible state, in-flight,
	// queued or loading count, measured memory or last error changed
	// since the last call for it.
	ModelChanged(ModelStatus)
	// Unloading says why the models named are about to be stopped
	// ("unload": an operator; "ttl": idle past their TTL; "job": evicted
	// for a GPU job, EvictForJob). A model that
	// then stops without such a word was stopped by the policy.
	Unloading(models []string, reason string)
	// SwapStarted reports a swap the router accepted and launched.
	SwapStarted(SwapInfo)
	// SwapEnded reports a swap's end: its target loaded (or was already
	// up) or failed to start.
	SwapEnded(SwapInfo)
	// PolicyFailed reports a policy call that returned an error (a crash,
	// a deadline, a disabled policy). role is "scheduler" or "swapper";
	// policy names the policy that failed: the name err carries (an
	// error with a PolicyName() string method, as host/policy's are; the
	// fallback's own failures name the fallback), else the configured
	// policy's name (Config.SchedulerName or SwapperName); event is the
	// export called ("on_request", "plan", ...).
	PolicyFailed(role, policy, event string, err error)
	// PolicyHandedOver reports that the policy answering for role
	// changed behind its fallback decorator (a fallback took over or gave
	// back).
	PolicyHandedOver(role string)
}

// SwapInfo describes one swap to an Observer.
type SwapInfo struct {
	Target  string   `json:"target"`            // the model the swap loads
	Evict   []string `json:"evict"`             // the models it stops first
	Devices []int32  `json:"devices,omitempty"` // the GPUs the target is placed on
	Cold    bool     `json:"cold"`              // the target was not running: it is started (or woken)
	// Wake: the target is asleep and the swap wakes it (a cold load only
	// if the wake fails: SwapEnded's WakeError). Modes says how each of
	// Evict goes: "stop", "sleep" (level 1) or "sleep2" (SwapStarted).
	Wake  bool     `json:"wake,omitempty"`
	Modes []string `json:"modes,omitempty"`
	// WakeError is why its wake failed, so that it was cold-loaded
	// instead (SwapEnded).
	WakeError string `json:"wake_error,omitempty"`
	// Policy names the scheduler that asked for the swap (SwapStarted).
	Policy string `json:"policy,omitempty"`
	// Err is why the target failed to start, "" when it did (SwapEnded).
	Err string `json:"error,omitempty"`
	// Upstream is the target's address once ready (SwapEnded).
	Upstream string `json:"upstream,omitempty"`
	// Time is when the router launched (SwapStarted) or ended the swap.
	Time time.Time `json:"time"`
}

// nopObserver is the Observer of a router configured without one.
type nopObserver struct{}

func (nopObserver) ModelChanged(ModelStatus)                   {}
func (nopObserver) Unloading([]string, string)                 {}
func (nopObserver) SwapStarted(SwapInfo)                       {}
func (nopObserver) SwapEnded(SwapInfo)                         {}
func (nopObserver) PolicyFailed(string, string, string, error) {}
func (nopObserver) PolicyHandedOver(string)                    {}

// failedPolicy names the policy whose call returned err: the name err
// carries (Observer.PolicyFailed), else configured.
func failedPolicy(err error, configured string) string {
	var named interface{ PolicyName() string }
	if errors.As(err, &named) {
		return named.PolicyName()
	}
	return configured
}

// observer returns the configured Observer, or one that does nothing.
func (r *Router) observer() Observer {
	if r.cfg.Observer == nil {
		return nopObserver{}
	}
	return r.cfg.Observer
}

// observed is what an Observer last heard of one model.
type observed struct {
	state                     string
	inFlight, queued, loading int
	measured                  uint64
	lastErr                   string
}

// observeModels tells the Observer about every model whose state or
// counts changed during the event just handled. It runs after each event;
// the changes are derived from the process table and the waiting callers,
// so no call site can forget one. The warm path's events (a request the
// loop granted itself, a quiet end) change one model and nothing else, and
// say which (l.observeOnly): then only that model is compared, so their
// cost does not grow with the number of models (docs/BENCHMARKS.md). What
// it compares with is kept on each model, and the held callers are counted
// on their models, not in maps: every other event compares every model.
func (r *Router) observeModels() {
	l := &r.loop
	only := l.observeOnly
	l.observeOnly = ""
	obs := r.cfg.Observer
	if obs == nil {
		return
	}
	l.countHeld(true)
	defer l.countHeld(false)
	if m, ok := l.models[only]; ok {
		r.observeModel(obs, m)
		return
	}
	for _, name := range l.names {
		r.observeModel(obs, l.models[name])
	}
}

// countHeld counts the held callers on their models (heldQueued and
// heldLoading, heldCounts' figures), or, with count false, zeroes what it
// counted.
func (l *loopState) countHeld(count bool) {
	for _, w := range l.waiters {
		if !w.held {
			continue
		}
		m := l.models[w.req.Model]
		switch {
		case m == nil:
		case !count:
			m.heldQueued, m.heldLoading = 0, 0
		case w.pos == 0:
			m.heldLoading++
		default:
			m.heldQueued++
		}
	}
}

// observeModel tells obs about model m if it changed since it last heard
// of it.
func (r *Router) observeModel(obs Observer, m *model) {
	l := &r.loop
	now := observed{state: m.apiState(), inFlight: m.inFlight, queued: m.heldQueued,
		loading: m.heldLoading, measured: m.measured, lastErr: m.lastErr}
	if m.seen && m.observed == now {
		return
	}
	m.observed, m.seen = now, true
	if set := l.replicaSetOf(m.name); set != nil {
		queued, loading := l.heldCounts()
		if st, ok := l.setStatus(set, queued, loading); ok {
			obs.ModelChanged(st) // a replica changes its model's entry
		}
		return
	}
	obs.ModelChanged(l.status(m.name, now.queued, now.loading))
}

// swapInfo describes a swap StartSwap launches.
func (r *Router) swapInfo(sw *swap, cold bool) SwapInfo {
	info := SwapInfo{Target: sw.target, Evict: slices.Clone(sw.evict), Devices: slices.Clone(sw.devices),
		Cold: cold, Wake: cold && sw.job.wake != nil, Policy: r.cfg.SchedulerName, Time: r.cfg.Clock()}
	for _, name := range sw.evict {
		mode := sdk.EvictStop
		if m := r.loop.models[name]; m != nil {
			switch m.sleeping {
			case 1:
				mode = sdk.EvictSleep1
			case 2:
				mode = sdk.EvictSleep2
			}
		}
		info.Modes = append(info.Modes, mode.String())
	}
	return info
}

// swapEnded describes a swap's end to the Observer.
func (r *Router) swapEnded(ev swapDone) SwapInfo {
	info := SwapInfo{Target: ev.target, Evict: ev.evicted, Time: r.cfg.Clock(), Wake: ev.woke}
	if ev.wakeErr != nil {
		info.WakeError = ev.wakeErr.Error()
	}
	if ev.err != nil {
		info.Err = ev.err.Error()
	} else if ev.inst != nil {
		info.Upstream = ev.inst.Upstream().String()
	}
	return info
}
