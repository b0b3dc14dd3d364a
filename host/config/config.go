package config

import (
	"encoding/json"
	"regexp"
	"slices"
	"sort"
	"time"

	"github.com/loadout-dev/loadout/sdk/placement"
)

// DefaultGroup is the name of llama-swap's implicit group: every model that no
// configured group lists belongs to it, and it swaps exclusively (one of its
// models runs at a time, and running one unloads every other group).
const DefaultGroup = "(default)"

// Built-in backends a model's `backend:` may name. Any other value containing a
// path separator is the path of a backend plugin binary.
const (
	BackendCmd         = "cmd"         // runs the model's `cmd` (llama-swap's only kind); the default when cmd is set
	BackendSim         = "sim"         // the simulator: load time, VRAM and token rate from `options`
	BackendLlamaServer = "llamaserver" // llama.cpp's llama-server, with GGUF-based VRAM estimates
	BackendVLLM        = "vllm"        // vLLM's OpenAI-compatible server
)

// The built-in policies the config itself names: the defaults, and what
// llama-swap's legacy top-level keys translate to. policies/builtin lists
// every built-in.
const (
	SchedulerFIFO = "fifo"   // the default scheduler: llama-swap's first in, first out, by priority
	RouterGroup   = "group"  // the default router: llama-swap's groups (and legacy `groups:`)
	RouterMatrix  = "matrix" // llama-swap's swap matrix (legacy `matrix:`)
	// RouterPrioritylru is the VRAM-aware router; its settings carry the
	// models' placement constraints (RouterSettingsJSON).
	RouterPrioritylru = "prioritylru"
	// RouterOllama is Ollama's eviction rule on sdk/evict; its settings
	// carry the placement constraints as prioritylru's do.
	RouterOllama = "ollama"
	// RouterAdaptive, RouterForesight, RouterS3FIFO, RouterSIEVE and
	// RouterGDSF are the learning routers and the classical cache
	// rules', on sdk/evict too: the same.
	RouterAdaptive  = "adaptive"
	RouterForesight = "foresight"
	RouterS3FIFO    = "s3fifo"
	RouterSIEVE     = "sieve"
	RouterGDSF      = "gdsf"
)

// placingRouters are the built-in routers that place models themselves
// (sdk/evict): the host hands them the placement constraints
// (RouterSettingsJSON) and an operator may not write them. A router on
// sdk/evict missing here plans without the constraints, and the host
// refuses its plans that break them: adaptive and foresight were, and a
// model pinned with gpus: failed requests under them (TestSimulate_
// PlacingRoutersKeepConstraints).
var placingRouters = []string{RouterPrioritylru, RouterOllama, RouterAdaptive, RouterForesight, RouterS3FIFO, RouterSIEVE, RouterGDSF}

// Config is a loaded, validated configuration: every default applied, every
// macro substituted, every alias and group resolved. Build one with Load or
// Parse; the zero value is not useful.
//
// Each field's reload tag says what a hot reload (loadout serve's
// reloader) does when the field changes: "source", nothing (where the
// configuration was read from); "model", it reloads with each model that
// reads it (a model's own settings, defaults and macros resolved);
// "live", it is applied to the running server; "restart,KEY", it was
// set up at start and a change waits for a restart, reported under its
// YAML key KEY. A new field needs one (TestConfig_EveryFieldHasAReloadTag).
type Config struct {
	// File is the name the configuration was loaded from, as used in messages.
	File string `reload:"source"`
	// Files are the files the configuration was merged from, File first
	// (LoadFiles: --config and --config-dir); one for Load and Parse.
	Files []string `reload:"source"`
	// Dir is the directory relative paths (wasm policies, backend plugins)
	// were resolved against: the directory of File.
	Dir string `reload:"source"`

	// HealthCheckTimeout is how long a model may take to become ready.
	// YAML: healthCheckTimeout, whole seconds, default 120, raised to
	// llama-swap's minimum of 15 with a warning.
	HealthCheckTimeout time.Duration `reload:"model"`
	// Liveness is the liveness: block (liveness.go): how a hung model
	// server is found.
	Liveness Liveness `reload:"restart,liveness"`
	// LogLevel is one of debug, info, warn, error (llama-swap's logLevel),
	// default info.
	LogLevel string `reload:"restart,logLevel"`
	// StartPort is the first port handed out for ${PORT} (llama-swap's
	// startPort), default 5800.
	StartPort int `reload:"restart,startPort"`
	// GlobalTTL is how long an idle model stays loaded (ModelConfig.TTL);
	// 0 means forever.
	// YAML: globalTTL, whole seconds, default 0 (llama-swap's).
	GlobalTTL time.Duration `reload:"model"`
	// UnloadTimeout is how long a stopping model gets before it is killed.
	// YAML: unloadTimeout, whole seconds, default 10 (llama-swap's).
	UnloadTimeout time.Duration `reload:"model"`
	// APIKeys, when not empty, are the keys a client must present
	// (llama-swap's apiKeys); ${env.VAR} substituted.
	APIKeys []string `reload:"live"`
	// Macros are the global macros in definition order, ${env.VAR} substituted.
	Macros []Macro `reload:"model"`
	// SendLoadingState streams loading progress in the reasoning field
	// (llama-swap's sendLoadingState); each Model carries the effective value.
	SendLoadingState bool `reload:"model"`
	// IncludeAliasesInList lists aliases in /v1/models (llama-swap's
	// includeAliasesInList).
	IncludeAliasesInList bool `reload:"restart,includeAliasesInList"`
	// HostMemory is the host memory in bytes sleeping models may lease
	// (evict.go; DESIGN.md, "Residency"). YAML: hostMemory, a size
	// (96GiB), 0 (nothing sleeps), or auto (the default, HostMemoryAuto:
	// the machine's available memory at start minus a reserve).
	HostMemory int64 `reload:"live"`
	// Evict is every model's evict: unless it has its own. YAML: evict,
	// default auto.
	Evict Evict `reload:"model"`
	// WakeTimeout bounds the wake of a sleeping model (evict.go): past it
	// the server is killed and the model cold-loaded in the same swap;
	// and a sleep: past it the server is killed and the eviction is a
	// stop. YAML: wakeTimeout, whole seconds, default 60
	// (DefaultWakeTimeout).
	WakeTimeout time.Duration `reload:"model"`

	// Models maps model id to model. ModelIDs gives them in a stable order.
	Models map[string]*Model `reload:"model"`
	// Groups are the effective swap groups in definition order, followed by
	// DefaultGroup when some model is in no configured group. They come from
	// the legacy top-level `groups:` or from routing.router.settings.groups of
	// the built-in group router; with any other router every model is in
	// DefaultGroup.
	Groups []*Group `reload:"model"`
	// Routing names the scheduler and router (swapper) policies.
	Routing Routing `reload:"live"`
	// GPUs are the declared devices (`gpus:`), used when NVML is absent.
	GPUs []GPU `reload:"restart,gpus"`
	// Placement is the box's `placement:` (Loadout's): PlacementSpread,
	// the default, or PlacementPack. It picks the device a model that fits
	// on one goes on; each model's GPUs and Split narrow the choice.
	Placement string `reload:"live"`
	// Peers are the other servers whose models this one forwards to, by
	// peer id (llama-swap's peers:); PeerIDs gives them in order.
	Peers map[string]*Peer `reload:"live"`
	// External are the models defined outside the file (Options.Models)
	// that were made, in the order given.
	External []External `reload:"model"`
	// Preload lists the model ids to load at startup
	// (hooks.on_startup.preload, aliases resolved, in order).
	Preload []string `reload:"restart,hooks.on_startup.preload"`

	// LogToStdout is what Loadout's log output carries (llama-swap's
	// logToStdout): LogProxy (the default), LogUpstream, LogBoth or LogNone.
	LogToStdout string `reload:"restart,logToStdout"`
	// LogTime is the time layout of log lines (llama-swap's logTimeFormat,
	// its name resolved to a Go layout; "" is lines without a timestamp);
	// nil when the key is absent: Loadout's logger's own timestamps.
	LogTime *string `reload:"restart,logTimeFormat"`
	// IgnorePaths are the paths under /upstream/{model}/ that never load a
	// model (llama-swap's upstream.ignorePaths, RE2, matched against the
	// path after the model; DefaultIgnorePaths when absent or empty): a
	// request for one while the model is not ready gets 409.
	IgnorePaths []*regexp.Regexp `reload:"restart,upstream.ignorePaths"`
	// SessionHeaders are the request headers whose first non-empty value
	// is the client id of a request that names none (llama-swap's
	// ui.activity.session_id; DefaultSessionHeaders when absent).
	SessionHeaders []string `reload:"restart,ui.activity.session_id"`
	// EventRing is how many events /api/events keeps in memory for the UI
	// to replay (llama-swap's metricsMaxInMemory); 0 means the default
	// (events.DefaultRingSize).
	EventRing int `reload:"restart,metricsMaxInMemory"`
	// CaptureBuffer is the memory, in bytes, that request/response
	// captures may take, compressed (llama-swap's captureBuffer, in
	// megabytes there; default DefaultCaptureBuffer); 0 turns capture off.
	CaptureBuffer int64 `reload:"restart,captureBuffer"`
	// Profiles are llama-swap's profiles: by id, each a set of model
	// name pins an operator switches on at run time (profiles.go).
	Profiles map[string]*Profile `reload:"restart,profiles"`
	// Selectors are llama-swap's selectors: by id, each a virtual model
	// the run loop resolves to one of its targets per request
	// (selectors.go).
	Selectors map[string]*Selector `reload:"restart,selectors"`

	aliases map[string]string // alias -> model id
	notes   []string          // how llama-swap keys were mapped, for Report
}

// Macro is one macro definition. Value is a string, int64, float64 or bool.
type Macro struct {
	Name  string
	Value any
}

// Model is one entry of `models:`, resolved: macros (global, model, ${MODEL_ID},
// ${PORT}) substituted, defaults applied.
type Model struct {
	// ID is the key under models:, the name clients ask for.
	ID string
	// Pos is where the model's key is in the file.
	Pos Pos

	// Backend is BackendCmd, BackendSim, BackendLlamaServer, BackendVLLM, or
	// the absolute path of a backend plugin binary (Loadout's `backend:`;
	// default BackendCmd when cmd is set).
	Backend string
	// Options is the free-form `options:` mapping handed to the backend as
	// JSON (see OptionsJSON), for example sim's load_time, vram,
	// tokens_per_second. Values are string, int64, float64, bool, nil,
	// []any or map[string]any.
	Options map[string]any

	// Cmd is llama-swap's cmd: comment lines dropped, trailing backslashes
	// removed and lines joined with single spaces (llama-swap folds a
	// multi-line cmd the same way). Split it with SplitCommand.
	Cmd string
	// CmdStop is llama-swap's cmdStop, folded like Cmd; ${PID} is left for
	// the backend to substitute when it runs.
	CmdStop string
	// Proxy is the upstream base URL (llama-swap's proxy, default
	// http://127.0.0.1:${PORT}). It is empty for backends other than
	// BackendCmd unless set: those backends report their own URL.
	Proxy string
	// Port is the port assigned for ${PORT}, or 0. Ports count up from
	// StartPort in sorted model-id order over the models whose cmd uses
	// ${PORT} (llama-swap's rule) and the models of non-cmd backends, which
	// always get one to listen on. ParseWith skips Loadout's own listen
	// port and the ports Options.PortFree refuses (taken ones), with a
	// warning for each.
	Port int
	// Env holds "NAME=value" entries added to the backend's environment.
	Env []string
	// CheckEndpoint is the readiness path (llama-swap's checkEndpoint, default
	// /health); empty means no health check (llama-swap's "none").
	CheckEndpoint string

	// Aliases are other names clients may use for this model.
	Aliases []string
	// Name and Description are shown in /v1/models.
	Name, Description string
	// UseModelName replaces the model name sent upstream (llama-swap's).
	UseModelName string
	// Unlisted hides the model from /v1/models.
	Unlisted bool
	// Metadata is passed through to /v1/models, macros substituted with their
	// types kept (llama-swap's metadata).
	Metadata map[string]any
	// Filters is llama-swap's request filters (stripParams, setParams,
	// setParamsByID; filters.go), applied by the proxy.
	Filters Filters
	// Timeouts bounds the connections to the model's upstream (llama-swap's
	// timeouts:; DefaultTimeouts for the keys left out).
	Timeouts Timeouts
	// Capabilities is llama-swap's capabilities:, shown in /v1/models.
	Capabilities Capabilities
	// IgnoreWebsockets is llama-swap's compat.ignoreWebsockets: a WebSocket
	// through /upstream/{model}/ never loads the model, is not counted
	// in flight (so neither holds it loaded nor counts toward its
	// concurrencyLimit or TTL), and gets 409 while the model is not ready.
	IgnoreWebsockets bool

	// TTL is how long the model may stay idle before it leaves the GPU —
	// stopped, or put to sleep as an eviction would (Evict and host
	// memory decide; host/router's expire); 0 means never. YAML: ttl,
	// whole seconds; -1 or absent means GlobalTTL.
	TTL time.Duration
	// UnloadTimeout is the grace period before a stopping model is killed.
	// YAML: unloadTimeout, whole seconds; 0 or absent means the global one.
	UnloadTimeout time.Duration
	// ConcurrencyLimit caps parallel requests (llama-swap's
	// concurrencyLimit); 0 means the default (llama-swap's is 10).
	ConcurrencyLimit int
	// SendLoadingState is the effective setting (the model's own
	// sendLoadingState, else the global one).
	SendLoadingState bool

	// VRAM is the declared VRAM footprint in bytes (Loadout's `vram:`), or 0
	// to ask the backend for an estimate.
	VRAM int64
	// Priority orders queued requests (higher first) and eviction. It comes
	// from the model's `priority:` or from llama-swap's
	// routing.scheduler.settings.fifo.priority; default 0.
	Priority int
	// Pinned models are never evicted (Loadout's `pinned:`).
	Pinned bool
	// Evict is how the model is evicted when its plan leaves it to the
	// host: its `evict:`, else the global one (evict.go).
	Evict Evict
	// WakeTimeout bounds its wake from sleep and its sleep: its
	// `wakeTimeout:` (whole seconds; 0 or absent means the global one).
	WakeTimeout time.Duration
	// Weights are the model's weight files (Loadout's `weights:`, paths
	// relative to the config's directory), read ahead into the page cache
	// before its load (serve reads the files of a llama-server model that
	// names none from its options or command line).
	Weights []string
	// GPUs are the device indices the model may be placed on (Loadout's
	// `gpus: [1, 2]`: NVML's numbering, or the declared devices' order);
	// empty means every device (`gpus: []` is an error). CheckPlacement
	// checks them against a box's devices.
	GPUs []int
	// Split is when the model may be split over several GPUs (Loadout's
	// `split: never | auto | always`; default auto: only when no single
	// device it may use holds it; always: over every device it may use).
	Split placement.SplitMode

	// Simulate is Loadout's per-model `simulate:` block: how `loadout
	// simulate` models this model's server (the sim backend's options:
	// load_time, tokens_per_second, ttft, prefill_tokens_per_second,
	// max_batch, vram), kept as written; nil when absent. A model of
	// backend sim needs none: its options are its simulation.
	Simulate map[string]any

	// MinReplicas and MaxReplicas are Loadout's `replicas: N` (both N) or
	// `min_replicas`/`max_replicas`: how many server processes of the model
	// may run at once, each on its own devices with its own lease; the
	// scheduler keeps at least MinReplicas while the model runs and scales
	// up to MaxReplicas as its queue grows. Both 1 by default.
	MinReplicas, MaxReplicas int
	// ReplicaOf is, for replica 2 and above (ids ReplicaID(model, k)), the
	// model's id; empty for a model's own entry. Parse adds the replicas to
	// Models as copies of their model, Unlisted and without aliases, each
	// with its own Port (and Cmd and Proxy on it). Replica is k (1 for the
	// model's own entry when it has replicas, else 0).
	ReplicaOf string
	Replica   int

	options, simulate keyedMap // where the blocks and their keys are
	placed            placePos // where gpus: and split: are
	replicaKeys       replicaKeys
	// cmdTemplate and proxyTemplate are Cmd and Proxy before ${PORT}, for
	// the replicas' own ports.
	cmdTemplate, proxyTemplate string
}

// keyedMap is where a mapping and each of its keys are in the file.
type keyedMap struct {
	pos  Pos
	keys map[string]Pos
}

// at is the error for a problem with key (or with the whole mapping when
// key is ""), at that key, the mapping or else the model, under the key
// path models.ID.section[.key].
func (k keyedMap) at(m *Model, section, key, message string) *Error {
	path := join(join("models", m.ID), section)
	pos := k.pos
	if key != "" {
		path = join(path, key)
		if p, ok := k.keys[key]; ok {
			pos = p
		}
	}
	if pos.Line == 0 {
		pos = m.Pos
	}
	return &Error{Pos: pos, Key: path, Message: message}
}

// OptionError is the configuration error for a problem a backend found with
// m's options (its Validate): at the option's key in the file (option ""
// means the options as a whole: at options:), falling back to the model's
// key, with the key path models.ID.options.OPTION, so it reads like every
// other error Parse reports.
func (m *Model) OptionError(option, message string) *Error {
	return m.options.at(m, "options", option, message)
}

// SimulateError is OptionError for the model's `simulate:` block: at the
// key in the file, with the key path models.ID.simulate.KEY.
func (m *Model) SimulateError(key, message string) *Error {
	return m.simulate.at(m, "simulate", key, message)
}

// SimulateJSON returns Simulate as a JSON object (nil when absent), the
// form the sim backend's option parser reads.
func (m *Model) SimulateJSON() ([]byte, error) {
	if m.Simulate == nil {
		return nil, nil
	}
	return json.Marshal(m.Simulate)
}

// OptionsJSON returns Options as a JSON object ("{}" when there are none), the
// form a backend plugin receives.
func (m *Model) OptionsJSON() ([]byte, error) {
	if len(m.Options) == 0 {
		return []byte("{}"), nil
	}
	return json.Marshal(m.Options)
}

// Group is one swap group, with llama-swap's defaults applied (swap and
// exclusive default to true).
type Group struct {
	// Name is the group's key, or DefaultGroup.
	Name string
	// Swap: only one member runs at a time. False lets all members run
	// together.
	Swap bool
	// Exclusive: running a member unloads every other (non-persistent) group.
	Exclusive bool
	// Persistent: other groups never unload this group's members.
	Persistent bool
	// Members are model ids, in the order written (sorted for DefaultGroup).
	Members []string
	// Implicit is true for DefaultGroup, made up of the models no group lists.
	Implicit bool
	// Pos is where the group is defined (the first model's position for
	// DefaultGroup).
	Pos Pos
}

// GPU is a declared device (`gpus:`).
type GPU struct {
	// Name identifies the device, default "gpu<index>".
	Name string
	// Memory is the device's memory in bytes (ParseSize syntax in YAML).
	Memory int64
}

// Routing names the two policies of the run loop: the scheduler orders
// requests, the router (llama-swap's name for the swapper) decides what to
// evict.
type Routing struct {
	Scheduler Policy
	Router    Policy
}

// Policy is one routing policy: a built-in (Use) or a Wasm module (Wasm),
// exactly one of the two.
type Policy struct {
	// Use is a built-in policy name (policies/builtin: Schedulers, Routers),
	// or empty when Wasm is set.
	Use string
	// Wasm is the absolute path of a policy module, resolved against the
	// configuration file's directory; empty when Use is set.
	Wasm string
	// Settings is the `settings:` mapping as written (macros substituted), as
	// a JSON object with the YAML key order kept; "{}" when absent. What the
	// policy receives at init is SchedulerSettingsJSON / RouterSettingsJSON.
	Settings json.RawMessage
	// Pos is where the policy is configured (zero when defaulted).
	Pos Pos

	src *settingsSource // where Settings came from, for InitError
}

// Name is the built-in name or the Wasm path, for messages.
func (p Policy) Name() string {
	if p.Wasm != "" {
		return p.Wasm
	}
	return p.Use
}

// ModelIDs returns the model ids in sorted order, the order ports are
// assigned in.
func (c *Config) ModelIDs() []string {
	ids := make([]string, 0, len(c.Models))
	for id := range c.Models {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// ResolveModel maps a name a client used, a model id or an alias, to the
// model id (llama-swap's RealModelName). Ids win over aliases.
// A replica's id (ReplicaID) is not a name clients use: it resolves to
// nothing.
func (c *Config) ResolveModel(nameOrAlias string) (id string, ok bool) {
	if m, ok := c.Models[nameOrAlias]; ok && m.ReplicaOf == "" {
		return nameOrAlias, true
	}
	if c.aliases != nil {
		id, ok = c.aliases[nameOrAlias]
		return id, ok
	}
	for _, id := range c.ModelIDs() {
		if slices.Contains(c.Models[id].Aliases, nameOrAlias) {
			return id, true
		}
	}
	return "", false
}

// GroupOf returns the effective group of a model id: the configured group that
// lists it, or DefaultGroup (which Parse always adds for ungrouped models). It
// returns nil for an unknown id, or for a model no group of a hand-built
// Config lists. A replica is in its model's group.
func (c *Config) GroupOf(modelID string) *Group {
	if _, ok := c.Models[modelID]; !ok {
		return nil
	}
	for _, g := range c.Groups {
		if slices.Contains(g.Members, modelID) {
			return g
		}
	}
	return nil
}
