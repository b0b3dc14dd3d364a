package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/host/gpu"
	"github.com/loadout-dev/loadout/sdk"
)

// SchedulerPolicy is a scheduler as the run loop calls it: sdk.Scheduler with
// an error from every event, which host/policy's Wasm scheduler returns when
// the policy crashed, timed out or is unhealthy. Any error means the policy
// lost the callers it held; the router fails them (DESIGN.md rule 7).
type SchedulerPolicy interface {
	OnRequest(sdk.RequestEvent) error
	OnSwapDone(sdk.SwapDoneEvent) error
	OnServeDone(sdk.ServeDoneEvent) error
	OnCancel(sdk.CancelEvent) error
	OnUnload(sdk.UnloadEvent) error
	OnTick(sdk.TickEvent) error
	OnShutdown(sdk.ShutdownEvent) error
}

// SwapperPolicy is a swapper as the run loop calls it. One that also
// implements sdk.PurePlanner and claims it gets its plans cached by target
// and running set.
type SwapperPolicy interface {
	Plan(sdk.PlanRequest) (sdk.Plan, error)
	OnSwapStart(sdk.SwapStartEvent) error
}

// handover is implemented by a policy decorator that may change which
// policy answers behind it (host/policy's FallbackScheduler and
// FallbackSwapper): HandedOver reports, once, that it changed since the
// last call. The run loop then offers the requests the old scheduler held
// to the new one, or drops the plans it cached from the old swapper.
type handover interface{ HandedOver() bool }

// ModelConfig is the static part of a model that policies read through
// sdk.ModelInfo.
type ModelConfig struct {
	Process          Process       // how to start it
	Priority         int32         // default request priority
	ConcurrencyLimit uint32        // max in-flight requests; 0 = the scheduler's default
	Pinned           bool          // never evicted: the host drops a plan's eviction of it (keepPinned)
	Group            string        // swap group name, for policies and the API
	TTL              time.Duration // leave the GPU after this long idle (expire: a sleep or a stop); 0 = never
	StopTimeout      time.Duration // how long Stop may take before the backend kills (0: 10 s)
	VRAM             uint64        // declared need in bytes; 0 = unknown
	// ReplicaOf is, for replica 2 and above of a model, the model's id
	// (whose requests it serves; host/config's ReplicaID names the row);
	// empty for a model's own row. Replica is its 1-based number (0 or 1
	// for a model's own row).
	ReplicaOf string
	Replica   int
	// MinReplicas and MaxReplicas are the model's replica range (its
	// replicas:, or min_replicas and max_replicas), read from the model's
	// own row; 0 means 1. Its rows must be in the table with it.
	MinReplicas, MaxReplicas int

	// Residency (sleep.go). Evict is how the model is evicted when a plan
	// says nothing (its `evict:`, else the global one). SleepLevels is
	// what its backend claims it can sleep at before a server of it runs
	// (bit 1 level 1, bit 2 level 2); a running instance's own answer
	// (SleepInstance) replaces it.
	Evict       config.Evict
	SleepLevels uint8
	// SleepOverhead is the host memory in bytes a level-2 sleeper holds
	// (its process and compiled state) until measured; 0: 1 GiB.
	SleepOverhead uint64
	// WakeTimeout bounds a wake (past it the server is killed and the
	// model cold-loaded) and a sleep (past it the server is killed and
	// the eviction is a stop): the config's wakeTimeout. 0: 60 s
	// (config.DefaultWakeTimeout).
	WakeTimeout time.Duration
	// LoadTime and WakeTime are the estimated durations of a cold load
	// and of a wake from level 1 and 2 (index 0 and 1), shown to policies
	// until measured; 0 unknown.
	LoadTime time.Duration
	WakeTime [2]time.Duration
	// Weights are the model's weight files and WeightBytes their size:
	// a stopped model that a request waits for has them read ahead into
	// the page cache, leased against host memory, before its load
	// (pagecache.go). Empty: nothing to read ahead.
	Weights     []string
	WeightBytes uint64
}

// Config builds a Router.
type Config struct {
	// Models maps model id → its config. It may be empty (a box that only
	// forwards to peers); models join later through UpdateModels.
	Models map[string]ModelConfig
	// NewScheduler makes the scheduler policy bound to the router's Effects.
	NewScheduler func(fx sdk.Effects) (SchedulerPolicy, error)
	// NewSwapper makes the swapper policy; it may only read.
	NewSwapper func(h sdk.Host) (SwapperPolicy, error)
	// SchedulerName and SwapperName name the policies in errors and logs
	// (e.g. "builtin:fifo", "/etc/loadout/mine.wasm").
	SchedulerName, SwapperName string
	// Clock is the time the run loop stamps events with and measures TTLs,
	// last use and load waits by; nil means the wall clock (time.Now). It
	// is the one clock the router's decisions read, so a replay can run
	// them on virtual time.
	Clock func() time.Time
	// TickInterval is how often OnTick runs (TTL checks, queue aging).
	// Default 1 s.
	TickInterval time.Duration
	// Logger receives one line per real event (a swap, an eviction, a crash).
	Logger *slog.Logger
	// NoWarmPath turns the warm path off (warm.go): Admit answers
	// sdk.ErrNotAllowed, so the scheduler is called for every request and
	// every request's end, as before the warm path existed. For tests and
	// benchmarks that compare the two.
	NoWarmPath bool
	// PeriodicTicks ticks the scheduler every TickInterval even when it
	// asks for ticks on demand (ticks.go): RequestTick answers
	// sdk.ErrNotAllowed, as from a host built before it. For tests and
	// benchmarks that compare the two.
	PeriodicTicks bool
	// Ledger accounts GPU memory: every load leases its model's VRAM on
	// the devices it is placed on, a load that does not fit is never
	// started, and snapshots carry the devices. Nil: no VRAM accounting.
	Ledger *gpu.Ledger
	// HostMemory is the host memory in bytes sleeping models may lease
	// (DESIGN.md, "Residency"): the config's hostMemory, or the machine's
	// available memory at start minus a reserve. 0: none, so every
	// eviction stops its model.
	HostMemory uint64
	// Liveness says how a hung model server is found (liveness.go); zero
	// fields take the defaults.
	Liveness Liveness
	// MeasureInterval is how often loaded models' memory use is measured
	// (MemoryReporter). Default 5 s.
	MeasureInterval time.Duration
	// Observer, when set, hears model changes, swaps and policy failures
	// on the run loop (observer.go); it must never block.
	Observer Observer
}

// Request is one caller asking for a model.
type Request struct {
	Model    string // resolved model id
	Priority int32  // 0: the model's configured priority
	Client   string // client id for fairness policies; may be empty
	// Select, when set, is the llama-swap selector the client named: the
	// run loop picks the model among its targets as the request arrives
	// (selector.go), and Model is replaced by the pick; the Grant's Model
	// says which it was. Policies see the picked model.
	Select *Selector
	// Progress, if not nil, receives the caller's latest queue position
	// while it waits; the router never blocks on it (latest value wins, so
	// give it a buffer of 1).
	Progress chan Progress
	// TTL, when set, is the model's TTL from this request's grant on, in
	// place of ModelConfig.TTL, until a request without one is granted
	// or the model stops: Ollama's keep_alive, which each request may
	// give. Its value reads as ModelConfig.TTL's (0: never; else idle
	// this long).
	TTL *time.Duration
}

// Progress is a waiting caller's place: Position 0 with Loading means its
// model is loading; Position n > 0 means n-th in the queue.
type Progress struct {
	Model    string
	Position int
	Loading  bool
}

// Grant is a caller's permission to use a model's upstream. Release must be
// called exactly once when the response is finished (later calls are
// no-ops); until then the model counts the request as in flight and is never
// evicted (DESIGN.md rule 6).
type Grant struct {
	// Model is the model the request asked for. Replica is, for a model
	// with replicas, the one that serves it (Model itself for replica 1,
	// else "model@2"…); empty for a model without.
	Model    string
	Replica  string
	Upstream *url.URL
	// LoadWait is the part of the caller's wait its model spent loading
	// (its last load, started before or during the wait); zero when the
	// model was ready when it came.
	LoadWait time.Duration
	// Woke: the load it waited on (LoadWait > 0) was a wake of its
	// sleeping model, not a cold load (DESIGN.md, "Residency").
	Woke    bool
	release func()
	stalled func(reason string) // nil: no liveness report (a peer, a test)
	// ended is set, before its server is killed, to why the router ended
	// the instance serving the grant (a hang); nil: no such report.
	ended *atomic.Pointer[string]
	once  sync.Once
}

// Ended is why the router killed the server the grant went to while it
// was granted ("hung: its health check failed 3 times …"), "" when it did
// not: what a request cut by that kill is told, rather than the broken
// connection it saw.
func (g *Grant) Ended() string {
	if g.ended == nil {
		return ""
	}
	if why := g.ended.Load(); why != nil {
		return *why
	}
	return ""
}

// Release ends the grant: the model's in-flight count goes down.
func (g *Grant) Release() { g.once.Do(g.release) }

// Error is a request the router or its policy failed. Code says what kind
// of failure it is; host/proxy maps it to an HTTP status.
type Error struct {
	Code    sdk.ErrorCode
	Message string
}

func (e *Error) Error() string { return e.Message }

// ErrShuttingDown is returned to callers once shutdown has begun.
var ErrShuttingDown = &Error{Code: sdk.CodeUnavailable, Message: "loadout is shutting down"}

// ModelStatus is one model as GET /api/models shows it.
type ModelStatus struct {
	Model     string    `json:"model"`
	State     string    `json:"state"`
	InFlight  int       `json:"in_flight"`
	Queued    int       `json:"queued"`  // callers queued for it
	Loading   int       `json:"loading"` // callers waiting on its swap
	LastUse   time.Time `json:"last_use,omitzero"`
	LastError string    `json:"last_error,omitempty"`
	Upstream  string    `json:"upstream,omitempty"`
	Group     string    `json:"group,omitempty"`
	VRAM      uint64    `json:"vram_bytes,omitempty"`          // declared or estimated need
	Measured  uint64    `json:"measured_vram_bytes,omitempty"` // measured while loaded
	Devices   []int     `json:"devices,omitempty"`             // GPUs it holds leases on
	// ExpiresAt is when its TTL takes it off the GPU (expire), as Ollama's /api/ps
	// expires_at: last use plus TTL while it is ready and idle; zero when
	// it has no TTL, is busy or is not loaded.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// TTL is its TTL now while it is ready — the last granted request's
	// (Request.TTL, Ollama's keep_alive), else its configuration's; 0 for
	// none or a model not ready. Not in the JSON (expires_at says it);
	// Ollama's /api/ps reads it for a model in use.
	TTL time.Duration `json:"-"`
	// StartFailures counts its failed starts in a row; from the second,
	// starts back off exponentially (backoff.go): none is attempted before
	// RetryAt (zero while there is no backoff; it may be past).
	StartFailures int       `json:"start_failures,omitempty"`
	RetryAt       time.Time `json:"retry_at,omitzero"`
	// For a model with replicas (max_replicas > 1): its range, how many
	// are ready, its state as Seldon Core v2 derives it from its replicas'
	// (ModelAvailable, ModelProgressing, …) and each replica. State is then
	// the most available of its replicas' states, and the counts and
	// devices are the replicas' together.
	MinReplicas   int             `json:"min_replicas,omitempty"`
	MaxReplicas   int             `json:"max_replicas,omitempty"`
	ReadyReplicas int             `json:"ready_replicas,omitempty"`
	ReplicaState  string          `json:"replica_state,omitempty"`
	Replicas      []ReplicaStatus `json:"replicas,omitempty"`
	// Residency (DESIGN.md, "Residency"). State is then "asleep" for a
	// sleeping model, "sleeping" and "waking" for the transitions;
	// SleepLevel is its level (1 or 2) while asleep or waking, HostBytes
	// the host memory it leases. ColdLoads counts its cold loads (full
	// starts), Wakes its wakes and WakeFailures the wakes that failed
	// and became cold loads; LoadSeconds and WakeSeconds are the last of
	// each's duration, in seconds.
	SleepLevel   int     `json:"sleep_level,omitempty"`
	HostBytes    uint64  `json:"host_bytes,omitempty"`
	ColdLoads    uint32  `json:"cold_loads"`
	Wakes        uint32  `json:"wakes"`
	WakeFailures uint32  `json:"wake_failures,omitempty"`
	LoadSeconds  float64 `json:"load_seconds,omitempty"`
	WakeSeconds  float64 `json:"wake_seconds,omitempty"`
	// SleepSeconds is how long its last sleep took (from the eviction to
	// its GPU memory released).
	SleepSeconds float64 `json:"sleep_seconds,omitempty"`
	// ReadAheadBytes is the host memory its weights, read ahead into the
	// page cache for its coming load, lease (pagecache.go).
	ReadAheadBytes uint64 `json:"read_ahead_bytes,omitempty"`
}

// PolicyCounters counts a role's policy misbehaviour as the router saw it.
type PolicyCounters struct {
	Failures       int    `json:"failures"`        // calls that returned an error (crash, deadline, unhealthy)
	RefusedEffects int    `json:"refused_effects"` // Effects calls the router refused (unknown id, busy evict, …)
	LastError      string `json:"last_error,omitempty"`
	// failures splits Failures by the policy that failed, keyed by its
	// name as its errors carry it (failedPolicy): a policy and the
	// built-in fallback serving while it is disabled fail apart.
	failures map[string]policyFailures
	// lastRefused is the last refused call's description.
	lastRefused string
}

// policyFailures is one policy's share of PolicyCounters.Failures.
type policyFailures struct {
	n       int
	lastErr string
}

// failed counts a failed call into the policy named policy.
func (c *PolicyCounters) failed(policy string, err error) {
	c.Failures++
	c.LastError = err.Error()
	if c.failures == nil {
		c.failures = map[string]policyFailures{}
	}
	c.failures[policy] = policyFailures{n: c.failures[policy].n + 1, lastErr: err.Error()}
}

// Of is the counters of the role's policy named name: its own failures
// and last error, and, when it is the one called now (active), the
// role's refused effects (the calls the router refuses come from the
// policy it calls). A disabled policy's failures are not its fallback's.
func (c PolicyCounters) Of(name string, active bool) PolicyCounters {
	f := c.failures[name]
	out := PolicyCounters{Failures: f.n, LastError: f.lastErr}
	if active {
		out.RefusedEffects = c.RefusedEffects
		if out.LastError == "" {
			out.LastError = c.lastRefused
		}
	}
	return out
}

// clone is c with its own map, for a caller off the run loop.
func (c PolicyCounters) clone() PolicyCounters {
	c.failures = maps.Clone(c.failures)
	return c
}

// Router is the run loop and its API. Create with New; all methods are safe
// for concurrent use.
type Router struct {
	cfg Config
	log *slog.Logger

	requests   chan *waiter
	cancels    chan *waiter
	serveDones chan serveDone
	swapDones  chan swapDone
	stopDones  chan stopDone
	exits      chan exitEvent
	unloads    chan unloadRequest
	queries    chan func()
	measured   chan []measurement
	probes     chan probeResult
	stalls     chan stall
	shutdown   chan struct{}
	done       chan struct{} // closed when the loop has exited

	procCtx    context.Context // cancelled at the end of shutdown: aborts starts
	procCancel context.CancelFunc

	exec executor // where slow work goes: goroutines, or a simulator (swap.go)

	loop loopState // touched only by the run-loop goroutine (rule 1)

	// profile is loop.profile as the loop last published it (SetProfile),
	// for Profile.
	profile atomic.Pointer[string]
}

// New validates cfg, makes the policies and starts the run loop.
// Errors: an empty model table, a missing policy constructor, or the
// policy's own construction error.
func New(cfg Config) (*Router, error) {
	r, err := newRouter(cfg, func(r *Router) executor { return goExecutor{r} })
	if err != nil {
		return nil, err
	}
	r.watchJobLeases()
	go r.run()
	return r, nil
}

// newRouter is New without the run loop's goroutine, with the executor
// that exec makes.
func newRouter(cfg Config, exec func(*Router) executor) (*Router, error) {
	if cfg.NewScheduler == nil || cfg.NewSwapper == nil {
		return nil, errors.New("router: a scheduler and a swapper policy are required")
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.TickInterval <= 0 {
		cfg.TickInterval = time.Second
	}
	if cfg.MeasureInterval <= 0 {
		cfg.MeasureInterval = 5 * time.Second
	}
	cfg.Liveness = cfg.Liveness.withDefaults()
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.SchedulerName == "" {
		cfg.SchedulerName = "scheduler"
	}
	if cfg.SwapperName == "" {
		cfg.SwapperName = "swapper"
	}
	r := &Router{
		cfg:        cfg,
		log:        cfg.Logger,
		requests:   make(chan *waiter),
		cancels:    make(chan *waiter),
		serveDones: make(chan serveDone),
		swapDones:  make(chan swapDone),
		stopDones:  make(chan stopDone),
		exits:      make(chan exitEvent),
		unloads:    make(chan unloadRequest),
		queries:    make(chan func()),
		measured:   make(chan []measurement),
		probes:     make(chan probeResult),
		stalls:     make(chan stall),
		shutdown:   make(chan struct{}),
		done:       make(chan struct{}),
	}
	r.procCtx, r.procCancel = context.WithCancel(context.Background())
	r.exec = exec(r)
	r.loop.init(cfg)
	fx := &effects{r: r}
	sw, err := cfg.NewSwapper(readOnlyHost{fx})
	if err != nil {
		return nil, fmt.Errorf("router: swapper %s: %w", cfg.SwapperName, err)
	}
	sched, err := cfg.NewScheduler(fx)
	if err != nil {
		return nil, fmt.Errorf("router: scheduler %s: %w", cfg.SchedulerName, err)
	}
	r.loop.sched, r.loop.swapper, r.loop.fx = sched, sw, fx
	r.loop.schedHandover, _ = sched.(handover)
	r.loop.swapHandover, _ = sw.(handover)
	r.loop.purePlans = purePlanner(sw)
	return r, nil
}

// purePlanner reports whether sw claims sdk.PurePlanner.
func purePlanner(sw SwapperPolicy) bool {
	pp, ok := sw.(sdk.PurePlanner)
	return ok && pp.PurePlan()
}

// Acquire waits until the scheduler grants req a model, fails it, or ctx
// ends (the caller left: the scheduler is told and the request never
// triggers a swap). The returned Grant must be released.
// Errors: *Error (policy or router decision), ctx.Err(), ErrShuttingDown.
func (r *Router) Acquire(ctx context.Context, req Request) (*Grant, error) {
	w := &waiter{ctx: ctx, req: req, respond: make(chan result)}
	select {
	case r.requests <- w:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-r.done:
		return nil, ErrShuttingDown
	}
	select {
	case res := <-w.respond:
		return res.grant, res.err
	case <-ctx.Done():
		select {
		case r.cancels <- w:
		case <-r.done:
		}
		return nil, ctx.Err()
	}
}

// UnloadOptions says what Router.Unload stops and how.
type UnloadOptions struct {
	// Models are the model ids to stop; none means every running model.
	Models []string
	// Force stops models with requests in flight at once, cutting those
	// requests; otherwise such a model takes no new request and stops when
	// its last one ends.
	Force bool
	// Timeout bounds the wait for the models to stop when ctx has no
	// earlier deadline; 0 means DefaultUnloadTimeout. The stop goes on
	// after the wait ends.
	Timeout time.Duration
}

// DefaultUnloadTimeout bounds an unload's wait for its models to stop.
const DefaultUnloadTimeout = 2 * time.Minute

// Unload stops models as an operator asks: the scheduler is told
// (OnUnload) and fails what it holds for them, but the stop is the host's,
// whatever the policy does. It waits until every model has stopped.
// Errors: *Error with CodeModelNotFound for an unknown model (nothing is
// stopped); *Error with CodeTimeout naming the models still stopping, and
// why, when the wait ends first (their stop goes on); ctx.Err();
// ErrShuttingDown.
func (r *Router) Unload(ctx context.Context, opt UnloadOptions) error {
	timeout := opt.Timeout
	if timeout <= 0 {
		timeout = DefaultUnloadTimeout
	}
	req := unloadRequest{models: opt.Models, force: opt.Force, done: make(chan error, 1)}
	select {
	case r.unloads <- req:
	case <-ctx.Done():
		return ctx.Err()
	case <-r.done:
		return ErrShuttingDown
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		var still []string
		r.query(func() { still = r.loop.stillStopping(r.loop.withReplicas(opt.Models)) })
		return &Error{Code: sdk.CodeTimeout, Message: fmt.Sprintf("unload: models still stopping after %s: %s",
			timeout, strings.Join(still, "; "))}
	}
}

// Models returns every model's status, sorted by id.
func (r *Router) Models() []ModelStatus {
	var out []ModelStatus
	r.query(func() { out = r.loop.modelStatuses() })
	return out
}

// Counters returns how often each policy failed or had an Effects call
// refused, keyed "scheduler" and "swapper".
func (r *Router) Counters() map[string]PolicyCounters {
	out := map[string]PolicyCounters{}
	r.query(func() {
		out["scheduler"] = r.loop.schedCounters.clone()
		out["swapper"] = r.loop.swapCounters.clone()
	})
	return out
}

// OnLoop runs fn on the run-loop goroutine and waits for it; after shutdown
// fn does not run. It is how another goroutine reads state that lives on the
// loop (rule 1), such as the policies' health for the admin API. fn must
// not block nor call the Router.
func (r *Router) OnLoop(fn func()) { r.query(fn) }

// query runs fn on the run loop and waits for it; after shutdown it does
// nothing.
func (r *Router) query(fn func()) {
	ran := make(chan struct{})
	select {
	case r.queries <- func() { fn(); close(ran) }:
		<-ran
	case <-r.done:
	}
}

// Shutdown fails every waiting caller, refuses new ones, lets in-flight
// requests finish, stops every model process and ends the run loop. It
// returns when all processes have exited, or ctx's error if ctx ends first
// (then remaining starts are aborted and processes killed as fast as the
// backends allow).
func (r *Router) Shutdown(ctx context.Context) error {
	select {
	case r.shutdown <- struct{}{}:
	case <-r.done:
		return nil
	}
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		r.procCancel()
		select {
		case <-r.done:
		case <-time.After(5 * time.Second):
		}
		return fmt.Errorf("router: shutdown: %w", ctx.Err())
	}
}

// Done is closed when the run loop has exited.
func (r *Router) Done() <-chan struct{} { return r.done }
