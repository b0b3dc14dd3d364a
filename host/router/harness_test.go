package router

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/gpu"
	"github.com/loadout-dev/loadout/host/policy"
	"github.com/loadout-dev/loadout/internal/wasmbuild"
	"github.com/loadout-dev/loadout/sdk"
)

// The router's tests run the real built-in policies through the real Wasm
// runtime: one runtime and one compilation per test binary.
var (
	policyOnce sync.Once
	policyRT   *policy.Runtime
	fifoMod    *policy.Module
	groupMod   *policy.Module
	policyErr  error
)

func policies(t testing.TB) (*policy.Runtime, *policy.Module, *policy.Module) {
	t.Helper()
	policyOnce.Do(func() {
		ctx := context.Background()
		policyRT, policyErr = policy.NewRuntime(ctx, policy.Options{Logger: testLogger()})
		if policyErr != nil {
			return
		}
		for _, p := range []struct {
			pkg string
			dst **policy.Module
		}{
			{"github.com/loadout-dev/loadout/policies/fifo", &fifoMod},
			{"github.com/loadout-dev/loadout/policies/group", &groupMod},
		} {
			wasm, err := wasmbuild.Build(p.pkg)
			if err != nil {
				policyErr = err
				return
			}
			if *p.dst, err = policyRT.Compile(ctx, p.pkg, wasm); err != nil {
				policyErr = err
				return
			}
		}
	})
	if policyErr != nil {
		t.Fatalf("policies: %v", policyErr)
	}
	return policyRT, fifoMod, groupMod
}

func testLogger() *slog.Logger {
	if os.Getenv("LOADOUT_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// harness is a router over fake processes with the real fifo + group
// policies.
type harness struct {
	t     testing.TB
	r     *Router
	world *fakeWorld
	procs map[string]*fakeProcess
}

// groupsExclusiveAB is the topology most tests use: a and b swap in one
// exclusive group, c in another exclusive group, e in a persistent,
// non-exclusive group that nothing evicts.
const groupsExclusiveAB = `{"groups": {
	"ab": {"swap": true, "exclusive": true, "members": ["a", "b"]},
	"c":  {"swap": true, "exclusive": true, "members": ["c"]},
	"e":  {"swap": true, "exclusive": false, "persistent": true, "members": ["e"]}}}`

type harnessOpts struct {
	groups    string
	scheduler string // fifo settings JSON
	models    map[string]ModelConfig
	newSched  func(fx sdk.Effects) (SchedulerPolicy, error) // overrides the fifo policy
	wrapSwap  func(*policy.Swapper) SwapperPolicy           // wraps the group policy
	newSwap   func(sdk.Host) (SwapperPolicy, error)         // overrides the group policy
	clock     *manualClock                                  // the router's clock; nil: the wall clock
	tick      time.Duration
	ledger    *gpu.Ledger
	measure   time.Duration
	observer  Observer
	noWarm    bool // Config.NoWarmPath
	liveness  Liveness
	// hostMemory is Config.HostMemory (bytes sleepers may lease).
	hostMemory uint64
	// logger is Config.Logger; nil: testLogger().
	logger *slog.Logger
}

func newHarness(t testing.TB, o harnessOpts) *harness {
	t.Helper()
	rt, fifo, group := policies(t)
	if o.groups == "" {
		o.groups = groupsExclusiveAB
	}
	if o.scheduler == "" {
		o.scheduler = "{}"
	}
	h := &harness{t: t, world: newFakeWorld(), procs: map[string]*fakeProcess{}}
	models := map[string]ModelConfig{}
	names := []string{"a", "b", "c", "e"}
	for name := range o.models {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	for _, name := range names {
		p := h.world.process(name)
		h.procs[name] = p
		mc := o.models[name]
		mc.Process = p
		models[name] = mc
	}
	ctx := context.Background()
	if o.logger == nil {
		o.logger = testLogger()
	}
	cfg := Config{
		Models:          models,
		SchedulerName:   "builtin:fifo",
		SwapperName:     "builtin:group",
		TickInterval:    o.tick,
		Ledger:          o.ledger,
		MeasureInterval: o.measure,
		Observer:        o.observer,
		NoWarmPath:      o.noWarm,
		Liveness:        o.liveness,
		HostMemory:      o.hostMemory,
		Logger:          o.logger,
		NewScheduler: func(fx sdk.Effects) (SchedulerPolicy, error) {
			return rt.NewScheduler(ctx, fifo, []byte(o.scheduler), fx)
		},
		NewSwapper: func(host sdk.Host) (SwapperPolicy, error) {
			sw, err := rt.NewSwapper(ctx, group, []byte(o.groups), host)
			if err != nil || o.wrapSwap == nil {
				return sw, err
			}
			return o.wrapSwap(sw), nil
		},
	}
	if o.newSched != nil {
		cfg.NewScheduler = o.newSched
		cfg.SchedulerName = "test"
	}
	if o.clock != nil {
		cfg.Clock = o.clock.now
	}
	if o.newSwap != nil {
		cfg.NewSwapper = o.newSwap
		cfg.SwapperName = "test"
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.r = r
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if live := h.world.live(); len(live) > 0 {
			t.Errorf("processes left running after shutdown: %v", live)
		}
	})
	return h
}

// call is one Acquire running in the background.
type call struct {
	model    string
	cancel   context.CancelFunc
	progress chan Progress
	done     chan struct{}
	grant    *Grant
	err      error
}

// acquire starts an Acquire for model and returns at once.
func (h *harness) acquire(model string) *call {
	ctx, cancel := context.WithCancel(context.Background())
	c := &call{model: model, cancel: cancel, progress: make(chan Progress, 1), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		c.grant, c.err = h.r.Acquire(ctx, Request{Model: model, Progress: c.progress})
	}()
	h.t.Cleanup(cancel)
	return c
}

// wait waits for the call to end and returns its grant, failing the test
// on an error.
func (c *call) wait(t *testing.T) *Grant {
	t.Helper()
	c.waitDone(t)
	if c.err != nil {
		t.Fatalf("acquire %s: %v", c.model, c.err)
	}
	return c.grant
}

func (c *call) waitDone(t *testing.T) {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("acquire %s: no answer", c.model)
	}
}

// waitErr waits for the call to fail and returns its *Error.
func (c *call) waitErr(t *testing.T) *Error {
	t.Helper()
	c.waitDone(t)
	e, ok := c.err.(*Error)
	if !ok {
		t.Fatalf("acquire %s: got grant=%v err=%v, want a router error", c.model, c.grant, c.err)
	}
	return e
}

// held waits until the scheduler has queued the call (position ≥ 1) or
// made it wait on a swap (position 0, loading).
func (c *call) held(t *testing.T, wantLoading bool) Progress {
	t.Helper()
	for {
		select {
		case p := <-c.progress:
			if p.Loading == wantLoading {
				return p
			}
		case <-c.done:
			t.Fatalf("acquire %s ended (err=%v) instead of waiting", c.model, c.err)
		case <-time.After(10 * time.Second):
			t.Fatalf("acquire %s: not held (loading=%v)", c.model, wantLoading)
		}
	}
}

// pending asserts that the call has not ended.
func (c *call) pending(t *testing.T) {
	t.Helper()
	select {
	case <-c.done:
		t.Fatalf("acquire %s ended (grant=%v err=%v), want it still waiting", c.model, c.grant, c.err)
	default:
	}
}

// status returns the router's view of one model; the query is answered
// after every event sent before it.
func (h *harness) status(name string) ModelStatus {
	for _, s := range h.r.Models() {
		if s.Model == name {
			return s
		}
	}
	h.t.Fatalf("no model %s", name)
	return ModelStatus{}
}

func (h *harness) expectState(name, state string) {
	h.t.Helper()
	if got := h.status(name).State; got != state {
		h.t.Fatalf("model %s is %s, want %s", name, got, state)
	}
}

// awaitState asks the loop for name's state until it is state: for a
// change the loop makes on an event that a fake process reports just
// before sending it (a stop), which the loop may take after a query.
func (h *harness) awaitState(name, state string) {
	h.t.Helper()
	h.await(func() string {
		if got := h.status(name).State; got != state {
			return fmt.Sprintf("model %s is %s, want %s", name, got, state)
		}
		return ""
	})
}

// await asks the loop (each query is one of its turns) until check says
// nothing is wrong ("") or 10 s have passed, then fails with what it says.
func (h *harness) await(check func() (wrong string)) {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for wrong := check(); wrong != ""; wrong = check() {
		if time.Now().After(deadline) {
			h.t.Fatal(wrong)
		}
	}
}

func (c *call) String() string { return fmt.Sprintf("acquire(%s)", c.model) }

// manualClock is a router clock the test moves by hand (Config.Clock), so
// durations the router measures are exact and need no sleeping.
type manualClock struct{ ns atomic.Int64 }

func newManualClock() *manualClock {
	c := &manualClock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *manualClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *manualClock) advance(d time.Duration) { c.ns.Add(int64(d)) }
