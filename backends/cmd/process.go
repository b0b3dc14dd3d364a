package cmdbackend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/loadout-dev/loadout/plugins"
)

// Polling of the check endpoint while a server starts: no fixed sleep, the
// first probe is immediate and the gap grows by a fifth from firstPoll to
// maxPoll (pollBackoff). The gap bounds how late readiness is noticed, which
// is most of a swap's overhead: the cap for a long load (the target is
// 20 ms; a cap of 250 ms measured 116 ms on a 200 ms load), the slow growth
// for a server ready at once (the target is 3 ms; growing by half, a server
// ready after 11 ms was noticed about 2 ms late). A loopback probe costs
// about 0.1 ms, so 100 a second while a model loads is nothing.
const (
	firstPoll    = 1 * time.Millisecond
	pollGrowth   = 1.2
	maxPoll      = 10 * time.Millisecond
	probeTimeout = 5 * time.Second
	// drainTimeout bounds the wait for a dead server's output pipes, which
	// a process that left the group could hold open.
	drainTimeout = time.Second
)

// startProgressEvery is how often a server that is still starting is
// logged at info ("model server still starting": how long, the last
// check's answer, the server's last output line), so that a load of
// minutes shows in the log as it goes and a stuck one says where it is.
// A variable for the package's tests.
var startProgressEvery = 15 * time.Second

// process is one model server: a process group led by cmd.
type process struct {
	model    string
	cmdStop  string
	upstream string
	// upstreamHost and upstreamPort are the upstream's, for telling whose
	// listener answered the check; the port is 0 when the URL has none.
	upstreamHost string
	upstreamPort int
	checkURL     string // "" when the check is off
	pid          int
	log          *slog.Logger
	stderr       tail
	lastOutput   atomic.Pointer[string] // the server's latest output line, stdout or stderr
	done         chan struct{}          // closed once the server has exited
	sleep        SleepConfig            // how it sleeps; the zero value: it cannot
	env          []string               // the server's environment, for command steps

	// sleepMu serialises Sleep and Wake: one changes the server's memory
	// at a time.
	sleepMu sync.Mutex

	mu        sync.Mutex
	state     plugins.State
	asleep    plugins.SleepLevel // 0 while awake
	requested bool
	exit      plugins.Exit // valid once done is closed
}

// launch starts the server of spec (already expanded), which sleeps as sleep
// says, and watches it until it exits. It does not wait for readiness.
func launch(spec plugins.ModelSpec, sleep SleepConfig, log *slog.Logger) (*process, error) {
	argv, err := plugins.SplitCommand(spec.Cmd)
	if err != nil {
		return nil, fmt.Errorf("model %q: parse cmd: %w", spec.Model, err)
	}
	upstream := strings.TrimRight(spec.Proxy, "/")
	if upstream == "" {
		upstream = "http://127.0.0.1:" + strconv.Itoa(spec.Port)
	}
	u, err := url.Parse(upstream)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("model %q: upstream %q is not a URL", spec.Model, upstream)
	}
	p := &process{
		model:        spec.Model,
		upstreamHost: u.Hostname(),
		upstreamPort: urlPort(u),
		cmdStop:      spec.CmdStop,
		upstream:     upstream,
		log:          log.With("model", spec.Model),
		done:         make(chan struct{}),
		state:        plugins.StateStarting,
		sleep:        sleep,
	}
	switch ep := spec.CheckEndpoint; ep {
	case "none":
	case "":
		p.checkURL = upstream + "/health"
	default:
		p.checkURL = upstream + "/" + strings.TrimLeft(ep, "/")
	}

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), spec.Env...)
	cmd.Env = append(cmd.Env, plugins.CUDAEnv(spec.Devices)...)
	p.env = cmd.Env
	cmd.SysProcAttr = serverSysProcAttr()
	// Own pipes rather than io.Writers: exec's copy goroutines would make
	// Wait block on a grandchild that holds the pipe open.
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("model %q: %w", spec.Model, err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("model %q: %w", spec.Model, err)
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	err = cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("model %q: start %s: %w", spec.Model, argv[0], err)
	}
	p.pid = cmd.Process.Pid
	p.log.Info("model server started", "pid", p.pid, "cmd", spec.Cmd, "upstream", upstream)

	var drained sync.WaitGroup
	drain := func(r io.ReadCloser, stream string, keep bool) {
		drained.Add(1)
		go func() {
			defer drained.Done()
			defer r.Close()
			readLines(r, func(line string) {
				if keep {
					p.stderr.add(line)
				}
				if strings.TrimSpace(line) != "" {
					p.lastOutput.Store(&line)
				}
				p.log.Debug("model server output", "stream", stream, "line", line)
			})
		}()
	}
	drain(outR, "stdout", false)
	drain(errR, "stderr", true)

	go func() {
		err := cmd.Wait()
		// The leader is gone: take the rest of its group with it.
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		waitTimeout(&drained, drainTimeout)
		p.finish(cmd.ProcessState, err)
	}()
	return p, nil
}

// finish records how the server exited and closes done.
func (p *process) finish(ps *os.ProcessState, waitErr error) {
	exit := plugins.Exit{Code: -1, StderrTail: p.stderr.String()}
	if ps != nil {
		exit.Code = ps.ExitCode()
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			exit.Signal = ws.Signal().String()
		}
	} else if waitErr != nil {
		exit.Signal = waitErr.Error()
	}
	p.mu.Lock()
	exit.Requested = p.requested
	p.exit = exit
	p.state = plugins.StateExited
	p.mu.Unlock()
	close(p.done)
	p.log.Info("model server exited", "pid", p.pid, "code", exit.Code, "signal", exit.Signal, "requested", exit.Requested)
}

func waitTimeout(wg *sync.WaitGroup, d time.Duration) {
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	select {
	case <-ch:
	case <-time.After(d):
	}
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *process) exitInfo() plugins.Exit {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exit
}

func (p *process) getState() plugins.State {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state
}

// waitReady polls the check endpoint until the server is ready, the server
// exits, timeout passes or ctx ends. Ready means all of: the check endpoint
// answered 2xx, the answering listener is not another, older server's (see
// foreignListener), and the server has not exited. A server that exits fails
// the start with its exit error whatever answers on its port.
func (p *process) waitReady(ctx context.Context, timeout time.Duration) error {
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	poll := pollBackoff()
	last := "no check yet"
	progress := time.NewTicker(startProgressEvery)
	defer progress.Stop()
	for p.checkURL != "" {
		err := p.probe(wctx)
		if err == nil {
			err = foreignListener(p.pid, p.upstreamHost, p.upstreamPort)
		}
		if err == nil {
			break
		}
		if wctx.Err() == nil || last == "no check yet" {
			// A probe cut short by the deadline says less than the
			// answer before it.
			last = err.Error()
		}
		select {
		case <-p.done:
			return p.exitedWhileStarting()
		case <-wctx.Done():
			if ctx.Err() != nil {
				return fmt.Errorf("model %q: start: %w", p.model, ctx.Err())
			}
			return fmt.Errorf("model %q not ready after %s (last check: %s)", p.model, timeout, last)
		case <-progress.C:
			out := ""
			if l := p.lastOutput.Load(); l != nil {
				out = *l
			}
			p.log.Info("model server still starting", "pid", p.pid, "after", time.Since(start).Round(time.Second).String(),
				"timeout", timeout.String(), "last_check", last, "last_output", out)
		case <-time.After(poll.NextBackOff()):
		}
	}
	p.mu.Lock()
	exited := p.state == plugins.StateExited
	if p.state == plugins.StateStarting {
		p.state = plugins.StateReady
	}
	p.mu.Unlock()
	if exited {
		return p.exitedWhileStarting()
	}
	p.log.Info("model server ready", "pid", p.pid, "after", time.Since(start).Round(time.Millisecond).String())
	return nil
}

// pollBackoff is the gaps between a starting server's checks: firstPoll,
// growing by pollGrowth to maxPoll, without jitter.
func pollBackoff() *backoff.ExponentialBackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.Multiplier, b.MaxInterval, b.RandomizationFactor = firstPoll, pollGrowth, maxPoll, 0
	b.Reset()
	return b
}

// exitedWhileStarting is the error of a start whose server has exited.
func (p *process) exitedWhileStarting() error {
	if err := p.exitInfo().Err(); err != nil {
		return fmt.Errorf("model %q exited while starting: %w", p.model, err)
	}
	return fmt.Errorf("model %q was stopped while starting", p.model)
}

// urlPort is the TCP port u connects to: its own, else its scheme's; 0 when
// neither says.
func urlPort(u *url.URL) int {
	if n, err := strconv.Atoi(u.Port()); err == nil {
		return n
	}
	switch u.Scheme {
	case "http":
		return 80
	case "https":
		return 443
	}
	return 0
}

var probeClient = &http.Client{Timeout: probeTimeout}

// probe asks the check endpoint once; nil means 2xx.
func (p *process) probe(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.checkURL, nil)
	if err != nil {
		return err
	}
	resp, err := probeClient.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("GET %s: %s", p.checkURL, resp.Status)
	}
	return nil
}

// minGrace is the shortest stop timeout that gives a server time to exit
// by itself; a shorter one is a kill.
const minGrace = 100 * time.Millisecond

// stop asks the server to exit (cmdStop or SIGTERM to its group), SIGKILLs the
// group after timeout or when ctx ends, and returns once it has exited.
func (p *process) stop(ctx context.Context, timeout time.Duration) error {
	p.mu.Lock()
	p.requested = true
	if p.state != plugins.StateExited {
		p.state = plugins.StateStopping
	}
	p.mu.Unlock()
	if p.exited() {
		return nil
	}
	if p.cmdStop != "" {
		p.runCmdStop(ctx, timeout)
	} else {
		p.signal(syscall.SIGTERM)
	}
	grace := time.NewTimer(timeout)
	defer grace.Stop()
	select {
	case <-p.done:
		return nil
	case <-grace.C:
		if timeout < minGrace {
			// A stop that gave no grace to speak of is a kill (the host's
			// of a hung server): nothing was ignored.
			p.log.Info("model server killed", "pid", p.pid, "grace", timeout.String())
		} else {
			p.log.Warn("model server ignored stop; killing", "pid", p.pid, "timeout", timeout.String())
		}
	case <-ctx.Done():
	}
	p.signal(syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("model %q: stop: %w", p.model, ctx.Err())
	}
}

// signal sends sig to the server's whole process group.
func (p *process) signal(sig syscall.Signal) {
	if err := syscall.Kill(-p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		p.log.Warn("signal model server", "pid", p.pid, "signal", sig, "err", err)
	}
}

// runCmdStop runs cmdStop with ${PID} substituted, in the server's
// environment (llama-swap's: a DOCKER_HOST or container name set in the
// model's env: reaches it); a failure is logged, and
// the SIGKILL escalation in stop still applies.
func (p *process) runCmdStop(ctx context.Context, timeout time.Duration) {
	argv, err := plugins.SplitCommand(strings.ReplaceAll(p.cmdStop, "${PID}", strconv.Itoa(p.pid)))
	if err != nil {
		p.log.Warn("cmdStop unusable; sending SIGTERM", "err", err)
		p.signal(syscall.SIGTERM)
		return
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stop := exec.CommandContext(cctx, argv[0], argv[1:]...)
	stop.Env = p.env // the server's: its env: and devices (llama-swap's)
	out, err := stop.CombinedOutput()
	if err != nil {
		p.log.Warn("cmdStop failed", "cmd", p.cmdStop, "err", err, "output", string(out))
	}
}
