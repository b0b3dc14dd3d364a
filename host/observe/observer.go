package observe

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/host/events"
	"github.com/loadout-dev/loadout/host/router"
)

// Eviction reasons, the reason label of loadout_model_evictions_total.
const (
	ReasonSwap   = "swap"   // stopped by a swap to make room for another model
	ReasonUnload = "unload" // an operator's unload
	ReasonTTL    = "ttl"    // idle past its TTL
	ReasonPolicy = "policy" // the scheduler stopped it otherwise
	ReasonExited = "exited" // its server exited on its own
	ReasonJob    = "job"    // evicted to give its GPUs to a GPU job
	// ReasonRemoved: a configuration reload took it out (the router's
	// Unloading reason).
	ReasonRemoved = "removed"
)

// reasons are every eviction reason: each model's eviction series start
// at 0 for all of them, so an increase() over one counts its first
// eviction.
var reasons = []string{ReasonSwap, ReasonUnload, ReasonTTL, ReasonPolicy, ReasonExited, ReasonJob, ReasonRemoved}

// states are the values of the state label of loadout_model_state.
// asleep, sleeping and waking are residency's (DESIGN.md, "Residency").
var states = []string{"stopped", "starting", "ready", "stopping", "failed", "asleep", "sleeping", "waking"}

// Observer implements router.Observer: metrics and events from the run
// loop. Make it with New.
type Observer struct {
	bus *events.Bus // nil: metrics only

	loads     *prometheus.CounterVec
	loadTime  *prometheus.HistogramVec
	evictions *prometheus.CounterVec
	queued    *prometheus.GaugeVec
	loading   *prometheus.GaugeVec
	state     *prometheus.GaugeVec
	measured  *prometheus.GaugeVec
	failures  *prometheus.CounterVec
	handovers *prometheus.CounterVec
	wakes     *prometheus.CounterVec
	wakeTime  *prometheus.HistogramVec

	// Touched only on the run loop (and New).
	models map[string]bool
	last   map[string]string // model → the state last heard
	// replicas: a replica's row id → its state last heard (a model
	// with replicas stays ready while one of them stops or crashes).
	replicas map[string]string
	hint     map[string]string    // model → why it is about to stop
	by       map[string]string    // model → the swap target that evicts it
	starts   map[string]time.Time // swap target → when its swap started
	cold     map[string]bool      // swap target → it is being started
	wake     map[string]bool      // swap target → it is being woken
}

var _ router.Observer = (*Observer)(nil)

// New makes the Observer to put in router.Config, with the run loop's
// series for the configured models (Register puts them on a registry).
// bus may be nil.
func New(models []string, bus *events.Bus) *Observer {
	o := &Observer{
		bus: bus,
		loads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadout_model_loads_total",
			Help: "Cold loads (a model server started by a swap), by result: ok or failed.",
		}, []string{"model", "result"}),
		loadTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "loadout_model_load_seconds",
			Help:    "Time from a swap's start to its target being ready (evictions and the server's start), for successful cold loads.",
			Buckets: []float64{.1, .25, .5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600},
		}, []string{"model"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadout_model_evictions_total",
			Help: "Running models stopped, by reason: swap, unload, ttl, job (a GPU job took its GPUs), removed (a configuration reload took it out), policy, exited.",
		}, []string{"model", "reason"}),
		queued: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "loadout_model_queued",
			Help: "Requests queued for the model (not yet granted, not waiting on its load).",
		}, []string{"model"}),
		loading: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "loadout_model_loading",
			Help: "Requests waiting for the model's load.",
		}, []string{"model"}),
		state: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "loadout_model_state",
			Help: "1 for the model's current state (stopped, starting, ready, stopping, failed), 0 for the others.",
		}, []string{"model", "state"}),
		measured: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "loadout_model_measured_vram_bytes",
			Help: "GPU memory the loaded model's server was measured to use; 0 when not loaded or not measured.",
		}, []string{"model"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadout_policy_failures_total",
			Help: "Policy calls that returned an error (crash, deadline, disabled), by role and by the policy that failed.",
		}, []string{"role", "policy"}),
		handovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadout_policy_handovers_total",
			Help: "Times the policy answering for a role changed (a fallback took over or gave back).",
		}, []string{"role"}),
		wakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadout_model_wakes_total",
			Help: "Wakes of a sleeping model server by a swap, by result: ok, or failed (the model was then cold-loaded, counted in loadout_model_loads_total).",
		}, []string{"model", "result"}),
		wakeTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "loadout_model_wake_seconds",
			Help:    "Time from a swap's start to its sleeping target serving again (evictions and the wake), for successful wakes.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 20, 30, 60},
		}, []string{"model"}),
		models:   map[string]bool{},
		wake:     map[string]bool{},
		last:     map[string]string{},
		replicas: map[string]string{},
		hint:     map[string]string{},
		by:       map[string]string{},
		starts:   map[string]time.Time{},
		cold:     map[string]bool{},
	}
	for _, m := range models {
		o.addModel(m)
	}
	for _, role := range []string{"scheduler", "swapper"} {
		o.handovers.WithLabelValues(role)
	}
	return o
}

// Register puts the Observer's series on reg.
func (o *Observer) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{o.loads, o.loadTime, o.evictions, o.queued, o.loading, o.state, o.measured, o.failures, o.handovers, o.wakes, o.wakeTime} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (o *Observer) publish(typ string, data any) {
	if o.bus != nil {
		o.bus.Publish(typ, data)
	}
}

// Eviction is the data of an eviction event.
type Eviction struct {
	Model  string `json:"model"`
	Reason string `json:"reason"`
	By     string `json:"by,omitempty"` // the swap's target, for ReasonSwap
	// Replica is, for a model with replicas, the replica that stopped
	// (its row id: the model's own for replica 1, "model@k" after).
	Replica string `json:"replica,omitempty"`
}

// ModelChanged updates the model's gauges, counts an eviction when a
// running model stops, and publishes the change.
func (o *Observer) ModelChanged(s router.ModelStatus) {
	if !o.models[s.Model] {
		// A model a configuration reload added: the router reports only
		// the models of its table, so the label set stays the config's.
		o.addModel(s.Model)
	}
	// Replicas first: the model's own transition below forgets why it
	// stops (its hint), which the last of its replicas to stop still
	// needs.
	for _, rs := range s.Replicas {
		prev := o.replicas[rs.ID]
		o.replicas[rs.ID] = rs.State
		if reason, ok := o.replicaStopReason(s.Model, prev, rs.State); ok {
			o.evictions.WithLabelValues(s.Model, reason).Inc()
			o.publish(events.TypeEviction, Eviction{Model: s.Model, Reason: reason, By: o.by[s.Model], Replica: rs.ID})
		}
	}
	prev := o.last[s.Model]
	if prev != s.State {
		o.last[s.Model] = s.State
		for _, st := range states {
			o.state.WithLabelValues(s.Model, st).Set(boolFloat(st == s.State))
		}
		if reason, ok := o.stopReason(s.Model, prev, s.State); ok {
			if len(s.Replicas) == 0 { // a model with replicas counts them one by one (below)
				o.evictions.WithLabelValues(s.Model, reason).Inc()
				o.publish(events.TypeEviction, Eviction{Model: s.Model, Reason: reason, By: o.by[s.Model]})
			}
			delete(o.hint, s.Model)
			delete(o.by, s.Model)
		}
	}
	o.queued.WithLabelValues(s.Model).Set(float64(s.Queued))
	o.loading.WithLabelValues(s.Model).Set(float64(s.Loading))
	o.measured.WithLabelValues(s.Model).Set(float64(s.Measured))
	o.publish(events.TypeModel, s)
}

// stopReason says whether going from prev to now is a running model
// stopping, and why.
func (o *Observer) stopReason(model, prev, now string) (string, bool) {
	if prev != "ready" {
		return "", false
	}
	switch now {
	case "failed":
		return ReasonExited, true
	case "stopping", "stopped", "sleeping", "asleep":
		if r, ok := o.hint[model]; ok {
			return r, true
		}
		return ReasonPolicy, true
	}
	return "", false
}

// replicaStopReason says whether a replica going from prev to now (its
// replica states) is a running replica stopping, and why: one that
// crashed exited; one stopped by its model's unload, removal or a swap
// has that reason (the model's hint); any other (a scale-in) is the
// scheduler's.
func (o *Observer) replicaStopReason(model, prev, now string) (string, bool) {
	if prev != router.ReplicaLoaded {
		return "", false
	}
	switch now {
	case router.ReplicaLoadFailed:
		return ReasonExited, true
	case router.ReplicaUnloading, router.ReplicaUnloaded:
		if r, ok := o.hint[model]; ok {
			return r, true
		}
		return ReasonPolicy, true
	}
	return "", false
}

// addModel makes a model's series, stopped. A replica's row has none:
// the router reports it as its model's entry, and its loads count as its
// model's (the labels are the configured models).
func (o *Observer) addModel(m string) {
	if config.ModelOf(m) != m {
		return
	}
	o.models[m] = true
	o.loads.WithLabelValues(m, "ok")
	o.wakes.WithLabelValues(m, "ok")
	for _, r := range reasons {
		o.evictions.WithLabelValues(m, r)
	}
	o.queued.WithLabelValues(m)
	o.loading.WithLabelValues(m)
	o.measured.WithLabelValues(m)
	for _, s := range states {
		o.state.WithLabelValues(m, s).Set(boolFloat(s == "stopped"))
	}
}

// Unloading remembers why the models are about to stop.
func (o *Observer) Unloading(models []string, reason string) {
	for _, m := range models {
		if o.models[m] {
			o.hint[m] = reason
		}
	}
}

// SwapInfo is the data of swap_start and swap_end events.
type SwapInfo struct {
	router.SwapInfo
	// Seconds is the swap's duration (swap_end).
	Seconds float64 `json:"seconds,omitempty"`
}

// SwapStarted remembers the swap's start and its evictions' reason, and
// publishes it.
func (o *Observer) SwapStarted(s router.SwapInfo) {
	o.starts[s.Target] = s.Time
	o.cold[s.Target] = s.Cold
	o.wake[s.Target] = s.Wake
	for _, m := range s.Evict {
		o.hint[m], o.by[m] = ReasonSwap, s.Target
	}
	o.publish(events.TypeSwapStart, SwapInfo{SwapInfo: s})
}

// SwapEnded counts a cold load and its time, and publishes the end.
func (o *Observer) SwapEnded(s router.SwapInfo) {
	started, ok := o.starts[s.Target]
	cold, wake := o.cold[s.Target], o.wake[s.Target]
	delete(o.starts, s.Target)
	delete(o.cold, s.Target)
	delete(o.wake, s.Target)
	ev := SwapInfo{SwapInfo: s}
	ev.Cold = cold
	if ok {
		ev.Seconds = s.Time.Sub(started).Seconds()
	}
	model := config.ModelOf(s.Target) // a replica's load is its model's
	if wake && o.models[model] {
		if s.WakeError == "" && s.Err == "" {
			o.wakes.WithLabelValues(model, "ok").Inc()
			if ok {
				o.wakeTime.WithLabelValues(model).Observe(ev.Seconds)
			}
			o.publish(events.TypeSwapEnd, ev)
			return
		}
		o.wakes.WithLabelValues(model, "failed").Inc()
	}
	if cold && o.models[model] {
		if s.Err != "" {
			o.loads.WithLabelValues(model, "failed").Inc()
		} else {
			o.loads.WithLabelValues(model, "ok").Inc()
			if ok {
				o.loadTime.WithLabelValues(model).Observe(ev.Seconds)
			}
		}
	}
	o.publish(events.TypeSwapEnd, ev)
}

// PolicyFailure is the data of a policy_failed event.
type PolicyFailure struct {
	Role   string `json:"role"`
	Policy string `json:"policy"` // the policy that failed, e.g. "builtin:fifo"
	Event  string `json:"event"`
	Error  string `json:"error"`
}

// AddPolicy makes the failure series of a policy now answering for role
// ("scheduler" or "swapper"), at 0, so that a rate over it counts its
// first failure. name is the policy's, as PolicyFailed gets it (e.g.
// "builtin:fifo"). Safe on any goroutine.
func (o *Observer) AddPolicy(role, name string) { o.failures.WithLabelValues(role, name) }

// PolicyFailed counts and publishes a failed policy call.
func (o *Observer) PolicyFailed(role, policy, event string, err error) {
	o.failures.WithLabelValues(role, policy).Inc()
	o.publish(events.TypePolicyFailed, PolicyFailure{Role: role, Policy: policy, Event: event, Error: err.Error()})
}

// PolicyHandedOver counts and publishes a fallback switch.
func (o *Observer) PolicyHandedOver(role string) {
	o.handovers.WithLabelValues(role).Inc()
	o.publish(events.TypePolicyHandover, map[string]string{"role": role})
}
