package router

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/sdk"
)

// tickScheduler is a native scheduler that asks for ticks on demand:
// after every tick it asks for the next one at ask(now) (unset: asks
// nothing, so it stays periodic), and fails the tick when fail is set.
type tickScheduler struct {
	fx    sdk.Effects
	ticks []int64 // Now of every OnTick
	ask   func(now int64) int64
	fail  bool
	err   error // RequestTick's last answer
}

func (s *tickScheduler) OnRequest(sdk.RequestEvent) error     { return nil }
func (s *tickScheduler) OnSwapDone(sdk.SwapDoneEvent) error   { return nil }
func (s *tickScheduler) OnServeDone(sdk.ServeDoneEvent) error { return nil }
func (s *tickScheduler) OnCancel(sdk.CancelEvent) error       { return nil }
func (s *tickScheduler) OnUnload(sdk.UnloadEvent) error       { return nil }
func (s *tickScheduler) OnShutdown(sdk.ShutdownEvent) error   { return nil }
func (s *tickScheduler) OnTick(ev sdk.TickEvent) error {
	s.ticks = append(s.ticks, ev.Now)
	if s.fail {
		return errors.New("tick failed")
	}
	if s.ask != nil {
		s.err = s.fx.(sdk.TickRequester).RequestTick(s.ask(ev.Now))
	}
	return nil
}

type noSwapper struct{}

func (noSwapper) Plan(sdk.PlanRequest) (sdk.Plan, error)               { return sdk.Plan{}, nil }
func (noSwapper) OnSwapStart(sdk.SwapStartEvent) error                 { return nil }
func (noWork) Stop(string, Instance, func())                           {}
func (noWork) Start(string, Process, StartSpec, func(Instance, error)) {}
func (noWork) Later(fn func())                                         { fn() }
func (noWork) Sleep(string, Instance, uint8, func(uint64, error))      {}
func (noWork) Wake(string, Instance, func(error))                      {}

type noWork struct{}

// tickRouter is a virtual router with sched and a clock the test moves;
// its log goes to logs.
func tickRouter(t *testing.T, sched *tickScheduler, periodic bool) (*Virtual, *manualClock, *bytes.Buffer) {
	t.Helper()
	clk := newManualClock()
	logs := &bytes.Buffer{}
	v, err := NewVirtual(Config{
		Clock: clk.now, TickInterval: time.Second, PeriodicTicks: periodic,
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Models: map[string]ModelConfig{"a": {Process: &fakeProcess{}}},
		NewScheduler: func(fx sdk.Effects) (SchedulerPolicy, error) {
			sched.fx = fx
			return sched, nil
		},
		NewSwapper: func(sdk.Host) (SwapperPolicy, error) { return noSwapper{}, nil },
	}, noWork{})
	if err != nil {
		t.Fatal(err)
	}
	return v, clk, logs
}

// advanceTo moves the clock to the router's next tick and ticks.
func advanceTo(t *testing.T, v *Virtual, clk *manualClock) time.Time {
	t.Helper()
	at, ok := v.NextTick()
	if !ok {
		t.Fatal("no next tick")
	}
	clk.advance(at.Sub(clk.now()))
	v.Tick()
	return at
}

// A scheduler that never asks is ticked every TickInterval; one that asks
// is ticked at the time it asked for, and not before.
func TestRouter_TicksOnDemand_AtTheRequestedTime(t *testing.T) {
	s := &tickScheduler{}
	v, clk, _ := tickRouter(t, s, false)
	start := clk.now()
	if at := advanceTo(t, v, clk); at != start.Add(time.Second) {
		t.Fatalf("first tick of a periodic scheduler at %v, want TickInterval after the start", at.Sub(start))
	}
	s.ask = func(now int64) int64 { return now + int64(90*time.Second) }
	advanceTo(t, v, clk) // it asks here: on demand from now on
	asked := clk.now().Add(90 * time.Second)
	if at, ok := v.NextTick(); !ok || !at.Equal(asked) {
		t.Fatalf("next tick %v (%v), want the requested %v", at, ok, asked)
	}
	// A tick that comes earlier (the host's check) calls nothing.
	clk.advance(time.Second)
	n := len(s.ticks)
	v.Tick()
	if len(s.ticks) != n {
		t.Fatalf("a tick before the requested time called the scheduler")
	}
	s.ask = func(int64) int64 { return 0 }
	advanceTo(t, v, clk)
	if got := time.Unix(0, s.ticks[len(s.ticks)-1]); !got.Equal(asked) {
		t.Fatalf("tick delivered at %v, want %v", got, asked)
	}
	if at, ok := v.NextTick(); ok {
		t.Fatalf("next tick %v after asking for none; want none", at)
	}
}

// A request in the past is taken as now+PastTickDelay, one too soon or
// absurdly far clamped to [now+MinTickDelay, now+MaxTickDelay], logged
// once.
func TestRouter_TicksOnDemand_ClampedAndLoggedOnce(t *testing.T) {
	s := &tickScheduler{}
	v, clk, logs := tickRouter(t, s, false)
	s.ask = func(now int64) int64 { return now - int64(time.Hour) }
	advanceTo(t, v, clk)
	if at, _ := v.NextTick(); at.Sub(clk.now()) != time.Duration(sdk.PastTickDelay) {
		t.Fatalf("a tick asked in the past is due in %v, want PastTickDelay", at.Sub(clk.now()))
	}
	s.ask = func(now int64) int64 { return now + 1 }
	advanceTo(t, v, clk)
	if at, _ := v.NextTick(); at.Sub(clk.now()) != time.Duration(sdk.MinTickDelay) {
		t.Fatalf("a tick asked 1 ns ahead is due in %v, want MinTickDelay", at.Sub(clk.now()))
	}
	s.ask = func(now int64) int64 { return now + int64(1000*time.Hour) }
	advanceTo(t, v, clk)
	if at, _ := v.NextTick(); at.Sub(clk.now()) != time.Duration(sdk.MaxTickDelay) {
		t.Fatalf("a tick asked 1000 h ahead is due in %v, want MaxTickDelay", at.Sub(clk.now()))
	}
	if n := strings.Count(logs.String(), "clamped"); n != 1 {
		t.Fatalf("%d clamp log lines, want 1:\n%s", n, logs)
	}
}

// A scheduler that fails loses its claim: the next instance is ticked
// periodically until it asks; PeriodicTicks refuses the claim.
func TestRouter_TicksOnDemand_FailureAndPeriodicTicks(t *testing.T) {
	s := &tickScheduler{ask: func(int64) int64 { return 0 }}
	v, clk, _ := tickRouter(t, s, false)
	advanceTo(t, v, clk)
	if _, ok := v.NextTick(); ok {
		t.Fatal("asked for no tick, yet one is due")
	}
	s.fail = true
	clk.advance(time.Second)
	v.Acquire(Request{Model: "a"}, func(*Grant, error) {}) // an event; the tick below fails
	v.r.loop.changed = append(v.r.loop.changed, "a")
	v.Tick()
	if at, ok := v.NextTick(); !ok || !at.Equal(clk.now().Add(time.Second)) {
		t.Fatalf("after a failure next tick %v (%v); want periodic again, TickInterval on", at, ok)
	}

	p := &tickScheduler{ask: func(int64) int64 { return 0 }}
	v, clk, _ = tickRouter(t, p, true)
	advanceTo(t, v, clk)
	if !errors.Is(p.err, sdk.ErrNotAllowed) {
		t.Fatalf("RequestTick with PeriodicTicks = %v, want ErrNotAllowed", p.err)
	}
	if at, ok := v.NextTick(); !ok || !at.Equal(clk.now().Add(time.Second)) {
		t.Fatalf("PeriodicTicks: next tick %v (%v), want TickInterval on", at, ok)
	}
}

// wakeScheduler asks, on its first request, for a tick soon, and reports
// every tick on ticks.
type wakeScheduler struct {
	fx    sdk.Effects
	in    time.Duration
	ticks chan int64
}

func (s *wakeScheduler) OnRequest(ev sdk.RequestEvent) error {
	if err := s.fx.(sdk.TickRequester).RequestTick(ev.Now + int64(s.in)); err != nil {
		return err
	}
	s.fx.GrantError(ev.ID, sdk.CodeUnavailable, "no")
	return nil
}
func (s *wakeScheduler) OnSwapDone(sdk.SwapDoneEvent) error   { return nil }
func (s *wakeScheduler) OnServeDone(sdk.ServeDoneEvent) error { return nil }
func (s *wakeScheduler) OnCancel(sdk.CancelEvent) error       { return nil }
func (s *wakeScheduler) OnUnload(sdk.UnloadEvent) error       { return nil }
func (s *wakeScheduler) OnShutdown(sdk.ShutdownEvent) error   { return nil }
func (s *wakeScheduler) OnTick(ev sdk.TickEvent) error {
	s.ticks <- ev.Now
	return nil
}

// Under serve, a requested tick comes at its time even when the periodic
// tick is far off (an hour here): the run loop wakes for it.
func TestRouter_TicksOnDemand_ServeWakesAtTheRequestedTime(t *testing.T) {
	s := &wakeScheduler{in: 20 * time.Millisecond, ticks: make(chan int64, 4)}
	r, err := New(Config{
		TickInterval: time.Hour, Logger: slog.New(slog.DiscardHandler),
		Models: map[string]ModelConfig{"a": {Process: &fakeProcess{}}},
		NewScheduler: func(fx sdk.Effects) (SchedulerPolicy, error) {
			s.fx = fx
			return s, nil
		},
		NewSwapper: func(sdk.Host) (SwapperPolicy, error) { return noSwapper{}, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown(context.Background())
	asked := time.Now()
	if _, err := r.Acquire(context.Background(), Request{Model: "a"}); err == nil {
		t.Fatal("the scheduler refused the request, yet Acquire succeeded")
	}
	select {
	case now := <-s.ticks:
		if d := time.Unix(0, now).Sub(asked); d < s.in {
			t.Fatalf("ticked %v after the request, before the %v asked for", d, s.in)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no tick within 10 s; it was asked for in 20 ms")
	}
}
