package plugins

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"
)

// Client is the host's handle on one running backend plugin process. It
// implements Backend by calling the plugin over gRPC; once the plugin has
// exited every call fails with an error wrapping ErrPluginExited. Its
// methods are safe for concurrent use.
type Client struct {
	rpc  *grpcClient
	pc   *plugin.Client
	proc *procRunner
	log  *slog.Logger
	hung sync.Once // the plugin missed a deadline and is being killed
	// condemned is set when hung's kill is decided, before it starts
	// (Condemned).
	condemned atomic.Bool
	// limits are the calls' deadlines (bounded); DefaultCallLimits
	// unless SetCallLimits changed them.
	limits CallLimits
}

var _ Backend = (*Client)(nil)

// Launch starts cmd (unstarted, with Stdout and Stderr unset: the handshake
// and the plugin's log use them) as a backend plugin, performs the handshake
// and returns a connected Client. The plugin gets cmd.Env (nil: the host's
// environment) plus the handshake variables. ctx bounds the launch only, not
// the plugin's life, and so does LaunchLimit: a plugin that has not
// completed the handshake by then is killed (the error wraps ErrPluginHung). On Linux the plugin gets SIGTERM if the host dies
// (unless cmd.SysProcAttr is already set), so it can stop its model servers.
// logger receives go-plugin's lines and the plugin's log; nil means
// slog.Default().
func Launch(ctx context.Context, cmd *exec.Cmd, logger *slog.Logger) (*Client, error) {
	if logger == nil {
		logger = slog.Default()
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = pluginSysProcAttr()
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, LaunchLimit)
	defer cancel()
	proc := &procRunner{cmd: cmd, done: make(chan struct{})}
	pc := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  handshake,
		VersionedPlugins: versionedPlugins(nil),
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           newHCLogger(logger, "backend-plugin"),
		// go-plugin hands the runner a blank command carrying only its own
		// variables (SkipHostEnv); they go on top of cmd's environment.
		SkipHostEnv: true,
		RunnerFunc: func(_ hclog.Logger, blank *exec.Cmd, _ string) (runner.Runner, error) {
			if cmd.Env == nil {
				cmd.Env = os.Environ()
			}
			cmd.Env = append(cmd.Env, blank.Env...)
			return proc, proc.init()
		},
	})

	type result struct {
		b   *grpcClient
		err error
	}
	ch := make(chan result, 1)
	go func() {
		rpc, err := pc.Client()
		if err != nil {
			ch <- result{err: err}
			return
		}
		raw, err := rpc.Dispense(pluginName)
		if err != nil {
			ch <- result{err: err}
			return
		}
		ch <- result{b: raw.(*grpcClient)}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			pc.Kill()
			return nil, fmt.Errorf("launch backend plugin %s: %w", cmd.Path, handshakeError(r.err))
		}
		return &Client{rpc: r.b, pc: pc, proc: proc, log: logger, limits: DefaultCallLimits}, nil
	case <-ctx.Done():
		// go-plugin holds its lock for the whole handshake: end the process
		// first so the handshake fails at once, then clean up.
		proc.abandon()
		<-ch
		pc.Kill()
		if parent.Err() == nil {
			return nil, fmt.Errorf("launch backend plugin %s: no handshake within %s: %w", cmd.Path, LaunchLimit, ErrPluginHung)
		}
		return nil, fmt.Errorf("launch backend plugin %s: %w", cmd.Path, ctx.Err())
	}
}

// ErrProtocolVersion is wrapped by Launch's error for a plugin that speaks
// no protocol version this host speaks (OldestProtocolVersion to
// ProtocolVersion); the message names the plugin's version and the host's.
var ErrProtocolVersion = errors.New("backend plugin speaks another protocol version")

// go-plugin's handshake errors, as go-plugin v1.8 words them.
var (
	incompatibleRE = regexp.MustCompile(`(?i)incompatible API version with plugin\. Plugin version: (\d+)`)
	unrecognizedRE = regexp.MustCompile(`Unrecognized remote plugin message: ([^\n]*)`)
)

// handshakeError says in a backend author's words what went wrong in
// go-plugin's handshake (err is go-plugin's error, kept wrapped).
func handshakeError(err error) error {
	msg := err.Error()
	if m := incompatibleRE.FindStringSubmatch(msg); m != nil {
		v, _ := strconv.Atoi(m[1])
		advice := "rebuild it against a newer " + ModulePath
		if v > ProtocolVersion {
			advice = "upgrade loadout, or build the plugin against an older " + ModulePath
		}
		return fmt.Errorf("%w: the plugin speaks protocol version %d, this host speaks versions %d to %d; %s",
			ErrProtocolVersion, v, OldestProtocolVersion, ProtocolVersion, advice)
	}
	if m := unrecognizedRE.FindStringSubmatch(msg); m != nil {
		if strings.Contains(msg, "Failed to read any lines") {
			return fmt.Errorf("it exited or closed its stdout before the handshake: not a loadout backend plugin (its main must call plugins.Serve), or it failed at start (see its stderr in the log): %w", err)
		}
		return fmt.Errorf("it wrote %q to stdout before the handshake: a plugin's stdout carries go-plugin's handshake line only, so log to stderr (plugins.Logger): %w", m[1], err)
	}
	return err
}

// ModulePath is the Go module of this package, which a backend plugin
// requires.
const ModulePath = "github.com/loadout-dev/loadout/plugins"

// ProtocolVersion returns the protocol version negotiated with the plugin at
// the handshake: OldestProtocolVersion to ProtocolVersion. The calls a
// version lacks (Sleep, Wake and Residency below 2) fail with
// ErrNotSupported without reaching the plugin.
func (c *Client) ProtocolVersion() int { return c.pc.NegotiatedVersion() }

// Every call into a plugin has a deadline (issue "Hung, not dead"): a
// plugin that misses one is taken as hung, not slow, and is killed, so
// its model servers die with it and the host's watchers see it exit
// (Done). The deadline is the work the call asks of the plugin — which the
// plugin bounds itself: Start by spec.HealthCheckTimeout, Stop by its
// timeout — plus CallLimits.Grace; calls that do no slow work get
// CallLimits.Quick.
// A deadline of the caller's own ctx that passes first is the caller's
// choice, not a miss: the plugin is then left alone. Wait has no deadline:
// it lasts as long as the model server, and a plugin that hangs under it
// is caught by the next call that has one.
type CallLimits struct {
	// Grace is what a plugin may take beyond the work a call bounds
	// (Start, Stop): the gRPC round trip and the plugin's bookkeeping.
	Grace time.Duration
	// Quick bounds Health, Stats, Capabilities and Validate, which start
	// nothing and read no model file.
	Quick time.Duration
	// Estimate bounds Estimate, which may read a model file's metadata
	// (a GGUF header) from a slow disk.
	Estimate time.Duration
}

// DefaultCallLimits are a Client's limits unless SetCallLimits changes
// them: 10 s of grace, 10 s for quick calls, 60 s for an estimate.
var DefaultCallLimits = CallLimits{Grace: 10 * time.Second, Quick: 10 * time.Second, Estimate: time.Minute}

// SetCallLimits replaces c's call limits; zero fields keep the current
// ones. Call it before c is shared (tests use short limits).
func (c *Client) SetCallLimits(l CallLimits) {
	if l.Grace > 0 {
		c.limits.Grace = l.Grace
	}
	if l.Quick > 0 {
		c.limits.Quick = l.Quick
	}
	if l.Estimate > 0 {
		c.limits.Estimate = l.Estimate
	}
}

const (
	// defaultStartWork is the readiness wait of a Start whose spec sets
	// no HealthCheckTimeout (the backends' default).
	defaultStartWork = 120 * time.Second
	// defaultStopWork is the stop a backend grants before SIGKILL when
	// the call says none (backends/cmd: 10 s).
	defaultStopWork = 10 * time.Second
	// LaunchLimit bounds launching a plugin: the process start and the
	// go-plugin handshake.
	LaunchLimit = 30 * time.Second
)

// deadlineSlack is how close to a call's deadline an error counts as the
// deadline's: the plugin's side of the stream may be reset by it a moment
// before the host's timer fires.
const deadlineSlack = 50 * time.Millisecond

// ErrPluginHung is wrapped by the error of a call the plugin did not
// answer within its deadline; the plugin has been killed by then.
var ErrPluginHung = errors.New("backend plugin did not answer in time")

// bounded runs call with a deadline of limit on top of ctx's. When that
// deadline, not ctx's, passes before the plugin answers, the plugin is
// killed (in the background: the caller does not wait for it) and the
// error wraps ErrPluginHung and ErrPluginExited.
func (c *Client) bounded(ctx context.Context, what string, limit time.Duration, call func(context.Context) error) error {
	cctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	deadline, _ := cctx.Deadline()
	err := call(cctx)
	// The plugin sees the same deadline (gRPC carries it): an error that
	// comes back at it — the host's own deadline, or the plugin's stream
	// reset when the deadline reached it first — is the plugin missing it.
	late := errors.Is(cctx.Err(), context.DeadlineExceeded) || time.Until(deadline) < deadlineSlack
	if err == nil || ctx.Err() != nil || !late {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !d.After(deadline) {
		// The caller's own deadline bounded the call, not the limit: the
		// plugin may answer it a moment before it passes here (gRPC
		// carries it), which is no missed deadline of the plugin's.
		return err
	}
	if c.Exited() {
		return err
	}
	c.hung.Do(func() {
		c.condemned.Store(true)
		c.log.Error("backend plugin did not answer in time; killing it", "call", what, "limit", limit.String(), "pid", c.proc.ID())
		go func() {
			// No graceful shutdown: a plugin that missed a deadline would
			// not answer the request for one either. Its model servers
			// die with it (their Pdeathsig).
			_ = c.proc.Kill(context.Background())
			c.Kill()
		}()
	})
	return fmt.Errorf("%s: %w after %s, so it was killed (%w)", what, ErrPluginHung, limit, ErrPluginExited)
}

// Start calls Backend.Start in the plugin, bounded by the spec's
// HealthCheckTimeout plus CallLimits.Grace.
func (c *Client) Start(ctx context.Context, spec ModelSpec) (started Started, err error) {
	work := spec.HealthCheckTimeout
	if work <= 0 {
		work = defaultStartWork
	}
	err = c.bounded(ctx, "Start", work+c.limits.Grace, func(ctx context.Context) (err error) {
		started, err = c.rpc.Start(ctx, spec)
		return err
	})
	return started, err
}

// Stop calls Backend.Stop in the plugin, bounded by timeout (<= 0: the
// backends' default of 10 s) plus CallLimits.Grace.
func (c *Client) Stop(ctx context.Context, model string, timeout time.Duration) error {
	work := timeout
	if work <= 0 {
		work = defaultStopWork
	}
	return c.bounded(ctx, "Stop", work+c.limits.Grace, func(ctx context.Context) error {
		return c.rpc.Stop(ctx, model, timeout)
	})
}

// Health calls Backend.Health in the plugin, bounded by CallLimits.Quick.
func (c *Client) Health(ctx context.Context, model string) (h Health, err error) {
	err = c.bounded(ctx, "Health", c.limits.Quick, func(ctx context.Context) (err error) {
		h, err = c.rpc.Health(ctx, model)
		return err
	})
	return h, err
}

// Estimate calls Backend.Estimate in the plugin, bounded by CallLimits.Estimate.
func (c *Client) Estimate(ctx context.Context, spec ModelSpec) (e Estimate, err error) {
	err = c.bounded(ctx, "Estimate", c.limits.Estimate, func(ctx context.Context) (err error) {
		e, err = c.rpc.Estimate(ctx, spec)
		return err
	})
	return e, err
}

// Stats calls Backend.Stats in the plugin, bounded by CallLimits.Quick.
func (c *Client) Stats(ctx context.Context, model string) (st Stats, err error) {
	err = c.bounded(ctx, "Stats", c.limits.Quick, func(ctx context.Context) (err error) {
		st, err = c.rpc.Stats(ctx, model)
		return err
	})
	return st, err
}

// Capabilities calls Backend.Capabilities in the plugin, bounded by
// CallLimits.Quick.
func (c *Client) Capabilities(ctx context.Context) (caps Capabilities, err error) {
	err = c.bounded(ctx, "Capabilities", c.limits.Quick, func(ctx context.Context) (err error) {
		caps, err = c.rpc.Capabilities(ctx)
		return err
	})
	return caps, err
}

// Wait calls Backend.Wait in the plugin: it returns when the model server
// has exited, or with an error wrapping ErrPluginExited when the plugin has.
// It has no deadline of its own (see bounded).
func (c *Client) Wait(ctx context.Context, model string) (Exit, error) {
	return c.rpc.Wait(ctx, model)
}

// Validate calls Backend.Validate in the plugin, bounded by
// CallLimits.Quick; a plugin built before Validate existed reports no
// problems.
func (c *Client) Validate(ctx context.Context, spec ModelSpec) (problems []Problem, err error) {
	err = c.bounded(ctx, "Validate", c.limits.Quick, func(ctx context.Context) (err error) {
		problems, err = c.rpc.Validate(ctx, spec)
		return err
	})
	return problems, err
}

var (
	_ Sleeper           = (*Client)(nil)
	_ ResidencyReporter = (*Client)(nil)
)

// defaultSleepWork and defaultWakeWork are the work of a Sleep or Wake
// whose call names no timeout: a level 1 sleep copies the weights to host
// RAM, a wake copies them back or (level 2) reloads them from disk.
const (
	defaultSleepWork = 60 * time.Second
	defaultWakeWork  = 120 * time.Second
)

// needs returns an error wrapping ErrNotSupported when the negotiated
// protocol version is older than version, which call needs.
func (c *Client) needs(call string, version int) error {
	if v := c.ProtocolVersion(); v < version {
		return fmt.Errorf("%s: the plugin speaks protocol version %d, and %s needs version %d: %w", call, v, call, version, ErrNotSupported)
	}
	return nil
}

// Sleep calls Sleeper.Sleep in the plugin (protocol version 2), bounded by
// timeout (<= 0: 60 s) plus CallLimits.Grace. A plugin of version 1, or
// one that does not implement it, gives an error wrapping ErrNotSupported.
func (c *Client) Sleep(ctx context.Context, model string, level SleepLevel, timeout time.Duration) error {
	if err := c.needs("Sleep", 2); err != nil {
		return err
	}
	work := timeout
	if work <= 0 {
		work = defaultSleepWork
	}
	return c.bounded(ctx, "Sleep", work+c.limits.Grace, func(ctx context.Context) error {
		return c.rpc.Sleep(ctx, model, level, timeout)
	})
}

// Wake calls Sleeper.Wake in the plugin (protocol version 2), bounded by
// timeout (<= 0: 120 s) plus CallLimits.Grace; errors as for Sleep.
func (c *Client) Wake(ctx context.Context, model string, timeout time.Duration) error {
	if err := c.needs("Wake", 2); err != nil {
		return err
	}
	work := timeout
	if work <= 0 {
		work = defaultWakeWork
	}
	return c.bounded(ctx, "Wake", work+c.limits.Grace, func(ctx context.Context) error {
		return c.rpc.Wake(ctx, model, timeout)
	})
}

// Residency calls ResidencyReporter.Residency in the plugin (protocol
// version 2), bounded by CallLimits.Quick; errors as for Sleep.
func (c *Client) Residency(ctx context.Context, model string) (r Residency, err error) {
	if err := c.needs("Residency", 2); err != nil {
		return Residency{}, err
	}
	err = c.bounded(ctx, "Residency", c.limits.Quick, func(ctx context.Context) (err error) {
		r, err = c.rpc.Residency(ctx, model)
		return err
	})
	return r, err
}

// Done is closed once the plugin process has exited, for whatever reason.
func (c *Client) Done() <-chan struct{} { return c.proc.done }

// Exited reports whether the plugin process has exited.
func (c *Client) Exited() bool {
	select {
	case <-c.proc.done:
		return true
	default:
		return false
	}
}

// Condemned reports whether no new call should go to the plugin: it has
// exited, or it missed a call's deadline and is being killed (bounded),
// which leaves its process running, and Exited false, for a few
// milliseconds more. PluginLauncher launches a new plugin in its place at
// once, so a request that comes in that moment does not fail on the old
// one.
func (c *Client) Condemned() bool { return c.condemned.Load() || c.Exited() }

// Kill ends the plugin: it asks it to shut down (it then stops its model
// servers), kills it after two seconds and returns once it has exited. A
// plugin that does not answer the request to shut down (stopped, wedged)
// is killed after killGrace: go-plugin alone would wait for its answer
// forever. It is safe to call more than once, and after the plugin has
// exited.
func (c *Client) Kill() {
	done := make(chan struct{})
	go func() {
		c.pc.Kill()
		close(done)
	}()
	t := time.NewTimer(killGrace)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	}
	_ = c.proc.Kill(context.Background())
	<-done
}

// killGrace is how long Kill waits for go-plugin's graceful shutdown (it
// gives the plugin two seconds once its request is answered) before it
// kills the process itself.
const killGrace = 3 * time.Second

// procRunner runs the plugin process for go-plugin and, unlike go-plugin's
// own runner, tells the host the moment the process has exited (done).
type procRunner struct {
	cmd            *exec.Cmd
	stdout, stderr io.ReadCloser
	done           chan struct{}

	mu     sync.Mutex // guards pid, killed and the start/kill race
	pid    int
	killed bool // Kill came first: Start must not start

	waitOnce sync.Once
	waitErr  error
}

var _ runner.Runner = (*procRunner)(nil)

func (r *procRunner) init() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var err error
	if r.stdout, err = r.cmd.StdoutPipe(); err != nil {
		return err
	}
	r.stderr, err = r.cmd.StderrPipe()
	return err
}

func (r *procRunner) Start(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.killed {
		close(r.done)
		return errors.New("launch canceled")
	}
	if err := r.cmd.Start(); err != nil {
		close(r.done)
		return err
	}
	r.pid = r.cmd.Process.Pid
	return nil
}

// Wait is called by go-plugin once both pipes are drained.
func (r *procRunner) Wait(context.Context) error {
	r.waitOnce.Do(func() {
		r.waitErr = r.cmd.Wait()
		close(r.done)
	})
	return r.waitErr
}

func (r *procRunner) Kill(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.killed = true
	if r.cmd.Process == nil {
		return nil
	}
	if err := r.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

// abandon kills a plugin that never completed its handshake and closes
// the host's ends of its stdout and stderr: a child it started (a shell
// wrapper's command) may hold them open for as long as it lives, and
// go-plugin reads the handshake line until they close.
func (r *procRunner) abandon() {
	_ = r.Kill(context.Background())
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range []io.ReadCloser{r.stdout, r.stderr} {
		if p != nil {
			_ = p.Close()
		}
	}
}

func (r *procRunner) Stdout() io.ReadCloser { return r.stdout }
func (r *procRunner) Stderr() io.ReadCloser { return r.stderr }
func (r *procRunner) Name() string          { return r.cmd.Path }
func (r *procRunner) ID() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pid == 0 {
		return "" // not started: nothing to kill
	}
	return strconv.Itoa(r.pid)
}

func (r *procRunner) Diagnose(context.Context) string {
	return "the plugin binary failed to start or to complete the handshake; " +
		"run it with " + MagicCookieKey + " unset to see whether it is a loadout backend plugin"
}

func (r *procRunner) PluginToHost(network, addr string) (string, string, error) {
	return network, addr, nil
}

func (r *procRunner) HostToPlugin(network, addr string) (string, string, error) {
	return network, addr, nil
}
