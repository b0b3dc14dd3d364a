package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/loadout-dev/loadout/plugins"
)

// Version is this backend's version, as Capabilities reports it.
const Version = "0.1.0"

const (
	// defaultStartTimeout bounds a start whose spec sets no
	// HealthCheckTimeout.
	defaultStartTimeout = 120 * time.Second
	// defaultStopTimeout is the grace between SIGTERM and SIGKILL when Stop
	// is given none.
	defaultStopTimeout = 10 * time.Second
	// readyPath answers 200 once llama_cpp.server has loaded its model (it
	// loads before it listens).
	readyPath = "/v1/models"
	// tailBytes is how much of a server's output Exit.StderrTail keeps.
	tailBytes = 4 << 10
)

// Backend runs llama_cpp.server processes, one per model. Its methods are
// safe for concurrent use; the host calls them concurrently.
type Backend struct {
	log *slog.Logger

	mu      sync.Mutex
	servers map[string]*server // by model id; an exited server stays until restarted
}

var (
	_ plugins.Backend = (*Backend)(nil)
	// Close is called by plugins.Serve on shutdown and on SIGTERM.
	_ interface{ Close() error } = (*Backend)(nil)
)

// New returns a Backend that logs to logger.
func New(logger *slog.Logger) *Backend {
	return &Backend{log: logger, servers: map[string]*server{}}
}

// server is one model server process.
type server struct {
	model    string
	cmd      *exec.Cmd
	upstream string
	tail     *tail
	done     chan struct{} // closed once the process has exited
	exit     plugins.Exit  // written before done is closed

	mu        sync.Mutex
	ready     bool
	requested bool // Stop asked for the exit
}

// Start implements plugins.Backend: it runs the server in a process group of
// its own that dies with the plugin, and returns once readyPath answers 200.
func (b *Backend) Start(ctx context.Context, spec plugins.ModelSpec) (plugins.Started, error) {
	o, problems := parseOptions(spec.Options)
	if len(problems) > 0 {
		return plugins.Started{}, plugins.ProblemsError(toPlugin(problems))
	}
	b.mu.Lock()
	if s, ok := b.servers[spec.Model]; ok && !s.exited() {
		b.mu.Unlock()
		return plugins.Started{}, fmt.Errorf("model %s: %w", spec.Model, plugins.ErrAlreadyRunning)
	}
	b.mu.Unlock()

	port := spec.Port
	if port == 0 {
		p, err := freePort()
		if err != nil {
			return plugins.Started{}, err
		}
		port = p
	} else if err := plugins.CheckPortFree(port); err != nil {
		return plugins.Started{}, fmt.Errorf("model %s: %w", spec.Model, err)
	}
	argv := o.argv(spec.Model, port)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), spec.Env...), plugins.CUDAEnv(spec.Devices)...)
	// Its own process group, so Stop reaches its children; SIGKILL when
	// the plugin dies, so it never outlives the plugin.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	t := &tail{}
	cmd.Stdout, cmd.Stderr = t, t
	if err := cmd.Start(); err != nil {
		return plugins.Started{}, fmt.Errorf("model %s: %w", spec.Model, err)
	}
	s := &server{model: spec.Model, cmd: cmd, upstream: fmt.Sprintf("http://127.0.0.1:%d", port), tail: t, done: make(chan struct{})}
	go s.wait()
	b.mu.Lock()
	b.servers[spec.Model] = s
	b.mu.Unlock()
	b.log.Info("model server started", "model", spec.Model, "pid", cmd.Process.Pid, "upstream", s.upstream)

	timeout := spec.HealthCheckTimeout
	if timeout <= 0 {
		timeout = defaultStartTimeout
	}
	if err := s.awaitReady(ctx, timeout); err != nil {
		s.kill()
		<-s.done
		return plugins.Started{}, fmt.Errorf("model %s: %w", spec.Model, err)
	}
	b.log.Info("model server ready", "model", spec.Model, "pid", cmd.Process.Pid)
	return plugins.Started{Upstream: s.upstream, Pids: []int{cmd.Process.Pid}}, nil
}

// awaitReady polls readyPath every 50 ms until it answers 200, the server
// exits (the error carries its output's tail), timeout passes or ctx ends.
func (s *server) awaitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.upstream+readyPath, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				s.mu.Lock()
				s.ready = true
				s.mu.Unlock()
				return nil
			}
		}
		select {
		case <-s.done:
			return s.exit.Err()
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("not ready within %s", timeout)
			}
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// wait reaps the process and records how it exited.
func (s *server) wait() {
	err := s.cmd.Wait()
	e := plugins.Exit{StderrTail: s.tail.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		e.Code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			e.Code, e.Signal = -1, ws.Signal().String()
		}
	}
	s.mu.Lock()
	e.Requested = s.requested
	s.ready = false
	s.mu.Unlock()
	s.exit = e
	close(s.done)
}

func (s *server) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the server's process group.
func (s *server) signal(sig syscall.Signal) {
	_ = syscall.Kill(-s.cmd.Process.Pid, sig)
}

func (s *server) kill() {
	s.mu.Lock()
	s.requested = true
	s.mu.Unlock()
	s.signal(syscall.SIGKILL)
}

// Stop implements plugins.Backend: SIGTERM to the process group, SIGKILL
// after timeout (<= 0: 10 s).
func (b *Backend) Stop(ctx context.Context, model string, timeout time.Duration) error {
	s, err := b.lookup(model)
	if err != nil {
		return err
	}
	if timeout <= 0 {
		timeout = defaultStopTimeout
	}
	s.mu.Lock()
	s.requested = true
	s.mu.Unlock()
	s.signal(syscall.SIGTERM)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-s.done:
		return nil
	case <-t.C:
		s.signal(syscall.SIGKILL)
	case <-ctx.Done():
		s.signal(syscall.SIGKILL)
	}
	<-s.done
	return nil
}

// Health implements plugins.Backend; a ready server answered readyPath
// just now.
func (b *Backend) Health(ctx context.Context, model string) (plugins.Health, error) {
	s, err := b.lookup(model)
	if err != nil {
		return plugins.Health{}, err
	}
	if s.exited() {
		return plugins.Health{State: plugins.StateExited, Message: "exited"}, nil
	}
	s.mu.Lock()
	ready, stopping := s.ready, s.requested
	s.mu.Unlock()
	switch {
	case stopping:
		return plugins.Health{State: plugins.StateStopping, Message: "stopping"}, nil
	case !ready:
		return plugins.Health{State: plugins.StateStarting, Message: "loading"}, nil
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.upstream+readyPath, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return plugins.Health{State: plugins.StateReady, Message: err.Error()}, nil
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return plugins.Health{State: plugins.StateReady, Message: readyPath + " answered " + resp.Status}, nil
	}
	return plugins.Health{Ready: true, State: plugins.StateReady}, nil
}

// Estimate implements plugins.Backend (estimateBytes), the same figure for
// every device the model is placed on.
func (b *Backend) Estimate(_ context.Context, spec plugins.ModelSpec) (plugins.Estimate, error) {
	o, problems := parseOptions(spec.Options)
	if len(problems) > 0 {
		return plugins.Estimate{}, nil // Validate reports them
	}
	n, err := estimateBytes(o)
	if err != nil {
		return plugins.Estimate{}, nil // unknown, not an error: the host falls back
	}
	per := make([]uint64, max(len(spec.Devices), 1))
	for i := range per {
		per[i] = n / uint64(len(per))
	}
	return plugins.Estimate{Known: true, BytesPerDevice: per}, nil
}

// Stats implements plugins.Backend: the server's pid; no measured memory
// (the host measures by pid).
func (b *Backend) Stats(_ context.Context, model string) (plugins.Stats, error) {
	s, err := b.lookup(model)
	if err != nil {
		return plugins.Stats{}, err
	}
	if s.exited() {
		return plugins.Stats{}, nil
	}
	return plugins.Stats{Pids: []int{s.cmd.Process.Pid}}, nil
}

// Capabilities implements plugins.Backend: estimates, no sleep (llama-cpp-
// python's server cannot release its memory and keep its process).
func (b *Backend) Capabilities(context.Context) (plugins.Capabilities, error) {
	return plugins.Capabilities{Name: "llamacpp-python", Version: Version, Features: []string{plugins.FeatureEstimate}}, nil
}

// Wait implements plugins.Backend.
func (b *Backend) Wait(ctx context.Context, model string) (plugins.Exit, error) {
	s, err := b.lookup(model)
	if err != nil {
		return plugins.Exit{}, err
	}
	select {
	case <-s.done:
		return s.exit, nil
	case <-ctx.Done():
		return plugins.Exit{}, ctx.Err()
	}
}

// Validate implements plugins.Backend with parseOptions: no file is read.
func (b *Backend) Validate(_ context.Context, spec plugins.ModelSpec) ([]plugins.Problem, error) {
	_, problems := parseOptions(spec.Options)
	return toPlugin(problems), nil
}

// Close stops every server, at once: the plugin is going away.
func (b *Backend) Close() error {
	b.mu.Lock()
	servers := make([]*server, 0, len(b.servers))
	for _, s := range b.servers {
		servers = append(servers, s)
	}
	b.mu.Unlock()
	for _, s := range servers {
		if !s.exited() {
			s.kill()
			<-s.done
		}
	}
	return nil
}

func (b *Backend) lookup(model string) (*server, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.servers[model]
	if !ok {
		return nil, fmt.Errorf("model %s: %w", model, plugins.ErrUnknownModel)
	}
	return s, nil
}

func toPlugin(ps []problem) []plugins.Problem {
	if len(ps) == 0 {
		return nil
	}
	out := make([]plugins.Problem, len(ps))
	for i, p := range ps {
		out[i] = plugins.Problem{Option: p.option, Message: p.message}
	}
	return out
}

// freePort returns a loopback port free at this moment.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tail keeps the last tailBytes written to it.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - tailBytes; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}
