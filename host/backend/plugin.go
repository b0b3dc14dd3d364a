package backend

import (
	"context"
	"errors"
	"fmt"
	"github.com/loadout-dev/loadout/host/router"
	"log/slog"
	"net"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/loadout-dev/loadout/plugins"
)

// PluginLauncher owns the process of one backend plugin binary, shared by
// every model of that backend: it launches the plugin on first use, hands the
// running one out after that, and launches a fresh one once it has exited.
// Its methods are safe for concurrent use.
type PluginLauncher struct {
	name   string
	newCmd func() *exec.Cmd
	log    *slog.Logger

	mu     sync.Mutex
	client *plugins.Client // nil before the first launch
	// caps are client's capabilities as read at its launch; zero when
	// they could not be read.
	caps plugins.Capabilities
}

// NewPluginLauncher returns a launcher for the backend called name (used in
// logs and errors) whose plugin process newCmd describes; newCmd is called
// for every launch and must return a fresh, unstarted command. logger nil
// means slog.Default().
func NewPluginLauncher(name string, newCmd func() *exec.Cmd, logger *slog.Logger) *PluginLauncher {
	if logger == nil {
		logger = slog.Default()
	}
	return &PluginLauncher{name: name, newCmd: newCmd, log: logger.With("backend", name)}
}

// Client returns the running plugin, launching one (bounded by ctx) if none
// runs yet or the last one has exited or is being killed for a missed
// deadline (plugins.Client.Condemned).
func (l *PluginLauncher) Client(ctx context.Context) (*plugins.Client, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.client != nil && !l.client.Condemned() {
		return l.client, nil
	}
	if l.client != nil {
		l.client.Kill() // reap what go-plugin still holds of the dead (or dying) one
		l.log.Warn("backend plugin exited or is being killed for a missed deadline; launching a new one")
	}
	c, err := plugins.Launch(ctx, l.newCmd(), l.log)
	if err != nil {
		return nil, fmt.Errorf("backend plugin %s: %w", l.name, err)
	}
	l.client = c
	l.caps = l.logLaunch(ctx, c)
	return c, nil
}

// capabilities are what the running plugin announced at its launch.
func (l *PluginLauncher) capabilities() plugins.Capabilities {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.caps
}

// logLaunch writes the launch's one log line: the negotiated protocol
// version and the plugin's capabilities, and, for a plugin of an older
// protocol version, a warning saying what it cannot do (Limitations). It
// returns the capabilities, zero when they could not be read.
func (l *PluginLauncher) logLaunch(ctx context.Context, c *plugins.Client) plugins.Capabilities {
	v := c.ProtocolVersion()
	caps, err := c.Capabilities(ctx)
	if err != nil {
		l.log.Warn("backend plugin launched; its capabilities are unknown", "protocol_version", v, "err", err)
		return plugins.Capabilities{}
	}
	l.log.Info("backend plugin launched", "protocol_version", v, "plugin", caps.Name, "plugin_version", caps.Version, "features", caps.Features)
	if v < plugins.ProtocolVersion {
		l.log.Warn("backend plugin speaks an older protocol", "protocol_version", v, "limitations", strings.Join(Limitations(v, caps), "; "))
	}
	return caps
}

// Close ends the plugin process, if one runs; the plugin stops its model
// servers first. A later Client call launches a new one.
func (l *PluginLauncher) Close() {
	l.mu.Lock()
	c := l.client
	l.client = nil
	l.mu.Unlock()
	if c != nil {
		c.Kill()
	}
}

// pluginExitedError is the reason of an instance whose plugin died.
type pluginExitedError struct{ plugin string }

func (e pluginExitedError) Error() string { return "backend plugin " + e.plugin + " exited" }
func (e pluginExitedError) Unwrap() error { return plugins.ErrPluginExited }

// PluginProcess is the Process of one model served by a backend plugin.
type PluginProcess struct {
	spec     plugins.ModelSpec
	launcher *PluginLauncher
}

var _ router.Process = (*PluginProcess)(nil)

// NewPluginProcess returns the Process of the model spec describes, started
// through launcher's plugin. Start fills in spec.Devices from its StartSpec.
func NewPluginProcess(spec plugins.ModelSpec, launcher *PluginLauncher) *PluginProcess {
	return &PluginProcess{spec: spec, launcher: launcher}
}

// Start implements Process. Errors from a plugin that died say "backend
// plugin NAME exited" and wrap plugins.ErrPluginExited.
func (p *PluginProcess) Start(ctx context.Context, s router.StartSpec) (router.Instance, error) {
	c, err := p.launcher.Client(ctx)
	if err != nil {
		return nil, err
	}
	spec := p.spec
	spec.Devices = s.Devices
	started, err := c.Start(ctx, spec)
	if errors.Is(err, plugins.ErrPluginExited) && !errors.Is(err, plugins.ErrPluginHung) {
		return nil, fmt.Errorf("start model %s: %w", spec.Model, pluginExitedError{p.launcher.name})
	}
	if err != nil {
		return nil, fmt.Errorf("start model %s: %w", spec.Model, err)
	}
	upstream, err := url.Parse(started.Upstream)
	if err == nil && spec.CheckEndpoint != "none" {
		err = checkListening(ctx, upstream)
	}
	if err != nil {
		_ = c.Stop(ctx, spec.Model, killTimeout)
		return nil, fmt.Errorf("start model %s: backend plugin %s reported upstream %q: %w", spec.Model, p.launcher.name, started.Upstream, err)
	}
	inst := &pluginInstance{
		model:    spec.Model,
		plugin:   p.launcher.name,
		client:   c,
		upstream: upstream,
		exited:   make(chan struct{}),
		caps:     p.launcher.capabilities(),
		grace:    s.StopTimeout,
	}
	go inst.watch()
	return inst, nil
}

// checkListening is the host's own check of a Start that reported its
// server ready (its check endpoint answered): something must accept a TCP
// connection at the upstream's host and port, within listenCheckLimit.
// Without it a plugin reporting a wrong port would make every request to
// the model fail with a proxy error instead of the start failing once.
func checkListening(ctx context.Context, u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("not an http(s) URL")
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	ctx, cancel := context.WithTimeout(ctx, listenCheckLimit)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", net.JoinHostPort(u.Hostname(), port))
	if err != nil {
		return fmt.Errorf("nothing accepts connections there: %w", err)
	}
	return conn.Close()
}

// listenCheckLimit bounds checkListening's connect.
const listenCheckLimit = 5 * time.Second

// pluginInstance is a started model server behind a plugin.
type pluginInstance struct {
	model, plugin string
	client        *plugins.Client
	upstream      *url.URL
	exited        chan struct{}
	err           error                // written once, before exited is closed
	caps          plugins.Capabilities // the plugin's, as read at its launch
	// grace is what Stop gives the server before SIGKILL (the model's
	// unloadTimeout, router.StartSpec.StopTimeout); 0: the backend's.
	grace time.Duration
}

func (i *pluginInstance) Upstream() *url.URL      { return i.upstream }
func (i *pluginInstance) Exited() <-chan struct{} { return i.exited }
func (i *pluginInstance) Err() error              { return i.err }

// watch waits for the server's exit, or the plugin's, and closes exited.
func (i *pluginInstance) watch() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		exit plugins.Exit
		err  error
	}
	done := make(chan result, 1)
	go func() {
		e, err := i.client.Wait(ctx, i.model)
		done <- result{e, err}
	}()
	select {
	case r := <-done:
		switch {
		case r.err == nil:
			if err := r.exit.Err(); err != nil {
				i.err = fmt.Errorf("model %s: %w", i.model, err)
			}
		case i.pluginGone():
			// The stream fails a moment before the process is reaped; wait
			// for that, so a Start after Exited launches a fresh plugin.
			i.err = pluginExitedError{i.plugin}
		default:
			i.err = fmt.Errorf("model %s: lost track of its server: %w", i.model, r.err)
		}
	case <-i.client.Done():
		i.err = pluginExitedError{i.plugin}
	}
	close(i.exited)
}

// pluginGone reports whether the plugin process has exited, or does so
// within pluginExitGrace, after Wait failed.
func (i *pluginInstance) pluginGone() bool {
	t := time.NewTimer(pluginExitGrace)
	defer t.Stop()
	select {
	case <-i.client.Done():
		return true
	case <-t.C:
		return false
	}
}

// pluginExitGrace bounds pluginGone's wait; plugins.Client.Kill gives a
// plugin two seconds to exit before killing it.
const pluginExitGrace = 5 * time.Second

// Stop implements Instance: the server gets the model's unloadTimeout
// (grace; else the backend's default, 10 s) to exit before SIGKILL.
func (i *pluginInstance) Stop(ctx context.Context) error {
	select {
	case <-i.exited:
		return nil
	default:
	}
	err := i.client.Stop(ctx, i.model, i.grace)
	if err != nil && !errors.Is(err, plugins.ErrPluginExited) {
		return fmt.Errorf("stop model %s: %w", i.model, err)
	}
	select {
	case <-i.exited:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop model %s: %w", i.model, ctx.Err())
	}
}

// Memory implements MemoryReporter through the backend's Stats.
func (i *pluginInstance) Memory(ctx context.Context) ([]int, uint64, error) {
	st, err := i.client.Stats(ctx, i.model)
	if err != nil {
		return nil, 0, err
	}
	return st.Pids, st.MemoryBytes, nil
}

// Healthy implements router.HealthChecker through the backend's Health:
// nil when the server answered its check endpoint as ready just now.
func (i *pluginInstance) Healthy(ctx context.Context) error {
	h, err := i.client.Health(ctx, i.model)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		// The plugin answers for a server that does not answer within the
		// call (the cmd backend probes it within nine tenths of it): this
		// is the plugin itself not answering.
		return fmt.Errorf("its backend plugin did not answer the health call, so its server's health is not known: %w", err)
	case err != nil:
		return err
	case h.Ready:
		return nil
	case h.Message != "":
		return errors.New(h.Message)
	default:
		return fmt.Errorf("not ready (%s)", h.State)
	}
}

// Kill implements router.Killer: the backend's Stop with no grace, so the
// server's process group gets SIGKILL a moment after SIGTERM — which a
// stopped (SIGSTOP) process would never act on.
func (i *pluginInstance) Kill(ctx context.Context) error {
	select {
	case <-i.exited:
		return nil
	default:
	}
	err := i.client.Stop(ctx, i.model, killTimeout)
	if err != nil && !errors.Is(err, plugins.ErrPluginExited) {
		return fmt.Errorf("kill model %s: %w", i.model, err)
	}
	select {
	case <-i.exited:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("kill model %s: %w", i.model, ctx.Err())
	}
}

// killTimeout is the grace Kill gives a server between SIGTERM and
// SIGKILL: none to speak of (a Stop timeout of 0 would mean the backend's
// default).
const killTimeout = time.Millisecond
