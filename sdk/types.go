package sdk

import (
	"slices"
	"strconv"
)

// ABIVersion is the version of the policy ABI this SDK speaks: the value
// of the `loadout_abi_version` export, and the first byte of every encoded
// message (docs/ABI.md). Version 3 added residency (ModelInfo's sleep
// fields, Snapshot.Host), eviction modes (Plan.Modes and the lists
// parallel to it) and made request_tick part of the version. A host loads
// modules of version 2 (wire.MinVersion) to this one and talks to each in
// its own version; it refuses any other.
const ABIVersion = 3

// RequestID identifies one waiting caller to a policy. The host assigns it;
// ids are never reused within a host's lifetime.
type RequestID uint64

// ModelState is a model's process state as the host derives it on its run
// loop (llama-swap's process states, plus Failed).
type ModelState uint8

// Model states.
const (
	StateStopped  ModelState = 0 // no process; a request must start a swap
	StateStarting ModelState = 1 // a swap is loading it
	StateReady    ModelState = 2 // serving
	StateStopping ModelState = 3 // being stopped (evicted, unloaded or TTL)
	StateFailed   ModelState = 4 // its last start failed or it crashed; the next request starts it again
)

var stateNames = [...]string{"stopped", "starting", "ready", "stopping", "failed"}

// String returns the state's lower-case name, e.g. "ready".
func (s ModelState) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// Running reports whether a process exists or is being made for the model:
// everything but Stopped and Failed. These are the models a swapper sees as
// running.
func (s ModelState) Running() bool {
	return s == StateStarting || s == StateReady || s == StateStopping
}

// ErrorCode classifies an error granted to a caller; the host maps it to an
// HTTP status and an OpenAI error type.
type ErrorCode int32

// Error codes for GrantError.
const (
	CodeInternal         ErrorCode = 0 // 500: the policy's own fault
	CodeModelNotFound    ErrorCode = 1 // 404: no such model
	CodeQueueFull        ErrorCode = 2 // 429: the queue is at its limit
	CodeConcurrencyLimit ErrorCode = 3 // 429: the model's concurrencyLimit is reached
	CodeUnavailable      ErrorCode = 4 // 503: unloaded, shutting down, or cannot be placed now
	CodeSwapFailed       ErrorCode = 5 // 502: the model failed to start
	CodeTimeout          ErrorCode = 6 // 504: waited too long
	CodeTooLarge         ErrorCode = 7 // 507: can never fit, even with everything evicted
)

// Valid reports whether c is one of the codes above. A host refuses (logs
// and counts) a GrantError with any other code and fails the caller with
// CodeInternal instead; sdk/policytest reports it as a breach.
func (c ErrorCode) Valid() bool { return c >= CodeInternal && c <= CodeTooLarge }

// LogLevel is a log line's severity, mapped onto log/slog's levels.
type LogLevel int32

// Log levels (slog's numeric values).
const (
	LevelDebug LogLevel = -4
	LevelInfo  LogLevel = 0
	LevelWarn  LogLevel = 4
	LevelError LogLevel = 8
)

// UnloadReason says why the host asks a scheduler to unload models.
type UnloadReason uint8

// Unload reasons.
const (
	UnloadAdmin UnloadReason = 0 // an operator asked (/unload, /api/models/unload/{model}); stop even if busy
	UnloadTTL   UnloadReason = 1 // the model has been idle for its ttl; stop only if still idle
)

// RequestEvent is one new caller waiting for a model.
type RequestEvent struct {
	Now      int64     // host time, Unix nanoseconds
	ID       RequestID // the caller's id
	Model    string    // the resolved model id (aliases already resolved)
	Priority int32     // higher is served first; the request's own, else the model's, else 0
	Client   string    // the client id (x_client_id / X-Loadout-Client), may be empty
}

// SwapDoneEvent reports that a swap started with StartSwap has finished.
type SwapDoneEvent struct {
	Now   int64
	Model string // the swap's target
	Err   string // empty when the model is ready; otherwise why it failed (stderr tail included)
}

// ServeDoneEvent reports that a granted caller has finished with its model:
// the model's in-flight count has already gone down by one.
type ServeDoneEvent struct {
	Now   int64
	ID    RequestID
	Model string
}

// CancelEvent reports that a waiting caller has left (its client
// disconnected). The scheduler must forget it: never grant it, never start a
// swap for it.
type CancelEvent struct {
	Now   int64
	ID    RequestID
	Model string
}

// UnloadEvent asks the scheduler to unload models.
type UnloadEvent struct {
	Now    int64
	Models []string
	Reason UnloadReason
}

// TickEvent arrives periodically, whenever a model's process changed
// state outside a swap (it crashed, or a stop finished), and when a GPU
// job's lease ended, so the scheduler can re-examine its queue.
type TickEvent struct {
	Now int64
	// Changed are the models whose state changed since the last event;
	// after a configuration reload, every model (its settings, replicas
	// or replica range may have changed). May be empty.
	Changed []string
}

// ShutdownEvent tells the scheduler the host is stopping: every caller it
// still holds must get an error.
type ShutdownEvent struct {
	Now    int64
	Reason string
}

// PlanRequest asks a swapper what must happen before Target can load.
// Running is every model whose process is not stopped, together with the
// targets of swaps already started (DESIGN.md run-loop rule 4), sorted, and
// without Target itself.
type PlanRequest struct {
	Now     int64
	Target  string
	Running []string
}

// JobPlanRequest asks a swapper that implements JobPlanner which models a
// GPU job evicts: the job takes GPUs whole devices (a job never shares a
// GPU with a model), and the plan names the devices it takes and the
// running models to stop so that nothing else holds them. The host asks
// only for a job that may evict idle models (evict_idle_models) when too
// few devices are free, and carries out a plan only after checking it:
// Devices must be GPUs distinct entries of Candidates; every model holding
// memory on one of them must be in Evict; every model in Evict must hold
// memory on one of them and be ready, idle (no request in flight),
// unpinned and outside any swap (DESIGN.md rule 6). A plan that breaks
// any of these is refused and the job waits.
//
// On the wire it is its own message kind, sent to the `plan` export (ABI
// version 2, optional): a module built before it answers with a decoding
// error, and the host then applies its own rule (docs/ABI.md).
type JobPlanRequest struct {
	Now int64
	// Job is the job's id (a task id such as "sft-20260301-142501-9f2c"),
	// for logs; empty when the host only asks whether the job could start
	// now (admission), without carrying the plan out.
	Job string
	// GPUs is how many whole devices the job needs, at least 1.
	GPUs uint32
	// Priority is the job's priority (its spec's priority:, higher first),
	// for a swapper that never evicts a model above it.
	Priority int32
	// Candidates are the GPUs the job may take, in index order: every
	// device no job holds. A candidate may be free (no model holds memory
	// on it; see the snapshot) or held by models.
	Candidates []int32
	// Running is every model whose process is not stopped, with the targets
	// of swaps already started (DESIGN.md run-loop rule 4), sorted, as in
	// PlanRequest.
	Running []string
}

// Plan is a swapper's answer: the running models to evict and, optionally,
// the GPU devices to place the target on (nil: the host places it).
// llama-swap's EvictionFor(target, running) is the case with no devices.
// For a JobPlanRequest, Devices are the GPUs the job takes (exactly GPUs
// of them) and Evict the models holding memory on them.
type Plan struct {
	Evict   []string
	Devices []int32
	// Modes says how each of Evict is evicted, parallel to it (ABI
	// version 3): shorter (or nil) leaves the rest to EvictDefault. Evict
	// may name an asleep model only with EvictStop or EvictDefault: that
	// stops it and gives back its host memory.
	Modes []EvictMode
}

// SwapFor is the SwapRequest that carries out p for model: its
// evictions with their modes, and its devices. A scheduler that starts the
// swap a swapper planned passes it whole, so that the swapper's eviction
// modes reach the host (a request without them evicts every victim the
// configured default).
func (p Plan) SwapFor(model string) SwapRequest {
	return SwapRequest{Model: model, Evict: p.Evict, Devices: p.Devices, Modes: p.Modes}
}

// SwapRequest is what a scheduler asks the host to do in StartSwap: stop
// Evict, then start Model on Devices.
type SwapRequest struct {
	Model   string
	Evict   []string
	Devices []int32
	// Modes, parallel to Evict, as in Plan (ABI version 3).
	Modes []EvictMode
}

// SwapStartEvent tells the swapper that a swap it planned is really
// starting: the one place a swapper should log its decision.
type SwapStartEvent struct {
	Now     int64
	Target  string
	Running []string
	Evict   []string
	Devices []int32
	// Modes, parallel to Evict: how the host carries out each eviction,
	// defaults resolved (ABI version 3).
	Modes []EvictMode
}

// InitEvent carries a policy's settings (JSON, from the config's
// `settings:`) once, before any other event.
type InitEvent struct {
	Now      int64
	Settings []byte
}

// ModelInfo is one model as the host sees it.
type ModelInfo struct {
	Name             string
	State            ModelState
	InFlight         uint32 // granted callers not yet done
	ConcurrencyLimit uint32 // the model's concurrencyLimit; 0 means the scheduler's default
	Priority         int32  // the model's configured priority
	Pinned           bool   // never evict
	Group            string // the model's swap group ("" when the config has none)
	LastUse          int64  // Unix nanoseconds of the last grant or serve-done; 0 if never
	TTL              int64  // idle time before unload, nanoseconds; 0 = never (the configured TTL, or the one the last request granted gave: Ollama's keep_alive)
	EstimatedVRAM    uint64 // bytes, from config, backend estimate or heuristic; 0 if unknown
	MeasuredVRAM     uint64 // bytes, measured while loaded; 0 if unknown
	// Devices are the GPUs the model holds leases on, in index order, and
	// Leased the bytes it holds on each (the same length): what evicting
	// it gives back to each device, exactly as the host's ledger counts it
	// (ABI version 2). An asleep model's are the GPUs its sleeping server
	// was started on, each with 0 leased (version 3; none under version
	// 2): the server cannot move, so the host wakes it only when it is
	// placed there again, and cold-loads it anywhere else.
	Devices []int32
	Leased  []uint64

	// Residency (ABI version 3; zero when a version 2 module reads it).
	//
	// SleepLevel is 1 or 2 while the model is asleep (State Stopped: its
	// process alive, its GPU memory released; vLLM's sleep levels: 1 keeps
	// the weights in host RAM, 2 drops them) and while it is being woken
	// (State Starting); 0 otherwise.
	SleepLevel uint8
	// CanSleep is the sleep levels it may sleep at, a bit set: 1 level 1,
	// 2 level 2; 0 when it can only be stopped. The levels its backend
	// offers, narrowed by its evict: (stop: none; sleep: level 1; sleep2:
	// level 2), so a policy that asks for no more respects the operator.
	CanSleep uint8
	// LoadTime is its cold load's duration in nanoseconds: the last one
	// measured, else the configured or estimated one (0 unknown).
	LoadTime int64
	// WakeTime1 and WakeTime2 are its wake's duration from each level in
	// nanoseconds: the last measured, else estimated (0 unknown).
	WakeTime1, WakeTime2 int64
	// HostBytes1 and HostBytes2 are the host memory in bytes a sleeper
	// of it leases at each level (level 1: its weights; level 2: its
	// process's overhead).
	HostBytes1, HostBytes2 uint64
	// HostLeased is the host memory in bytes it leases now (asleep).
	HostLeased uint64
}

// Asleep reports whether the model is asleep now: its process alive, no
// GPU memory held (ABI version 3).
func (m *ModelInfo) Asleep() bool { return m.SleepLevel != 0 && m.State == StateStopped }

// Equal reports whether m and o are equal field for field (Devices and
// Leased element by element): what a snapshot delta counts as unchanged.
func (m *ModelInfo) Equal(o *ModelInfo) bool {
	return m.Name == o.Name && m.State == o.State && m.InFlight == o.InFlight &&
		m.ConcurrencyLimit == o.ConcurrencyLimit && m.Priority == o.Priority &&
		m.Pinned == o.Pinned && m.Group == o.Group && m.LastUse == o.LastUse &&
		m.TTL == o.TTL && m.EstimatedVRAM == o.EstimatedVRAM && m.MeasuredVRAM == o.MeasuredVRAM &&
		slices.Equal(m.Devices, o.Devices) && slices.Equal(m.Leased, o.Leased) &&
		m.SleepLevel == o.SleepLevel && m.CanSleep == o.CanSleep && m.LoadTime == o.LoadTime &&
		m.WakeTime1 == o.WakeTime1 && m.WakeTime2 == o.WakeTime2 &&
		m.HostBytes1 == o.HostBytes1 && m.HostBytes2 == o.HostBytes2 && m.HostLeased == o.HostLeased
}

// GPUInfo is one GPU as the host accounts it.
type GPUInfo struct {
	Index  int32
	Name   string
	Total  uint64 // bytes
	Free   uint64 // bytes: the smaller of what the driver reports and Total minus Leased
	Leased uint64 // bytes held by loaded models and jobs
}

// Snapshot is the whole picture a policy may read: every model and GPU.
type Snapshot struct {
	Now    int64
	Models []ModelInfo
	GPUs   []GPUInfo
	// Host is the host memory that sleepers lease (ABI version 3; zero
	// when a version 2 module reads it, or the host accounts none).
	Host HostMemoryInfo
}

// HostMemoryInfo is the host memory the ledger accounts for sleeping
// models (ABI version 3): capacity from the config's hostMemory or the
// machine's available memory at start, minus a reserve.
type HostMemoryInfo struct {
	Total  uint64 // bytes; 0: the host accounts no host memory, so nothing sleeps
	Leased uint64 // bytes held by sleepers
}

// Free is Total minus Leased, in bytes (0 when over-leased).
func (h HostMemoryInfo) Free() uint64 {
	if h.Leased >= h.Total {
		return 0
	}
	return h.Total - h.Leased
}

// EvictMode is how a plan evicts one victim (ABI version 3).
type EvictMode uint8

// Eviction modes.
const (
	// EvictDefault: the model's configured `evict:` (its own, else the
	// global one; `auto` sleeps when its backend can and host memory
	// allows, else stops).
	EvictDefault EvictMode = 0
	// EvictStop stops its server. The only mode for an asleep victim:
	// evicting a sleeper stops it and frees its host memory.
	EvictStop EvictMode = 1
	// EvictSleep1 puts it to sleep at level 1 (weights to host RAM).
	EvictSleep1 EvictMode = 2
	// EvictSleep2 puts it to sleep at level 2 (weights dropped).
	EvictSleep2 EvictMode = 3
)

var evictModeNames = [...]string{"default", "stop", "sleep", "sleep2"}

// String returns the mode's config spelling: "default", "stop", "sleep"
// (level 1) or "sleep2".
func (e EvictMode) String() string {
	if int(e) < len(evictModeNames) {
		return evictModeNames[e]
	}
	return "evict(" + strconv.Itoa(int(e)) + ")"
}

// SleepLevel is the level e sleeps at: 1, 2, or 0 for a stop or the
// default.
func (e EvictMode) SleepLevel() uint8 {
	switch e {
	case EvictSleep1:
		return 1
	case EvictSleep2:
		return 2
	}
	return 0
}

// ModeOf is the mode for evict[i] in a list of modes parallel to it: a
// list shorter than evict (an old module's, or none) leaves the rest to
// EvictDefault.
func ModeOf(modes []EvictMode, i int) EvictMode {
	if i < len(modes) {
		return modes[i]
	}
	return EvictDefault
}
