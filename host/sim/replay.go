package sim

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/loadout-dev/loadout/backends/sim/decode"
	"github.com/loadout-dev/loadout/host/policy"
	"github.com/loadout-dev/loadout/host/router"
	"github.com/loadout-dev/loadout/sdk"
)

// Epoch is virtual time zero: the instant a replay's first event is
// stamped with (InitEvent.Now, and every event's now, count from it). It is
// a fixed date, not the Unix epoch, so that no policy mistakes time zero
// for "never".
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Clock is a replay's virtual clock. The policy runtime and the router
// read it through Now; only Run moves it. Safe to share between runs done
// one after another.
type Clock struct{ t time.Time }

// Now is the virtual time.
func (c *Clock) Now() time.Time {
	if c.t.IsZero() {
		return Epoch
	}
	return c.t
}

// Model is one model as a replay simulates it: its router configuration
// (Process is ignored: the simulator is the process), how long it takes to
// load and to stop, and its decode timing.
type Model struct {
	Config router.ModelConfig
	Load   time.Duration // cold load, from start to ready
	Stop   time.Duration // from stop to its memory being free; 0 is instant
	Decode decode.Model
	// Wake is a wake's duration from sleep level 1 and 2 (index 0 and
	// 1); a model sleeps at the levels whose Config.SleepLevels bit is
	// set, taking Stop to release its GPU memory.
	Wake [2]time.Duration
}

// Setup is one replay: the trace, the models, and the router's
// configuration with its policies.
type Setup struct {
	Trace  []Request
	Models map[string]Model
	// Router is the run loop's configuration: the policies (NewScheduler,
	// NewSwapper and their names), the GPU ledger over the simulated
	// devices, TickInterval, Logger. Run sets Models' Process, Clock and
	// Observer.
	Router router.Config
	// Clock is the clock the policy runtime was given (policy.Options),
	// moved by Run; nil makes one.
	Clock *Clock
	// CodeName names an error code in Result.ErrorsByCode (serve's
	// proxy.ClientError: "unavailable", "queue_full", …); nil uses the
	// number.
	CodeName func(sdk.ErrorCode) string
	// Drain bounds how long the replay goes on without progress once
	// every request has arrived: past Drain after the last arrival, the
	// last grant and the last request finished, with no request
	// decoding, the requests still unanswered (a policy that holds them
	// forever) or unfinished are counted as errors. A backlog that is
	// being served is not cut. 0 means 1 hour.
	Drain time.Duration
}

// Result is what one replay measured. Times are virtual seconds.
type Result struct {
	Scheduler string `json:"scheduler"`
	Router    string `json:"router"`
	// Evict is the evict: every model was replayed with (simulate
	// --compare evict=…); "" for the configuration's own.
	Evict     string `json:"evict,omitempty"`
	Requests  int    `json:"requests"`
	Completed int    `json:"completed"`
	Errors    int    `json:"errors"`
	// ErrorsByCode counts failed requests by the error code the router
	// or policy gave (sdk.ErrorCode names; "unanswered" for requests a
	// policy still held when the replay ended).
	ErrorsByCode map[string]int `json:"errors_by_code,omitempty"`
	ColdLoads    int            `json:"cold_loads"`
	// Evictions counts models stopped to make room (by a swap or the
	// scheduler's StopProcesses), not those unloaded for their TTL.
	Evictions int `json:"evictions"`
	// Unloads counts models stopped because their TTL ran out.
	Unloads int `json:"unloads"`
	// Wakes counts swaps that woke an asleep model instead of a cold
	// load (a wake that failed became a cold load: WakeFailures), Sleeps
	// the evictions that put a model to sleep (DESIGN.md, "Residency").
	Wakes        int `json:"wakes"`
	WakeFailures int `json:"wake_failures,omitempty"`
	Sleeps       int `json:"sleeps"`
	// SwapS is the swap seconds: the time granted requests spent waiting
	// on their model's load or wake (router.Grant.LoadWait), summed.
	SwapS     float64   `json:"swap_s"`
	QueueWait Quantiles `json:"queue_wait_s"` // arrival → grant, granted requests
	TTFT      Quantiles `json:"ttft_s"`       // arrival → first token, completed requests: serve's loadout_time_to_first_token_seconds
	E2E       Quantiles `json:"e2e_s"`        // arrival → last token, completed requests
	// GPUBusyFraction is the share of device time, over the replay's span,
	// in which a model placed on the device was decoding. Without
	// simulated GPUs, all models count as one device.
	GPUBusyFraction float64 `json:"gpu_busy_fraction"`
	// SpanS is the virtual time from the first arrival to the last
	// answer, seconds.
	SpanS float64 `json:"span_s"`
	// WallS is the real time the replay took; the caller measures it
	// (everything else is a function of the inputs).
	WallS float64 `json:"wall_s"`
	// PolicyFailures counts policy calls that failed (a crash, a
	// deadline, a policy disabled for crash-looping; not a plan that
	// says a model cannot be placed); when > 0 the figures are partly the
	// fallback's (Fallback), and PolicyEvents says what happened, in order.
	PolicyFailures int      `json:"policy_failures"`
	Fallback       bool     `json:"fallback"`
	PolicyEvents   []string `json:"policy_events,omitempty"`
	// Models has the figures of each model, by id: a policy that is good
	// on average may starve one.
	Models map[string]ModelResult `json:"models"`
	// Timeline is what happened over time, for the HTML report.
	Timeline Timeline `json:"-"`
}

// ModelResult is one model's share of a replay.
type ModelResult struct {
	Requests  int       `json:"requests"`
	Completed int       `json:"completed"`
	Errors    int       `json:"errors"`
	ColdLoads int       `json:"cold_loads"`
	Wakes     int       `json:"wakes,omitempty"`
	QueueWait Quantiles `json:"queue_wait_s"`
}

// Quantiles are the 50th, 95th and 99th percentiles of a set of
// durations in seconds (nearest rank); all 0 for an empty set.
type Quantiles struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
}

// quantiles sorts xs and reads its percentiles.
func quantiles(xs []float64) Quantiles {
	if len(xs) == 0 {
		return Quantiles{}
	}
	slices.Sort(xs)
	at := func(p float64) float64 { return round6(xs[sdk.NearestRank(p, len(xs))-1]) }
	return Quantiles{P50: at(0.50), P95: at(0.95), P99: at(0.99)}
}

// round6 rounds to the microsecond, so reports do not print float noise.
func round6(x float64) float64 {
	return float64(int64(x*1e6+0.5)) / 1e6
}

// Timeline is a replay's history for charts.
type Timeline struct {
	// Residency has one entry per model per stretch of time it held
	// memory: starting, ready or stopping, on which devices.
	Residency []Residency
	// Queue is the number of callers held (queued or waiting on a load),
	// at each change.
	Queue []Point
	// Swaps are the swaps the router launched, in order.
	Swaps []Swap
	// Devices are the simulated GPUs' indices and sizes in bytes.
	Devices []Device
	// Span is the replay's length in virtual seconds.
	Span float64
}

// Residency is one model holding memory from From to To (seconds).
type Residency struct {
	Model    string
	State    string // "starting", "ready" or "stopping"
	Devices  []int
	Bytes    uint64 // its declared or estimated need
	From, To float64
}

// Point is a value from a time on (seconds).
type Point struct {
	T float64
	V int
}

// Swap is one swap as launched (T in seconds).
type Swap struct {
	T      float64
	Target string
	Evict  []string
	Cold   bool
}

// Device is one simulated GPU.
type Device struct {
	Index int
	Bytes uint64
}

// PolicyCallTimeout is the deadline of one policy call in a replay. A
// policy call's deadline is wall time: serve's 100 ms could be overrun on a
// busy machine and change a replay's figures, so a replay's policy runtime
// allows this much (a looping policy still ends).
const PolicyCallTimeout = 2 * time.Second

// PolicyBackoff is how long a policy disabled for crash-looping in a
// replay waits, in virtual time, before it is tried again: 30 s doubling
// to a day, where serve's doubles to 10 minutes. A policy that loops costs
// its calls' deadlines in wall time (PolicyCallTimeout) at every retry,
// and weeks of virtual time retried every 10 minutes took hours; a day
// bounds a three-week replay to about fifteen retries, and the report
// marks its figures as partly the fallback's either way.
var PolicyBackoff = policy.Backoff{Initial: policy.DefaultBackoffInitial, Max: 24 * time.Hour}

// PolicyMaxCrashes is the crashes a replay tolerates of a policy within
// its crash window before it disables it (serve's: policy.DefaultMaxCrashes,
// 5). A replay is deterministic: a policy that crashed twice at one point of
// the trace crashes again, and each crash of a looping policy costs a
// deadline of wall time.
const PolicyMaxCrashes = 2

// Run replays s.Trace through a virtual router (router.NewVirtual) with
// s's policies, in virtual time. Errors: the router's construction (a
// policy that fails to initialise) and a trace that names a model the
// configuration lacks; everything that goes wrong during the replay is
// in the Result.
func Run(s Setup) (*Result, error) {
	for i, q := range s.Trace {
		if _, ok := s.Models[q.Model]; !ok {
			return nil, fmt.Errorf("trace request %d (arrival %gs): unknown model %q (the configuration has %d models)", i+1, q.Arrival, q.Model, len(s.Models))
		}
	}
	if s.Clock == nil {
		s.Clock = &Clock{}
	}
	if s.Drain <= 0 {
		s.Drain = time.Hour
	}
	e := &engine{setup: s, clock: s.Clock, instances: map[string]*instance{}}
	e.clock.t = Epoch
	e.obs = newRecorder(e)
	cfg := s.Router
	cfg.Clock = e.clock.Now
	cfg.Observer = e.obs
	cfg.Models = make(map[string]router.ModelConfig, len(s.Models))
	for name, m := range s.Models {
		mc := m.Config
		mc.Process = process{}
		cfg.Models[name] = mc
	}
	if cfg.Ledger != nil {
		devs, err := cfg.Ledger.Inventory().Devices()
		if err != nil {
			return nil, err
		}
		for _, d := range devs {
			e.obs.tl.Devices = append(e.obs.tl.Devices, Device{Index: d.Index, Bytes: d.Total})
		}
	}
	v, err := router.NewVirtual(cfg, e)
	if err != nil {
		return nil, err
	}
	e.v = v
	res := e.run()
	res.Scheduler, res.Router = cfg.SchedulerName, cfg.SwapperName
	res.PolicyFailures = e.obs.failures
	res.Fallback = res.PolicyFailures > 0 || e.obs.handedOver
	return res, nil
}

// process stands for a simulated model's server in its ModelConfig; a
// virtual router never calls it (VirtualWork.Start loads the model).
type process struct{}

func (process) Start(context.Context, router.StartSpec) (router.Instance, error) {
	return nil, fmt.Errorf("sim: a simulated model is started by the simulator")
}

// engine is one replay: the event queue and the simulated servers.
type engine struct {
	setup Setup
	clock *Clock
	v     *router.Virtual
	obs   *recorder
	now   time.Duration
	// tickAt is when the one pending tick event is (-1: none) and tickGen
	// invalidates a tick event replaced by an earlier one.
	tickAt    time.Duration
	tickGen   uint64
	events    eventHeap
	seq       uint64
	instances map[string]*instance // by upstream host+path
	gen       int

	next    int // the next trace request to arrive
	pending int // requests arrived and not yet answered
	// progress is when a request was last granted or finished (Drain).
	progress time.Duration
	reqs     []*request
	busy     busyMeter
}

type event struct {
	at  time.Duration
	seq uint64
	fn  func()
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = event{}
	*h = old[:len(old)-1]
	return x
}

// at schedules fn at virtual time t (never before now).
func (e *engine) at(t time.Duration, fn func()) {
	e.seq++
	heap.Push(&e.events, event{at: max(t, e.now), seq: e.seq, fn: fn})
}

// Stop implements router.VirtualWork.
func (e *engine) Stop(_ string, inst router.Instance, done func()) {
	in := inst.(*instance)
	e.at(e.now+in.model.Stop, func() {
		in.stopped = true
		done()
	})
}

// Start implements router.VirtualWork.
func (e *engine) Start(model string, _ router.Process, spec router.StartSpec, done func(router.Instance, error)) {
	m := e.setup.Models[model]
	e.at(e.now+m.Load, func() {
		e.gen++
		in := &instance{e: e, name: model, model: m, devices: spec.Devices,
			batch: decode.NewBatch[*request](m.Decode),
			url:   &url.URL{Scheme: "sim", Host: model, Path: "/" + strconv.Itoa(e.gen)}}
		e.instances[in.url.Host+in.url.Path] = in
		done(in, nil)
	})
}

// Later implements router.VirtualWork.
func (e *engine) Later(fn func()) { e.at(e.now, fn) }

// Sleep implements router.VirtualWork: the server gives back its GPU
// memory in the model's Stop time and keeps its process; the host memory
// it holds is the router's estimate (0 here).
func (e *engine) Sleep(_ string, inst router.Instance, level uint8, done func(uint64, error)) {
	in := inst.(*instance)
	if in.model.Config.SleepLevels&level == 0 {
		e.at(e.now+in.model.Stop, func() {
			in.stopped = true
			done(0, fmt.Errorf("sim: the model cannot sleep at level %d", level))
		})
		return
	}
	e.at(e.now+in.model.Stop, func() {
		in.asleep = level
		done(0, nil)
	})
}

// Wake implements router.VirtualWork: the server serves again after the
// model's Wake time for the level it sleeps at.
func (e *engine) Wake(_ string, inst router.Instance, done func(error)) {
	in := inst.(*instance)
	level := max(in.asleep, 1)
	e.at(e.now+in.model.Wake[level-1], func() {
		in.asleep = 0
		done(nil)
	})
}

// request is one trace request on its way.
type request struct {
	q        Request
	arrival  time.Duration
	granted  time.Duration
	first    time.Duration
	finished time.Duration
	left     int // output tokens still to decode
	grant    *router.Grant
	ok       bool
}

func (e *engine) run() *Result {
	trace := e.setup.Trace
	res := &Result{Requests: len(trace), ErrorsByCode: map[string]int{}}
	if len(trace) == 0 {
		return res
	}
	e.reqs = make([]*request, len(trace))
	e.arriveAt(0)
	e.tickAt = -1
	e.scheduleTick()
	last := e.arrival(len(trace) - 1)
	for e.events.Len() > 0 {
		ev := heap.Pop(&e.events).(event)
		if ev.at > max(last, e.progress)+e.setup.Drain && !e.decoding() {
			break
		}
		e.setNow(ev.at)
		ev.fn()
		if e.next == len(trace) && e.pending == 0 {
			break
		}
		e.scheduleTick()
	}
	e.busy.close(e.now)
	var waits, ttfts, e2es []float64
	perWait := map[string][]float64{}
	res.Models = map[string]ModelResult{}
	for _, r := range e.reqs {
		if r == nil { // never arrived: the replay stopped early
			res.Errors++
			res.ErrorsByCode["unanswered"]++
			continue
		}
		mr := res.Models[r.q.Model]
		mr.Requests++
		switch {
		case r.grant == nil && !r.failed():
			res.Errors++ // a policy still held it
			res.ErrorsByCode["unanswered"]++
			mr.Errors++
		case r.failed():
			mr.Errors++ // counted by code from the recorder
		case r.ok:
			res.SwapS += r.grant.LoadWait.Seconds()
			res.Completed++
			mr.Completed++
			waits = append(waits, (r.granted - r.arrival).Seconds())
			perWait[r.q.Model] = append(perWait[r.q.Model], (r.granted - r.arrival).Seconds())
			ttfts = append(ttfts, (r.first - r.arrival).Seconds())
			e2es = append(e2es, (r.finished - r.arrival).Seconds())
		default: // granted, still decoding when the replay ended
			res.Errors++
			res.ErrorsByCode["unfinished"]++
			mr.Errors++
		}
		res.Models[r.q.Model] = mr
	}
	for name, mr := range res.Models {
		mr.QueueWait = quantiles(perWait[name])
		mr.ColdLoads = e.obs.coldBy[name]
		mr.Wakes = e.obs.wakesBy[name]
		res.Models[name] = mr
	}
	for code, n := range e.obs.errs {
		res.Errors += n
		res.ErrorsByCode[code] += n
	}
	if len(res.ErrorsByCode) == 0 {
		res.ErrorsByCode = nil
	}
	res.QueueWait, res.TTFT, res.E2E = quantiles(waits), quantiles(ttfts), quantiles(e2es)
	span := e.now
	res.SpanS = round6(span.Seconds())
	if span > 0 {
		n := max(len(e.obs.tl.Devices), 1)
		res.GPUBusyFraction = round6(e.busy.total.Seconds() / (span.Seconds() * float64(n)))
	}
	res.ColdLoads, res.Evictions, res.Unloads = e.obs.cold, e.obs.evictions, e.obs.unloads
	res.Wakes, res.WakeFailures, res.Sleeps = e.obs.wakes, e.obs.wakeFailures, e.obs.sleeps
	res.SwapS = round6(res.SwapS)
	res.PolicyEvents = e.obs.policy
	e.obs.close(e.now)
	res.Timeline = e.obs.tl
	res.Timeline.Span = res.SpanS
	return res
}

func (e *engine) setNow(t time.Duration) {
	e.now = t
	e.clock.t = Epoch.Add(t)
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// arrival is when trace request i arrives in virtual time: the replay
// starts at the first request, so a trace whose arrival_s counts from
// elsewhere (a Unix time, the middle of a day) replays the same, without
// ticking through the time before it.
func (e *engine) arrival(i int) time.Duration {
	return seconds(e.setup.Trace[i].Arrival - e.setup.Trace[0].Arrival)
}

// arriveAt schedules trace request i's arrival, which schedules the next.
func (e *engine) arriveAt(i int) {
	q := e.setup.Trace[i]
	e.at(e.arrival(i), func() {
		e.next = i + 1
		if e.next < len(e.setup.Trace) {
			e.arriveAt(e.next)
		}
		r := &request{q: q, arrival: e.now, left: max(q.OutputTokens, 1)}
		e.reqs[i] = r
		e.pending++
		e.v.Acquire(router.Request{Model: q.Model, Priority: q.Priority, Client: q.Client}, func(g *router.Grant, err error) {
			if err != nil {
				e.pending--
				e.obs.failed(err)
				r.finished = -1
				return
			}
			r.grant, r.granted = g, e.now
			e.progress = e.now
			in := e.instances[g.Upstream.Host+g.Upstream.Path]
			e.at(e.now+in.model.Decode.Prefill(q.PromptTokens), func() { in.join(r) })
		})
	})
}

// failed reports whether the request was answered with an error.
func (r *request) failed() bool { return r.finished < 0 }

// scheduleTick makes the pending tick event the router's next tick
// (router.Virtual.NextTick), read after every event: virtual time jumps
// from one event to the next, and a tick is one only when the scheduler
// ticks periodically, asked for it, or a TTL deadline falls due. A tick
// event that an earlier one replaced does nothing when it comes.
func (e *engine) scheduleTick() {
	t, ok := e.v.NextTick()
	if !ok {
		return
	}
	at := max(t.Sub(Epoch), e.now)
	if e.tickAt >= 0 && e.tickAt <= at {
		return
	}
	e.tickAt = at
	e.tickGen++
	gen := e.tickGen
	e.at(at, func() {
		if gen != e.tickGen {
			return
		}
		e.tickAt = -1
		e.v.Tick()
	})
}

// instance is one simulated model server: decode's continuous batching
// in virtual time. A run of steps with the same batch is one event; a
// request that joins during it cuts it at the step boundary that follows.
type instance struct {
	e       *engine
	name    string
	model   Model
	devices []int
	url     *url.URL
	batch   *decode.Batch[*request]
	stopped bool
	asleep  uint8 // the level it sleeps at; 0 awake

	running  bool          // a run of steps is scheduled
	runStart time.Duration // when the run's first step began
	step     time.Duration // the run's step length
	steps    int           // the run's planned steps
	runGen   int           // invalidates a cut run's end event
}

// Virtual marks a simulated server for the router: it sleeps through
// VirtualWork, at its model's configured levels.
func (in *instance) Virtual() {}

func (in *instance) Upstream() *url.URL      { return in.url }
func (in *instance) Exited() <-chan struct{} { return nil }
func (in *instance) Err() error              { return nil }

// Stop is not called by a virtual router (VirtualWork.Stop stops it).
func (in *instance) Stop(context.Context) error { return nil }

func (in *instance) join(r *request) {
	in.batch.Join(r)
	if !in.running {
		in.begin()
		return
	}
	if in.e.now == in.runStart {
		// The run's first step begins at this very instant: the request
		// joins it, as one that the server's loop took in the same turn.
		in.runGen++
		in.begin()
		return
	}
	// Cut the run after the step in progress: the new request joins at
	// the next step, as in the server's loop.
	done := int((in.e.now-in.runStart)/in.step) + 1
	if done < in.steps {
		in.steps = done
		in.runGen++
		gen := in.runGen
		in.e.at(in.runStart+time.Duration(done)*in.step, func() { in.end(gen) })
	}
}

// begin starts a run of steps with the batch as it is now: as many steps
// as the active request with the fewest tokens left needs.
func (in *instance) begin() {
	active, d := in.batch.Begin()
	if len(active) == 0 {
		in.running = false
		in.e.busy.stop(in.e.now, in.devices)
		return
	}
	if !in.running {
		in.e.busy.start(in.e.now, in.devices)
	}
	in.running = true
	in.runStart, in.step = in.e.now, d
	in.steps = active[0].left
	for _, r := range active[1:] {
		in.steps = min(in.steps, r.left)
	}
	in.runGen++
	gen := in.runGen
	in.e.at(in.runStart+time.Duration(in.steps)*d, func() { in.end(gen) })
}

// end finishes a run: each active request got one token per step.
func (in *instance) end(gen int) {
	if gen != in.runGen {
		return
	}
	var finished []*request
	first := in.runStart + in.step
	in.batch.End(func(r *request) bool {
		if r.left == max(r.q.OutputTokens, 1) {
			r.first = first
		}
		r.left -= in.steps
		if r.left > 0 {
			return false
		}
		finished = append(finished, r)
		return true
	})
	in.begin()
	for _, r := range finished {
		r.finished, r.ok = in.e.now, true
		in.e.progress = in.e.now
		in.e.pending--
		r.grant.Release()
	}
}

// decoding reports whether some model server is decoding a request: the
// replay is making progress, however long since a request last finished
// (Drain).
func (e *engine) decoding() bool {
	for _, in := range e.instances {
		if in.running {
			return true
		}
	}
	return false
}

// busyMeter adds up device time with at least one model decoding.
type busyMeter struct {
	active map[int]int // device → decoding models on it
	since  map[int]time.Duration
	total  time.Duration
}

func (b *busyMeter) devs(devices []int) []int {
	if len(devices) == 0 {
		return []int{-1} // no GPUs: all models share one pseudo-device
	}
	return devices
}

func (b *busyMeter) start(now time.Duration, devices []int) {
	if b.active == nil {
		b.active, b.since = map[int]int{}, map[int]time.Duration{}
	}
	for _, d := range b.devs(devices) {
		if b.active[d] == 0 {
			b.since[d] = now
		}
		b.active[d]++
	}
}

func (b *busyMeter) stop(now time.Duration, devices []int) {
	for _, d := range b.devs(devices) {
		b.active[d]--
		if b.active[d] == 0 {
			b.total += now - b.since[d]
		}
	}
}

func (b *busyMeter) close(now time.Duration) {
	for d, n := range b.active {
		if n > 0 {
			b.total += now - b.since[d]
			b.active[d] = 0
		}
	}
}

// recorder is the replay's router.Observer: counts and the timeline.
type recorder struct {
	e       *engine
	tl      Timeline
	cold    int
	coldBy  map[string]int
	wakes   int
	wakesBy map[string]int
	sleeps  int
	// wakeFailures: wakes that failed and became cold loads
	wakeFailures int
	evictions    int
	unloads      int
	failures     int  // policy calls that crashed or were refused for crash-looping
	handedOver   bool // a fallback took over
	errs         map[string]int
	policy       []string
	state        map[string]string // model → last visible state
	open         map[string]int    // model → index of its open Residency
	unloading    map[string]bool   // models an Unloading word named
	held         map[string]int    // model → queued + loading
	heldSum      int
}

func newRecorder(e *engine) *recorder {
	return &recorder{e: e, errs: map[string]int{}, coldBy: map[string]int{}, wakesBy: map[string]int{}, state: map[string]string{}, open: map[string]int{},
		unloading: map[string]bool{}, held: map[string]int{}}
}

func (o *recorder) t() float64 { return round6(o.e.now.Seconds()) }

func (o *recorder) failed(err error) {
	code := "error"
	if re, ok := err.(*router.Error); ok {
		if o.e.setup.CodeName != nil {
			code = o.e.setup.CodeName(re.Code)
		} else {
			code = strconv.Itoa(int(re.Code))
		}
	}
	o.errs[code]++
}

// ModelChanged implements router.Observer.
func (o *recorder) ModelChanged(st router.ModelStatus) {
	prev := o.state[st.Model]
	if st.State != prev {
		o.state[st.Model] = st.State
		if st.State == "sleeping" {
			o.sleeps++
		}
		if (st.State == sdk.StateStopping.String() || st.State == "sleeping") && prev == sdk.StateReady.String() {
			if o.unloading[st.Model] {
				o.unloads++
			} else {
				o.evictions++
			}
		}
		delete(o.unloading, st.Model)
		if i, ok := o.open[st.Model]; ok {
			o.tl.Residency[i].To = o.t()
			delete(o.open, st.Model)
		}
		state := st.State
		switch state { // the transitions hold GPU memory as a start and a stop do
		case "waking":
			state = sdk.StateStarting.String()
		case "sleeping":
			state = sdk.StateStopping.String()
		}
		switch state {
		case sdk.StateStarting.String(), sdk.StateReady.String(), sdk.StateStopping.String():
			o.open[st.Model] = len(o.tl.Residency)
			o.tl.Residency = append(o.tl.Residency, Residency{Model: st.Model, State: state,
				Devices: slices.Clone(st.Devices), Bytes: st.VRAM, From: o.t()})
		}
	}
	if h := st.Queued + st.Loading; h != o.held[st.Model] {
		o.heldSum += h - o.held[st.Model]
		o.held[st.Model] = h
		p := Point{T: o.t(), V: o.heldSum}
		if n := len(o.tl.Queue); n > 0 && o.tl.Queue[n-1].T == p.T {
			o.tl.Queue[n-1] = p
		} else {
			o.tl.Queue = append(o.tl.Queue, p)
		}
	}
}

// Unloading implements router.Observer.
func (o *recorder) Unloading(models []string, _ string) {
	for _, m := range models {
		o.unloading[m] = true
	}
}

// SwapStarted implements router.Observer.
func (o *recorder) SwapStarted(s router.SwapInfo) {
	if s.Wake {
		o.wakes++
		o.wakesBy[s.Target]++
	} else if s.Cold {
		o.cold++
		o.coldBy[s.Target]++
	}
	o.tl.Swaps = append(o.tl.Swaps, Swap{T: o.t(), Target: s.Target, Evict: slices.Clone(s.Evict), Cold: s.Cold})
}

// SwapEnded implements router.Observer.
func (o *recorder) SwapEnded(s router.SwapInfo) {
	if s.WakeError != "" { // the wake failed: the swap was a cold load after all
		o.wakes--
		o.wakesBy[s.Target]--
		o.wakeFailures++
		o.cold++
		o.coldBy[s.Target]++
	}
}

// PolicyFailed implements router.Observer. A swapper's plan that fails is
// its answer (the model cannot be placed), not a breakdown: the requests
// it concerns are counted as errors, and the run is not marked.
func (o *recorder) PolicyFailed(role, _, event string, err error) {
	var crash *policy.CrashError
	if role == "swapper" && event == "plan" && !errors.As(err, &crash) && !errors.Is(err, policy.ErrUnhealthy) {
		return
	}
	o.failures++
	if len(o.policy) < 20 {
		o.policy = append(o.policy, fmt.Sprintf("%.3fs: %s %s failed: %v", o.t(), role, event, err))
	}
}

// PolicyHandedOver implements router.Observer.
func (o *recorder) PolicyHandedOver(role string) {
	o.handedOver = true
	if len(o.policy) < 20 {
		o.policy = append(o.policy, fmt.Sprintf("%.3fs: %s handed over (fallback)", o.t(), role))
	}
}

func (o *recorder) close(now time.Duration) {
	for _, i := range o.open {
		o.tl.Residency[i].To = round6(now.Seconds())
	}
}
