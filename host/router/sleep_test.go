package router

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/pprof"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/host/gpu"
	"github.com/loadout-dev/loadout/internal/proctest"
	"github.com/loadout-dev/loadout/sdk"
)

// sleepHarness is the exclusive group a+b with both able to sleep at
// levels 1 and 2, 1 GiB of weights each, and hostMemory bytes for
// sleepers.
func sleepHarness(t *testing.T, hostMemory uint64, evict config.Evict) *harness {
	t.Helper()
	mc := ModelConfig{VRAM: gib, SleepLevels: 3, Evict: evict, SleepOverhead: 256 << 20}
	h := newHarness(t, harnessOpts{hostMemory: hostMemory, models: map[string]ModelConfig{"a": mc, "b": mc}})
	for _, name := range []string{"a", "b"} {
		h.procs[name].sleepLevels = 3
	}
	return h
}

// serveOnce acquires model and releases the grant at once.
func serveOnce(t *testing.T, h *harness, model string) {
	t.Helper()
	c := h.acquire(model)
	c.wait(t).Release()
}

func TestSleep_EvictedModelSleepsAndItsRequestWakesIt(t *testing.T) {
	h := sleepHarness(t, 8*gib, config.EvictAuto)
	serveOnce(t, h, "a")
	h.world.expect(t, "starting a", "ready a")

	serveOnce(t, h, "b") // the group evicts a: it sleeps at level 1
	h.world.expect(t, "asleep a 1", "starting b", "ready b")
	st := h.status("a")
	if st.State != "asleep" || st.SleepLevel != 1 || st.HostBytes != gib || st.SleepSeconds <= 0 {
		t.Fatalf("a after its eviction: state %s, level %d, host bytes %d, sleep %v s; want asleep, 1, 1 GiB, measured", st.State, st.SleepLevel, st.HostBytes, st.SleepSeconds)
	}

	g := h.acquire("a").wait(t) // b sleeps, a wakes: no second start of a
	g.Release()
	h.world.expect(t, "asleep b 1", "awake a")
	if !g.Woke || g.LoadWait <= 0 {
		t.Fatalf("grant after a wake: Woke %v, LoadWait %v; want a wake waited on", g.Woke, g.LoadWait)
	}
	st = h.status("a")
	if st.State != "ready" || st.ColdLoads != 1 || st.Wakes != 1 || st.HostBytes != 0 {
		t.Fatalf("a after its wake: state %s, cold loads %d, wakes %d, host bytes %d; want ready, 1, 1, 0",
			st.State, st.ColdLoads, st.Wakes, st.HostBytes)
	}
	if n := h.world.starts["a"]; n != 1 {
		t.Fatalf("a was started %d times, want 1 (woken, not reloaded)", n)
	}
}

func TestSleep_HostMemoryThatHoldsNoWeightsSleepsAtLevel2(t *testing.T) {
	h := sleepHarness(t, 512<<20, config.EvictAuto) // holds the 256 MiB overhead, not 1 GiB of weights
	serveOnce(t, h, "a")
	serveOnce(t, h, "b")
	h.world.expect(t, "starting a", "ready a", "asleep a 2", "starting b", "ready b")
	if st := h.status("a"); st.SleepLevel != 2 || st.HostBytes != 256<<20 {
		t.Fatalf("a: level %d, host bytes %d; want 2, 256 MiB", st.SleepLevel, st.HostBytes)
	}
}

func TestSleep_NoRoomForASleeperStops(t *testing.T) {
	h := sleepHarness(t, 128<<20, config.EvictAuto)
	serveOnce(t, h, "a")
	serveOnce(t, h, "b")
	h.world.expect(t, "starting a", "ready a", "stopped a", "starting b", "ready b")
	h.expectState("a", "stopped")
}

func TestSleep_EvictStopConfigStops(t *testing.T) {
	h := sleepHarness(t, 8*gib, config.EvictStop)
	serveOnce(t, h, "a")
	serveOnce(t, h, "b")
	h.world.expect(t, "starting a", "ready a", "stopped a", "starting b", "ready b")
}

func TestSleep_NoHostMemoryMeansNoSleep(t *testing.T) {
	h := sleepHarness(t, 0, config.EvictAuto)
	serveOnce(t, h, "a")
	serveOnce(t, h, "b")
	h.world.expect(t, "starting a", "ready a", "stopped a", "starting b", "ready b")
}

func TestSleep_RefusedSleepStopsInstead(t *testing.T) {
	h := sleepHarness(t, 8*gib, config.EvictAuto)
	h.procs["a"].sleepFail = errors.New("405 Method Not Allowed")
	serveOnce(t, h, "a")
	serveOnce(t, h, "b")
	h.world.expect(t, "starting a", "ready a", "sleep refused a", "killed a", "starting b", "ready b")
	if st := h.status("a"); st.State != "stopped" || st.HostBytes != 0 {
		t.Fatalf("a: %s with %d host bytes, want stopped with none", st.State, st.HostBytes)
	}
}

// A sleep that hangs (a server stopped with SIGSTOP while it is evicted)
// is cut at the model's wakeTimeout, and the server is then killed
// under a deadline of its own — not under the sleep's, used up — before
// the swap goes on to use its memory.
func TestSleep_HungSleepIsKilledAndTheSwapGoesOn(t *testing.T) {
	mc := ModelConfig{VRAM: gib, SleepLevels: 3, WakeTimeout: 200 * time.Millisecond}
	h := newHarness(t, harnessOpts{hostMemory: 8 * gib, models: map[string]ModelConfig{"a": mc, "b": mc}})
	h.procs["a"].sleepLevels, h.procs["b"].sleepLevels = 3, 3
	gate := make(chan struct{})
	defer close(gate)
	h.procs["a"].sleepGate = gate // never opens during the sleep
	serveOnce(t, h, "a")
	serveOnce(t, h, "b")
	h.world.expect(t, "starting a", "ready a", "sleep waits a", "sleep hung a", "killed a", "starting b", "ready b")
	if st := h.status("a"); st.State != "stopped" || st.HostBytes != 0 {
		t.Fatalf("a: %s with %d host bytes; want stopped with none", st.State, st.HostBytes)
	}
}

// hungSleepHarness is a and b, able to sleep, with a wake timeout far
// past any test's deadline: only liveness can cut a hung sleep or wake.
func hungSleepHarness(t *testing.T) *harness {
	t.Helper()
	mc := ModelConfig{VRAM: gib, SleepLevels: 3, WakeTimeout: time.Hour}
	h := newHarness(t, harnessOpts{hostMemory: 8 * gib, liveness: quickLiveness, models: map[string]ModelConfig{"a": mc, "b": mc}})
	h.procs["a"].sleepLevels, h.procs["b"].sleepLevels = 3, 3
	return h
}

// A server that stops answering while it is put to sleep is found by its
// health checks, as a serving one is, not at the wake timeout: the sleep
// is cut, the server killed, and the swap waiting for its memory goes on.
func TestSleep_HungSleepIsCutByLiveness(t *testing.T) {
	h := hungSleepHarness(t)
	gate := make(chan struct{})
	defer close(gate)
	serveOnce(t, h, "a")
	h.world.expect(t, "starting a", "ready a")
	h.procs["a"].mu.Lock()
	h.procs["a"].sleepGate = gate // never opens during the sleep
	h.procs["a"].mu.Unlock()
	h.procs["a"].hang()
	serveOnce(t, h, "b")
	h.world.expect(t, "sleep waits a", "sleep hung a", "killed a", "starting b", "ready b")
	if st := h.status("a"); st.State != "stopped" || st.HostBytes != 0 {
		t.Fatalf("a: %s with %d host bytes; want stopped with none", st.State, st.HostBytes)
	}
}

// A sleeping server that stopped answering is found while it is woken:
// the wake is cut after its failed health checks, not at the wake
// timeout, the server killed, and the model cold-loaded in the same swap.
func TestSleep_HungWakeIsCutByLiveness(t *testing.T) {
	h := hungSleepHarness(t)
	serveOnce(t, h, "a")
	serveOnce(t, h, "b")
	h.world.expect(t, "starting a", "ready a", "asleep a 1", "starting b", "ready b")
	gate := make(chan struct{})
	defer close(gate)
	h.procs["a"].mu.Lock()
	h.procs["a"].wakeGate = gate // never opens during the wake
	h.procs["a"].mu.Unlock()
	h.procs["a"].hang()
	release := h.procs["a"].hold() // the cold start waits until a answers again
	c := h.acquire("a")
	h.world.expect(t, "asleep b 1", "wake failed a", "killed a")
	h.procs["a"].mu.Lock()
	h.procs["a"].unhealthy = nil
	h.procs["a"].mu.Unlock()
	release()
	h.world.expect(t, "starting a", "ready a")
	g := c.wait(t)
	g.Release()
	if g.Woke {
		t.Fatal("the grant says a woke; it was cold-loaded")
	}
	if st := h.status("a"); st.ColdLoads != 2 || st.Wakes != 0 {
		t.Fatalf("a: %d cold loads, %d wakes; want 2, 0", st.ColdLoads, st.Wakes)
	}
}

func TestSleep_FailedWakeColdLoads(t *testing.T) {
	var logged proctest.LockedBuffer
	mc := ModelConfig{VRAM: gib, SleepLevels: 3, Evict: config.EvictAuto, SleepOverhead: 256 << 20}
	h := newHarness(t, harnessOpts{hostMemory: 8 * gib, models: map[string]ModelConfig{"a": mc, "b": mc},
		logger: slog.New(slog.NewTextHandler(&logged, nil))})
	h.procs["a"].sleepLevels, h.procs["b"].sleepLevels = 3, 3
	serveOnce(t, h, "a")
	serveOnce(t, h, "b")
	h.world.expect(t, "starting a", "ready a", "asleep a 1", "starting b", "ready b")
	h.procs["a"].wakeFail = errors.New("500 on /wake_up")
	serveOnce(t, h, "a")
	h.world.expect(t, "asleep b 1", "wake failed a", "killed a", "starting a", "ready a")
	st := h.status("a")
	if st.State != "ready" || st.WakeFailures != 1 || st.ColdLoads != 2 || st.HostBytes != 0 {
		t.Fatalf("a: %s, wake failures %d, cold loads %d, host bytes %d; want ready, 1, 2, 0", st.State, st.WakeFailures, st.ColdLoads, st.HostBytes)
	}
	// The wake's own error, not a timeout it never had (the context was
	// read after its cancel).
	if out := logged.String(); !strings.Contains(out, "500 on /wake_up") || strings.Contains(out, "timed out") {
		t.Errorf("the failed wake's log, want its error and no timeout:\n%s", out)
	}
}

func TestSleep_HungWakeIsKilledAndColdLoads(t *testing.T) {
	mc := ModelConfig{VRAM: gib, SleepLevels: 3, WakeTimeout: 200 * time.Millisecond}
	h := newHarness(t, harnessOpts{hostMemory: 8 * gib, models: map[string]ModelConfig{"a": mc, "b": mc}})
	h.procs["a"].sleepLevels, h.procs["b"].sleepLevels = 3, 3
	serveOnce(t, h, "a")
	serveOnce(t, h, "b")
	h.world.expect(t, "starting a", "ready a", "asleep a 1", "starting b", "ready b")
	wakeHangsAndColdLoads(t, h)
}

// wakeHangsAndColdLoads asks for asleep a with b running, a's wake hung:
// the wake is cut, a's server killed, b put to sleep, a cold-loaded.
func wakeHangsAndColdLoads(t *testing.T, h *harness) {
	t.Helper()
	gate := make(chan struct{})
	defer close(gate)
	h.procs["a"].wakeGate = gate // never opens during the wake
	serveOnce(t, h, "a")
	h.world.expect(t, "asleep b 1", "wake failed a", "killed a", "starting a", "ready a")
}

func TestSleep_SleeperThatDiesIsStoppedAndColdLoads(t *testing.T) {
	h := sleepHarness(t, 8*gib, config.EvictAuto)
	serveOnce(t, h, "a")
	serveOnce(t, h, "b")
	h.world.expect(t, "starting a", "ready a", "asleep a 1", "starting b", "ready b")
	h.world.crash(t, "a")
	h.await(func() string {
		if st := h.status("a"); st.State != "stopped" || st.HostBytes != 0 {
			return "a is " + st.State + " after its sleeping server died, want stopped with no host lease"
		}
		return ""
	})
	serveOnce(t, h, "a")
	h.world.expect(t, "asleep b 1", "starting a", "ready a")
}

// Sleeping and waking keep the one exit watcher each server got when it
// started: a model woken a thousand times holds no thousand goroutines
// (each wake started another before, left until the server exited). The
// server's exit is still seen after its wakes, awake or asleep.
func TestSleep_WakesStartNoExitWatcher(t *testing.T) {
	h := sleepHarness(t, 8*gib, config.EvictAuto)
	serveOnce(t, h, "a")
	serveOnce(t, h, "b")
	h.world.expect(t, "starting a", "ready a", "asleep a 1", "starting b", "ready b")
	for range 10 {
		serveOnce(t, h, "a")
		h.world.expect(t, "asleep b 1", "awake a")
		serveOnce(t, h, "b")
		h.world.expect(t, "asleep a 1", "awake b")
	}
	if n := exitWatchers(t, h.r); n != 2 {
		t.Fatalf("%d exit watchers after 20 wakes of 2 servers; want 2", n)
	}
	h.world.crash(t, "b") // awake, woken ten times
	h.awaitState("b", "failed")
	h.world.crash(t, "a") // asleep
	h.await(func() string {
		if st := h.status("a"); st.State != "stopped" || st.HostBytes != 0 {
			return "a is " + st.State + " after its sleeping server died, want stopped with no host lease"
		}
		return ""
	})
	h.await(func() string {
		if n := exitWatchers(t, h.r); n != 0 {
			return fmt.Sprintf("%d exit watchers left with no server running", n)
		}
		return ""
	})
}

// exitWatchers counts r's goroutines in watchExit, from the goroutine
// profile (each goroutine's stack names its receiver).
func exitWatchers(t *testing.T, r *Router) int {
	t.Helper()
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 2); err != nil {
		t.Fatal(err)
	}
	return strings.Count(b.String(), fmt.Sprintf("router.(*Router).watchExit(%p", r))
}

func TestSleep_UnloadStopsSleepers(t *testing.T) {
	h := sleepHarness(t, 8*gib, config.EvictAuto)
	serveOnce(t, h, "a")
	serveOnce(t, h, "b")
	h.world.expect(t, "starting a", "ready a", "asleep a 1", "starting b", "ready b")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.r.Unload(ctx, UnloadOptions{}); err != nil {
		t.Fatal(err)
	}
	h.world.expectSet(t, "stopped a", "stopped b")
	h.expectState("a", "stopped")
}

// modeSwapper evicts every running model but the target, each with mode,
// and records the resolved modes the host tells it at swap start.
type modeSwapper struct {
	mode    sdk.EvictMode
	started [][]sdk.EvictMode
}

func (s *modeSwapper) Plan(q sdk.PlanRequest) (sdk.Plan, error) {
	p := sdk.Plan{Evict: q.Running}
	for range q.Running {
		p.Modes = append(p.Modes, s.mode)
	}
	return p, nil
}

func (s *modeSwapper) OnSwapStart(ev sdk.SwapStartEvent) error {
	s.started = append(s.started, ev.Modes)
	return nil
}

// The swapper's mode for each victim reaches the host through fifo's
// swap (ABI version 3): here a level-2 sleep where level 1 would fit.
func TestSleep_PlanModeIsCarriedOut(t *testing.T) {
	sw := &modeSwapper{mode: sdk.EvictSleep2}
	mc := ModelConfig{VRAM: gib, SleepLevels: 3}
	h := newHarness(t, harnessOpts{hostMemory: 8 * gib, models: map[string]ModelConfig{"a": mc, "b": mc},
		newSwap: func(sdk.Host) (SwapperPolicy, error) { return sw, nil }})
	h.procs["a"].sleepLevels = 3
	serveOnce(t, h, "a")
	serveOnce(t, h, "b")
	h.world.expect(t, "starting a", "ready a", "asleep a 2", "starting b", "ready b")
	if len(sw.started) != 2 || !slices.Equal(sw.started[1], []sdk.EvictMode{sdk.EvictSleep2}) {
		t.Fatalf("modes at swap start: %v, want [] then [sleep2]", sw.started)
	}
}

// A sleep the policy asks for that host memory cannot hold is a stop,
// counted against the policy.
func TestSleep_PlanSleepWithoutRoomIsAStop(t *testing.T) {
	sw := &modeSwapper{mode: sdk.EvictSleep1}
	mc := ModelConfig{VRAM: gib, SleepLevels: 3}
	h := newHarness(t, harnessOpts{hostMemory: 256 << 20, models: map[string]ModelConfig{"a": mc, "b": mc},
		newSwap: func(sdk.Host) (SwapperPolicy, error) { return sw, nil }})
	h.procs["a"].sleepLevels = 3
	serveOnce(t, h, "a")
	serveOnce(t, h, "b")
	h.world.expect(t, "starting a", "ready a", "stopped a", "starting b", "ready b")
	if refused := h.r.Counters()["scheduler"].RefusedEffects; refused != 1 {
		t.Fatalf("refused effects: %d, want 1 (the sleep that became a stop)", refused)
	}
}

// A reload that changes only a model's evict: restarts nothing; its next
// eviction follows the new setting.
func TestSleep_ReloadedEvictTakesEffectWithoutARestart(t *testing.T) {
	h := sleepHarness(t, 8*gib, config.EvictAuto)
	serveOnce(t, h, "a")
	h.world.expect(t, "starting a", "ready a")
	models := map[string]ModelConfig{}
	for _, name := range []string{"a", "b", "c", "e"} {
		mc := ModelConfig{Process: h.procs[name], VRAM: gib, SleepLevels: 3, SleepOverhead: 256 << 20}
		if name == "a" {
			mc.Evict = config.EvictStop
		}
		models[name] = mc
	}
	if err := h.r.UpdateModels(models, nil); err != nil {
		t.Fatal(err)
	}
	serveOnce(t, h, "b")
	h.world.expect(t, "stopped a", "starting b", "ready b")
}

// A reload that changes only a model's wakeTimeout restarts nothing, not
// even its sleeper; its next wake is bounded by the new one.
func TestSleep_ReloadedWakeTimeoutTakesEffectWithoutARestart(t *testing.T) {
	h := sleepHarness(t, 8*gib, config.EvictAuto) // wakeTimeout: the default, a minute
	serveOnce(t, h, "a")
	serveOnce(t, h, "b")
	h.world.expect(t, "starting a", "ready a", "asleep a 1", "starting b", "ready b")
	models := map[string]ModelConfig{}
	for _, name := range []string{"a", "b", "c", "e"} {
		mc := ModelConfig{Process: h.procs[name], VRAM: gib, SleepLevels: 3, SleepOverhead: 256 << 20}
		if name == "a" {
			mc.WakeTimeout = 200 * time.Millisecond
		}
		models[name] = mc
	}
	if err := h.r.UpdateModels(models, nil); err != nil {
		t.Fatal(err)
	}
	if st := h.status("a"); st.State != "asleep" {
		t.Fatalf("a after the reload: %s, want still asleep", st.State)
	}
	wakeHangsAndColdLoads(t, h)
}

// An unload of an asleep model stops its server, and returns once the
// server has exited.
func TestSleep_UnloadOfASleeperWaitsForItsExit(t *testing.T) {
	h := sleepHarness(t, 8*gib, config.EvictAuto)
	serveOnce(t, h, "a")
	serveOnce(t, h, "b")
	h.world.expect(t, "starting a", "ready a", "asleep a 1", "starting b", "ready b")
	release := h.procs["a"].holdStop()
	done := make(chan error, 1)
	go func() { done <- h.r.Unload(context.Background(), UnloadOptions{Models: []string{"a"}}) }()
	h.world.expect(t, "stopping a")
	select {
	case err := <-done:
		t.Fatalf("the unload returned (%v) while a's server was still stopping", err)
	default:
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	h.world.expect(t, "stopped a")
	if st := h.status("a"); st.State != "stopped" || st.HostBytes != 0 {
		t.Fatalf("a after its unload: %s with %d host bytes; want stopped with none", st.State, st.HostBytes)
	}
}

// A smaller host memory (a reload's hostMemory:) stops the least recently
// used sleepers until the rest fit; 0 stops every one, and evictions are
// stops from then on.
func TestSleep_SetHostMemoryStopsTheLeastRecentlyUsedSleepers(t *testing.T) {
	mc := ModelConfig{VRAM: gib, SleepLevels: 3, SleepOverhead: 256 << 20}
	h := newHarness(t, harnessOpts{hostMemory: 8 * gib, models: map[string]ModelConfig{"a": mc, "b": mc, "c": mc}})
	for _, name := range []string{"a", "b", "c"} {
		h.procs[name].sleepLevels = 3
	}
	serveOnce(t, h, "a")
	serveOnce(t, h, "b")
	serveOnce(t, h, "c")
	h.world.expect(t, "starting a", "ready a", "asleep a 1", "starting b", "ready b", "asleep b 1", "starting c", "ready c")
	if err := h.r.SetHostMemory(gib + gib/2); err != nil {
		t.Fatal(err)
	}
	h.world.expect(t, "stopped a")
	if st := h.status("b"); st.State != "asleep" {
		t.Fatalf("b, the most recently used sleeper: %s, want asleep (it fits in 1.5 GiB)", st.State)
	}
	if hm, err := h.r.HostMemory(); err != nil || hm.Total != gib+gib/2 || hm.Sleepers != gib {
		t.Fatalf("host memory %+v (%v); want 1.5 GiB, 1 GiB leased by b", hm, err)
	}
	if err := h.r.SetHostMemory(0); err != nil {
		t.Fatal(err)
	}
	h.world.expect(t, "stopped b")
	serveOnce(t, h, "a")
	h.world.expect(t, "stopped c", "starting a", "ready a")
}

// A sleep under way when host memory shrinks below what it leased ends
// with the new sleeper stopped: the ledger is never left over-committed.
func TestSleep_HostMemoryShrunkDuringASleepStopsTheSleeper(t *testing.T) {
	h := sleepHarness(t, 8*gib, config.EvictAuto)
	gate := make(chan struct{})
	h.procs["a"].sleepGate = gate
	serveOnce(t, h, "a")
	c := h.acquire("b") // evicts a: its sleep (level 1, 1 GiB) waits on the gate
	h.world.expect(t, "starting a", "ready a", "sleep waits a")
	if err := h.r.SetHostMemory(gib / 2); err != nil {
		t.Fatal(err)
	}
	close(gate)
	c.wait(t).Release()
	h.world.expect(t, "asleep a 1")
	h.world.expectSet(t, "starting b", "ready b", "stopped a") // a's stop and b's start run at once
	if hm, err := h.r.HostMemory(); err != nil || hm.Sleepers != 0 {
		t.Fatalf("host memory %+v (%v); want no sleeper leasing any", hm, err)
	}
}

// ttlHarness is one model, a, that can sleep at levels 1 and 2 (1 GiB of
// weights), idle for 30 ms past its TTL, with evict and 8 GiB of host
// memory.
func ttlHarness(t *testing.T, evict config.Evict) *harness {
	t.Helper()
	mc := ModelConfig{VRAM: gib, SleepLevels: 3, Evict: evict, SleepOverhead: 256 << 20, TTL: 30 * time.Millisecond}
	h := newHarness(t, harnessOpts{hostMemory: 8 * gib, tick: 5 * time.Millisecond, models: map[string]ModelConfig{"a": mc}})
	h.procs["a"].sleepLevels = 3
	return h
}

// A model idle past its TTL leaves the GPU as an eviction would: asleep
// when its evict: and host memory allow, so its next request wakes it
// rather than paying a cold load.
func TestSleep_TTLPutsAnIdleModelToSleep(t *testing.T) {
	h := ttlHarness(t, config.EvictAuto)
	serveOnce(t, h, "a")
	h.world.expect(t, "starting a", "ready a", "asleep a 1")
	h.awaitState("a", "asleep")
	if st := h.status("a"); st.SleepLevel != 1 || st.HostBytes != gib || !st.ExpiresAt.IsZero() {
		t.Fatalf("a after its TTL: level %d, host bytes %d, expires at %v; want 1, 1 GiB, none", st.SleepLevel, st.HostBytes, st.ExpiresAt)
	}
	g := h.acquire("a").wait(t)
	g.Release()
	h.world.expect(t, "awake a")
	if !g.Woke {
		t.Fatal("the request after a's TTL did not wake it")
	}
	if n := h.world.starts["a"]; n != 1 {
		t.Fatalf("a was started %d times, want 1 (woken, not reloaded)", n)
	}
}

// evict: stop holds for a TTL too: the server is stopped, as llama-swap's
// ttl does.
func TestSleep_TTLWithEvictStopStops(t *testing.T) {
	h := ttlHarness(t, config.EvictStop)
	serveOnce(t, h, "a")
	h.world.expect(t, "starting a", "ready a", "stopped a")
	h.awaitState("a", "stopped")
}

// devSwapper places each target on the device it names and evicts every
// running model there: a router that chooses its devices (sdk.Plan's
// Devices), as the sdk/evict ones do.
type devSwapper struct {
	h   sdk.Host
	dev map[string]int32
	// target is the last plan's target as the snapshot showed it.
	target sdk.ModelInfo
}

func (s *devSwapper) Plan(q sdk.PlanRequest) (sdk.Plan, error) {
	s.target, _ = s.h.ModelState(q.Target)
	d := s.dev[q.Target]
	p := sdk.Plan{Devices: []int32{d}}
	for _, name := range q.Running {
		if m, ok := s.h.ModelState(name); ok && slices.Contains(m.Devices, d) {
			p.Evict = append(p.Evict, name)
		}
	}
	return p, nil
}

func (s *devSwapper) OnSwapStart(sdk.SwapStartEvent) error { return nil }

// twoGPUSleepHarness is a, b and c of 1 GiB, able to sleep, on two 1 GiB
// GPUs, each placed where sw says; a has been put to sleep on GPU 0 (c
// took its place) and b runs on GPU 1.
func twoGPUSleepHarness(t *testing.T, sw *devSwapper) (*harness, *gpu.Ledger) {
	t.Helper()
	ledger := gpu.NewLedger(gpu.NewDeclared([]gpu.DeclaredDevice{{Name: "sim0", Memory: gib}, {Name: "sim1", Memory: gib}}), 0)
	mc := ModelConfig{VRAM: gib, SleepLevels: 3}
	h := newHarness(t, harnessOpts{hostMemory: 8 * gib, ledger: ledger, models: map[string]ModelConfig{"a": mc, "b": mc, "c": mc},
		newSwap: func(host sdk.Host) (SwapperPolicy, error) { sw.h = host; return sw, nil }})
	for _, name := range []string{"a", "b", "c"} {
		h.procs[name].sleepLevels = 3
	}
	sw.dev = map[string]int32{"a": 0, "b": 1, "c": 0}
	serveOnce(t, h, "a")
	serveOnce(t, h, "b")
	serveOnce(t, h, "c")
	h.world.expect(t, "starting a", "ready a", "starting b", "ready b", "asleep a 1", "starting c", "ready c")
	return h, ledger
}

// An asleep model is woken only on the GPU its server was started on: a
// router that places it there gets a wake.
func TestSleep_WokenOnTheGPUItSleptOn(t *testing.T) {
	sw := &devSwapper{}
	h, ledger := twoGPUSleepHarness(t, sw)
	serveOnce(t, h, "a") // placed on GPU 0 again: c goes
	h.world.expect(t, "asleep c 1", "awake a")
	if tg := sw.target; !tg.Asleep() || !slices.Equal(tg.Devices, []int32{0}) || !slices.Equal(tg.Leased, []uint64{0}) {
		t.Fatalf("asleep a as its plan saw it: level %d, devices %v, leased %v; want asleep on [0], holding 0", tg.SleepLevel, tg.Devices, tg.Leased)
	}
	if d := onGPU(t, ledger, "a"); d != 0 || h.world.starts["a"] != 1 {
		t.Fatalf("a on GPU %d after %d starts; want woken on GPU 0 (1 start)", d, h.world.starts["a"])
	}
}

// A router that places an asleep model on another GPU than its sleeping
// server's gets a cold load there, its sleeper stopped first: the server
// cannot move, waking it where the ledger gave its memory to c would put
// two models' weights on one GPU, and a backend runs one server per model,
// so the new one starts only once the old has exited.
func TestSleep_PlacedOnAnotherGPUColdLoads(t *testing.T) {
	sw := &devSwapper{}
	h, ledger := twoGPUSleepHarness(t, sw)
	sw.dev["a"] = 1 // b's GPU: b goes
	release := h.procs["a"].holdStop()
	c := h.acquire("a")
	h.world.expectSet(t, "asleep b 1", "stopping a")
	release()
	h.world.expect(t, "stopped a", "starting a", "ready a")
	c.wait(t).Release()
	if d := onGPU(t, ledger, "a"); d != 1 || h.world.starts["a"] != 2 {
		t.Fatalf("a on GPU %d after %d starts; want cold-loaded on GPU 1 (2 starts)", d, h.world.starts["a"])
	}
	if st := h.status("a"); st.Wakes != 0 || st.State != "ready" {
		t.Fatalf("a: %s, %d wakes; want ready, not woken", st.State, st.Wakes)
	}
}

// prioritylru, planning on the snapshot, places an asleep model on the GPU
// its server holds, evicting there, though the least recently used model
// is on the other GPU: the model is woken, not cold-loaded.
func TestSleep_RouterPlacesASleeperOnItsGPU(t *testing.T) {
	ledger := gpu.NewLedger(gpu.NewDeclared([]gpu.DeclaredDevice{{Name: "sim0", Memory: gib}, {Name: "sim1", Memory: gib}}), 0)
	mc := ModelConfig{VRAM: gib, SleepLevels: 3}
	h := newHarness(t, harnessOpts{hostMemory: 8 * gib, ledger: ledger, groups: `{}`, newSwap: prioritylru(t),
		models: map[string]ModelConfig{"a": mc, "b": mc, "c": mc}})
	for _, name := range []string{"a", "b", "c"} {
		h.procs[name].sleepLevels = 3
	}
	serveOnce(t, h, "a")
	serveOnce(t, h, "b")
	h.world.expect(t, "starting a", "ready a", "starting b", "ready b")
	gpuA := onGPU(t, ledger, "a")
	serveOnce(t, h, "c") // a is the least recently used: it sleeps, c takes its GPU
	h.world.expect(t, "asleep a 1", "starting c", "ready c")
	if d := onGPU(t, ledger, "c"); d != gpuA {
		t.Fatalf("c on GPU %d, want a's %d", d, gpuA)
	}
	serveOnce(t, h, "a") // b is now the least recently used, on the other GPU
	h.world.expect(t, "asleep c 1", "awake a")
	if d := onGPU(t, ledger, "a"); d != gpuA || h.world.starts["a"] != 1 {
		t.Fatalf("a on GPU %d after %d starts; want woken on GPU %d", d, h.world.starts["a"], gpuA)
	}
	h.expectState("b", "ready")
}

// A request for a model whose sleeping server is still being stopped (here
// for want of host memory) starts a new server only once the old one has
// exited: a backend runs one server per model, and a start beside the
// exiting one failed ("already running") before.
func TestSleep_StartWaitsForItsStoppingSleeper(t *testing.T) {
	h := sleepHarness(t, 8*gib, config.EvictAuto)
	serveOnce(t, h, "a")
	serveOnce(t, h, "b")
	h.world.expect(t, "starting a", "ready a", "asleep a 1", "starting b", "ready b")
	release := h.procs["a"].holdStop()
	if err := h.r.SetHostMemory(0); err != nil { // no room for sleepers: a's server is stopped
		t.Fatal(err)
	}
	h.world.expect(t, "stopping a")
	c := h.acquire("a")
	h.world.expect(t, "stopped b") // the group's eviction; no host memory, so a stop
	h.awaitState("b", "stopped")   // the swap's phase 1 is over: a start now would be beside the old server
	release()
	h.world.expect(t, "stopped a", "starting a", "ready a")
	c.wait(t).Release()
}
