package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/loadout-dev/loadout/host/sim"
)

// tuneIn runs `loadout policy tune` in-process on files written to a
// temporary directory, with --json, and returns its output and the JSON.
func tuneIn(t *testing.T, config, trace string, o tuneOptions) (string, *tuneReport, error) {
	t.Helper()
	dir := t.TempDir()
	o.config.path = writeConfig(t, dir, config)
	o.tracePath = filepath.Join(dir, "trace.csv")
	o.jsonPath = filepath.Join(dir, "tune.json")
	if o.rate == 0 {
		o.rate = 1
	}
	if o.objective == "" {
		o.objective = "cold-loads"
	}
	if err := os.WriteFile(o.tracePath, []byte(trace), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, warn bytes.Buffer
	if err := runTune(context.Background(), o, &out, &warn); err != nil {
		if _, serr := os.Stat(o.jsonPath); serr == nil {
			t.Errorf("--json %s left behind after the error %v", o.jsonPath, err)
		}
		return out.String(), nil, err
	}
	b, err := os.ReadFile(o.jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep tuneReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, b)
	}
	return out.String(), &rep, nil
}

// A sweep replays every point of the grid, ranks them by the objective
// (fewest errors first), and each point's figures are the ones simulate
// gives with those settings written in the configuration; the best
// settings are printed as YAML that reads back as the routing: block.
func TestPolicyTune_RanksTheGridAndPrintsTheBest(t *testing.T) {
	trace := simTrace(60, 7, "a", "b", "a", "c", "a", "b", "b", "c", "a")
	out, rep, err := tuneIn(t, simConfig(""), trace, tuneOptions{
		simulateOptions: simulateOptions{router: "adaptive"},
		sets:            []string{"router.decay=0.3,0.9", "router.rate=0.1,2"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Points) != 4 {
		t.Fatalf("%d points, want 2 × 2:\n%s", len(rep.Points), out)
	}
	for i, p := range rep.Points {
		if p.Rank != i+1 {
			t.Errorf("point %d has rank %d", i, p.Rank)
		}
		if i > 0 {
			prev := rep.Points[i-1].Run
			if p.Run.Errors < prev.Errors || (p.Run.Errors == prev.Errors && p.Run.ColdLoads < prev.ColdLoads) {
				t.Errorf("rank %d (%d errors, %d cold loads) after rank %d (%d, %d)", p.Rank, p.Run.Errors, p.Run.ColdLoads, prev.Errors, prev.ColdLoads, i)
			}
		}
	}
	// Each point replays as simulate replays the configuration with
	// those settings.
	for _, p := range []tuneResult{rep.Points[0], rep.Points[len(rep.Points)-1]} {
		cfg := simConfig("") + "routing:\n  router:\n    use: adaptive\n    settings: {decay: " + string(p.Settings["router.decay"]) + ", rate: " + string(p.Settings["router.rate"]) + "}\n"
		simJSON := filepath.Join(t.TempDir(), "sim.json")
		if _, err := simulateIn(t, cfg, trace, simulateOptions{rate: 1, jsonPath: simJSON}); err != nil {
			t.Fatal(err)
		}
		var simRep sim.Report
		readJSON(t, simJSON, &simRep)
		if got, want := figures(t, p.Run), figures(t, simRep.Runs[0]); got != want {
			t.Errorf("point %v:\n%s\nsimulate with those settings:\n%s", p.Settings, got, want)
		}
	}
	var doc struct {
		Routing struct {
			Router struct {
				Use      string
				Settings map[string]float64
			}
		}
	}
	if err := yaml.Unmarshal([]byte(rep.Best), &doc); err != nil {
		t.Fatalf("best YAML: %v\n%s", err, rep.Best)
	}
	best := rep.Points[0].Settings
	if doc.Routing.Router.Use != "adaptive" || len(doc.Routing.Router.Settings) != 2 ||
		jsonNumber(t, best["router.decay"]) != doc.Routing.Router.Settings["decay"] || jsonNumber(t, best["router.rate"]) != doc.Routing.Router.Settings["rate"] {
		t.Errorf("best YAML %q, want adaptive with the first point's settings %v", rep.Best, best)
	}
	if !strings.Contains(out, rep.Best) || !strings.Contains(out, "ranked by cold-loads") {
		t.Errorf("output lacks the best YAML or the objective:\n%s", out)
	}
}

// figures is a run's JSON, wall time aside.
func figures(t *testing.T, r *sim.Result) string {
	t.Helper()
	c := *r
	c.WallS = 0
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// readJSON decodes the JSON file at path into v.
func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func jsonNumber(t *testing.T, raw json.RawMessage) float64 {
	t.Helper()
	var x float64
	if err := json.Unmarshal(raw, &x); err != nil {
		t.Fatal(err)
	}
	return x
}

// A point that fails requests ranks below every point that fails fewer,
// however few cold loads it has: a queue of 1 refuses requests (and so
// loads less) but is not the best. The other objectives rank by their
// figure.
func TestPolicyTune_ErrorsRankLastAndObjectives(t *testing.T) {
	var b strings.Builder
	b.WriteString("arrival_s,model,prompt_tokens,output_tokens\n")
	for i := range 40 { // bursts: every model asked four times at once
		for range 4 {
			b.WriteString(strings.Join([]string{strconv.Itoa(i * 3), []string{"a", "b", "c"}[i%3], "100", "40"}, ",") + "\n")
		}
	}
	for _, objective := range tuneObjectives {
		t.Run(objective, func(t *testing.T) {
			out, rep, err := tuneIn(t, simConfig(""), b.String(), tuneOptions{objective: objective, sets: []string{"scheduler.max_queue=1,1024", "scheduler.max_wait=1s,60s"}})
			if err != nil {
				t.Fatal(err)
			}
			first, last := rep.Points[0].Run, rep.Points[len(rep.Points)-1].Run
			if first.Errors != 0 || last.Errors == 0 {
				t.Fatalf("first point %d errors, last %d; want 0 first and the refused last:\n%s", first.Errors, last.Errors, out)
			}
			if got := string(rep.Points[0].Settings["scheduler.max_queue"]); got != "1024" {
				t.Errorf("best max_queue %s, want 1024:\n%s", got, out)
			}
			figure := map[string]func(p tuneResult) float64{
				"cold-loads":   func(p tuneResult) float64 { return float64(p.Run.ColdLoads) },
				"load-seconds": func(p tuneResult) float64 { return p.LoadS },
				"p95-wait":     func(p tuneResult) float64 { return p.Run.QueueWait.P95 },
			}[objective]
			for i := 1; i < len(rep.Points); i++ {
				p, q := rep.Points[i-1], rep.Points[i]
				if p.Run.Errors == q.Run.Errors && figure(p) > figure(q) {
					t.Errorf("%s: rank %d (%g) before rank %d (%g)", objective, p.Rank, figure(p), q.Rank, figure(q))
				}
			}
		})
	}
}

// Bad sweeps are refused before any replay, each naming the --set: an
// unknown setting with the settings the policy knows, a value the policy
// refuses with its reason, and malformed flags.
func TestPolicyTune_BadSweepNamesTheSetting(t *testing.T) {
	trace := simTrace(10, 5, "a", "b", "c")
	for name, tc := range map[string]struct {
		router    string
		sets      []string
		objective string
		want      []string
	}{
		"unknown router setting":    {"adaptive", []string{"router.decai=0.5"}, "", []string{`--set router.decai=0.5`, `unknown setting "decai"`, "known: margin, placement, decay, rate"}},
		"unknown scheduler setting": {"", []string{"scheduler.max_wiat=1s"}, "", []string{`--set scheduler.max_wiat=1s`, `unknown setting "max_wiat"`, "max_wait"}},
		"not a number":              {"adaptive", []string{"router.decay=0.5,abc"}, "", []string{"--set router.decay=abc", "want a number"}},
		"out of range":              {"adaptive", []string{"router.decay=2"}, "", []string{"--set router.decay=2", "(0, 1]"}},
		"bad duration":              {"", []string{"scheduler.max_wait=10s,5x"}, "", []string{"--set scheduler.max_wait=5x", "want a duration"}},
		"the second of two":         {"adaptive", []string{"router.decay=0.5", "router.rate=x"}, "", []string{"--set router.rate=x", "want a number"}},
		"no role":                   {"", []string{"decay=1"}, "", []string{"want router.KEY=V1,V2"}},
		"empty value":               {"", []string{"scheduler.max_wait=1s,"}, "", []string{"an empty value"}},
		"twice":                     {"", []string{"scheduler.max_wait=1s", "scheduler.max_wait=2s"}, "", []string{"given twice"}},
		"a value twice":             {"adaptive", []string{"router.decay=0.5,0.50"}, "", []string{`--set router.decay: value "0.50" is "0.5" again`}},
		"list item":                 {"", []string{"scheduler.fifo[0]=1"}, "", []string{"list item"}},
		"objective":                 {"", []string{"scheduler.max_wait=1s"}, "fastest", []string{`--objective "fastest"`, "cold-loads, load-seconds, p95-wait"}},
		"too many points":           {"", []string{"scheduler.max_wait=" + values(41, "s"), "scheduler.max_queue=" + values(41, "")}, "", []string{"more than 1000 points"}},
		"no sweep":                  {"", nil, "", []string{"name a setting"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := tuneIn(t, simConfig(""), trace, tuneOptions{simulateOptions: simulateOptions{router: tc.router}, sets: tc.sets, objective: tc.objective})
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// A point whose policy crashed is marked in the table and said under it,
// as simulate marks a run partly its fallback's.
func TestPolicyTune_ACrashingPointIsMarked(t *testing.T) {
	out, rep, err := tuneIn(t, flakyConfig(t, t.TempDir(), "{}"), simTrace(120, 0.5, "a", "b", "c"), tuneOptions{sets: []string{"scheduler.panic_every=0,7"}})
	if err != nil {
		t.Fatal(err)
	}
	var crashed *tuneResult
	for i := range rep.Points {
		if p := &rep.Points[i]; string(p.Settings["scheduler.panic_every"]) == "7" {
			crashed = p
		}
	}
	if crashed == nil || !crashed.Run.Fallback {
		t.Fatalf("the panicking point did not fall back: %+v\n%s", crashed, out)
	}
	row := regexp.MustCompile(`(?m)^\s*` + strconv.Itoa(crashed.Rank) + ` \*\s+7\s`)
	note := fmt.Sprintf("* rank %d (scheduler.panic_every=7): a policy failed during the replay (%d failed calls)", crashed.Rank, crashed.Run.PolicyFailures)
	if !row.MatchString(out) || !strings.Contains(out, note) || strings.Count(out, " * ") > 1 {
		t.Errorf("the crashed point is not marked once, with %q:\n%s", note, out)
	}
	// Its figures are partly the fallback's: it ranks below the point
	// whose policy did not fail, and is not the best.
	if crashed.Rank != len(rep.Points) || strings.Contains(out, "best: scheduler.panic_every=7") {
		t.Errorf("the crashed point ranks %d of %d:\n%s", crashed.Rank, len(rep.Points), out)
	}
}

// A sweep whose every point fell back says the best is no fit.
func TestPolicyTune_EveryPointCrashedIsSaid(t *testing.T) {
	out, _, err := tuneIn(t, flakyConfig(t, t.TempDir(), "{}"), simTrace(60, 0.5, "a", "b", "c"), tuneOptions{sets: []string{"scheduler.panic_every=1,2"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "the policy failed at every point") {
		t.Errorf("no warning that every point failed:\n%s", out)
	}
}

// The sweep's JSON carries, per point, simulate's figures and the load
// seconds the objective ranks by.
func TestPolicyTune_JSONLoadSeconds(t *testing.T) {
	_, rep, err := tuneIn(t, simConfig(""), simTrace(30, 4, "a", "b", "c"), tuneOptions{sets: []string{"scheduler.max_wait=5s,60s"}})
	if err != nil {
		t.Fatal(err)
	}
	loads := map[string]float64{"a": 4, "b": 6, "c": 8}
	for _, p := range rep.Points {
		var want float64
		for name, m := range p.Run.Models {
			want += float64(m.ColdLoads) * loads[name]
		}
		if p.LoadS != want || p.LoadS != sim.LoadSeconds(p.Run, map[string]sim.Model{"a": {Load: 4e9}, "b": {Load: 6e9}, "c": {Load: 8e9}}) {
			t.Errorf("point %v: load_s %g, want %g", p.Settings, p.LoadS, want)
		}
	}
}

// A setting that changes nothing on the trace (a margin of 0 or 1 byte
// where two 10 GiB models share 24 GiB) gives every point the same
// figures, and the output says so.
func TestPolicyTune_SameFiguresAreSaid(t *testing.T) {
	out, rep, err := tuneIn(t, simConfig(""), simTrace(12, 3, "a", "b", "c"), tuneOptions{
		simulateOptions: simulateOptions{router: "prioritylru"}, sets: []string{"router.margin=0,1"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Points) != 2 || !strings.Contains(out, "every point gave the same figures") {
		t.Errorf("want two points and the note:\n%s", out)
	}
}

// --sequence sweeps on the anchors' terms, as simulate --sequence replays:
// the report says so, and with the LRU router each point's cold loads are
// the LRU anchor's.
func TestPolicyTune_Sequence(t *testing.T) {
	trace := simTrace(40, 0.5, "a", "b", "c", "a", "c", "b", "b")
	out, rep, err := tuneIn(t, simConfig(""), trace, tuneOptions{
		simulateOptions: simulateOptions{router: "prioritylru", sequence: true},
		sets:            []string{"router.margin=0,1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.SequenceGap <= 0 || !strings.Contains(out, "sequence replay") || rep.Bounds == nil {
		t.Fatalf("sequence_gap_s %g, bounds %v; output:\n%s", rep.SequenceGap, rep.Bounds, out)
	}
	for _, p := range rep.Points {
		if p.Run.ColdLoads != rep.Bounds.LRU || p.Run.Completed != 40 {
			t.Errorf("point %v: %d cold loads, %d completed; want LRU's %d, 40", p.Settings, p.Run.ColdLoads, p.Run.Completed, rep.Bounds.LRU)
		}
	}
}

// --max-p95 ranks every point whose p95 wait is above it below every
// point within it, whatever the objective says: on overlapping requests
// foresight's patience trades waits for cold loads, so with the limit
// at the lowest p95 of the sweep the fewest cold loads ranks below a
// point that waits less. A negative limit is refused.
func TestPolicyTune_MaxP95RanksTheWaitYouAccept(t *testing.T) {
	trace := simTrace(60, 2.5, "a", "a", "b", "a", "c")
	o := tuneOptions{simulateOptions: simulateOptions{router: "foresight"}, sets: []string{"router.patience=0,0.5,1"}}
	out, free, err := tuneIn(t, simConfig(""), trace, o)
	if err != nil {
		t.Fatal(err)
	}
	lowest := free.Points[0].Run.QueueWait.P95
	for _, p := range free.Points {
		lowest = min(lowest, p.Run.QueueWait.P95)
		if p.OverMaxP95 {
			t.Errorf("point %v over a limit never set", p.Settings)
		}
	}
	if free.Points[0].Run.QueueWait.P95 == lowest {
		t.Fatalf("the fewest cold loads already waits least: no trade for the limit to rank:\n%s", out)
	}
	limit := lowest + 0.001 // seconds; a Duration of whole milliseconds
	o.maxP95 = time.Duration(limit * float64(time.Second)).Round(time.Millisecond)
	out, lim, err := tuneIn(t, simConfig(""), trace, o)
	if err != nil {
		t.Fatal(err)
	}
	if lim.MaxP95 != o.maxP95.Seconds() {
		t.Errorf("max_p95_s %g, want %g", lim.MaxP95, o.maxP95.Seconds())
	}
	over := 0
	for i, p := range lim.Points {
		if want := p.Run.QueueWait.P95 > lim.MaxP95; p.OverMaxP95 != want {
			t.Errorf("rank %d (p95 %gs): over_max_p95 %v, want %v", p.Rank, p.Run.QueueWait.P95, p.OverMaxP95, want)
		}
		if p.OverMaxP95 {
			over++
		} else if over > 0 {
			t.Errorf("rank %d is within the limit but ranks below a point over it:\n%s", p.Rank, out)
		}
		if i > 0 {
			q := lim.Points[i-1]
			if q.OverMaxP95 == p.OverMaxP95 && q.Run.ColdLoads > p.Run.ColdLoads {
				t.Errorf("rank %d (%d cold loads) before rank %d (%d)", q.Rank, q.Run.ColdLoads, p.Rank, p.Run.ColdLoads)
			}
		}
	}
	if over == 0 || lim.Points[0].OverMaxP95 {
		t.Errorf("%d points over the limit, best over it: %v; want some over and the best within:\n%s", over, lim.Points[0].OverMaxP95, out)
	}
	if want := fmt.Sprintf("%d of %d points have a p95 wait above --max-p95", over, len(lim.Points)); !strings.Contains(out, want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
	o.maxP95 = -time.Second
	if _, _, err := tuneIn(t, simConfig(""), trace, o); err == nil || !strings.Contains(err.Error(), "--max-p95 -1s") {
		t.Errorf("a negative --max-p95: error %v, want one naming it", err)
	}
}

// values is "1U,2U,…,nU".
func values(n int, unit string) string {
	vs := make([]string, n)
	for i := range vs {
		vs[i] = strconv.Itoa(i+1) + unit
	}
	return strings.Join(vs, ",")
}
