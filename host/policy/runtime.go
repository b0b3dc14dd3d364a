package policy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// Defaults for the zero values of Options.
const (
	DefaultMemoryLimitPages = 1024                   // 64 MiB of guest memory (a page is 64 KiB)
	DefaultCallTimeout      = 100 * time.Millisecond // per event
	DefaultMaxCrashes       = 5                      // crashes tolerated within DefaultCrashWindow
	DefaultCrashWindow      = time.Minute            // the crash-loop window
	DefaultCrashCalls       = 100                    // the crash-loop window in calls
)

// BuiltinCallTimeout is the deadline serve gives the built-in policies
// (Module.CallTimeout). The deadline is wall time, and a busy machine — a
// CPU model server on every core — can keep a policy call off a CPU for
// longer than DefaultCallTimeout: a built-in policy, this project's own
// code and tested not to loop, must not be declared crashed (and the
// requests it held failed) for that. Its deadline guards against a bug of
// ours; a module from disk keeps DefaultCallTimeout.
const BuiltinCallTimeout = time.Second

// defaultStartTimeout bounds instantiating a module: _initialize (the Go
// runtime's start-up, ~3 ms), abi_buffers and init together. It is larger
// than a call's deadline because a Go guest's start-up is, but a module that
// loops in its start function must not hang the host either.
const defaultStartTimeout = 2 * time.Second

// Options configures a Runtime. The zero value is usable: every zero field
// takes its default.
type Options struct {
	// CacheDir is wazero's compilation cache directory. "" means
	// os.UserCacheDir()/loadout/wazero; if that cannot be made, the runtime
	// compiles without a cache and logs why.
	CacheDir string
	// MemoryLimitPages caps each instance's linear memory, in 64 KiB pages.
	// 0 means DefaultMemoryLimitPages (64 MiB); above MaxMemoryLimitPages
	// NewRuntime fails (CheckMemoryLimitPages).
	MemoryLimitPages uint32
	// CallTimeout is the deadline of one call into a policy; the time a
	// scheduler waits for a nested swapper plan does not count against it.
	// 0 means DefaultCallTimeout (100 ms).
	CallTimeout time.Duration
	// MaxCrashes is the number of crashes tolerated within CrashWindow: one
	// more disables the policy (ErrUnhealthy). 0 means DefaultMaxCrashes.
	MaxCrashes int
	// CrashWindow is the sliding window MaxCrashes counts in. 0 means
	// DefaultCrashWindow (1 minute).
	CrashWindow time.Duration
	// CrashCalls is the window MaxCrashes also counts in, in calls into
	// the policy: more than MaxCrashes crashes within the last CrashCalls
	// calls disable it too, however far apart in time (a policy that
	// crashes at every request, requests minutes apart). 0 means
	// DefaultCrashCalls (100).
	CrashCalls int
	// Logger receives the runtime's log lines and the policies' own (each
	// with policy=<name>). nil discards them.
	Logger *slog.Logger
	// Trusted turns wazero's loop checks off (WithCloseOnContextDone).
	// The checks are what stops a policy that loops at its call
	// deadline, and they cost a Go guest two to four times its run time:
	// every loop header of Go's Wasm code exits to the host and back
	// (docs/RATIONALE.md, "Per-call deadline mechanism"). Without them a
	// call that overruns its deadline is still caught when it returns
	// (the instance is discarded, as with the checks), but one that never
	// returns hangs its caller. Only for modules whose code is trusted:
	// `loadout simulate` sets it for replays whose policies are all
	// built-in (this repository's tested code) or when asked to
	// (--trust-policies); serve never does.
	Trusted bool
	// Clock is the time InitEvent.Now carries and crash-loop detection
	// counts by; nil means the wall clock. `loadout simulate` sets it to
	// its virtual clock, so a replay is the same whatever the machine.
	// Call latency statistics always use the wall clock.
	Clock func() time.Time
}

// MaxMemoryLimitPages is the most memory a 32-bit WebAssembly module can
// address, in 64 KiB pages: 65,536, 4 GiB (the WebAssembly core
// specification's limit; wazero panics above it).
const MaxMemoryLimitPages = 65536

// CheckMemoryLimitPages checks a memory limit in 64 KiB pages. Errors: 0,
// or above MaxMemoryLimitPages.
func CheckMemoryLimitPages(pages uint32) error {
	if pages < 1 || pages > MaxMemoryLimitPages {
		return fmt.Errorf("memory limit: want 1 to %d pages of 64 KiB (4 GiB, WebAssembly's most), got %d", MaxMemoryLimitPages, pages)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.MemoryLimitPages == 0 {
		o.MemoryLimitPages = DefaultMemoryLimitPages
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.MaxCrashes <= 0 {
		o.MaxCrashes = DefaultMaxCrashes
	}
	if o.CrashWindow <= 0 {
		o.CrashWindow = DefaultCrashWindow
	}
	if o.CrashCalls <= 0 {
		o.CrashCalls = DefaultCrashCalls
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Runtime compiles and instantiates policy modules. It holds one wazero
// runtime (compiler engine) with WASI preview 1 and the loadout_v2 host
// module. Compile, NewScheduler and NewSwapper may be called from any
// goroutine; each Scheduler and Swapper from one goroutine at a time.
type Runtime struct {
	opts     Options
	log      *slog.Logger
	wz       wazero.Runtime
	cache    wazero.CompilationCache // nil when compiling without a cache
	cacheDir string                  // "" without a cache
	modCfg   wazero.ModuleConfig     // base config of every instance
	provided map[string]map[string]api.FunctionDefinition
	// startTimeout bounds one instantiation (_initialize, abi_buffers, init).
	startTimeout time.Duration
	closed       atomic.Bool
	// compiling is held shared by each Compile and exclusively by Close:
	// wazero panics when its runtime closes under a compilation (serve
	// compiles the fallback policies in the background, so a shutdown
	// soon after start would meet one), so Close waits for them.
	compiling sync.RWMutex
}

// NewRuntime makes a Runtime: wazero's compiler engine with a compilation
// cache, the memory limit and close-on-context-done (which the per-call
// deadline relies on to stop a guest that loops; off when opts.Trusted),
// WASI preview 1 without filesystem, environment, arguments, stdin, clock
// or real randomness, and the loadout_v2 host module.
func NewRuntime(ctx context.Context, opts Options) (*Runtime, error) {
	opts = opts.withDefaults()
	if err := CheckMemoryLimitPages(opts.MemoryLimitPages); err != nil {
		return nil, err
	}
	r := &Runtime{opts: opts, log: opts.Logger, startTimeout: max(defaultStartTimeout, 20*opts.CallTimeout)}

	cfg := wazero.NewRuntimeConfigCompiler().
		WithMemoryLimitPages(opts.MemoryLimitPages).
		WithCloseOnContextDone(!opts.Trusted)
	r.cache, r.cacheDir = openCache(opts.CacheDir, r.log)
	if r.cache != nil {
		cfg = cfg.WithCompilationCache(r.cache)
	}
	r.wz = wazero.NewRuntimeWithConfig(ctx, cfg)

	// WASI preview 1 for the Go runtime's needs (fd_write, proc_exit,
	// random_get, clock_time_get). The module config below gives it nothing:
	// wazero's defaults are no filesystem, environment or arguments, an
	// empty stdin, a fake clock and a deterministic random source.
	wasi_snapshot_preview1.MustInstantiate(ctx, r.wz)

	b := r.wz.NewHostModuleBuilder(hostModuleName)
	for _, imp := range hostImports() {
		b.NewFunctionBuilder().
			WithGoModuleFunction(imp.fn, imp.sig.params, imp.sig.results).
			WithName(imp.name).
			Export(imp.name)
	}
	if _, err := b.Instantiate(ctx); err != nil {
		_ = r.Close(ctx)
		return nil, fmt.Errorf("policy runtime: instantiating %s: %w", hostModuleName, err)
	}

	r.provided = map[string]map[string]api.FunctionDefinition{}
	for _, name := range []string{hostModuleName, wasiModuleName} {
		r.provided[name] = r.wz.Module(name).ExportedFunctionDefinitions()
	}
	r.modCfg = wazero.NewModuleConfig().
		WithName(""). // anonymous: one module may be instantiated many times
		WithStartFunctions("_initialize")
	return r, nil
}

// openCache opens wazero's compilation cache in dir (or the default
// directory), returning nil and logging why when it cannot.
func openCache(dir string, log *slog.Logger) (wazero.CompilationCache, string) {
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			log.Warn("policy runtime: no user cache directory; compiling without a cache", "err", err)
			return nil, ""
		}
		dir = filepath.Join(base, "loadout", "wazero")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		log.Warn("policy runtime: cannot make the compilation cache; compiling without it", "dir", dir, "err", err)
		return nil, ""
	}
	c, err := wazero.NewCompilationCacheWithDir(dir)
	if err != nil {
		log.Warn("policy runtime: cannot open the compilation cache; compiling without it", "dir", dir, "err", err)
		return nil, ""
	}
	return c, dir
}

// CacheDir returns the compilation cache directory in use, or "" when the
// runtime compiles without a cache.
func (r *Runtime) CacheDir() string { return r.cacheDir }

// Close closes every module and instance the runtime made, then the
// compilation cache, after waiting for compilations under way (a Compile
// afterwards fails). Schedulers and Swappers fail every call afterwards.
func (r *Runtime) Close(ctx context.Context) error {
	r.compiling.Lock()
	defer r.compiling.Unlock()
	if r.closed.Swap(true) {
		return nil
	}
	err := r.wz.Close(ctx)
	if r.cache != nil {
		if cerr := r.cache.Close(ctx); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("policy runtime: closing: %w", err)
	}
	return nil
}

// moduleConfig returns the config of one new instance whose stdout and
// stderr go to out.
func (r *Runtime) moduleConfig(out io.Writer) wazero.ModuleConfig {
	return r.modCfg.WithStdout(out).WithStderr(out)
}
