package policytest_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/policytest"
)

// simple is a small scheduler for the runner's tests: it grants a ready
// model, refuses an unknown one, and otherwise starts a swap with the
// swapper's plan and waits for it; a swap's end grants (or fails) its
// waiters. Request 99 is left without an outcome, a breach.
type simple struct {
	fx      sdk.Effects
	waiting map[string][]sdk.RequestID
}

func newSimple(fx sdk.Effects, settings []byte) (sdk.Scheduler, error) {
	if string(settings) != "{}" {
		return nil, fmt.Errorf("simple: no settings, got %s", settings)
	}
	return &simple{fx: fx, waiting: map[string][]sdk.RequestID{}}, nil
}

func (s *simple) OnRequest(ev sdk.RequestEvent) {
	m, ok := s.fx.ModelState(ev.Model)
	switch {
	case ev.ID == 99:
	case !ok:
		s.fx.GrantError(ev.ID, sdk.CodeModelNotFound, "no model "+ev.Model)
	case m.State == sdk.StateReady:
		s.fx.GrantServe(ev.ID, ev.Model)
	default:
		if len(s.waiting[ev.Model]) == 0 {
			p, err := s.fx.Plan(ev.Model)
			if err == nil {
				err = s.fx.StartSwap(p.SwapFor(ev.Model))
			}
			if err != nil {
				s.fx.GrantError(ev.ID, sdk.CodeUnavailable, err.Error())
				return
			}
			s.fx.Log(sdk.LevelInfo, "swap model="+ev.Model)
		}
		s.waiting[ev.Model] = append(s.waiting[ev.Model], ev.ID)
		s.fx.SetQueuePosition(ev.ID, 0)
	}
}

func (s *simple) OnSwapDone(ev sdk.SwapDoneEvent) {
	for _, id := range s.waiting[ev.Model] {
		if ev.Err != "" {
			s.fx.GrantError(id, sdk.CodeSwapFailed, ev.Err)
		} else {
			s.fx.GrantServe(id, ev.Model)
		}
	}
	delete(s.waiting, ev.Model)
}

func (s *simple) OnServeDone(sdk.ServeDoneEvent) {}
func (s *simple) OnCancel(sdk.CancelEvent)       {}
func (s *simple) OnUnload(ev sdk.UnloadEvent)    { _ = s.fx.StopProcesses(ev.Models) }
func (s *simple) OnTick(sdk.TickEvent)           {}
func (s *simple) OnShutdown(sdk.ShutdownEvent) {
	for m, ids := range s.waiting {
		for _, id := range ids {
			s.fx.GrantError(id, sdk.CodeUnavailable, "shutting down")
		}
		delete(s.waiting, m)
	}
}

// oldest is a small swapper: it evicts the least recently used running
// model, and logs from Plan when asked to plan for "noisy" (a breach).
type oldest struct{ h sdk.Host }

func newOldest(h sdk.Host, _ []byte) (sdk.Swapper, error) { return oldest{h}, nil }

func (o oldest) Plan(q sdk.PlanRequest) (sdk.Plan, error) {
	if q.Target == "noisy" {
		o.h.Log(sdk.LevelInfo, "thinking")
	}
	if q.Target == "nope" {
		return sdk.Plan{}, errors.New("no such model")
	}
	var victim *sdk.ModelInfo
	for _, m := range o.h.RunningModels() {
		if victim == nil || m.LastUse < victim.LastUse {
			victim = &m
		}
	}
	if victim == nil {
		return sdk.Plan{}, nil
	}
	return sdk.Plan{Evict: []string{victim.Name}, Devices: victim.Devices}, nil
}

func (o oldest) OnSwapStart(ev sdk.SwapStartEvent) {
	o.h.Log(sdk.LevelInfo, fmt.Sprintf("swap to %s evicts %v", ev.Target, ev.Evict))
}

const schedulerScenario = `name: cold start
kind: scheduler
swapper: {rule: plans, plans: {a: {evict: [c], devices: [1]}}}
models: [{name: a}, {name: b, state: ready}, {name: c, state: ready}]
steps:
  - request: {id: 1, model: a}
    expect:
      - start_swap: {model: a, evict: [c], devices: [1]}
      - queue: {id: 1, pos: 0}
    logs: [model=a]
  - request: {id: 2, model: b}
    expect: [grant: 2]
  - at: 2s
    swap_done: a
    expect: [grant: {id: 1, model: a}]
  - request: {id: 3, model: zz}
    expect: [error: {id: 3, code: model_not_found, message: "no model"}]
`

func parse(t *testing.T, text string) *policytest.Scenario {
	t.Helper()
	sc, err := policytest.ParseScenario("x.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func TestScenario_SchedulerPasses(t *testing.T) {
	sc := parse(t, schedulerScenario)
	if sc.Name != "cold start" || sc.Kind != sdk.KindScheduler {
		t.Errorf("parsed %q, %s", sc.Name, sc.Kind)
	}
	var trace strings.Builder
	if err := sc.Run(policytest.SchedulerPolicy(newSimple), &trace); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"step 1, line 6, at 0s: request: {id: 1, model: a}\n  expect:\n    - start_swap: {model: a, evict: [c], devices: [1]}\n    - queue: {id: 1, pos: 0}\n  logs:\n    - \"swap model=a\"\n",
		"step 3, line 13, at 2s: swap_done: a\n  expect:\n    - grant: {id: 1, model: a}\n",
		`- error: {id: 3, code: model_not_found, message: "no model zz"}`,
	} {
		if !strings.Contains(trace.String(), want) {
			t.Errorf("trace lacks %q:\n%s", want, trace.String())
		}
	}
	// A scenario runs against a fresh instance every time.
	if err := sc.Run(policytest.SchedulerPolicy(newSimple), nil); err != nil {
		t.Fatalf("second run: %v", err)
	}
}

func TestScenario_FirstDifference(t *testing.T) {
	for _, tc := range []struct {
		name, from, to string
		want           []string
	}{
		{"a differing effect names its line and shows the step's effects",
			"      - queue: {id: 1, pos: 0}", "      - queue: {id: 1, pos: 2}",
			[]string{"x.yaml:9: step 1 (request: {id: 1, model: a}): effect 2 differs\n  want: queue: {id: 1, pos: 2}\n  got:  queue: {id: 1, pos: 0}\n  the step's effects:\n    - start_swap: {model: a, evict: [c], devices: [1]}\n    - queue: {id: 1, pos: 0}"}},
		{"a missing effect",
			"    expect: [grant: 2]", "    expect: [grant: 2, grant: 7]",
			[]string{"x.yaml:12: step 2 (request: {id: 2, model: b}): effect 2 of 2 is missing\n  want: grant: 7\n  got:  nothing more"}},
		{"an effect more than expected",
			"    expect: [grant: {id: 1, model: a}]", "    expect: []",
			[]string{"x.yaml:13: step 3 (swap_done: a): one effect more than the 0 expected\n  got:  grant: {id: 1, model: a}"}},
		{"a message is a substring",
			`message: "no model"`, `message: "unknown"`,
			[]string{`want: error: {id: 3, code: model_not_found, message: "unknown"}`, `got:  error: {id: 3, code: model_not_found, message: "no model zz"}`}},
		{"evictions are compared",
			"      - start_swap: {model: a, evict: [c], devices: [1]}", "      - start_swap: {model: a, devices: [1]}",
			[]string{"want: start_swap: {model: a, devices: [1]}", "got:  start_swap: {model: a, evict: [c], devices: [1]}"}},
		{"log lines are compared when listed",
			"    logs: [model=a]", "    logs: [model=a, again]",
			[]string{"x.yaml:6: step 1 (request: {id: 1, model: a}): log lines differ\n  want 2, containing:", `got 1:` + "\n" + `    - "swap model=a"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := strings.Replace(schedulerScenario, tc.from, tc.to, 1)
			if text == schedulerScenario {
				t.Fatalf("%q is not in the scenario", tc.from)
			}
			err := parse(t, text).Run(policytest.SchedulerPolicy(newSimple), nil)
			if err == nil {
				t.Fatal("the scenario passed")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestScenario_Breaches(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"a request left without an outcome",
			"kind: scheduler\nmodels: [{name: a}]\nsteps:\n  - request: {id: 99, model: a}\n",
			"x.yaml:4: step 1 (request: {id: 99, model: a}): policytest: OnRequest(99, \"a\") returned without granting, failing or holding the request"},
		{"a swap_done with no swap",
			"kind: scheduler\nmodels: [{name: a}]\nsteps:\n  - swap_done: a\n",
			"x.yaml:4: step 1 (swap_done: a): policytest: CompleteSwap(\"a\"): no swap for it is active"},
		{"a serve_done for a request not served",
			"kind: scheduler\nmodels: [{name: a}]\nsteps:\n  - request: {id: 1, model: a}\n  - serve_done: 1\n",
			"x.yaml:5: step 2 (serve_done: 1): policytest: ServeDone(1): the request is not being served (waiting on a swap)"},
		{"a request still held at shutdown",
			"kind: scheduler\nmodels: [{name: a}]\nsteps:\n  - request: {id: 1, model: a}\n  - request: {id: 99, model: a}\n",
			"returned without granting"},
		{"init fails",
			"kind: scheduler\nsettings: {x: 1}\nmodels: [{name: a}]\nsteps:\n  - tick:\n",
			`x.yaml:1: init with settings {"x":1}: simple: no settings, got {"x":1}`},
		{"init_error that does not happen",
			"kind: scheduler\ninit_error: boom\n",
			"x.yaml:1: init with settings {} succeeded; want an error containing \"boom\""},
		{"init_error with another text",
			"kind: scheduler\nsettings: '{\"x\": 1}'\ninit_error: boom\n",
			`x.yaml:1: init with settings {"x": 1}: error "simple: no settings, got {\"x\": 1}"; want one containing "boom"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := parse(t, tc.text).Run(policytest.SchedulerPolicy(newSimple), nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v\nwant it to contain %q", err, tc.want)
			}
		})
	}
	ok := parse(t, "kind: scheduler\nsettings: '{\"x\": 1}'\ninit_error: 'no settings, got {\"x\": 1}'\n")
	if err := ok.Run(policytest.SchedulerPolicy(newSimple), nil); err != nil {
		t.Errorf("an expected init error: %v", err)
	}
}

const swapperScenario = `kind: swapper
models:
  - {name: a, state: ready, last_use: -5s, devices: [0]}
  - {name: b, state: ready, last_use: -9s, devices: [1]}
  - {name: t}
steps:
  - plan: {target: t}
    expect: [plan: {evict: [b], devices: [1]}]
  - swap_start: {target: t, evict: [b]}
    logs: ["swap to t evicts [b]"]
  - at: 1s
    swap_done: t
  - set: {models: [{name: t, last_use: -20s}]}
  - plan: {target: a}
    expect: [plan: {evict: [t]}]
  - plan: {target: nope, running: []}
    expect: [plan_error: no such model]
`

func TestScenario_Swapper(t *testing.T) {
	sc := parse(t, swapperScenario)
	if err := sc.Run(policytest.SwapperPolicy(newOldest), nil); err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(swapperScenario, "[plan: {evict: [t]}]", "[plan: {evict: [a]}]", 1)
	err := parse(t, bad).Run(policytest.SwapperPolicy(newOldest), nil)
	if err == nil || !strings.Contains(err.Error(), "x.yaml:15: step 5 (plan: {target: a}): the plan differs\n  want: plan: {evict: [a]}\n  got:  plan: {evict: [t]}") {
		t.Errorf("got %v", err)
	}
	noisy := "kind: swapper\nmodels: [{name: noisy}]\nsteps:\n  - plan: {target: noisy}\n"
	err = parse(t, noisy).Run(policytest.SwapperPolicy(newOldest), nil)
	if err == nil || !strings.Contains(err.Error(), `Plan("noisy") logged or acted (Log(info, "thinking")); a plan is a speculative, pure query`) {
		t.Errorf("a plan that logs: %v", err)
	}
	err = sc.Run(policytest.SchedulerPolicy(newSimple), nil)
	if err == nil || !strings.Contains(err.Error(), "x.yaml:1: the scenario is for a swapper; the policy is a scheduler") {
		t.Errorf("kind mismatch: %v", err)
	}
	if err := sc.Run(policytest.Policy{}, nil); err == nil {
		t.Error("an empty Policy ran")
	}
}

func TestScenario_RefuseSwapAndGPUs(t *testing.T) {
	text := `kind: scheduler
models:
  - {name: a, state: ready, vram: 10GiB, devices: [0, 1]}
  - {name: b, state: ready, devices: [1], leased: [3GiB]}
  - {name: c}
gpus: [{total: 24GiB}, {total: 24GiB, name: big}, {index: 7, total: 8GiB, free: 1GiB}]
steps:
  - set: {refuse_swap: {c: held_by_job}}
  - request: {id: 1, model: c}
    expect: [start_swap: {model: c, evict: [a, b], refused: held_by_job}, error: {id: 1, code: unavailable}]
  - set: {refuse_swap: {c: none}}
  - request: {id: 2, model: c}
    expect: [start_swap: {model: c, evict: [a, b]}, queue: {id: 2, pos: 0}]
`
	var got []sdk.GPUInfo
	p := policytest.SchedulerPolicy(func(fx sdk.Effects, settings []byte) (sdk.Scheduler, error) {
		got = fx.Snapshot().GPUs
		return newSimple(fx, settings)
	})
	if err := parse(t, text).Run(p, nil); err != nil {
		t.Fatal(err)
	}
	const gib = 1 << 30
	want := []sdk.GPUInfo{
		{Index: 0, Total: 24 * gib, Leased: 5 * gib, Free: 19 * gib},
		{Index: 1, Name: "big", Total: 24 * gib, Leased: 8 * gib, Free: 16 * gib},
		{Index: 7, Total: 8 * gib, Free: 1 * gib},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("GPUs %+v\nwant %+v", got, want)
	}
}

func TestScenario_ParseErrors(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"empty", "", "x.yaml: empty scenario file"},
		{"no kind", "models: []\n", "x.yaml:1: kind: is required"},
		{"bad kind", "kind: router\n", `x.yaml:1: kind: want scheduler or swapper, got "router"`},
		{"unknown field", "kind: scheduler\nmodels:\n  - {name: a, colour: red}\n", `x.yaml:3: unknown field "colour"`},
		{"unknown top-level field", "kind: scheduler\nstep: []\n", `x.yaml:2: unknown field "step"`},
		{"no steps", "kind: scheduler\n", "x.yaml:1: steps: a scenario needs at least one step"},
		{"a second document", "kind: scheduler\nsteps: [tick: ]\n---\nkind: swapper\n", "x.yaml:3: a scenario file holds one scenario"},
		{"no event", "kind: scheduler\nsteps:\n  - at: 1s\n", "x.yaml:3: step 1: no event (one of: request, swap_done"},
		{"two events", "kind: scheduler\nsteps:\n  - tick:\n    cancel: 1\n", "x.yaml:3: step 1: one event per step, got tick and cancel"},
		{"an event of the other kind", "kind: scheduler\nsteps:\n  - plan: {target: a}\n", "x.yaml:3: step 1: plan is not an event for a scheduler"},
		{"a request needs a model", "kind: scheduler\nsteps:\n  - request: {id: 1}\n", "x.yaml:3: step 1: request needs an id (from 1) and a model"},
		{"an event needs a value", "kind: scheduler\nsteps:\n  - cancel:\n", "x.yaml:3: step 1: cancel needs a value"},
		{"time goes back", "kind: scheduler\nsteps:\n  - {at: 2s, tick: }\n  - {at: 1s, tick: }\n", "x.yaml:4: step 2: at: 1s is before the previous step's 2s"},
		{"a bad duration", "kind: scheduler\nsteps:\n  - {at: soon, tick: }\n", "x.yaml:3: want a duration such as 1.5s or -10m, got \"soon\""},
		{"a bad size", "kind: swapper\nmodels: [{name: a, vram: lots}]\nsteps: [plan: {target: a}]\n", `x.yaml:2: want a size such as 24GiB`},
		{"a bad state", "kind: swapper\nmodels: [{name: a, state: up}]\nsteps: [plan: {target: a}]\n", `x.yaml:2: unknown state "up" (known: stopped, starting, ready, stopping, failed)`},
		{"a model twice", "kind: swapper\nmodels: [{name: a}, {name: a}]\nsteps: [plan: {target: a}]\n", `x.yaml:2: model "a" is listed twice`},
		{"leased without devices", "kind: swapper\nmodels:\n  - {name: a, leased: [1GiB]}\nsteps: [plan: {target: a}]\n", `x.yaml:3: model "a": leased has 1 entries and devices 0`},
		{"an unknown effect", "kind: scheduler\nsteps:\n  - tick:\n    expect: [grnt: 1]\n", `x.yaml:4: unknown field "grnt"`},
		{"two effects in one item", "kind: scheduler\nsteps:\n  - tick:\n    expect: [{grant: 1, queue: {id: 1, pos: 1}}]\n", "x.yaml:4: step 1: an expected effect is a mapping with one of grant"},
		{"a bad error code", "kind: scheduler\nsteps:\n  - tick:\n    expect: [error: {id: 1, code: oops}]\n", `x.yaml:4: unknown error code "oops" (known: internal, model_not_found`},
		{"a bad refusal", "kind: scheduler\nsteps:\n  - tick:\n    expect: [start_swap: {model: a, refused: busy}]\n", `x.yaml:4: unknown refusal "busy" (known: unknown_request`},
		{"an unknown field in a shorthand's mapping", "kind: scheduler\nsteps:\n  - swap_done: {model: a, err: x}\n", `x.yaml:3: unknown field "err" (known: model, error)`},
		{"a plan answer to a request", "kind: scheduler\nsteps:\n  - tick:\n    expect: [plan: {}]\n", "x.yaml:4: step 1: plan is the answer to a plan step"},
		{"a swapper has no grants", "kind: swapper\nsteps:\n  - plan: {target: a}\n    expect: [grant: 1]\n", "x.yaml:4: step 1: a plan step expects plan: or plan_error:, not grant"},
		{"a plan step wants one answer", "kind: swapper\nsteps:\n  - plan: {target: a}\n    expect: []\n", "x.yaml:4: step 1: a plan step expects one answer"},
		{"set of an unknown model", "kind: swapper\nmodels: [{name: a}]\nsteps:\n  - set: {models: [{name: b, state: ready}]}\n", `x.yaml:4: step 1: set: no model "b" in models:`},
		{"a swapper for a swapper", "kind: swapper\nswapper: none\nsteps: [plan: {target: a}]\n", "x.yaml:2: swapper: is for scheduler scenarios"},
		{"an unknown swapper rule", "kind: scheduler\nswapper: lru\nsteps: [tick: ]\n", `x.yaml:2: swapper: unknown rule "lru"`},
		{"a field of another rule", "kind: scheduler\nswapper: {rule: none, error: x}\nsteps: [tick: ]\n", "x.yaml:2: swapper: error is not a field of rule none"},
		{"init_error with steps", "kind: scheduler\ninit_error: x\nsteps: [tick: ]\n", "x.yaml:3: steps: a scenario with init_error: has no instance"},
		{"waits of an unknown model", "kind: swapper\nmodels: [{name: a}]\nwaits:\n  a: {granted: 1}\n  b: {granted: 1}\nsteps: [plan: {target: a}]\n", `x.yaml:5: waits: no model "b" in models: ("" is the box's record)`},
		{"waits above more than granted and held", "kind: swapper\nwaits: {\"\": {granted: 10, held: 2, above: 13}}\nsteps: [plan: {target: a}]\n", `x.yaml:2: waits: "": above (13) counts grants and held requests past the p95, so at most granted + held (12)`},
		{"waits with a negative p95", "kind: swapper\nwaits: {\"\": {p95: -1s}}\nsteps: [plan: {target: a}]\n", `x.yaml:2: waits: "": p95 -1s is negative`},
		{"a null record outside a set", "kind: swapper\nwaits: {\"\": }\nsteps: [plan: {target: a}]\n", `x.yaml:2: waits: "": a record needs granted`},
		{"waits: an unknown field", "kind: swapper\nwaits: {\"\": {granted: 1, p99: 2s}}\nsteps: [plan: {target: a}]\n", `x.yaml:2: unknown field "p99"`},
		{"set: waits of an unknown model", "kind: swapper\nmodels: [{name: a}]\nsteps:\n  - set:\n      waits: {b: ~}\n", `x.yaml:5: step 1: set: waits: no model "b" in models:`},
		{"requests: not a count", "kind: swapper\nmodels: [{name: a, requests: -3}]\nsteps: [plan: {target: a}]\n", `x.yaml:2: cannot unmarshal`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := policytest.ParseScenario("x.yaml", []byte(tc.text))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v\nwant it to contain %q", err, tc.want)
			}
		})
	}
}

// reader is a swapper for the record tests: at each plan it logs
// nothing (plans are pure) and evicts the running model with the fewest
// requests counted (sdk.ReadDemand) — or, when the box's record of waits
// (sdk.ReadWaits) has room above its p95 (Slack), the one with the most.
type reader struct{ h sdk.Host }

func (r reader) Plan(q sdk.PlanRequest) (sdk.Plan, error) {
	counts, _ := sdk.ReadDemand(r.h)
	w, ok := sdk.ReadWaits(r.h, "")
	most := ok && w.Slack() > 0
	var victim string
	var best uint64
	for _, d := range counts {
		if !slices.Contains(q.Running, d.Name) {
			continue
		}
		if victim == "" || (most && d.Requests > best) || (!most && d.Requests < best) {
			victim, best = d.Name, d.Requests
		}
	}
	if victim == "" {
		return sdk.Plan{}, nil
	}
	return sdk.Plan{Evict: []string{victim}}, nil
}

func (r reader) OnSwapStart(sdk.SwapStartEvent) {}

// TestScenario_DemandAndWaits: a model's requests: are the host's counts
// from the start (and set steps change them), and waits: is the host's
// record of queueing delay, by model and for the box (""); a set step
// replaces a record or drops it (null).
func TestScenario_DemandAndWaits(t *testing.T) {
	text := `kind: swapper
models:
  - {name: a, state: ready, requests: 40}
  - {name: b, state: ready, requests: 3}
  - {name: t}
waits:
  "": {granted: 100, p95: 10s, above: 5}
steps:
  - plan: {target: t}                  # no room: the fewest requests go
    expect: [plan: {evict: [b]}]
  - set: {models: [{name: b, requests: 90}]}
  - plan: {target: t}
    expect: [plan: {evict: [a]}]
  - set:
      waits: {"": {granted: 100, p95: 10s, above: 2, held: 1}}
  - plan: {target: t}                  # room: the most requests go
    expect: [plan: {evict: [b]}]
  - set: {waits: {"": ~}}
  - plan: {target: t}                  # no record
    expect: [plan: {evict: [a]}]
`
	var got []sdk.WaitStats
	p := policytest.SwapperPolicy(func(h sdk.Host, _ []byte) (sdk.Swapper, error) { return reader{h}, nil })
	if err := parse(t, text).Run(p, nil); err != nil {
		t.Fatal(err)
	}
	// The figures reach the policy as written.
	p = policytest.SwapperPolicy(func(h sdk.Host, _ []byte) (sdk.Swapper, error) {
		w, _ := sdk.ReadWaits(h, "")
		got = append(got, w)
		return reader{h}, nil
	})
	two := strings.Replace(text, `"": {granted: 100, p95: 10s, above: 5}`, `"": {granted: 7, p95: 1.5s, above: 1, held: 2}`, 1)
	if err := parse(t, two).Run(p, nil); err != nil {
		t.Error(err) // seven grants have no room above their p95 either
	}
	if want := (sdk.WaitStats{Granted: 7, P95: 1.5e9, Above: 1, Held: 2}); len(got) != 1 || got[0] != want {
		t.Errorf("the policy read %+v, want %+v", got, want)
	}
}

// TestRunScenarioFiles runs files from disk, as a policy's own test does.
func TestRunScenarioFiles(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{"cold.yaml": schedulerScenario, "unknown.yaml": "kind: scheduler\nsteps:\n  - request: {id: 1, model: q}\n    expect: [error: {id: 1, code: model_not_found}]\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	policytest.RunScenarioFiles(t, policytest.SchedulerPolicy(newSimple), filepath.Join(dir, "*.yaml"))
	if _, err := policytest.LoadScenario(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("a missing file loaded")
	}
}
