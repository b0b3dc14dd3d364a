package sim

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/router"
	"github.com/loadout-dev/loadout/sdk"
)

// wakeAsker is a scheduler that holds every request (grants nothing) and,
// on every call, asks for its next tick at ask(now): a policy that asks
// to be woken in the past, or never.
type wakeAsker struct {
	fx    sdk.Effects
	ask   func(now int64) int64
	ticks int
}

func (s *wakeAsker) again(now int64) error {
	return s.fx.(sdk.TickRequester).RequestTick(s.ask(now))
}
func (s *wakeAsker) OnRequest(ev sdk.RequestEvent) error {
	s.fx.SetQueuePosition(ev.ID, 1)
	return s.again(ev.Now)
}
func (s *wakeAsker) OnSwapDone(ev sdk.SwapDoneEvent) error { return s.again(ev.Now) }
func (s *wakeAsker) OnServeDone(ev sdk.ServeDoneEvent) error {
	return s.again(ev.Now)
}
func (s *wakeAsker) OnCancel(ev sdk.CancelEvent) error  { return s.again(ev.Now) }
func (s *wakeAsker) OnUnload(ev sdk.UnloadEvent) error  { return s.again(ev.Now) }
func (s *wakeAsker) OnShutdown(sdk.ShutdownEvent) error { return nil }
func (s *wakeAsker) OnTick(ev sdk.TickEvent) error      { s.ticks++; return s.again(ev.Now) }

// A scheduler that asks to be woken in the past (every time) is woken
// sdk.PastTickDelay later each time, as one ticked periodically, not
// again at the same instant nor every millisecond; one
// that asks for "never" (the largest time) is woken sdk.MaxTickDelay
// later, past the replay's end. Either way the clamp is logged once, the
// replay ends at its drain bound, and the requests it held are counted
// as unanswered errors.
func TestReplay_TickInThePastOrNever_ClampedLoggedOnceAndEnds(t *testing.T) {
	trace := []Request{{Model: "m1", PromptTokens: 10, OutputTokens: 10}, {Arrival: 1, Model: "m2", PromptTokens: 10, OutputTokens: 10}}
	const drain = 2 * time.Second
	for name, tc := range map[string]struct {
		ask      func(now int64) int64
		minTicks int
		maxTicks int
	}{
		// from the first arrival to the last (1 s) plus the drain, one
		// tick a second
		"past":  {func(now int64) int64 { return now - int64(time.Hour) }, 2, 4},
		"never": {func(int64) int64 { return math.MaxInt64 }, 0, 0},
		"zero":  {func(int64) int64 { return 0 }, 0, 0},
	} {
		t.Run(name, func(t *testing.T) {
			var logs bytes.Buffer
			s := &wakeAsker{ask: tc.ask}
			setup := Setup{Trace: trace, Models: eightModels(), Drain: drain, Router: router.Config{
				SchedulerName: "waker", SwapperName: "none",
				Logger: slog.New(slog.NewTextHandler(&logs, nil)),
				NewScheduler: func(fx sdk.Effects) (router.SchedulerPolicy, error) {
					s.fx = fx
					return s, nil
				},
				NewSwapper: func(sdk.Host) (router.SwapperPolicy, error) { return nil, nil },
			}}
			done := make(chan struct{})
			var res *Result
			var err error
			go func() {
				defer close(done)
				res, err = Run(setup)
			}()
			select {
			case <-done:
			case <-time.After(time.Minute):
				t.Fatal("the replay did not end")
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Errors != len(trace) || res.ErrorsByCode["unanswered"] != len(trace) {
				t.Errorf("errors %d %v, want both requests unanswered", res.Errors, res.ErrorsByCode)
			}
			if s.ticks < tc.minTicks || s.ticks > tc.maxTicks {
				t.Errorf("%d ticks, want %d to %d", s.ticks, tc.minTicks, tc.maxTicks)
			}
			want := 1
			if name == "zero" { // 0 asks for no tick: nothing to clamp
				want = 0
			}
			if n := strings.Count(logs.String(), "clamped"); n != want {
				t.Errorf("%d clamp log lines, want %d:\n%s", n, want, logs.String())
			}
		})
	}
}

// A trace of one request, served or not: every bound and anchor is a
// number (no division by zero), and the report encodes as JSON (which
// refuses NaN and ±Inf) and HTML.
func TestReport_OneRequest_NoNaN(t *testing.T) {
	for name, tc := range map[string]struct {
		models map[string]Model
		gpus   []uint64
	}{
		"equal slots":     {eightModels(), []uint64{24 * gib, 24 * gib}},
		"mixed sizes":     {map[string]Model{"m1": simModel(10*gib, 4*time.Second, 50, 4), "m2": simModel(20*gib, 9*time.Second, 30, 4)}, []uint64{24 * gib}},
		"nothing fits":    {map[string]Model{"m1": simModel(40*gib, 4*time.Second, 50, 4), "m2": simModel(30*gib, 9*time.Second, 30, 4)}, []uint64{24 * gib}},
		"equal, no room":  {map[string]Model{"m1": simModel(40*gib, 4*time.Second, 50, 4), "m2": simModel(40*gib, 4*time.Second, 50, 4)}, []uint64{24 * gib}},
		"instant request": {eightModels(), []uint64{24 * gib}},
	} {
		t.Run(name, func(t *testing.T) {
			trace := []Request{{Arrival: 7, Model: "m1", PromptTokens: 10, OutputTokens: 10}}
			if name == "instant request" {
				trace[0].OutputTokens = 0
			}
			res, err := Run(setup(t, "prioritylru", "{}", tc.models, tc.gpus, trace))
			if err != nil {
				t.Fatal(err)
			}
			if res.Completed+res.Errors != 1 {
				t.Fatalf("%d completed + %d errors, want the one request", res.Completed, res.Errors)
			}
			rep := &Report{Trace: Describe("one.csv", trace), Runs: []*Result{res}}
			rep.Bounds, rep.LoadBound = BoxBounds(trace, tc.models, tc.gpus)
			var js, html bytes.Buffer
			if err := rep.WriteJSON(&js); err != nil {
				t.Fatalf("JSON: %v", err)
			}
			if err := rep.WriteHTML(&html); err != nil {
				t.Fatalf("HTML: %v", err)
			}
			for what, text := range map[string]string{"JSON": js.String(), "HTML": html.String()} {
				if strings.Contains(text, "NaN") || strings.Contains(text, "Inf") {
					t.Errorf("%s holds NaN or Inf", what)
				}
			}
			if x, _, ok := rep.RatioToBound(res); ok && (math.IsNaN(x) || math.IsInf(x, 0)) {
				t.Errorf("ratio to bound %v", x)
			}
			var back map[string]any
			if err := json.Unmarshal(js.Bytes(), &back); err != nil {
				t.Fatal(err)
			}
		})
	}
}
