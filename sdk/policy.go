package sdk

import (
	"errors"
	"strconv"
)

// Scheduler owns the queue, the waiting callers and the decision tree. The
// host calls it from one goroutine, one event at a time, so it needs no
// locks. It must never block: slow work goes through Effects.StartSwap,
// whose result comes back as OnSwapDone. Every OnRequest must end, before it
// returns, in exactly one of: GrantServe, GrantError, or holding the request
// and saying so with SetQueuePosition (0 while it waits on a swap, 1.. while
// queued); the host fails a request that got none of these (DESIGN.md rule 5).
type Scheduler interface {
	OnRequest(ev RequestEvent)
	OnSwapDone(ev SwapDoneEvent)
	OnServeDone(ev ServeDoneEvent)
	OnCancel(ev CancelEvent)
	OnUnload(ev UnloadEvent)
	OnTick(ev TickEvent)
	OnShutdown(ev ShutdownEvent)
}

// Swapper is the eviction policy: given a target and the running set, which
// models must stop, and optionally where to place the target. Plan is a
// speculative, pure query (called for every request and every queue drain):
// it must not log or keep state that changes its answers. OnSwapStart is
// called once per real swap and is where a swapper logs its decision
// (llama-swap's Swapper contract).
type Swapper interface {
	Plan(q PlanRequest) (Plan, error)
	OnSwapStart(ev SwapStartEvent)
}

// JobPlanner is implemented by a swapper that decides which models a GPU
// job evicts, as it decides for a model: PlanJob gets the job's need and
// returns the devices the job takes and the models to stop (see
// JobPlanRequest for the rules the host checks). Like Plan it is a
// speculative, pure query: the host may ask it only to learn whether a
// job could start now. An error is the job's reason to wait, shown in its
// attempt; an error wrapping ErrJobPlanUnsupported (or a swapper that does
// not implement JobPlanner) makes the host choose by its own rule: free
// devices first, then those only idle, unpinned models hold, lowest index
// first.
type JobPlanner interface {
	PlanJob(q JobPlanRequest) (Plan, error)
}

// ErrJobPlanUnsupported is returned, wrapped or as is, by a JobPlanner that
// leaves the choice for a job to the host, and by the host for a swapper
// that does not plan for jobs (one built before JobPlanRequest existed, or
// one that does not implement JobPlanner).
var ErrJobPlanUnsupported = errors.New("the swapper does not plan for GPU jobs")

// PurePlanner is implemented by a swapper whose Plan depends only on its
// settings, the target and the running set: it reads no ModelState,
// RunningModels or Snapshot, and keeps no state that changes its answers
// (llama-swap's EvictionFor contract). When PurePlan returns true, the host
// may answer a Plan for a target and running set it has seen from a cache
// instead of calling the module, which takes a nested Wasm call off the
// path of every request for a loaded model. A swapper that weighs VRAM,
// in-flight counts or last use (prioritylru) must not claim it.
type PurePlanner interface {
	PurePlan() bool
}

// Host is what every policy may read and write: logs and the host's view of
// models and GPUs. Reads cost one host call each (~60 ns through Wasm).
type Host interface {
	// Log writes one structured log line attributed to the policy. Log only
	// real events (a swap, an eviction), never speculative decisions.
	Log(level LogLevel, msg string)
	// ModelState returns one model's current state; ok is false for an
	// unknown model.
	ModelState(model string) (info ModelInfo, ok bool)
	// RunningModels returns every model whose state is Running(), sorted by
	// name.
	RunningModels() []ModelInfo
	// Snapshot returns every model and GPU.
	Snapshot() Snapshot
}

// Effects is a scheduler's whole window onto the world: "the scheduler's
// syscall table" (llama-swap's router design). The host checks every call;
// a call the host refuses returns one of the Err* values below and is
// recorded against the policy.
type Effects interface {
	Host
	// GrantServe hands caller id the model and reports whether the caller
	// was still there to take it. The host counts the model's in-flight
	// requests only on true (DESIGN.md rule 3); false also for an unknown
	// request or a model that is not ready.
	GrantServe(id RequestID, model string) bool
	// GrantError fails caller id with an error the client sees.
	GrantError(id RequestID, code ErrorCode, msg string)
	// StartSwap stops s.Evict, then starts s.Model, in the background; the
	// result arrives as OnSwapDone. Refused (ErrModelBusy) if an evicted
	// model has requests in flight (rule 6), (ErrSwapActive) if s.Model
	// already has a swap, (ErrUnknownModel) for an unknown model.
	StartSwap(s SwapRequest) error
	// StopProcesses stops the models in the background (an unload). A stop
	// that finishes arrives as a TickEvent naming the model. A model with
	// requests in flight is never cut off (rule 6): it shows as
	// StateStopping at once, takes no new request, and stops when its last
	// one ends. A model being started stops once its start ends.
	StopProcesses(models []string) error
	// SetQueuePosition tells the host, and through it the caller, that the
	// scheduler holds request id: 0 while it waits for a swap of its model,
	// 1 for the head of the queue, and so on.
	SetQueuePosition(id RequestID, pos int)
	// Plan asks the configured swapper what must happen before target can
	// load. The host builds the running set (rule 4).
	Plan(target string) (Plan, error)
}

// SchedulerFactory makes a scheduler from its settings (JSON from the
// config's `routing.scheduler.settings`, "{}" if none).
type SchedulerFactory func(fx Effects, settings []byte) (Scheduler, error)

// SwapperFactory makes a swapper from its settings (JSON from the config's
// `routing.router.settings`, "{}" if none).
type SwapperFactory func(h Host, settings []byte) (Swapper, error)

// PolicyKind is the value of a module's `loadout_policy_kind` export.
type PolicyKind uint32

// Policy kinds.
const (
	KindNone      PolicyKind = 0 // nothing registered: the module is refused
	KindScheduler PolicyKind = 1
	KindSwapper   PolicyKind = 2
)

// String returns "scheduler", "swapper" or "none".
func (k PolicyKind) String() string {
	switch k {
	case KindScheduler:
		return "scheduler"
	case KindSwapper:
		return "swapper"
	default:
		return "none"
	}
}

// The registered factories; the wasip1 glue (abi_wasm.go) reads them.
var (
	registeredScheduler SchedulerFactory //lint:ignore U1000 read by the wasip1 build
	registeredSwapper   SwapperFactory   //lint:ignore U1000 read by the wasip1 build
)

// RegisterScheduler registers the module's scheduler. Call it once, from an
// init function: in a Wasm reactor module main never runs.
func RegisterScheduler(f SchedulerFactory) { registeredScheduler = f }

// RegisterSwapper registers the module's swapper. Call it once, from an init
// function.
func RegisterSwapper(f SwapperFactory) { registeredSwapper = f }

// ResultError is a refusal returned by a host import: the negative i32 the
// import returned.
type ResultError int32

// Host import results. A host import returns >= 0 on success.
const (
	ErrUnknownRequest ResultError = -1 // no waiting caller has this id
	ErrUnknownModel   ResultError = -2 // no such model
	ErrNotReady       ResultError = -3 // GrantServe of a model that is not ready
	ErrNotAllowed     ResultError = -4 // the call is not for this kind of policy
	ErrModelBusy      ResultError = -5 // StartSwap would evict a model with requests in flight
	ErrSwapActive     ResultError = -6 // StartSwap for a model that already has a swap
	ErrSwapperFailed  ResultError = -7 // Plan: the swapper failed; the host logged why
	ErrBadArgument    ResultError = -8 // a malformed argument
	ErrDoesNotFit     ResultError = -9 // StartSwap: the target does not fit in GPU memory even with the evictions
	// StartSwap: the target would fit, but GPU jobs hold the memory it
	// needs now; queue the request and try again later (a tick follows).
	ErrHeldByJob ResultError = -10
)

var resultNames = map[ResultError]string{
	ErrUnknownRequest: "unknown request id",
	ErrUnknownModel:   "unknown model",
	ErrNotReady:       "model is not ready",
	ErrNotAllowed:     "not allowed for this policy kind",
	ErrModelBusy:      "would evict a model with requests in flight",
	ErrSwapActive:     "model already has a swap in progress",
	ErrSwapperFailed:  "swapper failed",
	ErrBadArgument:    "malformed argument",
	ErrDoesNotFit:     "does not fit in GPU memory with the planned evictions",
	ErrHeldByJob:      "the GPU memory it needs is held by jobs",
}

func (e ResultError) Error() string {
	if s, ok := resultNames[e]; ok {
		return s
	}
	return "host error " + strconv.Itoa(int(e))
}

// NotNow reports whether err is a host's refusal that says "not now"
// rather than "no": a swap already running, or a stop under way, for the
// model (ErrSwapActive), an eviction of a model with requests in flight
// (ErrModelBusy), GPU memory held by jobs (ErrHeldByJob). A scheduler
// that meets one waits for the event that ends it (OnSwapDone,
// OnServeDone, a tick) and tries again, as the built-in fifo does; the
// host counts it among the refused effects but logs it at debug level,
// not as the policy's mistake (docs/ABI.md, "Host imports").
func NotNow(err error) bool {
	return errors.Is(err, ErrSwapActive) || errors.Is(err, ErrModelBusy) || errors.Is(err, ErrHeldByJob)
}

// AsResult returns the host import result for err: 0 for nil, the
// ResultError's value, or ErrBadArgument for any other error.
func AsResult(err error) int32 {
	if err == nil {
		return 0
	}
	var re ResultError
	if errors.As(err, &re) {
		return int32(re)
	}
	return int32(ErrBadArgument)
}

// Admitter is implemented by the Effects of a host that takes the warm
// path (docs/ABI.md, "The warm path"; DESIGN.md): a scheduler states once
// that the host may admit requests for a model on its own, and the host
// then grants them on its run loop without calling the policy. Every
// Effects the Go SDK and sdk/policytest give a scheduler implements it; a
// scheduler finds it with a type assertion, so one written before it
// existed, or that never asks, is called for every request as before.
type Admitter interface {
	// Admit lets the host grant new requests for model itself while all
	// of these hold: the model is ready (not draining for an unload), no
	// swap loads or evicts it, the policy holds no request for it (none
	// queued or waiting on a swap), and fewer than limit of its requests
	// are in flight. Such a request costs no policy call: the policy never
	// hears its OnRequest, and hears the OnServeDone of the model's
	// requests only while it holds some request (for any model) or when
	// flags has AdmitServeDone.
	//
	// A limit of 0 revokes the admission. The host revokes it by itself
	// whenever something the policy must see changes for the model: its
	// state changes, a swap names it (target or eviction), the policy
	// holds a request for it (SetQueuePosition), it is unloaded or
	// removed, the policy is replaced, fails or is handed over to a
	// fallback. A policy that wants the shortcut back asks again, e.g. on
	// the next request it grants for the model.
	//
	// Errors: ErrUnknownModel; ErrNotReady when the conditions above do
	// not hold now (the model is not ready, a swap names it, or the policy
	// holds a request for it); ErrBadArgument for undefined flags.
	Admit(model string, limit uint32, flags AdmitFlags) error
}

// TickRequester is implemented by the Effects of a host that ticks a
// scheduler on demand (docs/ABI.md, "Ticks on demand"): a scheduler
// says when it next needs OnTick, and the host stops ticking it every
// TickInterval. Every Effects the Go SDK and sdk/policytest give a
// scheduler implements it; a scheduler finds it with a type assertion,
// so one written before it existed, or that never asks, is ticked
// periodically as before.
type TickRequester interface {
	// RequestTick asks for OnTick at host time at (Unix ns; the clock of
	// every event's Now), and says that the scheduler needs no other
	// tick: from its first call on, the instance is ticked only at the
	// earliest of at, a TTL deadline the host keeps, and a state change
	// outside a swap (TickEvent.Changed). at 0 asks for no tick. Each
	// call replaces the one before; a request is used up by the first
	// OnTick at or after at (an OnTick delivered earlier, for a change,
	// leaves it standing). The host clamps at to no earlier than
	// MinTickDelay after now and no later than MaxTickDelay after it; a
	// time already past (at or before now) is taken as PastTickDelay
	// after now, the periodic tick's interval. It logs the first clamp. A new instance (after a crash, a reload,
	// a fallback's hand-over) is ticked periodically until it asks.
	//
	// Errors: ErrNotAllowed from a swapper's effects or a host without
	// ticks on demand (the policy is then ticked periodically).
	RequestTick(at int64) error
}

// The bounds a host clamps a TickRequester.RequestTick to, after now: no
// sooner than MinTickDelay (a policy that keeps asking for a time just
// ahead would otherwise be called in a loop at one instant of virtual
// time), no later than MaxTickDelay (an absurd time, e.g. a duration
// passed as a time, still gets a tick within a day). A time at or before
// now — a deadline the policy let pass, or a bug — is taken as
// PastTickDelay after now, the periodic tick's interval: a policy that
// keeps asking for the past is ticked as one that never asked, not every
// MinTickDelay (which made a replay of two days take hours).
const (
	MinTickDelay  int64 = 1e6             // 1 ms, in ns
	MaxTickDelay  int64 = 24 * 3600 * 1e9 // 24 h, in ns
	PastTickDelay int64 = 1e9             // 1 s, in ns
)

// AdmitFlags modify an admission (Admitter.Admit). The zero value asks for
// nothing beyond the admission itself.
type AdmitFlags uint32

// Admission flags.
const (
	// AdmitServeDone: deliver OnServeDone for every request of the model,
	// even while the policy holds no request; for a policy that counts
	// completions itself.
	AdmitServeDone AdmitFlags = 1 << iota

	// AdmitAllFlags is every defined flag; a host refuses others.
	AdmitAllFlags = AdmitServeDone
)

// SnapshotReader is implemented by a Host that can decode a snapshot into
// storage the caller keeps between calls (the Go SDK's Wasm glue). Use it
// through ReadSnapshot.
type SnapshotReader interface {
	// SnapshotInto overwrites *dst with the current snapshot, reusing the
	// storage of dst.Models, dst.GPUs and each model's Devices and Leased
	// where large enough.
	SnapshotInto(dst *Snapshot)
}

// ReadSnapshot fills *dst with h's snapshot. Where h is a SnapshotReader
// it reuses the storage *dst already has, so a policy that reads the
// snapshot on every call (a swapper that plans by VRAM) stops allocating
// it each time: in Go compiled to Wasm each allocation costs about 1.3 µs
// (docs/RATIONALE.md), and a snapshot allocates one list per loaded model.
// Keep *dst in the policy and read it again on every call; slices taken
// from an earlier read are overwritten. Through Wasm only the models that
// changed since the previous read into *dst cross the ABI (see
// ReadSnapshotChanges, whose rules apply: never modify *dst's contents).
// Otherwise it is *dst = h.Snapshot().
func ReadSnapshot(h Host, dst *Snapshot) {
	if r, ok := h.(SnapshotReader); ok {
		r.SnapshotInto(dst)
		return
	}
	*dst = h.Snapshot()
}

// SnapshotChangesReader is implemented by a Host that can say which models
// changed since the snapshot a caller already holds (the Go SDK's Wasm
// glue, through the snapshot_delta import: the host sends only the models
// that changed). Use it through ReadSnapshotChanges.
type SnapshotChangesReader interface {
	// SnapshotChangesInto is SnapshotReader.SnapshotInto that also appends
	// to changed the positions in dst.Models of the models it overwrote,
	// ascending, and returns the extended slice; all is true when every
	// model must be taken as changed (then changed may hold any subset).
	SnapshotChangesInto(dst *Snapshot, changed []int) (out []int, all bool)
}

// ReadSnapshotChanges is ReadSnapshot that also says what changed since
// the previous read into *dst: it appends to changed the positions in
// dst.Models of the models whose values may differ from those *dst held
// before the call and returns the extended slice, or all=true when every
// model must be taken as changed — the first read into *dst, a host that
// does not send deltas (sdk/policytest's Host, a native host), or after
// anything replaced *dst's lists. A model added or removed by a reload
// shows as the positions from where the lists differ on, and len(dst.Models)
// changes; the GPUs are always current and carry no change list. Now is
// always current.
//
// Through Wasm (the Go SDK's glue) the host sends only the models that
// changed, and the guest decodes only those: a plan that reads a snapshot
// of 100 models where none changed decodes none of them. For that, *dst
// must hold exactly what the previous ReadSnapshot or ReadSnapshotChanges
// into it left there: keep it in the policy, read it on every call, and
// never modify its contents (replacing *dst as a whole is fine: the next
// read is then whole). Slices taken from it are overwritten by later reads.
func ReadSnapshotChanges(h Host, dst *Snapshot, changed []int) ([]int, bool) {
	if r, ok := h.(SnapshotChangesReader); ok {
		return r.SnapshotChangesInto(dst, changed)
	}
	ReadSnapshot(h, dst)
	return changed, true
}
