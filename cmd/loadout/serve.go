package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/loadout-dev/loadout/backends/llamaserver"
	"github.com/loadout-dev/loadout/host/backend"
	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/host/gpu"
	"github.com/loadout-dev/loadout/host/logs"
	"github.com/loadout-dev/loadout/host/policy"
	"github.com/loadout-dev/loadout/host/proxy"
	"github.com/loadout-dev/loadout/host/router"
	"github.com/loadout-dev/loadout/host/sim"
	"github.com/loadout-dev/loadout/internal/bounded"
	"github.com/loadout-dev/loadout/plugins"
	"github.com/loadout-dev/loadout/policies/builtin"
	"github.com/loadout-dev/loadout/sdk"
	sdksettings "github.com/loadout-dev/loadout/sdk/settings"
	"github.com/prometheus/procfs"
	"github.com/spf13/cobra"
)

type serveOptions struct {
	config          configSource
	listen          string
	logLevel        string
	shutdownTimeout time.Duration
	jobs            jobsOptions       // jobs.go
	activity        activityOptions   // activity.go
	watch           bool              // reload.go
	tlsCert, tlsKey string            // PEM files; both or neither
	recordTrace     string            // record.go
	routerMode      routerModeOptions // routermode.go
	maxBody         string            // --max-request-body: a size (sdk/settings.ParseSize)
}

func newServeCmd() *cobra.Command {
	var o serveOptions
	cmd := &cobra.Command{
		Use:   "serve [--config FILE] [--listen ADDR]",
		Short: "Serve the OpenAI-compatible endpoint, loading and swapping models on demand",
		// serve --version (-version) prints the version, as llama-swap's
		// -version does.
		Version: versionLine(),
		Long: `Serve the OpenAI-compatible endpoint. Every request names a model; Loadout
loads it through its backend plugin, evicting or queueing as the configured
scheduler and router policies decide, and proxies the request to it.

With no --config, an embedded default configuration of three simulated models
is served (small and medium in one exclusive swap group, embed in a persistent
group), so the endpoint can be tried with curl at once.

llama-swap's command line works here unchanged, one dash or two:
  loadout serve -config config.yaml -config-dir conf.d -listen :8080 -watch-config
--config-dir merges every *.yml and *.yaml file of the directory after
--config, in name order: a model, group, peer, profile or selector is
defined in one file, lists concatenate, and a setting given in two files
must have one value (an error names both places). --tls-cert-file and
--tls-key-file serve HTTPS.

SIGINT or SIGTERM stops taking requests, fails queued ones, lets in-flight
requests finish (up to --shutdown-timeout), stops every model process and
exits 0. Requests still in flight at the timeout are ended with an error
their clients can read (503, or a last SSE error event without [DONE]),
and Loadout still exits 0, within the timeout plus one second. A second
SIGINT or SIGTERM (Ctrl-C again) brings the timeout forward to that moment.

Hot reload: SIGHUP, POST /api/policies/reload, or with --watch any change
to what the configuration's files or policy modules hold (a file replaced
by an editor, one added to or removed from --config-dir, a Kubernetes
ConfigMap's symlink swap) re-reads them and swaps
in changed policies without dropping a request: the new modules are
compiled and instantiated first (a broken one is refused, the old ones keep
running, and the error is logged and shown in /api/policies), requests the
old scheduler held go to the new one in arrival order, and requests in
flight finish. Models added, removed or changed in the configuration are
applied too: a removed model stops after its requests in flight, one whose
server changes (its command, options, VRAM, GPUs) reloads with its new
configuration once idle, and one whose other settings change (aliases, TTL,
priority, filters, …) takes them as it runs. New apiKeys apply at once (a
removed key is refused from the next request). Settings serve sets up at
start (logLevel, startPort, gpus, profiles, …) take effect at the next
start: a reload names them in a warning and in its answer ("restart").
A reload is applied whole or not at all.

Peers (llama-swap's peers: in the configuration) put other servers' models
behind this endpoint: PEER/MODEL always, MODEL alone where unambiguous,
listed in /v1/models and forwarded with streaming. Each peer's /api/models
is polled (health: {interval, timeout}, default every 5s, 2s); a peer that
is down fails its requests at once with a 503 naming it, and comes back
when it answers. When several peers, or a local model and peers, serve the
same name, a request goes to one whose model is ready, then with the
fewest requests in flight. GET /api/peers shows them. A reload applies
peer changes too (requests already forwarded finish on their peer). A
configuration with peers: and no models: is a gateway in front of them.

` + routerModeHelp + `

` + recordHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runServe(ctx, o)
		},
	}
	o.config.addFlags(cmd)
	cmd.Flags().StringVarP(&o.listen, "listen", "l", defaultListen, "address to listen on")
	cmd.Flags().StringVar(&o.logLevel, "log-level", "", "debug, info, warn or error (default: the config's logLevel)")
	cmd.Flags().DurationVar(&o.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long in-flight requests may take to finish on shutdown; then they are ended with an error (0: at once)")
	cmd.Flags().BoolVar(&o.watch, "watch", false, "reload the configuration (models, peers, policies) when one of its files, a file of --config-dir or a policy module changes on disk (also: SIGHUP, POST /api/policies/reload)")
	cmd.InitDefaultVersionFlag()
	cmd.Flags().Lookup("version").Usage = "print the version and exit (llama-swap's -version)"
	cmd.Flags().BoolVar(&o.watch, "watch-config", false, "llama-swap's name for --watch")
	cmd.Flags().StringVar(&o.tlsCert, "tls-cert-file", "", "serve HTTPS with this PEM certificate (chain); needs --tls-key-file (llama-swap's flags)")
	cmd.Flags().StringVar(&o.tlsKey, "tls-key-file", "", "the PEM private key of --tls-cert-file")
	cmd.Flags().StringVar(&o.recordTrace, "record-trace", "", "write the requests served to this CSV file as a trace for 'loadout simulate --trace' (see above)")
	cmd.Flags().StringVar(&o.maxBody, "max-request-body", sdksettings.FormatSize(proxy.DefaultMaxBodyBytes, ""), "the largest request body accepted (e.g. 32MiB, 200MB); larger ones are answered 413 (raise it for large images, audio or video sent inline)")
	addJobsFlags(cmd, &o.jobs)
	addActivityFlags(cmd, &o.activity)
	addRouterModeFlags(cmd, &o.routerMode)
	return cmd
}

// configSource is where a configuration is read from: a file (--config)
// and the YAML files of a directory (--config-dir) merged after it
// (llama-swap's -config and -config-dir: config.LoadFiles). Neither
// is the embedded default, or llama-server's router-mode inputs alone.
type configSource struct {
	path, dir string
}

// addFlags adds --config (-c) and --config-dir to cmd.
func (s *configSource) addFlags(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&s.path, "config", "c", "", "configuration file (llama-swap compatible YAML); default: the embedded example")
	cmd.Flags().StringVar(&s.dir, "config-dir", "", "a directory of *.yml and *.yaml files merged after --config, in name order (llama-swap's -config-dir: a model, group, peer, profile or selector is defined in one file; lists concatenate; a setting in two files must agree)")
}

// files are the configuration files s names, in merge order: none for
// the embedded default. A --config-dir that cannot be read is an error,
// and so is one without a YAML file when it is all there is.
func (s configSource) files() ([]string, error) {
	var files []string
	if s.path != "" {
		files = append(files, s.path)
	}
	if s.dir != "" {
		more, err := config.DirFiles(s.dir)
		if err != nil {
			return nil, fmt.Errorf("--config-dir: %w", err)
		}
		if len(more) == 0 && s.path == "" {
			return nil, fmt.Errorf("--config-dir %s: no *.yml or *.yaml file in it", s.dir)
		}
		files = append(files, more...)
	}
	return files, nil
}

// maxRequestBody is --max-request-body in bytes: "" is the proxy's
// default. Errors: a size ParseSize refuses, or 0.
func maxRequestBody(flag string) (int64, error) {
	if flag == "" {
		return proxy.DefaultMaxBodyBytes, nil
	}
	n, err := sdksettings.ParseSize(flag)
	if err == nil && n == 0 {
		err = errors.New("a limit of 0 bytes refuses every request with a body")
	}
	if err != nil {
		return 0, fmt.Errorf("--max-request-body: %w", err)
	}
	return n, nil
}

// listen takes serve's address. Errors: net.Listen's, one held by
// another server saying so and what to do.
func listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("listen: %w: another server holds %s (a Loadout or llama-swap already running?); stop it, or serve on another address with --listen", err, addr)
	}
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	return ln, nil
}

// inputLimit bounds the reading of what the operator gives serve and
// config check: the configuration files (--config, --config-dir), the
// policy modules they name, and llama-server's router-mode inputs. One on
// a stalled disk or network share then fails start-up, a reload or a
// check with an error saying the reading did not end, rather than hanging
// it (or, for a reload, every reload after it).
const inputLimit = 30 * time.Second

// readInput is os.ReadFile of one of the operator's inputs (a policy
// module, or a configuration file --watch digests), within inputLimit or
// ctx's deadline. Errors: ReadFile's, or the reading not ending in time.
func readInput(ctx context.Context, path string) ([]byte, error) {
	return bounded.Call(ctx, inputLimit, "reading "+path, func() ([]byte, error) { return os.ReadFile(path) })
}

// loadConfig reads the configuration src names, or the embedded default
// when it names none, fitted to a Loadout listening on listen
// (hostOptions), with the models of llama-server's router-mode inputs rm
// beside the file's; with rm and no file, rm's models alone (no embedded
// default).
func loadConfig(ctx context.Context, src configSource, listen string, rm routerModeOptions) (*config.Config, []config.Warning, error) {
	return loadConfigWith(ctx, src, rm, hostOptions(listen))
}

// loadConfigWith is loadConfig with the host options given.
func loadConfigWith(ctx context.Context, src configSource, rm routerModeOptions, opts config.Options) (*config.Config, []config.Warning, error) {
	files, err := bounded.Call(ctx, inputLimit, "listing the configuration files", src.files)
	if err != nil {
		return nil, nil, err
	}
	ext, warns, err := rm.externalModels(ctx)
	if err != nil {
		return nil, warns, err
	}
	opts.Models = ext
	var (
		cfg *config.Config
		w   []config.Warning
	)
	switch {
	case len(files) > 0:
		type loaded struct {
			cfg *config.Config
			w   []config.Warning
		}
		var r loaded
		r, err = bounded.Call(ctx, inputLimit, "reading the configuration ("+strings.Join(files, ", ")+")", func() (loaded, error) {
			cfg, w, err := config.LoadFiles(files, opts)
			return loaded{cfg, w}, err
		})
		cfg, w = r.cfg, r.w
	case rm.set():
		name := rm.modelsPreset
		if name == "" {
			name = rm.modelsDir
		}
		cfg, w, err = config.ParseWith(name, nil, opts)
	default:
		cfg, w, err = config.ParseWith("embedded default config", config.DefaultYAML(), opts)
	}
	return cfg, append(warns, w...), err
}

// newLoggerAt is a logger to stderr at level whose lines carry clock's time instead of the
// wall clock's, when clock is set (simulate's virtual time, as seconds
// from the replay's start: t=12.5).
func newLoggerAt(level string, clock *sim.Clock) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	if clock != nil {
		opts.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.Float64("t", clock.Now().Sub(sim.Epoch).Seconds())
			}
			return a
		}
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
}

// idleConnTimeout is how long serve keeps a client's idle keep-alive
// connection (http.Server.IdleTimeout): nginx's keepalive_timeout is 75 s.
const idleConnTimeout = 2 * time.Minute

func runServe(ctx context.Context, o serveOptions) error {
	tlsConfig, err := loadTLS(o.tlsCert, o.tlsKey)
	if err != nil {
		return err
	}
	maxBody, err := maxRequestBody(o.maxBody)
	if err != nil {
		return err
	}
	if o.shutdownTimeout < 0 {
		return fmt.Errorf("--shutdown-timeout %s: want 0 (end requests in flight at once) or more", o.shutdownTimeout)
	}
	cfg, warnings, err := loadConfig(ctx, o.config, o.listen, o.routerMode)
	if err != nil {
		return err
	}
	level := cfg.LogLevel
	if o.logLevel != "" {
		level = o.logLevel
	}
	logStore := logs.New(0)
	log, err := newServeLogger(os.Stderr, level, cfg, logStore)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		log.Warn(w.String())
	}
	for _, m := range missingExecutables(cfg) {
		log.Warn(m + " (the model's start fails until it is there)")
	}
	// The address is taken before anything with an effect: a second serve
	// on the address of one already running (the same --record-trace and
	// job database, by default) fails here, before it truncates that
	// trace, runs the job queue both share or starts a plugin. Requests
	// that come meanwhile wait in the listen queue until start-up ends.
	ln, err := listen(o.listen)
	if err != nil {
		return err
	}
	defer ln.Close() // on an error return; once served, the server closes it
	// Before the rest, so that a path that cannot be written fails before
	// anything starts; closed after shutdown, so every request served is
	// written.
	rec, err := openTraceRecorder(o.recordTrace, log)
	if err != nil {
		return err
	}
	defer rec.close(log)
	// A missing model file may yet appear (a disk mounted later): say so
	// now, and let the load fail with the same message if it has not.
	if err := checkModelFiles(cfg, detailsLimit); err != nil {
		log.Warn("model file check failed; those models will fail to load", "err", err)
	}

	started := time.Now()
	endStartupGC := deferStartupGC()
	defer endStartupGC() // on an error return; a no-op once start-up is done
	rt, err := policy.NewRuntime(ctx, policy.Options{Logger: log})
	if err != nil {
		return err
	}
	defer rt.Close(context.Background())
	policies, err := loadPolicies(ctx, rt, cfg)
	if err != nil {
		return err
	}

	inv, ledger, err := openGPUs(cfg, log)
	if err != nil {
		return err
	}
	if err := applyPlacement(cfg, inv, ledger); err != nil {
		return err
	}
	if c, ok := inv.(io.Closer); ok {
		defer c.Close()
	}

	launchers := map[string]*backend.PluginLauncher{}
	defer func() {
		for _, l := range launchers {
			l.Close()
		}
	}()
	obsv := newObservability(cfg.ModelIDs(), cfg.EventRing, logStore)
	if err := validateModels(ctx, cfg, launchers, obsv.pluginLog(log)); err != nil {
		return err
	}
	models, catalog, err := modelTable(ctx, cfg, cfg.ModelIDs(), launchers, ledger, obsv.pluginLog(log))
	if err != nil {
		return err
	}

	rcfg := router.Config{
		Models:     models,
		Ledger:     ledger,
		HostMemory: hostMemory(cfg, log, 0),
		Logger:     log,
		Observer:   obsv.observer,
		Liveness: router.Liveness{
			Interval: cfg.Liveness.ProbeInterval,
			Timeout:  cfg.Liveness.ProbeTimeout,
			Failures: cfg.Liveness.Failures,
		},
	}
	policies.routerConfig(ctx, &rcfg)
	r, err := router.New(rcfg)
	if err != nil {
		return err
	}
	reload, err := newReloader(ctx, o, cfg, rt, r, policies, log)
	if err != nil {
		return err
	}
	reload.launchers, reload.ledger, reload.pluginLog = launchers, ledger, obsv.pluginLog(log)

	jobRunner, stopJobs, err := startJobs(ctx, o.jobs, ledger, r, reload.residency, log, obsv.jobTransition)
	if err != nil {
		return err
	}
	defer stopJobs()
	act, err := openActivity(o.jobs.db, o.activity, log)
	if err != nil {
		return err
	}
	defer act.close(log) // after shutdown: what the last requests left is written

	peerSet, stopPeers, err := startPeers(ctx, cfg, nil, obsv.bus, log)
	if err != nil {
		return err
	}
	reload.bus, reload.peers, reload.stopPeers = obsv.bus, peerSet, stopPeers
	defer func() { reload.stopPeers() }() // the peers in place at exit (a reload may change them)

	pcfg := proxy.Config{
		Peers: peerSet,
		Build: buildInfo(),
		Reload: func(context.Context) (proxy.ReloadResult, error) {
			return reload.reload("POST /api/policies/reload")
		},
		MaxBodyBytes:         maxBody,
		Jobs:                 jobRunner,
		JobToken:             o.jobs.token,
		Router:               r,
		Models:               catalog,
		APIKeys:              cfg.APIKeys,
		IncludeAliasesInList: cfg.IncludeAliasesInList,
		IgnorePaths:          cfg.IgnorePaths,
		SessionHeaders:       cfg.SessionHeaders,
		Profiles:             cfg.Profiles,
		Selectors:            cfg.Selectors,
		CaptureBuffer:        cfg.CaptureBuffer,
		SendLoadingState:     cfg.SendLoadingState,
		StreamIdle:           cfg.Liveness.StreamIdle,
		Events:               obsv.bus,
		Logs:                 obsv.logs,
		Logger:               log,
		GPUs: func() (any, error) {
			if ledger == nil {
				return map[string]any{"source": inv.Source(), "devices": []any{}}, nil
			}
			devices, err := ledger.Leases()
			return map[string]any{"source": inv.Source(), "margin": ledger.Margin(), "devices": devices}, err
		},
		PolicyStatus: func() []proxy.PolicyInfo {
			var out []proxy.PolicyInfo
			r.OnLoop(func() { // the policies live on the run loop (rule 1)
				ps := reload.policies()
				for _, st := range ps.Scheduler.Statuses() {
					out = append(out, reload.decorate(policyInfo("scheduler", st)))
				}
				for _, st := range ps.Swapper.Statuses() {
					out = append(out, reload.decorate(policyInfo("swapper", st)))
				}
			})
			return out
		},
	}
	act.config(&pcfg)
	rec.config(&pcfg)
	handler, err := proxy.New(pcfg)
	if err != nil {
		return err
	}
	reload.proxy = handler
	if err := act.register(handler); err != nil {
		return err
	}

	// A connection kept alive between requests is closed after two idle
	// minutes (without IdleTimeout or ReadTimeout net/http keeps it for
	// ever, so clients that open connections and leave them would use
	// up the process's descriptors); clients reconnect as they do after
	// any server's keep-alive ends. A request in flight is not idle.
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: idleConnTimeout, TLSConfig: tlsConfig}
	if err := obsv.attach(srv, handler, r, ledger, reload.policies, jobRunner); err != nil {
		return err
	}
	serveErr := make(chan error, 1)
	go func() {
		if tlsConfig != nil {
			serveErr <- srv.ServeTLS(ln, "", "")
			return
		}
		serveErr <- srv.Serve(ln)
	}()
	log.Info("loadout serving", "listen", ln.Addr().String(), "config", cfg.File, "models", len(models),
		"scheduler", rcfg.SchedulerName, "router", rcfg.SwapperName, "startup", time.Since(started).Round(time.Millisecond),
		"ui", uiURL(ln.Addr(), tlsConfig != nil))
	endStartupGC()

	// Start-up's compilation leaves tens of MB of garbage that Go's
	// background scavenger would return to the OS only slowly; return it
	// once (docs/RATIONALE.md, idle memory).
	go debug.FreeOSMemory()

	for _, id := range cfg.Preload {
		go preload(ctx, r, id, log)
	}
	if o.watch {
		if err := reload.watch(ctx); err != nil {
			return err
		}
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-hup:
				_, _ = reload.reload("SIGHUP")
			case <-ctx.Done():
				return
			}
		}
	}()

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		log.Error("http server stopped", "err", err)
	}
	log.Info("shutting down; a second SIGINT or SIGTERM ends the requests in flight now", "timeout", o.shutdownTimeout)
	again := make(chan os.Signal, 1)
	signal.Notify(again, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(again)
	if err := shutdown(srv, handler, r, o.shutdownTimeout, again, log); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}

// startupHeapLimit is the heap start-up may grow to before the garbage
// collector runs: compiling two Go guests allocates about 100 MB (a few
// hundred without a warm cache) that is garbage once compiled, and
// collecting it as it goes cost start-up 5-10% (docs/BENCHMARKS.md,
// start-up).
const startupHeapLimit = 256 << 20

// startupGC is the process's collector settings saved while one or more
// serves start (tests run several in one process): the first to start
// saves them, the last to finish restores them.
var startupGC struct {
	sync.Mutex
	starting int
	percent  int
	limit    int64
}

// deferStartupGC turns the garbage collector off until start-up's heap
// reaches startupHeapLimit, unless the operator set GOGC or GOMEMLIMIT.
// The returned func restores the settings; it may be called more than once.
func deferStartupGC() (end func()) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return func() {}
	}
	startupGC.Lock()
	if startupGC.starting == 0 {
		startupGC.percent = debug.SetGCPercent(-1)
		startupGC.limit = debug.SetMemoryLimit(startupHeapLimit)
	}
	startupGC.starting++
	startupGC.Unlock()
	return sync.OnceFunc(func() {
		startupGC.Lock()
		defer startupGC.Unlock()
		if startupGC.starting--; startupGC.starting == 0 {
			debug.SetMemoryLimit(startupGC.limit)
			debug.SetGCPercent(startupGC.percent)
		}
	})
}

// modelTable builds, for the models ids of cfg, the run loop's model
// configurations (each model's process runs through its backend plugin;
// launchers are shared and kept) with their VRAM need (declared, else the
// backend's estimate when VRAM is accounted), and the proxy's catalog of
// every model of cfg. Errors name the model.
func modelTable(ctx context.Context, cfg *config.Config, ids []string, launchers map[string]*backend.PluginLauncher, ledger *gpu.Ledger, log *slog.Logger) (map[string]router.ModelConfig, []proxy.ModelEntry, error) {
	models := map[string]router.ModelConfig{}
	for _, id := range ids {
		m := cfg.Models[id]
		launcher, err := backendLauncher(launchers, m.Backend, log)
		if err != nil {
			return nil, nil, fmt.Errorf("model %s: %w", id, err)
		}
		spec, err := modelSpec(cfg, m)
		if err != nil {
			return nil, nil, fmt.Errorf("model %s: %w", id, err)
		}
		vram := uint64(max(m.VRAM, 0))
		if ledger != nil && vram == 0 {
			vram = backendEstimate(ctx, launcher, spec, log)
		}
		mc := modelConfig(cfg, m, vram)
		mc.Process = backend.NewPluginProcess(spec, launcher)
		models[id] = mc
	}
	var catalog []proxy.ModelEntry
	for _, id := range cfg.ServedIDs() { // a replica is its model's, not a name of its own
		m := cfg.Models[id]
		cmd := m.Cmd
		if m.Backend == config.BackendLlamaServer {
			if opts, err := m.OptionsJSON(); err == nil {
				cmd = llamaserver.CommandOf(id, opts) // what it runs, as /running shows a cmd: model's
			}
		}
		catalog = append(catalog, proxy.ModelEntry{
			ID: id, Name: m.Name, Description: m.Description, Aliases: m.Aliases,
			UseModelName: m.UseModelName, Cmd: cmd, TTL: m.TTL, Unlisted: m.Unlisted, Backend: m.Backend,
			Filters: m.Filters, Timeouts: &m.Timeouts, Metadata: m.Metadata,
			Capabilities: m.Capabilities, IgnoreWebsockets: m.IgnoreWebsockets, SendLoadingState: m.SendLoadingState,
			Details: modelDetails(m, log),
		})
	}
	return models, catalog, nil
}

// weightFiles are the files m's load reads: its weights:, else the GGUF
// files its llama-server will be given — the llamaserver backend's model
// and mmproj (llamaserver.OptionFiles), or, for a cmd: that runs
// llama-server, as llama-swap's configurations do, the files its -m and
// --mmproj name (llamaserver.CommandFiles). A relative path among the
// latter is left as the server is given it, to be taken from the working
// directory Loadout runs in, as the server takes it (weights: are the
// configuration's, resolved against its directory). They are read ahead
// into the page cache while a request waits for the model, and read for
// Ollama's details (modelDetails).
func weightFiles(m *config.Model) []string {
	if len(m.Weights) > 0 {
		return m.Weights
	}
	switch m.Backend {
	case config.BackendLlamaServer:
		opts, err := m.OptionsJSON()
		if err != nil {
			return nil
		}
		return llamaserver.OptionFiles(opts)
	case config.BackendCmd:
		argv, err := config.SplitCommand(m.Cmd) // its macros, ${MODEL_ID} among them, substituted
		if err != nil {
			return nil
		}
		return llamaserver.CommandFiles(argv, m.Env)
	}
	return nil
}

// modelDetails is what m's GGUF files say of it (llamaserver.Describe, their
// headers only), for Ollama's model details: the model's is the first
// .gguf of its weight files (weightFiles), and a later one that is a
// vision projector (--mmproj) makes it take images. Zero where there is
// none, or the model's cannot be read (a missing file is the backend's to
// report when the model loads).
func modelDetails(m *config.Model, log *slog.Logger) proxy.ModelDetails {
	var d proxy.ModelDetails
	for _, path := range weightFiles(m) {
		if !strings.EqualFold(filepath.Ext(path), ".gguf") {
			continue
		}
		f, err := describeWithin(path, detailsLimit)
		switch {
		case err != nil && d.Format == "":
			log.Warn("no model details", "model", m.ID, "err", err)
			return proxy.ModelDetails{}
		case err != nil:
			log.Warn("no details of the model's projector", "model", m.ID, "err", err)
		case d.Format == "":
			d = proxy.ModelDetails{Format: "gguf", Family: f.Architecture, Parameters: f.Parameters,
				Quantization: f.Quantization, ContextLength: f.ContextLength, EmbeddingLength: f.EmbeddingLength,
				Embedding: f.Embedding, Tools: f.Tools, Thinking: f.Thinking, Insert: f.Insert}
		default:
			d.Vision = d.Vision || f.Vision
		}
	}
	return d
}

// describeWithin is llamaserver.Describe(path), given up after limit
// (bounded.Call). Errors: Describe's, or the limit's, naming the file.
func describeWithin(path string, limit time.Duration) (llamaserver.Facts, error) {
	return bounded.Call(context.Background(), limit, "reading "+path, func() (llamaserver.Facts, error) { return llamaserver.Describe(path) })
}

// detailsLimit bounds each of serve's reads of a model file: a stat
// (modelConfig), its header (modelDetails), and the check of a model's
// files at start-up and in `config check` (checkModelFiles).
const detailsLimit = 5 * time.Second

// modelConfig is m as the run loop sees it (without its Process), with
// vram bytes as its declared or estimated need: for serve and simulate.
func modelConfig(cfg *config.Config, m *config.Model, vram uint64) router.ModelConfig {
	group := ""
	if g := cfg.GroupOf(m.ID); g != nil {
		group = g.Name
	}
	// The weight files' sizes now; a file missing now, or whose stat does
	// not answer, is not read ahead.
	var weights []string
	var weightBytes uint64
	for _, f := range weightFiles(m) {
		if st, err := bounded.Call(context.Background(), detailsLimit, "stat "+f, func() (os.FileInfo, error) { return os.Stat(f) }); err == nil && st.Mode().IsRegular() {
			weights = append(weights, f)
			weightBytes += uint64(st.Size())
		}
	}
	return router.ModelConfig{
		Priority:         int32(m.Priority),
		ConcurrencyLimit: uint32(max(m.ConcurrencyLimit, 0)),
		Pinned:           m.Pinned,
		Group:            group,
		TTL:              m.TTL,
		StopTimeout:      m.UnloadTimeout,
		WakeTimeout:      m.WakeTimeout,
		VRAM:             vram,
		ReplicaOf:        m.ReplicaOf,
		Replica:          m.Replica,
		MinReplicas:      m.MinReplicas,
		MaxReplicas:      m.MaxReplicas,
		Evict:            m.Evict,
		SleepLevels:      m.SleepLevels(),
		Weights:          weights,
		WeightBytes:      weightBytes,
	}
}

// hostMemory is the host memory in bytes sleeping models may lease
// (router.Config.HostMemory): the config's hostMemory, or for auto the
// machine's available memory now plus held (what sleepers already lease,
// on a reload; 0 at start) minus config.HostMemoryReserve of that sum (0,
// so nothing sleeps, when it cannot be read).
func hostMemory(cfg *config.Config, log *slog.Logger, held uint64) uint64 {
	if cfg.HostMemory != config.HostMemoryAuto {
		return uint64(max(cfg.HostMemory, 0))
	}
	fs, err := procfs.NewDefaultFS()
	var mi procfs.Meminfo
	if err == nil {
		mi, err = fs.Meminfo()
	}
	if err == nil && mi.MemAvailableBytes == nil {
		err = errors.New("no MemAvailable in /proc/meminfo")
	}
	if err != nil {
		log.Warn("host memory unknown: evicted models are stopped, never put to sleep (set hostMemory: to let them sleep)", "err", err)
		return 0
	}
	avail := *mi.MemAvailableBytes + held
	reserve := config.HostMemoryReserve(avail)
	if avail <= reserve {
		log.Info("host memory for sleeping models: none (available memory is below the reserve)", "available_mib", avail>>20, "reserve_mib", reserve>>20)
		return 0
	}
	log.Info("host memory for sleeping models", "mib", (avail-reserve)>>20, "available_mib", avail>>20, "reserve_mib", reserve>>20)
	return avail - reserve
}

// nvmlMargin is the memory kept free on every NVML device beyond the
// leases: CUDA contexts, fragmentation, other tenants' small allocations.
const nvmlMargin = 512 << 20

// openGPUs opens the GPU inventory (NVML, else the config's declared
// devices) and, when there are devices, the lease ledger over them. It
// rejects a config whose pinned models cannot all fit at once.
func openGPUs(cfg *config.Config, log *slog.Logger) (gpu.Inventory, *gpu.Ledger, error) {
	declared := make([]gpu.DeclaredDevice, 0, len(cfg.GPUs))
	for _, g := range cfg.GPUs {
		declared = append(declared, gpu.DeclaredDevice{Name: g.Name, Memory: uint64(max(g.Memory, 0))})
	}
	inv := gpu.Open(log, declared)
	if inv.Source() == gpu.SourceNone {
		return inv, nil, nil
	}
	var margin uint64
	if inv.Source() == gpu.SourceNVML {
		margin = nvmlMargin
	}
	devices, err := inv.Devices()
	if err != nil {
		return nil, nil, fmt.Errorf("reading the GPUs: %w", err)
	}
	var total, pinned uint64
	for _, d := range devices {
		total += d.Total - min(d.Total, margin)
	}
	var names []string
	for _, id := range cfg.ModelIDs() {
		if m := cfg.Models[id]; m.Pinned && m.VRAM > 0 {
			pinned += uint64(m.VRAM)
			names = append(names, id)
		}
	}
	if pinned > total {
		return nil, nil, fmt.Errorf("pinned models %v need %.1f GiB of GPU memory together, but the GPUs hold %.1f GiB: pinned models are never evicted, so they must fit at once",
			names, float64(pinned)/(1<<30), float64(total)/(1<<30))
	}
	return inv, gpu.NewLedger(inv, margin), nil
}

// backendEstimate asks a model's backend how much GPU memory it will need
// (llama-server's from GGUF metadata, sim's from its options): the second
// source of a VRAM figure after the config's `vram`. 0 when it cannot tell.
func backendEstimate(ctx context.Context, launcher *backend.PluginLauncher, spec plugins.ModelSpec, log *slog.Logger) uint64 {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := launcher.Client(ctx)
	if err != nil {
		log.Warn("no VRAM estimate: backend plugin did not start", "model", spec.Model, "err", err)
		return 0
	}
	est, err := c.Estimate(ctx, spec)
	if err != nil || !est.Known {
		log.Info("no VRAM estimate for model; it is accounted as 0 bytes until measured", "model", spec.Model, "err", err)
		return 0
	}
	var sum uint64
	for _, b := range est.BytesPerDevice {
		sum += b
	}
	log.Debug("VRAM estimate", "model", spec.Model, "bytes", sum, "source", "backend")
	return sum
}

// preload loads a model at startup (hooks.on_startup.preload) the way a
// request would, so the scheduler and swapper decide as usual.
func preload(ctx context.Context, r *router.Router, id string, log *slog.Logger) {
	g, err := r.Acquire(ctx, router.Request{Model: id})
	if err != nil {
		log.Warn("preload failed", "model", id, "err", err)
		return
	}
	g.Release()
	log.Info("preloaded", "model", id)
}

func policyInfo(role string, s policy.Status) proxy.PolicyInfo {
	return proxy.PolicyInfo{Role: role, Name: s.Name, Healthy: s.Healthy, Crashes: s.Crashes, Instantiations: s.Instantiations, LastError: s.LastError,
		Active: s.Active, Fallback: s.Fallback, DisabledReason: s.DisabledReason, RetryAt: s.RetryAt}
}

// loadPolicy compiles a built-in or on-disk policy and checks it is of the
// kind its place in the config needs; a built-in one's calls get
// policy.BuiltinCallTimeout.
func loadPolicy(ctx context.Context, rt *policy.Runtime, p config.Policy, want sdk.PolicyKind) (*policy.Module, error) {
	var wasm []byte
	var err error
	name := p.Wasm
	if p.Use != "" {
		name = "builtin:" + p.Use
		wasm, err = builtin.Lookup(p.Use)
	} else {
		wasm, err = readInput(ctx, p.Wasm)
	}
	if err != nil {
		return nil, fmt.Errorf("%s policy: %w", want, err)
	}
	mod, err := rt.Compile(ctx, name, wasm)
	if err != nil {
		return nil, err
	}
	if mod.Kind != want {
		return nil, fmt.Errorf("%s: is a %s policy, but it is configured as the %s", name, mod.Kind, want)
	}
	if p.Use != "" {
		mod.CallTimeout = policy.BuiltinCallTimeout // ours: a busy machine must not fail it
	}
	return mod, nil
}

// backendLauncher returns the shared launcher for a backend: a built-in one
// runs this binary as `loadout backend NAME`, any other is a plugin binary.
func backendLauncher(launchers map[string]*backend.PluginLauncher, backendName string, log *slog.Logger) (*backend.PluginLauncher, error) {
	name := backendName
	if name == config.BackendVLLM {
		name = config.BackendCmd // vLLM is an OpenAI-compatible command line
	}
	if l, ok := launchers[name]; ok {
		return l, nil
	}
	var newCmd func() *exec.Cmd
	switch name {
	case config.BackendCmd, config.BackendSim, config.BackendLlamaServer:
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		newCmd = func() *exec.Cmd { return exec.Command(exe, "backend", name) }
	default:
		newCmd = func() *exec.Cmd { return exec.Command(name) }
	}
	l := backend.NewPluginLauncher(name, newCmd, log)
	launchers[name] = l
	return l, nil
}

func modelSpec(cfg *config.Config, m *config.Model) (plugins.ModelSpec, error) {
	opts, err := m.OptionsJSON()
	if err != nil {
		return plugins.ModelSpec{}, err
	}
	check := m.CheckEndpoint
	if check == "" {
		check = "none"
	}
	// ${PORT} is left for the backend to substitute: a port taken at load
	// time is then replaced by a free one, the upstream following it.
	cmd, proxy := m.PortTemplates()
	return plugins.ModelSpec{
		Model:              m.ID,
		Cmd:                cmd,
		CmdStop:            m.CmdStop,
		Proxy:              proxy,
		CheckEndpoint:      check,
		Env:                m.Env,
		Port:               m.Port,
		HealthCheckTimeout: cfg.HealthCheckTimeout,
		Options:            opts,
	}, nil
}

func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Work with configuration files",
	}
	var listen string
	var rm routerModeOptions
	var src configSource
	check := &cobra.Command{
		Use:   "check [FILE]",
		Short: "Validate a configuration (llama-swap's format is accepted) without starting any model",
		Long: `Validate a configuration file and report what it maps to: models and their
backends, swap groups, the scheduler and router policies, and every key that
is accepted but not honoured yet. Errors name file:line:column and the key.
The scheduler and router policies are then loaded and initialised with their
settings, as serve would, so a policy that refuses its settings is reported
too. Each model's backend plugin checks the model's options (no model server
is started), and a model whose cmd names an executable this machine lacks
is warned of (its start would fail). Ports for ${PORT} are assigned as serve
would: skipping --listen's port and ports something already listens on, with
a warning for each. With no
FILE (and no --models-dir or --models-preset), the embedded default
configuration is checked. --config-dir adds a directory's *.yml and *.yaml
files, merged as serve merges them.

` + routerModeHelp + ` The report says what each GGUF and
preset section became.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				if src.path != "" {
					return fmt.Errorf("the configuration file is given twice: as an argument and --config")
				}
				src.path = args[0]
			}
			cfg, warnings, err := loadConfig(cmd.Context(), src, listen, rm)
			if err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), config.Report(cfg, warnings))
			if err := checkBackends(cmd.Context(), cfg); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "backends: every model's options well-formed (the files they name are read next)")
			if missing := missingExecutables(cfg); len(missing) > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "commands: %d not found here (a warning: those models fail to start until they are)\n  %s\n",
					len(missing), strings.Join(missing, "\n  "))
			} else {
				fmt.Fprintln(cmd.OutOrStdout(), "commands: every model's executable found")
			}
			if err := checkModelFiles(cfg, detailsLimit); err != nil {
				return err
			}
			if err := checkPolicies(cmd.Context(), cfg); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "policies: loaded and initialised with their settings")
			fmt.Fprintln(cmd.OutOrStdout(), "OK") // only now: a check above may still fail after the report
			return nil
		},
	}
	check.Flags().StringVarP(&listen, "listen", "l", defaultListen, "the address serve will listen on: its port is not handed to models")
	src.addFlags(check)
	addRouterModeFlags(check, &rm)
	cmd.AddCommand(check, newConfigDefaultCmd())
	return cmd
}

// checkModelFiles checks what backends can check without starting anything:
// the GGUF files of every llamaserver model (llamaserver.Validate) and of
// every cmd: that runs llama-server (llamaserver.ValidateCommand, as
// llama-swap's configurations do), each model's given up after limit (a
// stalled share), which is then its error, at the model's line.
func checkModelFiles(cfg *config.Config, limit time.Duration) error {
	var errs []error
	for _, id := range cfg.ModelIDs() {
		m := cfg.Models[id]
		var key string
		var check func() error
		switch m.Backend {
		case config.BackendLlamaServer:
			opts, err := m.OptionsJSON()
			key, check = "options", func() error {
				if err != nil {
					return err
				}
				return llamaserver.Validate(opts)
			}
		case config.BackendCmd:
			argv, err := config.SplitCommand(m.Cmd)
			if err != nil {
				continue // the configuration's own check reports it
			}
			key, check = "cmd", func() error { return llamaserver.ValidateCommand(argv, m.Env) }
		default:
			continue
		}
		_, err := bounded.Call(context.Background(), limit, "reading its model files", func() (struct{}, error) {
			return struct{}{}, check()
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: models.%s.%s: %w", m.Pos, id, key, err))
		}
	}
	return errors.Join(errs...)
}

// loadTLS is the TLS configuration of serve's --tls-cert-file and
// --tls-key-file: nil for neither (plain HTTP). One without the other,
// or a pair that does not load (a file missing, a key that is not the
// certificate's), is an error naming the flags.
func loadTLS(certFile, keyFile string) (*tls.Config, error) {
	switch {
	case certFile == "" && keyFile == "":
		return nil, nil
	case certFile == "" || keyFile == "":
		return nil, errors.New("--tls-cert-file and --tls-key-file go together: give both, or neither for plain HTTP")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert-file %s, --tls-key-file %s: %w", certFile, keyFile, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// uiURL is the web UI's address on addr (https when secure), for the
// start-up line: a wildcard listener (0.0.0.0, ::) is reached on this
// machine at 127.0.0.1.
func uiURL(addr net.Addr, secure bool) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	scheme := "http://"
	if secure {
		scheme = "https://"
	}
	return scheme + net.JoinHostPort(host, port) + "/ui/"
}

// missingExecutables is config check's list of models whose cmd (or, for
// the llamaserver backend, binary option) names an executable this
// machine does not have (exec.LookPath: a name on PATH,
// or a path to an executable file), one "models.ID.cmd: …" line each. A
// warning, not an error: llama-swap starts such a config, and the
// executable may come before the first request (an install, a mounted
// volume); until then the model's start fails. A model whose env sets
// PATH is looked up there by its server's start, not here: skipped.
func missingExecutables(cfg *config.Config) []string {
	var out []string
	for _, id := range cfg.ModelIDs() {
		m := cfg.Models[id]
		if slices.ContainsFunc(m.Env, func(e string) bool { return strings.HasPrefix(e, "PATH=") }) {
			continue
		}
		key, exe := "cmd", ""
		switch {
		case m.Backend == config.BackendLlamaServer:
			opts, err := m.OptionsJSON()
			if err == nil {
				exe, err = llamaserver.BinaryOf(opts)
			}
			if err != nil {
				continue // checkModelFiles reports the options
			}
			key = "options.binary"
		case m.Cmd != "":
			argv, err := config.SplitCommand(m.Cmd)
			if err != nil || len(argv) == 0 {
				continue // the config's own error
			}
			exe = argv[0]
		default:
			continue
		}
		if _, err := exec.LookPath(exe); err != nil {
			out = append(out, fmt.Sprintf("%s: models.%s.%s: %v", m.Pos, id, key, err))
		}
	}
	return out
}

// checkPolicies loads the configured scheduler and router and initialises
// them with their settings against an inert host, so that settings only the
// policy itself understands are checked too.
func checkPolicies(ctx context.Context, cfg *config.Config) error {
	log := slog.New(slog.DiscardHandler)
	rt, err := policy.NewRuntime(ctx, policy.Options{Logger: log})
	if err != nil {
		return err
	}
	defer rt.Close(context.Background())
	ps, err := loadPolicies(ctx, rt, cfg)
	if err != nil {
		return err
	}
	return ps.checkInit(ctx)
}

// inertHost is the host of `config check`: the configured models, stopped,
// as serve's host lists them at init (so a policy checks the model ids its
// settings name against the same list), no GPUs, and every effect refused.
// Policies only read at init, if at all.
type inertHost struct{ models []sdk.ModelInfo }

func newInertHost(cfg *config.Config) inertHost {
	var h inertHost
	for _, id := range cfg.ModelIDs() {
		m := cfg.Models[id]
		group := ""
		if g := cfg.GroupOf(id); g != nil {
			group = g.Name
		}
		h.models = append(h.models, sdk.ModelInfo{Name: id, Priority: int32(m.Priority), Pinned: m.Pinned,
			Group: group, ConcurrencyLimit: uint32(max(m.ConcurrencyLimit, 0)), TTL: int64(m.TTL), EstimatedVRAM: uint64(max(m.VRAM, 0))})
	}
	return h
}

func (inertHost) Log(sdk.LogLevel, string) {}
func (h inertHost) ModelState(name string) (sdk.ModelInfo, bool) {
	for _, m := range h.models {
		if m.Name == name {
			return m, true
		}
	}
	return sdk.ModelInfo{}, false
}
func (inertHost) RunningModels() []sdk.ModelInfo                  { return nil }
func (h inertHost) Snapshot() sdk.Snapshot                        { return sdk.Snapshot{Models: h.models} }
func (inertHost) GrantServe(sdk.RequestID, string) bool           { return false }
func (inertHost) GrantError(sdk.RequestID, sdk.ErrorCode, string) {}
func (inertHost) StartSwap(sdk.SwapRequest) error                 { return sdk.ErrNotAllowed }
func (inertHost) StopProcesses([]string) error                    { return sdk.ErrNotAllowed }
func (inertHost) SetQueuePosition(sdk.RequestID, int)             {}
func (inertHost) Plan(string) (sdk.Plan, error)                   { return sdk.Plan{}, sdk.ErrNotAllowed }
