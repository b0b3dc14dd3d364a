package proxy

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/host/events"
	"github.com/loadout-dev/loadout/host/jobs"
	"github.com/loadout-dev/loadout/host/logs"
	"github.com/loadout-dev/loadout/host/peers"
	"github.com/loadout-dev/loadout/host/router"
)

// DefaultMaxBodyBytes is the request-body limit when Config.MaxBodyBytes is
// zero: 32 MiB, enough for a long chat history or a short audio file.
const DefaultMaxBodyBytes = 32 << 20

// Router is the part of *router.Router the proxy uses. Tests and the binary
// pass the real router; nothing here keeps scheduling state of its own.
type Router interface {
	// Acquire waits until the model named in req may serve, and returns the
	// grant to release when the response is done.
	Acquire(ctx context.Context, req router.Request) (*router.Grant, error)
	// Unload stops the models opt names (all running models when none is
	// named) and waits, bounded, until they have exited.
	Unload(ctx context.Context, opt router.UnloadOptions) error
	// Models returns every model's status, sorted by id.
	Models() []router.ModelStatus
	// Counters returns each policy's failure counters, keyed by role.
	Counters() map[string]router.PolicyCounters
}

var _ Router = (*router.Router)(nil)

// ModelEntry is one model of the catalog as clients see it. The binary
// fills the catalog from the YAML config; its ids are the router's model
// ids.
type ModelEntry struct {
	ID          string   // the model id clients use and the router knows
	Name        string   // display name for /v1/models; optional
	Description string   // description for /v1/models; optional
	Aliases     []string // other names that resolve to ID
	// UseModelName, when set, replaces the request's model name before the
	// upstream sees it (llama-swap's useModelName).
	UseModelName string
	// Cmd is the model's command line as configured (macros expanded) and
	// TTL its idle time before it leaves the GPU (0: never): what GET
	// /running shows, as llama-swap's does.
	Cmd      string
	TTL      time.Duration
	Unlisted bool   // hidden from /v1/models; still served
	Backend  string // the backend plugin's name, shown by /api/models
	// Filters are applied to the JSON body of every request for the model
	// (llama-swap's filters: stripParams, setParams, setParamsByID; body.go).
	Filters config.Filters
	// Timeouts bound the connections to the model's upstream (llama-swap's
	// timeouts:); nil means config.DefaultTimeouts. Models with equal
	// timeouts share one transport (one keep-alive pool).
	Timeouts *config.Timeouts
	// Metadata is shown in /v1/models under meta.llamaswap (llama-swap's
	// metadata:), beside the proxy's own type and aliases keys.
	Metadata map[string]any
	// Capabilities is shown in /v1/models as llama-swap renders it
	// (architecture, capabilities, supported_parameters,
	// context_length, meta.n_ctx).
	Capabilities config.Capabilities
	// IgnoreWebsockets: a WebSocket upgrade through /upstream/{model}/ is
	// proxied to the model's server only when it is ready, without a
	// grant, so it never loads the model and is never in flight
	// (llama-swap's compat.ignoreWebsockets); otherwise 409.
	IgnoreWebsockets bool
	// SendLoadingState: a streaming chat that must wait for the model's
	// load gets its loading progress first (the model's
	// sendLoadingState, else the global one; Config.SendLoadingState).
	SendLoadingState bool
	// Details are what the model's weights file says of it, shown by
	// Ollama's /api/tags, /api/show and /api/ps; zero where Loadout read
	// no file.
	Details ModelDetails
}

// ModelDetails are what a model's GGUF file says of it (its header, read
// by the llamaserver backend's Describe), for Ollama's API's model details
// (api/types.go's ModelDetails) and /api/show's model_info.
type ModelDetails struct {
	Format       string // "gguf"; "" where no file was read
	Family       string // general.architecture, e.g. "llama"
	Parameters   uint64 // the parameter count
	Quantization string // llama.cpp's name of the file type, e.g. "Q4_K_M"
	// ContextLength is the context the model was trained for, in tokens
	// (ARCH.context_length); 0 where unknown.
	ContextLength uint64
	// EmbeddingLength is the width of its embeddings
	// (ARCH.embedding_length); 0 where unknown.
	EmbeddingLength uint64
	// What the files say the model can do (llamaserver.Facts): an
	// embedding model, a chat template that takes tools or has a
	// reasoning block, fill-in-the-middle tokens, a vision projector
	// beside it. /api/show adds them to the capabilities the
	// configuration declares.
	Embedding, Tools, Thinking, Insert, Vision bool
}

// PolicyInfo describes one loaded policy for GET /api/policies. The binary
// supplies it through Config.PolicyStatus; the router's failure counters
// for the same role are shown beside it.
type PolicyInfo struct {
	Role           string // "scheduler" or "swapper"
	Name           string // e.g. "builtin:fifo" or a .wasm path
	Healthy        bool   // false once the policy was disabled for crashing
	Crashes        int    // crashes since it was loaded
	Instantiations int    // instances made, the first included
	LastError      string // the last error a call returned
	Active         bool   // the policy called now for its role
	Fallback       bool   // the built-in fallback, not the configured policy
	// DisabledReason says why a configured policy is disabled, while it
	// is; RetryAt is when it is tried again (zero when not disabled).
	DisabledReason string
	RetryAt        time.Time
	// ReloadError is why the last hot reload was refused (the policies
	// shown kept running); empty when it succeeded or none was asked.
	// Reloaded is when the policies shown were loaded by a reload.
	ReloadError string
	Reloaded    time.Time
}

// ReloadResult is what a hot reload did (Config.Reload).
type ReloadResult struct {
	// Changed lists what the reload applied ("scheduler", "router",
	// "models", "placement"); empty when nothing had changed.
	Changed []string `json:"changed"`
	// PauseMS is how long scheduling paused while the policies were
	// switched, in milliseconds.
	PauseMS float64 `json:"pause_ms"`
	// Restart names the settings that changed but take effect only when
	// loadout serve restarts (logLevel, startPort, gpus, …); absent when
	// none did.
	Restart []string `json:"restart,omitempty"`
}

// Config builds a Server. Router and Models are required.
type Config struct {
	// Router grants models; usually the binary's *router.Router.
	Router Router
	// Build is what GET /api/version reports.
	Build BuildInfo
	// Models is the catalog: every model the router knows, with the names
	// clients may use for it.
	Models []ModelEntry
	// APIKeys, when not empty, are the keys a client must present
	// (Authorization: Bearer <key>, or X-Api-Key) on every endpoint but
	// GET /health.
	APIKeys []string
	// MaxBodyBytes limits request bodies; larger ones get 413. Zero means
	// DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// StreamIdle is how long a response from a model server or a peer may
	// send nothing once its body has begun before it is ended and the
	// server taken as hung (liveness.go); and, at the other end, how long
	// a write to a client may wait on a client that reads nothing before
	// the response is cut (between StreamIdle/2 and StreamIdle: the write
	// deadline is refreshed once half of it has passed; exchange.Write).
	// Zero means DefaultStreamIdle; negative turns both off.
	StreamIdle time.Duration
	// BodyIdleTimeout is the longest a request body of an OpenAI
	// endpoint may go without a byte arriving, and the time it has
	// before BodyMinRate applies; past either the request ends with a
	// 408 (request_timeout). Zero means DefaultBodyIdleTimeout; negative
	// turns both off. (Headers are the http.Server's ReadHeaderTimeout.)
	BodyIdleTimeout time.Duration
	// BodyMinRate is the slowest average rate, in bytes per second from
	// the request's start, a request body may arrive at once
	// BodyIdleTimeout has passed: each byte buys 1/BodyMinRate s. Zero
	// means DefaultBodyMinRate; negative: no rate, only the idle timeout.
	BodyMinRate int64
	// IncludeAliasesInList lists every alias in /v1/models as a model of
	// its own (llama-swap's includeAliasesInList).
	IncludeAliasesInList bool
	// SendLoadingState, for a selector (a model takes its own,
	// ModelEntry.SendLoadingState), starts the SSE response of a streaming chat
	// completion that has to wait, and reports its queue position or the
	// model's load as reasoning_content chunks (llama-swap's
	// sendLoadingState).
	SendLoadingState bool
	// GPUs, when set, describes the GPUs and their leases for /api/gpus
	// (any JSON-encodable value; the binary passes host/gpu's ledger view).
	// Nil: /api/gpus answers an empty device list.
	GPUs func() (any, error)
	// PolicyStatus, when set, describes the loaded policies for
	// /api/policies.
	PolicyStatus func() []PolicyInfo
	// Reload, when set, is POST /api/policies/reload: it re-reads the
	// configuration and the policy modules and applies what changed
	// (loadout serve's hot reload). An error means nothing changed: 422
	// with the error's text. Nil: the endpoint answers 404.
	Reload func(ctx context.Context) (ReloadResult, error)
	// Events, when set, is the ring GET /api/events serves; every model
	// request's summary is published on it when it ends.
	Events *events.Bus
	// Logs, when set, keeps the model servers' output for GET /logs and
	// /logs/stream.
	Logs *logs.Store
	// OnRequest, when set, receives every model request's summary when it
	// ends (the activity log, serve's --record-trace). It runs on the
	// request's goroutine and must not block.
	OnRequest func(RequestSummary)
	// OnRequestStart, when set, receives every model request of a catalog
	// model as it goes to the router (serve's --record-trace, which needs
	// arrivals in order before their token counts are known). OnRequest
	// then receives the same request's summary (same Seq) when it ends,
	// whatever way it ends. It runs on the request's goroutine and must
	// not block.
	OnRequestStart func(RequestStart)
	// Activity, when set, is the activity log GET /api/activity reads
	// (activity.go); the binary feeds it through OnRequest.
	Activity ActivityLog
	// Peers, when set, are the other servers whose models this one serves
	// by forwarding (llama-swap's peers:, host/peers): a model request
	// whose name Peers.Lookup knows goes to the peer Peers.Choose picks —
	// weighed against the local model of the same name, if any — through
	// the same reverse proxy as local model servers, with the model
	// renamed to the peer's id, the peer's API key, and the
	// X-Loadout-Forwarded mark (a marked request is only ever served
	// locally: no loops). A peer that is down fails its requests at once
	// (503, peer_unavailable, naming it); one that fails a request is a
	// 502 (peer_error) naming it — a 504 when its answer did not begin
	// within its Timeouts.ResponseHeader, a 502 too when its 200 is not
	// what the endpoint returns — and the failure is reported to its
	// passive health (Target.Failed). /v1/models lists peer models by their
	// full names, GET /api/peers shows the peers' health; /api/models,
	// which peers poll, stays local.
	Peers *peers.Set
	// Jobs, when set with JobToken, serves the jobs API under /api/jobs
	// (jobs.go); JobToken is its bearer token, apart from APIKeys.
	Jobs     *jobs.Runner
	JobToken string
	// IgnorePaths are paths under /upstream/{model}/ (the part after the
	// model, "/x.js") that never load a model (llama-swap's
	// upstream.ignorePaths): a request for one while its model is not
	// ready gets 409; once it is ready, it is served as any other. Nil:
	// none.
	IgnorePaths []*regexp.Regexp
	// SessionHeaders are request headers whose first non-empty value is
	// the client id (Request.Client) of a request that names none in
	// X-Loadout-Client or x_client_id (llama-swap's
	// ui.activity.session_id). Nil: none.
	SessionHeaders []string
	// Logger receives one line per request: debug when it succeeded, warn
	// when it failed. Nil means slog.Default().
	Logger *slog.Logger
	// Profiles are llama-swap's profiles by id (config.Profile): name
	// pins an operator switches on with PUT /api/profiles/active; the
	// Router holds which is active (ProfileRouter). Nil: none.
	Profiles map[string]*config.Profile
	// Selectors are llama-swap's selectors by id (config.Selector): a
	// request for one goes to the router with Request.Select, and the run
	// loop picks its model. Nil: none.
	Selectors map[string]*config.Selector
	// CaptureBuffer is the memory, in bytes, the request/response captures
	// of GET /api/captures/{id} may hold, compressed (llama-swap's
	// captureBuffer); 0: no capture.
	CaptureBuffer int64
}

// Server is Loadout's HTTP handler. Create it with New and serve it with an
// http.Server; it is safe for concurrent use.
type Server struct {
	cfg        Config
	router     Router
	catalog    atomic.Pointer[catalog]   // replaced by SetModels
	peers      atomic.Pointer[peers.Set] // Config.Peers, replaced by SetPeers; nil: none
	log        *slog.Logger
	maxBody    int64
	streamIdle time.Duration                       // Config.StreamIdle; <= 0: no watch
	keyHashes  atomic.Pointer[[][sha256.Size]byte] // SetAPIKeys; none: no key asked for
	mux        *mux.Router
	upstreams  *upstreams
	metrics    *metrics
	ids        *idSource
	seq        atomic.Uint64 // the last request's Seq
	started    time.Time
	inflight   inflight     // the requests being handled, for Abort
	captures   *captureRing // nil: capture off (Config.CaptureBuffer 0)
}

// SetModels replaces the catalog (a configuration reload that added,
// removed or changed models); requests already past the lookup keep the
// entry they found. Errors: as New's for the catalog; the old one stays.
func (s *Server) SetModels(models []ModelEntry) error {
	cat, err := newCatalog(models)
	if err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	s.metrics.addModels(cat.ids())
	s.catalog.Store(cat)
	return nil
}

// SetPeers replaces the peers (a configuration reload that changed
// peers:); nil means none. Requests already forwarded finish on the peer
// they were sent to. The caller stops the old set's health checks.
func (s *Server) SetPeers(set *peers.Set) {
	if set != nil {
		var names []string
		for _, n := range set.Names() {
			names = append(names, n.Name)
		}
		s.metrics.addModels(names) // the per-model series of new peer models
	}
	s.peers.Store(set)
}

// New checks cfg and builds the server. Errors: no router, or a catalog
// whose ids and aliases are empty or collide. The catalog may be empty: a
// box that only forwards to its peers.
func New(cfg Config) (*Server, error) {
	if cfg.Router == nil {
		return nil, errors.New("proxy: a router is required")
	}
	cat, err := newCatalog(cfg.Models)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	if cfg.MaxBodyBytes < 0 {
		return nil, fmt.Errorf("proxy: MaxBodyBytes %d is negative", cfg.MaxBodyBytes)
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.StreamIdle == 0 {
		cfg.StreamIdle = DefaultStreamIdle
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.BodyIdleTimeout == 0 {
		cfg.BodyIdleTimeout = DefaultBodyIdleTimeout
	}
	switch {
	case cfg.BodyMinRate == 0:
		cfg.BodyMinRate = DefaultBodyMinRate
	case cfg.BodyMinRate < 0:
		cfg.BodyMinRate = 0
	}
	s := &Server{
		cfg:        cfg,
		router:     cfg.Router,
		log:        cfg.Logger,
		maxBody:    cfg.MaxBodyBytes,
		streamIdle: cfg.StreamIdle,
		ids:        newIDSource(),
		started:    time.Now(),
	}
	s.catalog.Store(cat)
	if err := s.SetAPIKeys(cfg.APIKeys); err != nil {
		return nil, err
	}
	s.metrics = newMetrics(cat.ids())
	s.metrics.reg.MustRegister(peerCollector{s})
	s.SetPeers(cfg.Peers) // with the peer models' series
	s.upstreams = newUpstreams(s)
	if cfg.CaptureBuffer > 0 {
		s.captures = newCaptureRing(cfg.CaptureBuffer)
	}
	s.mux = s.routes()
	return s, nil
}

// Registry is the Prometheus registry /metrics serves. The binary may
// register collectors of its own (GPU memory, jobs) on it.
func (s *Server) Registry() *prometheus.Registry { return s.metrics.reg }

func (s *Server) routes() *mux.Router {
	m := mux.NewRouter()
	// Paths are proxied as they came; mux's cleaning would redirect
	// /upstream/m//x and similar.
	m.SkipClean(true)
	post := func(path string, h http.HandlerFunc) { m.HandleFunc(path, h).Methods(http.MethodPost) }

	// The OpenAI API. Chat completions first: it is the hottest route.
	post("/v1/chat/completions", s.inference(endpoint{path: "/v1/chat/completions", chat: true}))
	// Every other endpoint a llama-swap client calls with a model (its
	// internal/server/server.go route lists): the model comes from the
	// JSON body, the multipart form (/v1/audio/transcriptions,
	// /v1/images/edits) or ?model= (the GETs).
	for _, p := range []string{
		"/v1/completions", "/v1/embeddings", "/v1/responses",
		"/v1/rerank", "/rerank", "/v1/reranking", "/reranking",
		"/v1/audio/speech", "/v1/audio/transcriptions", "/v1/audio/voices",
		"/v1/images/generations", "/v1/images/edits",
		"/sdapi/v1/txt2img", "/sdapi/v1/img2img",
		"/completion", "/infill",
	} {
		post(p, s.inference(endpoint{path: p}))
	}
	for _, p := range []string{"/v1/audio/voices", "/sdapi/v1/loras", "/props", "/lora-adapters", "/slots"} {
		m.HandleFunc(p, s.inference(endpoint{})).Methods(http.MethodGet)
	}
	// Anthropic's Messages API, checked before anything loads.
	post("/v1/messages", s.inference(endpoint{path: "/v1/messages"}))
	post("/v1/messages/count_tokens", s.inference(endpoint{path: "/v1/messages/count_tokens"}))
	// llama-swap's versionless routes (/v/chat/completions reaches the
	// upstream as /chat/completions) and audio.cpp's task API, checked
	// as their /v1 forms are.
	for _, p := range []string{"/v/chat/completions", "/v/responses", "/v/completions", "/v/embeddings",
		"/v/messages", "/v/messages/count_tokens", "/v/rerank", "/v/reranking"} {
		v1 := "/v1" + strings.TrimPrefix(p, "/v")
		post(p, s.inference(endpoint{path: v1, chat: v1 == "/v1/chat/completions", forward: strings.TrimPrefix(p, "/v")}))
	}
	post("/audioapi/v1/tasks/run", s.inference(endpoint{forward: "/v1/tasks/run"}))
	// llama-server's own model endpoints (tools/server/server.cpp, which
	// its router mode proxies by the model in the body or ?model=): its
	// OpenAI routes without /v1, checked as with it; its native ones
	// (legacy /completions and /embedding, tokens, templates, LoRA
	// adapters, slots) passed as they come.
	post("/chat/completions", s.inference(endpoint{path: "/v1/chat/completions", chat: true}))
	post("/responses", s.inference(endpoint{path: "/v1/responses"}))
	for _, p := range []string{
		"/completions", "/embedding", "/embeddings", "/tokenize", "/detokenize", "/apply-template",
		"/chat/completions/input_tokens", "/v1/chat/completions/input_tokens",
		"/responses/input_tokens", "/v1/responses/input_tokens",
		"/audio/transcriptions", "/lora-adapters", "/slots/{id}",
	} {
		post(p, s.inference(endpoint{}))
	}
	m.HandleFunc("/v1/models", s.listModels).Methods(http.MethodGet)
	m.HandleFunc("/v1/models/{model:.+}", s.getModel).Methods(http.MethodGet)
	// Ollama's API (ollama.go), over the same pipeline.
	post("/api/chat", s.ollamaInference(ollamaChat))
	post("/api/generate", s.ollamaInference(ollamaGenerate))
	post("/api/embed", s.ollamaInference(ollamaEmbed))
	post("/api/embeddings", s.ollamaInference(ollamaEmbeddings))
	m.HandleFunc("/api/tags", s.ollamaTags).Methods(http.MethodGet, http.MethodHead)
	m.HandleFunc("/api/ps", s.ollamaPs).Methods(http.MethodGet)
	post("/api/show", s.ollamaShow)
	post("/api/pull", s.ollamaPull)
	for _, p := range []string{"/api/push", "/api/create", "/api/copy", "/api/delete"} {
		m.HandleFunc(p, s.ollamaUnsupported).Methods(http.MethodPost, http.MethodDelete)
	}

	// llama-swap's operational endpoints.
	m.HandleFunc("/health", s.health).Methods(http.MethodGet, http.MethodHead)
	m.HandleFunc("/v1/health", s.health).Methods(http.MethodGet, http.MethodHead) // llama-server's
	// llama-swap's health check for its wake-on-LAN proxy, and its
	// models page's old address: both public, as there.
	m.HandleFunc("/wol-health", s.health).Methods(http.MethodGet, http.MethodHead)
	m.Handle("/upstream", http.RedirectHandler("/ui/", http.StatusFound)).Methods(http.MethodGet, http.MethodHead)
	m.HandleFunc("/running", s.running).Methods(http.MethodGet)
	m.HandleFunc("/unload", s.unloadAll).Methods(http.MethodGet, http.MethodPost)
	post("/api/models/unload", s.unloadAll)
	post("/api/models/unload/{model:.+}", s.unloadModel)
	post("/api/inflight/{id}/cancel", s.cancelInflight)

	// llama-server's router mode: its model-management API.
	m.HandleFunc("/models", s.routerModels).Methods(http.MethodGet)
	m.HandleFunc("/models/sse", s.routerModelsSSE).Methods(http.MethodGet)
	post("/models/load", s.routerLoad)
	post("/models/unload", s.routerUnload)
	m.HandleFunc("/api/version", s.apiVersion).Methods(http.MethodGet)
	m.PathPrefix("/upstream/").HandlerFunc(s.upstream)
	m.HandleFunc("/comfyui", s.comfyUI)
	m.PathPrefix("/comfyui/").HandlerFunc(s.comfyUI)

	// Loadout's own.
	m.HandleFunc("/api/models", s.apiModels).Methods(http.MethodGet)
	m.HandleFunc("/api/policies", s.apiPolicies).Methods(http.MethodGet)
	post("/api/policies/reload", s.reloadPolicies)
	m.HandleFunc("/api/gpus", s.apiGPUs).Methods(http.MethodGet)
	m.HandleFunc("/api/peers", s.apiPeers).Methods(http.MethodGet)
	m.HandleFunc("/api/events", s.apiEvents).Methods(http.MethodGet)
	m.HandleFunc("/api/events/history", s.apiEventsHistory).Methods(http.MethodGet)
	m.HandleFunc("/api/summary", s.apiSummaryHandler).Methods(http.MethodGet)
	m.HandleFunc("/api/activity", s.apiActivity).Methods(http.MethodGet)
	m.HandleFunc("/api/profiles", s.apiProfiles).Methods(http.MethodGet)
	m.HandleFunc("/api/profiles/active", s.setActiveProfile).Methods(http.MethodPut)
	m.HandleFunc("/api/captures/{id}", s.apiCapture).Methods(http.MethodGet)
	s.uiRoutes(m)
	m.HandleFunc("/logs", s.logsHistory).Methods(http.MethodGet)
	m.HandleFunc("/logs/stream", s.logsStream).Methods(http.MethodGet)
	m.HandleFunc("/logs/stream/{model:.+}", s.logsStream).Methods(http.MethodGet)
	m.HandleFunc("/logs/{model:.+}", s.logsHistory).Methods(http.MethodGet)
	s.jobRoutes(m)
	m.Handle("/metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	})).Methods(http.MethodGet)

	m.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, &apiError{status: http.StatusNotFound, code: "unknown_endpoint",
			msg: fmt.Sprintf("no endpoint %s %s", bounded(r.Method), bounded(r.URL.Path))})
	})
	m.MethodNotAllowedHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// RFC 9110 §15.5.6: a 405 lists the methods the path takes.
		allow := s.allowed(r)
		w.Header().Set("Allow", strings.Join(allow, ", "))
		s.writeError(w, r, &apiError{status: http.StatusMethodNotAllowed, code: "method_not_allowed",
			msg: fmt.Sprintf("method %s is not allowed on %s (allowed: %s)", bounded(r.Method), bounded(r.URL.Path), strings.Join(allow, ", "))})
	})
	m.Use(s.decodeBody) // encoding.go
	return m
}

// unsafeGets are the paths whose GET acts (llama-swap's GET /unload
// stops every model): HEAD, which a monitor or a link checker sends
// believing it safe, is not served there by their GET.
var unsafeGets = []string{"/unload"}

// allowMethods are the methods a 405's Allow header may list, in the
// order it lists them.
var allowMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// allowed is what the router takes on r's path, for a 405's Allow: each
// method a route matches, HEAD wherever GET is (route), and OPTIONS,
// which ServeHTTP answers on every path (preflight). Asked of the router
// itself, so it cannot drift from the routes.
func (s *Server) allowed(r *http.Request) []string {
	var out []string
	for _, method := range allowMethods {
		if s.takes(r, method) || method == http.MethodHead && s.takes(r, http.MethodGet) && !slices.Contains(unsafeGets, r.URL.Path) {
			out = append(out, method)
		}
	}
	return append(out, http.MethodOptions)
}

// takes reports whether a route matches r's path with method.
func (s *Server) takes(r *http.Request, method string) bool {
	probe := r.WithContext(r.Context())
	probe.Method = method
	var rm mux.RouteMatch
	return s.mux.Match(probe, &rm) && rm.MatchErr == nil
}

// route hands r to the router. A HEAD on a path whose route takes GET
// but not HEAD is served by the GET route (RFC 9110 §9.3.2: HEAD is GET
// without the body, and net/http drops the body a handler writes for
// one), through a headWriter, so that an endpoint that streams (the
// event and log streams) ends with its headers rather than never.
func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodHead && !s.takes(r, http.MethodHead) && s.takes(r, http.MethodGet) && !slices.Contains(unsafeGets, r.URL.Path) {
		// A copy: the request's log line still says HEAD.
		get := r.WithContext(r.Context())
		get.Method = http.MethodGet
		s.mux.ServeHTTP(headWriter{w}, get)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// errHeadOnly is what a flush returns when a HEAD is served by a GET
// route: the headers are the whole response.
var errHeadOnly = errors.New("a HEAD request's response ends with its headers")

// headWriter is the response writer of a HEAD served by a GET route. Its
// flush sends the headers and then fails: a handler flushes only what it
// streams, and each of the streaming ones (streamEvents, logsStream)
// flushes its headers or its history first and returns when a flush
// fails, so a HEAD on an endpoint that would stream for as long as the
// client stays ends at once. A handler that answers whole never flushes,
// and httputil.ReverseProxy ignores its flushes' errors.
type headWriter struct{ http.ResponseWriter }

// FlushError sends the headers and ends the response (errHeadOnly).
func (h headWriter) FlushError() error {
	_ = http.NewResponseController(h.ResponseWriter).Flush()
	return errHeadOnly
}

// Flush sends the headers, for handlers that type-assert http.Flusher.
func (h headWriter) Flush() { _ = h.FlushError() }

// Unwrap lets http.ResponseController reach the exchange (write
// deadlines).
func (h headWriter) Unwrap() http.ResponseWriter { return h.ResponseWriter }

// ServeHTTP gives the request an id, checks its API key, routes it, and
// logs it and counts it when it ends (also when it panics: an aborted
// stream still gets its line). Until it returns, Abort can end it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ex := &exchange{ResponseWriter: w, start: time.Now(), id: s.ids.fromRequest(r), seq: s.seq.Add(1), path: r.URL.Path, shape: shapeOf(r.URL.Path),
		writeIdle: s.streamIdle}
	w.Header().Set(requestIDHeader, ex.id)
	r.Header.Set(requestIDHeader, ex.id) // the upstream logs the same id
	ctx, cancel := context.WithCancelCause(context.WithValue(r.Context(), exchangeKey{}, ex))
	r = r.WithContext(ctx)
	defer s.finish(ex, r)
	s.inflight.add(ex, cancel) // Abort may end it
	defer func() {
		s.inflight.remove(ex)
		cancel(nil)
		ex.clearWriteDeadline()
	}()
	if r.Method == http.MethodOptions {
		preflight(ex, r) // browsers send no credentials with it
		ex.completed = true
		return
	}
	if !public(r) && !isJobsPath(r.URL.Path) {
		if e := s.authorize(r); e != nil {
			s.writeError(ex, r, e)
			ex.completed = true
			return
		}
	}
	s.route(ex, r)
	ex.completed = true
}

// finish writes the request's log line and, for requests that named a
// model, its metrics. It runs deferred, so it also sees a handler that
// panicked: httputil.ReverseProxy aborts a response whose body copy failed
// with http.ErrAbortHandler (the client left, or the upstream died
// mid-body); anything else is a bug, logged with its stack. The panic goes
// on to net/http either way.
func (s *Server) finish(ex *exchange, r *http.Request) {
	if p := recover(); p != nil {
		switch {
		case p != http.ErrAbortHandler:
			ex.fail(http.StatusInternalServerError, fmt.Sprintf("panic: %v\n%s", p, debug.Stack()))
		case ex.clientStuck:
			ex.fail(statusClientGone, fmt.Sprintf("response cut: the client read nothing for %s (liveness.streamIdle)", ex.writeIdle))
		case ex.logical == 0 && !ex.streamDone:
			// The upstream side records its own failure (responseGuard);
			// what is left is a client that stopped reading. One that
			// left after [DONE] had the whole response: a success.
			ex.fail(statusClientGone, "response aborted: the client went away")
		}
		defer panic(p)
	}
	ex.streamFailed()
	status := ex.outcome()
	d := time.Since(ex.start)
	if ex.inference {
		s.metrics.observeRequest(ex, status, d)
		s.summarize(ex, status, d)
		s.finishCapture(ex, status)
	}
	attrs := []slog.Attr{
		slog.String("request_id", ex.id),
		slog.String("method", r.Method),
		slog.String("path", bounded(r.URL.Path)),
		slog.Int("status", status),
		slog.Duration("duration", d),
	}
	if ex.model != "" {
		attrs = append(attrs, slog.String("model", ex.model))
	}
	ctx := context.Background()
	switch {
	case status == statusClientGone && abortedBy(r.Context()) == nil: // not a cancel, also 499
		if ex.clientStuck {
			attrs = append(attrs, slog.String("err", ex.errMsg))
			s.log.LogAttrs(ctx, slog.LevelWarn, "client stopped reading; its response was cut", attrs...)
			break
		}
		s.log.LogAttrs(ctx, slog.LevelInfo, "client went away", attrs...)
	case refusedAsAsked(status):
		// The request's own fault: an operator reads these at info (a
		// client that keeps asking for a removed model is not a fault
		// of the box), a client's author at debug too.
		if ex.errMsg != "" {
			attrs = append(attrs, slog.String("err", ex.errMsg))
		}
		s.log.LogAttrs(ctx, slog.LevelInfo, "request refused", attrs...)
	case status >= 400 || ex.errMsg != "":
		if ex.errMsg != "" {
			attrs = append(attrs, slog.String("err", ex.errMsg))
		}
		s.log.LogAttrs(ctx, slog.LevelWarn, "request failed", attrs...)
	default:
		if s.log.Enabled(ctx, slog.LevelDebug) {
			s.log.LogAttrs(ctx, slog.LevelDebug, "request", attrs...)
		}
	}
}

// refusedAsAsked tells the statuses of a request refused for what it is
// (RFC 9110's client errors a client can mend itself: a malformed body,
// a missing or wrong API key, an unknown model or path, a method the path
// does not take, a body too large or of the wrong type, a well-formed
// body that cannot be served as asked), from the ones that say something
// about the box: a queue full (429), a wait cut (408), a conflict with
// the model's state (409), a cancel (499), and every 5xx.
func refusedAsAsked(status int) bool {
	switch status {
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound,
		http.StatusMethodNotAllowed, http.StatusLengthRequired, http.StatusRequestEntityTooLarge,
		http.StatusRequestURITooLong, http.StatusUnsupportedMediaType, http.StatusUnprocessableEntity,
		http.StatusRequestHeaderFieldsTooLarge:
		return true
	}
	return false
}

// preflight answers a CORS preflight for any path permissively, as
// llama-swap does, so browser-based clients can call the API.
func preflight(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", "*")
	h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, PATCH, DELETE, OPTIONS")
	allow := "Content-Type, Authorization, Accept, X-Requested-With, X-Api-Key, " + requestIDHeader + ", " + headerPriority + ", " + headerClient
	if req := r.Header.Get("Access-Control-Request-Headers"); req != "" && headerList(req) {
		allow = req
	}
	h.Set("Access-Control-Allow-Headers", allow)
	h.Set("Access-Control-Max-Age", "86400")
	w.WriteHeader(http.StatusNoContent)
}

// headerList reports whether s looks like a list of header names, safe to
// echo back.
func headerList(s string) bool {
	if len(s) > 1024 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == ',' || c == ' ') {
			return false
		}
	}
	return true
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("OK"))
}
