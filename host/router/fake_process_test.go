package router

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeProcess is the in-memory Process this package's tests use in place of
// a backend plugin: the one fake the design allows, at the lowest seam.
// Every start and stop is reported on the world's event channel so tests
// wait for events, never for time.
type fakeProcess struct {
	name  string
	world *fakeWorld
	mu    sync.Mutex
	gate  chan struct{} // when set, Start blocks until it is closed
	// stopGate, when set, makes its instances' Stop report "stopping"
	// and block until it is closed (a server slow to exit).
	stopGate chan struct{}
	fail     error  // when set, Start returns it
	memory   uint64 // what its instances report using (MemoryReporter)
	// unhealthy, when set, is what its instances' health checks answer
	// (HealthChecker): a server that stopped answering. With wedged set
	// instead, a check answers nothing and ends with its deadline, as a
	// stopped (SIGSTOP) server's does; probes records when each check
	// began.
	unhealthy error
	wedged    bool
	probes    []time.Time
	// probed, when set, is told of each health check as it begins.
	probed chan struct{}
	// Sleep (SleepInstance): the levels its instances offer, what their
	// sleeps and wakes fail with, a gate a wake blocks on (a hung wake),
	// and what a sleeper says it holds in host memory.
	sleepLevels uint8
	sleepFail   error
	sleepGate   chan struct{} // a sleep blocks on it (a hung sleep)
	wakeFail    error
	wakeGate    chan struct{}
	hostBytes   uint64
}

type fakeInstance struct {
	proc   *fakeProcess
	url    *url.URL
	exited chan struct{}
	once   sync.Once
	err    error
}

// fakeWorld tracks every fake process of one test.
type fakeWorld struct {
	mu      sync.Mutex
	events  chan string
	running map[string]*fakeInstance
	starts  map[string]int
	maxLive int // the most instances alive at once
	port    int
}

func newFakeWorld() *fakeWorld {
	return &fakeWorld{events: make(chan string, 256), running: map[string]*fakeInstance{}, starts: map[string]int{}, port: 40000}
}

func (w *fakeWorld) process(name string) *fakeProcess { return &fakeProcess{name: name, world: w} }

// hold makes the next starts of p block until the returned func is called.
func (p *fakeProcess) hold() (release func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	gate := make(chan struct{})
	p.gate = gate
	var once sync.Once
	return func() { once.Do(func() { close(gate) }) }
}

// holdStop makes the stops of p's instances block until the returned func
// is called.
func (p *fakeProcess) holdStop() (release func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	gate := make(chan struct{})
	p.stopGate = gate
	var once sync.Once
	return func() { once.Do(func() { close(gate) }) }
}

func (p *fakeProcess) Start(ctx context.Context, spec StartSpec) (Instance, error) {
	p.mu.Lock()
	gate, fail := p.gate, p.fail
	p.mu.Unlock()
	p.world.emit("starting " + p.name)
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			p.world.emit("aborted " + p.name)
			return nil, ctx.Err()
		}
	}
	if fail != nil {
		p.world.emit("failed " + p.name)
		return nil, fail
	}
	w := p.world
	w.mu.Lock()
	w.port++
	inst := &fakeInstance{proc: p, url: &url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", w.port)}, exited: make(chan struct{})}
	if _, dup := w.running[p.name]; dup {
		w.mu.Unlock()
		return nil, errors.New("fake: " + p.name + " started twice")
	}
	w.running[p.name] = inst
	w.starts[p.name]++
	w.maxLive = max(w.maxLive, len(w.running))
	w.mu.Unlock()
	p.world.emit("ready " + p.name)
	return inst, nil
}

// Memory implements MemoryReporter: the process's configured figure.
func (i *fakeInstance) Memory(context.Context) ([]int, uint64, error) {
	i.proc.mu.Lock()
	defer i.proc.mu.Unlock()
	return nil, i.proc.memory, nil
}

// Healthy implements HealthChecker: the process's unhealthy error, or,
// while it is wedged, ctx's error once ctx ends.
func (i *fakeInstance) Healthy(ctx context.Context) error {
	i.proc.mu.Lock()
	i.proc.probes = append(i.proc.probes, time.Now())
	wedged, err, probed := i.proc.wedged, i.proc.unhealthy, i.proc.probed
	i.proc.mu.Unlock()
	if probed != nil {
		select {
		case probed <- struct{}{}:
		default:
		}
	}
	if wedged {
		<-ctx.Done()
		return ctx.Err()
	}
	return err
}

// Kill implements Killer: the instance exits at once, reported as
// "killed NAME" — unless ctx has ended already, when, as the plugin
// client's call would, it fails at once and kills nothing.
func (i *fakeInstance) Kill(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		i.proc.world.emit("kill not sent " + i.proc.name)
		return err
	}
	if i.exit(errors.New("killed")) {
		i.proc.world.emit("killed " + i.proc.name)
	}
	return nil
}

// hang makes p's instances stop answering their health checks.
func (p *fakeProcess) hang() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unhealthy = errors.New("context deadline exceeded")
}

// SleepLevels implements SleepInstance.
func (i *fakeInstance) SleepLevels() uint8 {
	i.proc.mu.Lock()
	defer i.proc.mu.Unlock()
	return i.proc.sleepLevels
}

// Sleep implements SleepInstance, reported as "asleep NAME LEVEL" or
// "sleep refused NAME"; with a sleep gate it says "sleep waits NAME" and
// blocks until the gate closes or ctx ends ("sleep hung NAME").
func (i *fakeInstance) Sleep(ctx context.Context, level uint8) error {
	i.proc.mu.Lock()
	fail, gate := i.proc.sleepFail, i.proc.sleepGate
	i.proc.mu.Unlock()
	if gate != nil {
		i.proc.world.emit("sleep waits " + i.proc.name)
		select {
		case <-gate:
		case <-ctx.Done():
			i.proc.world.emit("sleep hung " + i.proc.name)
			return ctx.Err()
		}
	}
	if fail != nil {
		i.proc.world.emit("sleep refused " + i.proc.name)
		return fail
	}
	i.proc.world.emit(fmt.Sprintf("asleep %s %d", i.proc.name, level))
	return nil
}

// Wake implements SleepInstance, reported as "awake NAME" or "wake failed
// NAME"; with a wake gate it blocks until the gate closes or ctx ends.
func (i *fakeInstance) Wake(ctx context.Context) error {
	i.proc.mu.Lock()
	fail, gate := i.proc.wakeFail, i.proc.wakeGate
	i.proc.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			i.proc.world.emit("wake failed " + i.proc.name)
			return ctx.Err()
		}
	}
	if fail != nil {
		i.proc.world.emit("wake failed " + i.proc.name)
		return fail
	}
	i.proc.world.emit("awake " + i.proc.name)
	return nil
}

// HostBytes implements SleepInstance.
func (i *fakeInstance) HostBytes(context.Context) (uint64, error) {
	i.proc.mu.Lock()
	defer i.proc.mu.Unlock()
	return i.proc.hostBytes, nil
}

func (i *fakeInstance) Upstream() *url.URL      { return i.url }
func (i *fakeInstance) Exited() <-chan struct{} { return i.exited }
func (i *fakeInstance) Err() error              { return i.err }

func (i *fakeInstance) exit(err error) bool {
	first := false
	i.once.Do(func() {
		first = true
		i.err = err
		w := i.proc.world
		w.mu.Lock()
		delete(w.running, i.proc.name)
		w.mu.Unlock()
		close(i.exited)
	})
	return first
}

func (i *fakeInstance) Stop(ctx context.Context) error {
	i.proc.mu.Lock()
	gate := i.proc.stopGate
	i.proc.mu.Unlock()
	if gate != nil {
		i.proc.world.emit("stopping " + i.proc.name)
		select {
		case <-gate:
		case <-ctx.Done():
		}
	}
	if i.exit(nil) {
		i.proc.world.emit("stopped " + i.proc.name)
	}
	return nil
}

// crash makes the running instance of name exit on its own.
func (w *fakeWorld) crash(t *testing.T, name string) {
	t.Helper()
	w.mu.Lock()
	inst := w.running[name]
	w.mu.Unlock()
	if inst == nil {
		t.Fatalf("crash: %s is not running", name)
	}
	inst.exit(errors.New("segmentation fault"))
}

func (w *fakeWorld) emit(ev string) { w.events <- ev }

// expect waits for the next events to be exactly want, in order.
func (w *fakeWorld) expect(t *testing.T, want ...string) {
	t.Helper()
	for _, ev := range want {
		select {
		case got := <-w.events:
			if got != ev {
				t.Fatalf("process event: got %q, want %q", got, ev)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("process event: timed out waiting for %q", ev)
		}
	}
}

// expectSet waits for the next len(want) events to be want in any order
// (starts that run side by side).
func (w *fakeWorld) expectSet(t *testing.T, want ...string) {
	t.Helper()
	var got []string
	for range want {
		select {
		case ev := <-w.events:
			got = append(got, ev)
		case <-time.After(10 * time.Second):
			t.Fatalf("process events: timed out with %q, want %q in any order", got, want)
		}
	}
	slices.Sort(got)
	want = slices.Sorted(slices.Values(want))
	if !slices.Equal(got, want) {
		t.Fatalf("process events: got %q, want %q in any order", got, want)
	}
}

// expectNone asserts that no process event is pending. Callers first make
// sure the run loop has handled everything they sent (a Models query is
// processed after every earlier event).
func (w *fakeWorld) expectNone(t *testing.T) {
	t.Helper()
	select {
	case ev := <-w.events:
		t.Fatalf("unexpected process event %q", ev)
	default:
	}
}

func (w *fakeWorld) live() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for name := range w.running {
		out = append(out, name)
	}
	return out
}
