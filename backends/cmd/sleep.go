package cmdbackend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/loadout-dev/loadout/plugins"
)

// Defaults of Sleep and Wake given no timeout, as plugins.Client's.
const (
	// DefaultSleepTimeout bounds a Sleep given none.
	DefaultSleepTimeout = 60 * time.Second
	// DefaultWakeTimeout bounds a Wake given none.
	DefaultWakeTimeout = 120 * time.Second
	// stepOutputMax bounds what an error quotes of a step's answer or
	// output, in bytes.
	stepOutputMax = 512
	// maxSleepPoll caps the gap between two asks of IsSleeping while a
	// sleep or a wake settles: llama-server falls asleep on a 1 s tick, so
	// 50 ms is lateness nobody sees and 20 loopback asks a second.
	maxSleepPoll = 50 * time.Millisecond
	// residencyAskTimeout bounds Residency's ask of is_sleeping, well
	// inside plugins.CallLimits.Quick.
	residencyAskTimeout = 2 * time.Second
)

// SleepConfig says how a model's server sleeps and wakes. The zero value is
// a server that cannot sleep: Sleep and Wake answer plugins.ErrNotSupported.
type SleepConfig struct {
	// Levels are the sleep levels the server offers, a bit each: 1<<0 for
	// level 1, 1<<1 for level 2. 0: it cannot sleep.
	Levels uint8
	// Sleep runs in order to put the server to sleep; "${level}" in a step
	// becomes the level asked for. It may be empty when IsSleeping is set:
	// Sleep then waits for the server to fall asleep by itself
	// (llama-server's --sleep-idle-seconds).
	Sleep []Step
	// Wake runs in order to wake the server from a level 1 sleep, and from
	// a level 2 sleep when WakeLevel2 is empty.
	Wake []Step
	// WakeLevel2 runs instead of Wake after a level 2 sleep (vLLM: wake
	// the weights, reload them, wake the KV cache, reset the prefix cache).
	WakeLevel2 []Step
	// IsSleeping, if set, asks the server whether it sleeps: an HTTP step
	// answers 2xx with a JSON object whose "is_sleeping" is a boolean
	// (vLLM's GET /is_sleeping, llama-server's GET /props); a command exits
	// 0 for asleep and 1 for awake. Sleep waits until it says asleep, Wake
	// until it says awake, and Residency believes it over the backend's
	// own record.
	IsSleeping *Step
}

// Offers reports whether c offers level.
func (c SleepConfig) Offers(level plugins.SleepLevel) bool {
	return (level == plugins.SleepLevel1 || level == plugins.SleepLevel2) && c.Levels&(1<<(level-1)) != 0
}

// deepest is the deepest level c offers, 0 for none.
func (c SleepConfig) deepest() plugins.SleepLevel {
	switch {
	case c.Offers(plugins.SleepLevel2):
		return plugins.SleepLevel2
	case c.Offers(plugins.SleepLevel1):
		return plugins.SleepLevel1
	}
	return 0
}

// expand substitutes r in every step of c.
func (c SleepConfig) expand(r *strings.Replacer) SleepConfig {
	each := func(ss []Step) []Step {
		var out []Step
		for _, s := range ss {
			out = append(out, s.expand(r))
		}
		return out
	}
	c.Sleep, c.Wake, c.WakeLevel2 = each(c.Sleep), each(c.Wake), each(c.WakeLevel2)
	if c.IsSleeping != nil {
		s := c.IsSleeping.expand(r)
		c.IsSleeping = &s
	}
	return c
}

// Step is one action of a sleep or a wake: an HTTP call to the server's
// own upstream (Method set) or a command (Argv set).
type Step struct {
	// Method, Path and Body are an HTTP call: Path (with its query) is
	// joined to the server's upstream; Body, if any, is sent as JSON.
	Method, Path, Body string
	// Argv is a command, run with the server's environment (the plugin's,
	// the model's env and CUDA_VISIBLE_DEVICES) and not through a shell.
	Argv []string
}

// httpMethods are the words that begin an HTTP step.
var httpMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// ParseStep reads a step as a model's options write it: "METHOD /path"
// with an optional JSON body after the path ("POST /collective_rpc
// {"method": "reload_weights"}") is an HTTP call to the server's upstream;
// anything else is a command line, split as cmd is (plugins.SplitCommand).
// ${level}, ${PORT}, ${MODEL_ID} and ${PID} are substituted when it runs.
func ParseStep(s string) (Step, error) {
	s = strings.TrimSpace(s)
	if method, rest, ok := strings.Cut(s, " "); ok && slices.Contains(httpMethods, method) {
		rest = strings.TrimSpace(rest)
		path, body, _ := strings.Cut(rest, " ")
		if !strings.HasPrefix(path, "/") {
			return Step{}, fmt.Errorf("%q: an HTTP step is METHOD /path [JSON body]; the path must begin with /", s)
		}
		body = strings.TrimSpace(body)
		if body != "" && !json.Valid([]byte(strings.ReplaceAll(body, "${level}", "1"))) {
			return Step{}, fmt.Errorf("%q: the body after the path must be JSON", s)
		}
		return Step{Method: method, Path: path, Body: body}, nil
	}
	argv, err := plugins.SplitCommand(s)
	if err != nil {
		return Step{}, fmt.Errorf("%q: %w", s, err)
	}
	return Step{Argv: argv}, nil
}

// String writes the step back in ParseStep's form.
func (s Step) String() string {
	if s.Method != "" {
		return strings.TrimSpace(s.Method + " " + s.Path + " " + s.Body)
	}
	return strings.Join(s.Argv, " ")
}

// expand substitutes r in every part of s.
func (s Step) expand(r *strings.Replacer) Step {
	out := Step{Method: s.Method, Path: r.Replace(s.Path), Body: r.Replace(s.Body)}
	for _, a := range s.Argv {
		out.Argv = append(out.Argv, r.Replace(a))
	}
	return out
}

var stepClient = &http.Client{}

// run performs the step for p, with level substituted, bounded by ctx, and
// returns the body of an HTTP step's answer or a command's output. A
// non-2xx answer or a failed command is an error quoting the answer.
func (p *process) runStep(ctx context.Context, s Step, level plugins.SleepLevel) ([]byte, error) {
	s = s.expand(strings.NewReplacer("${level}", strconv.Itoa(int(level)), "${PID}", strconv.Itoa(p.pid)))
	if s.Method == "" {
		cmd := exec.CommandContext(ctx, s.Argv[0], s.Argv[1:]...)
		cmd.Env = p.env
		cmd.WaitDelay = time.Second
		out, err := cmd.CombinedOutput()
		if err != nil {
			if ctx.Err() != nil {
				return out, fmt.Errorf("%s: %w", s, ctx.Err())
			}
			return out, fmt.Errorf("%s: %w: %s", s, err, clip(out))
		}
		return out, nil
	}
	var body io.Reader
	if s.Body != "" {
		body = strings.NewReader(s.Body)
	}
	req, err := http.NewRequestWithContext(ctx, s.Method, p.upstream+s.Path, body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s, err)
	}
	if s.Body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := stepClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return out, fmt.Errorf("%s: %s: %s", s, resp.Status, clip(out))
	}
	return out, nil
}

// clip is b, trimmed, cut to stepOutputMax bytes.
func clip(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > stepOutputMax {
		return string(b[:stepOutputMax]) + "…"
	}
	return string(b)
}

// askSleeping runs the IsSleeping step once.
func (p *process) askSleeping(ctx context.Context) (bool, error) {
	s := *p.sleep.IsSleeping
	if s.Method == "" {
		_, err := p.runStep(ctx, s, 0)
		var ee *exec.ExitError
		switch {
		case err == nil:
			return true, nil
		case errors.As(err, &ee) && ee.ExitCode() == 1:
			return false, nil
		}
		return false, err
	}
	out, err := p.runStep(ctx, s, 0)
	if err != nil {
		return false, err
	}
	var v struct {
		IsSleeping *bool `json:"is_sleeping"`
	}
	if err := json.Unmarshal(out, &v); err != nil || v.IsSleeping == nil {
		return false, fmt.Errorf("%s: want a JSON object with a boolean is_sleeping, got %s", s, clip(out))
	}
	return *v.IsSleeping, nil
}

// awaitSleeping asks IsSleeping until it answers want, the server exits or
// ctx ends.
func (p *process) awaitSleeping(ctx context.Context, want bool) error {
	poll := pollBackoff()
	poll.MaxInterval = maxSleepPoll
	last := "no answer yet"
	for {
		got, err := p.askSleeping(ctx)
		if err == nil && got == want {
			return nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("is_sleeping: %t", got)
		}
		select {
		case <-p.done:
			return p.exitedWhile("sleeping or waking")
		case <-ctx.Done():
			return fmt.Errorf("%w (last answer: %s)", ctx.Err(), last)
		case <-time.After(poll.NextBackOff()):
		}
	}
}

// awaitServing waits until the server answers its check endpoint (and, with
// IsSleeping, says it is awake), the server exits or ctx ends.
func (p *process) awaitServing(ctx context.Context) error {
	poll := pollBackoff()
	last := "no check yet"
	for p.checkURL != "" {
		err := p.probe(ctx)
		if err == nil {
			break
		}
		last = err.Error()
		select {
		case <-p.done:
			return p.exitedWhile("waking")
		case <-ctx.Done():
			return fmt.Errorf("%w (last check: %s)", ctx.Err(), last)
		case <-time.After(poll.NextBackOff()):
		}
	}
	if p.sleep.IsSleeping != nil {
		return p.awaitSleeping(ctx, false)
	}
	return nil
}

// exitedWhile is the error of a sleep or wake whose server exited.
func (p *process) exitedWhile(what string) error {
	err := p.exitInfo().Err()
	if err == nil {
		err = errors.New("it was stopped")
	}
	return fmt.Errorf("model server exited while %s: %w", what, errors.Join(plugins.ErrNotRunning, err))
}

// sleepAt puts p to sleep at level: see Backend.Sleep.
func (p *process) sleepAt(ctx context.Context, level plugins.SleepLevel, timeout time.Duration) error {
	if !p.sleep.Offers(level) {
		if p.sleep.Levels == 0 {
			return fmt.Errorf("model %q cannot sleep (its options configure no sleep: set preset, or sleep and wake): %w", p.model, plugins.ErrNotSupported)
		}
		return fmt.Errorf("model %q cannot sleep at level %d: %w", p.model, level, plugins.ErrNotSupported)
	}
	p.sleepMu.Lock()
	defer p.sleepMu.Unlock()
	p.mu.Lock()
	state, asleep := p.state, p.asleep
	p.mu.Unlock()
	switch {
	case state != plugins.StateReady:
		return fmt.Errorf("model %q is %s: %w", p.model, state, plugins.ErrNotRunning)
	case asleep == level:
		return nil
	case asleep != 0:
		return fmt.Errorf("model %q is asleep at level %d: wake it before sleeping at level %d", p.model, asleep, level)
	}
	if timeout <= 0 {
		timeout = DefaultSleepTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	for _, s := range p.sleep.Sleep {
		if _, err := p.runStep(ctx, s, level); err != nil {
			return fmt.Errorf("model %q: sleep at level %d: %w", p.model, level, err)
		}
	}
	if p.sleep.IsSleeping != nil {
		if err := p.awaitSleeping(ctx, true); err != nil {
			return fmt.Errorf("model %q: sleep at level %d: not asleep within %s: %w", p.model, level, timeout, err)
		}
	}
	p.mu.Lock()
	p.asleep = level
	p.mu.Unlock()
	p.log.Info("model server asleep", "pid", p.pid, "level", int(level), "after", time.Since(start).Round(time.Millisecond).String())
	return nil
}

// wake wakes p: see Backend.Wake.
func (p *process) wake(ctx context.Context, timeout time.Duration) error {
	if p.sleep.Levels == 0 {
		return fmt.Errorf("model %q cannot sleep, so cannot wake: %w", p.model, plugins.ErrNotSupported)
	}
	p.sleepMu.Lock()
	defer p.sleepMu.Unlock()
	if p.exited() {
		return p.exitedWhile("asleep")
	}
	if timeout <= 0 {
		timeout = DefaultWakeTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	p.mu.Lock()
	level := p.asleep
	p.mu.Unlock()
	if level == 0 && p.sleep.IsSleeping != nil {
		// A server that falls asleep by itself (llama-server) is woken
		// all the same.
		if asleep, err := p.askSleeping(ctx); err == nil && asleep {
			level = p.sleep.deepest()
		}
	}
	if level == 0 {
		return nil
	}
	start := time.Now()
	steps := p.sleep.Wake
	if level == plugins.SleepLevel2 && len(p.sleep.WakeLevel2) > 0 {
		steps = p.sleep.WakeLevel2
	}
	for _, s := range steps {
		if _, err := p.runStep(ctx, s, level); err != nil {
			return fmt.Errorf("model %q: wake from level %d: %w", p.model, level, err)
		}
	}
	if err := p.awaitServing(ctx); err != nil {
		return fmt.Errorf("model %q: wake from level %d: not serving within %s: %w", p.model, level, timeout, err)
	}
	p.mu.Lock()
	p.asleep = 0
	p.mu.Unlock()
	p.log.Info("model server awake", "pid", p.pid, "level", int(level), "after", time.Since(start).Round(time.Millisecond).String())
	return nil
}

// residency reports p's residency: see Backend.Residency.
func (p *process) residency(ctx context.Context) plugins.Residency {
	if p.exited() {
		return plugins.Residency{State: plugins.ResidencyStopped}
	}
	p.mu.Lock()
	level := p.asleep
	p.mu.Unlock()
	if p.sleep.IsSleeping != nil && p.sleepMu.TryLock() {
		// The server's word over the record, unless a sleep or wake is
		// under way (the record is then about to change). A server that
		// does not answer in time leaves the record: a hung server must
		// not make the plugin miss the call's deadline.
		actx, cancel := context.WithTimeout(ctx, residencyAskTimeout)
		asleep, err := p.askSleeping(actx)
		cancel()
		p.sleepMu.Unlock()
		switch {
		case err != nil:
		case asleep && level == 0:
			level = p.sleep.deepest() // it fell asleep by itself
		case !asleep:
			level = 0
		}
	}
	if level != 0 {
		return plugins.Residency{State: plugins.ResidencyAsleep, Level: level}
	}
	return plugins.Residency{State: plugins.ResidencyRunning}
}
