package cmdbackend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/loadout-dev/loadout/internal/bounded"
	"github.com/loadout-dev/loadout/plugins"
)

// Defaults for the spec's zero values.
const (
	// DefaultHealthCheckTimeout bounds a start when the spec sets none.
	DefaultHealthCheckTimeout = 120 * time.Second
	// DefaultStopTimeout is the grace between SIGTERM and SIGKILL when
	// Stop is given none.
	DefaultStopTimeout = 10 * time.Second
	// closeTimeout is the grace Close gives every server before SIGKILL.
	closeTimeout = time.Second
)

// Version is the cmd backend's version, reported by Capabilities.
const Version = "0.1.0"

// Backend runs command-line model servers; see the package comment. The zero
// value is not usable: call New. Close stops every server.
type Backend struct {
	log *slog.Logger
	// Estimator, when set before the backend serves, estimates a model
	// server's memory from its command line (Estimate); nil: every
	// estimate is unknown.
	Estimator CommandEstimator

	mu     sync.Mutex
	procs  map[string]*process // by model id; an exited one stays until restarted
	closed bool
}

var (
	_ plugins.Backend           = (*Backend)(nil)
	_ plugins.Sleeper           = (*Backend)(nil)
	_ plugins.ResidencyReporter = (*Backend)(nil)
	_ io.Closer                 = (*Backend)(nil)
)

// New returns a Backend that logs to logger (nil: slog.Default()).
func New(logger *slog.Logger) *Backend {
	if logger == nil {
		logger = slog.Default()
	}
	return &Backend{log: logger, procs: make(map[string]*process)}
}

// Start implements plugins.Backend: it expands ${PORT} and ${MODEL_ID} in
// Cmd, CmdStop and Proxy (picking a free loopback port when Port is 0), runs
// the command and waits until the server is ready (see the package comment).
// A Port that something already listens on (plugins.CheckPortFree) is
// replaced by a free one the kernel picks, with a warning in the log, when
// the server's port is the ${PORT} macro in Cmd and the upstream follows it
// (Proxy empty or with ${PORT} too): Started.Upstream names the new port.
// Otherwise (the port written into Cmd or Proxy) the start fails before
// anything is run.
//
// The options (see the package comment) say how the server sleeps; a
// preset adds the flags its server needs to Cmd. A spec Validate reports
// problems with is refused with plugins.ProblemsError.
func (b *Backend) Start(ctx context.Context, spec plugins.ModelSpec) (plugins.Started, error) {
	o, problems := parseOptions(spec.Options)
	problems = append(problems, o.applyPreset(&spec)...)
	if len(problems) > 0 {
		return plugins.Started{}, fmt.Errorf("model %q: %w", spec.Model, plugins.ProblemsError(problems))
	}
	return b.StartServer(ctx, spec, o.sleep)
}

// StartServer is Start for a backend built on this one (sim, llamaserver):
// spec.Cmd is the server's whole command line, spec.Options are the
// caller's own and are not read, and sleep says how the server sleeps and
// wakes (the zero value: it cannot). ${PORT} and ${MODEL_ID} in sleep's
// steps are substituted as in Cmd. Sleep, Wake and Residency then serve the
// model.
func (b *Backend) StartServer(ctx context.Context, spec plugins.ModelSpec, sleep SleepConfig) (plugins.Started, error) {
	if spec.Model == "" {
		return plugins.Started{}, errors.New("start: empty model id")
	}
	var taken error // the configured port, taken by another process
	if spec.Port != 0 {
		if taken = plugins.CheckPortFree(spec.Port); taken != nil && !portMovable(spec) {
			// Another process answers there (a second Loadout's model,
			// any server): launching there would only make the server
			// fail to bind while that process answers its checks.
			return plugins.Started{}, fmt.Errorf("model %q: not started: %w (another process listens there: stop it, or change startPort)", spec.Model, taken)
		}
	}
	if spec.Port == 0 || taken != nil {
		port, err := freePort()
		if err != nil {
			return plugins.Started{}, fmt.Errorf("model %q: pick a port: %w", spec.Model, err)
		}
		if taken != nil {
			b.log.Warn("model port taken by another process; the server starts on a free port instead",
				"model", spec.Model, "port", spec.Port, "new_port", port, "err", taken)
		}
		spec.Port = port
	}
	macros := strings.NewReplacer("${PORT}", strconv.Itoa(spec.Port), "${MODEL_ID}", spec.Model)
	spec.Cmd = macros.Replace(spec.Cmd)
	spec.CmdStop = macros.Replace(spec.CmdStop)
	spec.Proxy = macros.Replace(spec.Proxy)
	sleep = sleep.expand(macros)

	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return plugins.Started{}, fmt.Errorf("model %q: backend is shutting down", spec.Model)
	}
	if p := b.procs[spec.Model]; p != nil && !p.exited() {
		b.mu.Unlock()
		return plugins.Started{}, fmt.Errorf("model %q: %w", spec.Model, plugins.ErrAlreadyRunning)
	}
	p, err := launch(spec, sleep, b.log)
	if err != nil {
		b.mu.Unlock()
		return plugins.Started{}, err
	}
	b.procs[spec.Model] = p
	b.mu.Unlock()

	timeout := spec.HealthCheckTimeout
	if timeout <= 0 {
		timeout = DefaultHealthCheckTimeout
	}
	if err := p.waitReady(ctx, timeout); err != nil {
		p.signal(syscall.SIGKILL)
		<-p.done
		return plugins.Started{}, err
	}
	return plugins.Started{Upstream: p.upstream, Pids: []int{p.pid}}, nil
}

// Stop implements plugins.Backend.
func (b *Backend) Stop(ctx context.Context, model string, timeout time.Duration) error {
	p, err := b.lookup(model)
	if err != nil {
		return err
	}
	if timeout <= 0 {
		timeout = DefaultStopTimeout
	}
	return p.stop(ctx, timeout)
}

// Health implements plugins.Backend; a ready server is probed once, within
// nine tenths of the call's time (answerBefore): a server that does not
// answer is this call's message, so the host tells it from a plugin that
// did not answer the call.
func (b *Backend) Health(ctx context.Context, model string) (plugins.Health, error) {
	p, err := b.lookup(model)
	if err != nil {
		return plugins.Health{}, err
	}
	h := plugins.Health{State: p.getState()}
	switch h.State {
	case plugins.StateReady:
		if p.checkURL == "" {
			h.Ready = true
			break
		}
		pctx, cancel := answerBefore(ctx)
		err := p.probe(pctx)
		cancel()
		if err != nil {
			h.Message = err.Error()
		} else {
			h.Ready = true
		}
	case plugins.StateExited:
		if err := p.exitInfo().Err(); err != nil {
			h.Message = err.Error()
		} else {
			h.Message = "stopped"
		}
	default:
		h.Message = string(h.State)
	}
	return h, nil
}

// CommandEstimator estimates the memory of a model server run by a command
// line: argv is its words (${MODEL_ID} substituted, ${PORT} as written),
// env the model's env entries (KEY=VALUE), devices the GPUs it will have
// (0: unplaced yet). An estimate not Known, with no error, is a command it
// cannot tell; an error, one it could tell but for a bad value or file.
// cmd/loadout sets llama-server's (llamaserver.EstimateCommand), which
// reads the GGUF file the command names.
type CommandEstimator func(argv, env []string, devices int) (plugins.Estimate, error)

// ModelFileLimit bounds a backend's reads of model files within one call
// (a stalled disk or network share can hang them): an estimate's, the
// Estimator's here and the llamaserver backend's, and the llamaserver
// backend's check of its files in Start. Past it the estimate is unknown,
// or the start fails, and the plugin answers well inside the host's
// deadline for the call, whose miss would kill the plugin with every model
// server it runs.
const ModelFileLimit = 10 * time.Second

// Estimate implements plugins.Backend: the Estimator's estimate from the
// model's command line (split as Start splits it), or unknown where there
// is none or the command cannot be split. Errors: the Estimator's, with
// the model's id; one that took longer than ModelFileLimit (or the
// caller's deadline), which is left to finish on its own.
func (b *Backend) Estimate(ctx context.Context, spec plugins.ModelSpec) (plugins.Estimate, error) {
	if b.Estimator == nil {
		return plugins.Estimate{}, nil
	}
	argv, err := plugins.SplitCommand(strings.ReplaceAll(spec.Cmd, "${MODEL_ID}", spec.Model))
	if err != nil {
		return plugins.Estimate{}, nil // Validate and Start report it
	}
	e, err := bounded.Call(ctx, ModelFileLimit, "reading its model file", func() (plugins.Estimate, error) {
		return b.Estimator(argv, spec.Env, len(spec.Devices))
	})
	if err != nil {
		return plugins.Estimate{}, fmt.Errorf("model %q: %w", spec.Model, err)
	}
	return e, nil
}

// Stats implements plugins.Backend: the pids of the server's process group;
// MemoryBytes stays 0 (the host measures device memory by pid).
func (b *Backend) Stats(_ context.Context, model string) (plugins.Stats, error) {
	p, err := b.lookup(model)
	if err != nil {
		return plugins.Stats{}, err
	}
	if p.exited() {
		return plugins.Stats{}, nil
	}
	return plugins.Stats{Pids: groupPids(p.pid)}, nil
}

// Capabilities implements plugins.Backend. The cmd backend can sleep at
// both levels and reports residency; whether a model's server can is its
// options' to say (Sleep answers plugins.ErrNotSupported for one that
// configures no sleep).
func (b *Backend) Capabilities(context.Context) (plugins.Capabilities, error) {
	features := []string{plugins.FeatureSleep, plugins.FeatureSleepLevel2, plugins.FeatureResidency}
	if b.Estimator != nil {
		features = append(features, plugins.FeatureEstimate) // for the commands it can tell
	}
	return plugins.Capabilities{Name: "cmd", Version: Version, Features: features}, nil
}

// Sleep implements plugins.Sleeper: it runs the model's sleep steps, in
// order, with ${level} substituted, then (with is_sleeping) waits until the
// server says it sleeps, all within timeout (<= 0: DefaultSleepTimeout),
// and returns once it does. Errors: plugins.ErrUnknownModel;
// plugins.ErrNotSupported for a level the model's options do not offer (or
// no sleep configured); plugins.ErrNotRunning for a server not ready; a
// step that failed (a non-2xx answer, a command's failure), quoting its
// answer; the deadline, saying what the server answered last. A failed
// sleep leaves the record awake: the host stops such a server.
// Sleeping a server asleep at the same level returns nil.
func (b *Backend) Sleep(ctx context.Context, model string, level plugins.SleepLevel, timeout time.Duration) error {
	p, err := b.lookup(model)
	if err != nil {
		return err
	}
	return p.sleepAt(ctx, level, timeout)
}

// Wake implements plugins.Sleeper: it runs the model's wake steps (after a
// level 2 sleep its wake_level_2 steps, where set), then waits until the
// check endpoint answers 2xx and, with is_sleeping, the server says it is
// awake, all within timeout (<= 0: DefaultWakeTimeout). A wake that hangs
// ends at the deadline with an error; the server is left asleep in the
// record. Waking a running server returns nil. Errors:
// plugins.ErrUnknownModel; plugins.ErrNotSupported for a model that cannot
// sleep; plugins.ErrNotRunning with the exit of a server that died asleep.
func (b *Backend) Wake(ctx context.Context, model string, timeout time.Duration) error {
	p, err := b.lookup(model)
	if err != nil {
		return err
	}
	return p.wake(ctx, timeout)
}

// Residency implements plugins.ResidencyReporter: stopped once the server
// has exited (asleep or not), asleep at its level after a Sleep (or, with
// is_sleeping, when the server says it fell asleep by itself: at the
// deepest level it offers), else running. DeviceBytes and HostBytes stay
// 0: a command line says nothing of memory, and the host measures by pid.
func (b *Backend) Residency(ctx context.Context, model string) (plugins.Residency, error) {
	p, err := b.lookup(model)
	if err != nil {
		return plugins.Residency{}, err
	}
	return p.residency(ctx), nil
}

// Wait implements plugins.Backend.
func (b *Backend) Wait(ctx context.Context, model string) (plugins.Exit, error) {
	p, err := b.lookup(model)
	if err != nil {
		return plugins.Exit{}, err
	}
	select {
	case <-p.done:
		return p.exitInfo(), nil
	case <-ctx.Done():
		return plugins.Exit{}, fmt.Errorf("model %q: wait: %w", model, ctx.Err())
	}
}

// Validate implements plugins.Backend: the options as Start reads them
// (see the package comment), and, with a preset, whether its flags can be
// added to Cmd. Cmd itself is the host configuration's to check.
func (b *Backend) Validate(_ context.Context, spec plugins.ModelSpec) ([]plugins.Problem, error) {
	o, problems := parseOptions(spec.Options)
	return append(problems, o.applyPreset(&spec)...), nil
}

// Close stops every server (SIGTERM, SIGKILL after a second) and refuses
// later starts. plugins.Serve calls it when the plugin shuts down.
func (b *Backend) Close() error {
	b.mu.Lock()
	b.closed = true
	procs := make([]*process, 0, len(b.procs))
	for _, p := range b.procs {
		procs = append(procs, p)
	}
	b.mu.Unlock()

	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = p.stop(context.Background(), closeTimeout)
		}()
	}
	wg.Wait()
	return nil
}

func (b *Backend) lookup(model string) (*process, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.procs[model]
	if p == nil {
		return nil, fmt.Errorf("model %q: %w", model, plugins.ErrUnknownModel)
	}
	return p, nil
}

// portMovable reports whether spec's server may be started on another port
// than spec.Port: its port is the ${PORT} macro in Cmd, and its upstream
// follows (Proxy is empty, the default http://127.0.0.1:${PORT}, or names
// ${PORT} too).
func portMovable(spec plugins.ModelSpec) bool {
	return strings.Contains(spec.Cmd, "${PORT}") && (spec.Proxy == "" || strings.Contains(spec.Proxy, "${PORT}"))
}

// freePort asks the kernel for a free loopback TCP port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// answerBefore is ctx with a deadline a tenth of its time left earlier
// (none: ctx as it is), for work whose failure the call must still be
// able to report before its caller's deadline.
func answerBefore(ctx context.Context) (context.Context, context.CancelFunc) {
	d, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, d.Add(-time.Until(d)/10))
}
