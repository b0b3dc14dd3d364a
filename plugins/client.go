package plugins

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"sync"
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
	rpc  Backend
	pc   *plugin.Client
	proc *procRunner
}

var _ Backend = (*Client)(nil)

// Launch starts cmd (unstarted, with Stdout and Stderr unset: the handshake
// and the plugin's log use them) as a backend plugin, performs the handshake
// and returns a connected Client. The plugin gets cmd.Env (nil: the host's
// environment) plus the handshake variables. ctx bounds the launch only, not
// the plugin's life. On Linux the plugin gets SIGTERM if the host dies
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
	proc := &procRunner{cmd: cmd, done: make(chan struct{})}
	pc := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  handshake,
		Plugins:          plugin.PluginSet{pluginName: &grpcPlugin{}},
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
		b   Backend
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
		ch <- result{b: raw.(Backend)}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			pc.Kill()
			return nil, fmt.Errorf("launch backend plugin %s: %w", cmd.Path, r.err)
		}
		return &Client{rpc: r.b, pc: pc, proc: proc}, nil
	case <-ctx.Done():
		// go-plugin holds its lock for the whole handshake: end the process
		// first so the handshake fails at once, then clean up.
		_ = proc.Kill(context.Background())
		<-ch
		pc.Kill()
		return nil, fmt.Errorf("launch backend plugin %s: %w", cmd.Path, ctx.Err())
	}
}

// Start calls Backend.Start in the plugin.
func (c *Client) Start(ctx context.Context, spec ModelSpec) (Started, error) {
	return c.rpc.Start(ctx, spec)
}

// Stop calls Backend.Stop in the plugin.
func (c *Client) Stop(ctx context.Context, model string, timeout time.Duration) error {
	return c.rpc.Stop(ctx, model, timeout)
}

// Health calls Backend.Health in the plugin.
func (c *Client) Health(ctx context.Context, model string) (Health, error) {
	return c.rpc.Health(ctx, model)
}

// Estimate calls Backend.Estimate in the plugin.
func (c *Client) Estimate(ctx context.Context, spec ModelSpec) (Estimate, error) {
	return c.rpc.Estimate(ctx, spec)
}

// Stats calls Backend.Stats in the plugin.
func (c *Client) Stats(ctx context.Context, model string) (Stats, error) {
	return c.rpc.Stats(ctx, model)
}

// Capabilities calls Backend.Capabilities in the plugin.
func (c *Client) Capabilities(ctx context.Context) (Capabilities, error) {
	return c.rpc.Capabilities(ctx)
}

// Wait calls Backend.Wait in the plugin: it returns when the model server
// has exited, or with an error wrapping ErrPluginExited when the plugin has.
func (c *Client) Wait(ctx context.Context, model string) (Exit, error) {
	return c.rpc.Wait(ctx, model)
}

// Validate calls Backend.Validate in the plugin; a plugin built before
// Validate existed reports no problems.
func (c *Client) Validate(ctx context.Context, spec ModelSpec) ([]Problem, error) {
	return c.rpc.Validate(ctx, spec)
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

// Kill ends the plugin: it asks it to shut down (it then stops its model
// servers), kills it after two seconds and returns once it has exited. It
// is safe to call more than once, and after the plugin has exited.
func (c *Client) Kill() { c.pc.Kill() }

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
