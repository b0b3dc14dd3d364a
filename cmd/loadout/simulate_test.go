package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/host/sim"
	"github.com/loadout-dev/loadout/policies/builtin"
)

// simConfig is a box of one 24 GiB GPU and three 10 GiB sim models (two
// fit at once), with extra YAML appended under models:.
func simConfig(extraModels string) string {
	return `gpus:
  - {name: g0, memory: 24GiB}
models:
  a:
    backend: sim
    options: {load_time: 4s, vram: 10GiB, tokens_per_second: 50}
  b:
    backend: sim
    aliases: [bee]
    options: {load_time: 6s, vram: 10GiB, tokens_per_second: 40}
  c:
    backend: sim
    options: {load_time: 8s, vram: 10GiB, tokens_per_second: 30}
` + extraModels
}

// simTrace is n requests cycling over models, one every gap seconds.
func simTrace(n int, gap float64, models ...string) string {
	var b strings.Builder
	b.WriteString("arrival_s,model,prompt_tokens,output_tokens\n")
	for i := range n {
		fmt.Fprintf(&b, "%.3f,%s,100,%d\n", float64(i)*gap, models[i%len(models)], 10+i%7)
	}
	return b.String()
}

// simulateIn runs `loadout simulate` in-process on files written to a
// temporary directory and returns its output.
func simulateIn(t *testing.T, config, trace string, o simulateOptions) (string, error) {
	t.Helper()
	out, _, err := simulateWarn(t, config, trace, o)
	return out, err
}

// simulateWarn is simulateIn that also returns what was written to
// standard error.
func simulateWarn(t *testing.T, config, trace string, o simulateOptions) (string, string, error) {
	t.Helper()
	dir := t.TempDir()
	o.config.path = writeConfig(t, dir, config)
	o.tracePath = filepath.Join(dir, "trace.csv")
	if err := os.WriteFile(o.tracePath, []byte(trace), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, warn bytes.Buffer
	err := runSimulate(context.Background(), o, &out, &warn)
	return out.String(), warn.String(), err
}

func TestSimulate_BadTraceNamesTheLine(t *testing.T) {
	for name, tc := range map[string]struct{ trace, want string }{
		"unsorted":      {"arrival_s,model,prompt_tokens,output_tokens\n1,a,1,1\n0.5,a,1,1\n", "trace.csv:3: arrival_s"},
		"unknown model": {"arrival_s,model,prompt_tokens,output_tokens\n0,a,1,1\n1,zzz,1,1\n", `trace.csv:3: model: unknown model "zzz"`},
		"negative":      {"arrival_s,model,prompt_tokens,output_tokens\n0,a,-1,1\n", "trace.csv:2: prompt_tokens"},
		"not a number":  {"arrival_s,model,prompt_tokens,output_tokens\n0,a,1,many\n", "trace.csv:2: output_tokens"},
		"no column":     {"arrival_s,model,prompt_tokens\n0,a,1\n", "output_tokens"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := simulateIn(t, simConfig(""), tc.trace, simulateOptions{rate: 1})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// A trace as other tools export it — a byte order mark, extra columns,
// CRLF, blank lines, token counts written as floats, arrivals as Unix
// times — replays exactly as the plain trace of the same requests; the
// skipped columns are named, and a bad line after a blank one is named
// by its line in the file.
func TestSimulate_ExportedTraceReplaysAsThePlainOne(t *testing.T) {
	plain := simTrace(12, 3, "a", "b")
	var exported strings.Builder
	exported.WriteString("\ufeffrequest_id,arrival_s,model,prompt_tokens,output_tokens,timestamp\r\n")
	for i, line := range strings.Split(strings.TrimSpace(plain), "\n")[1:] {
		f := strings.Split(line, ",")
		var at float64
		fmt.Sscan(f[0], &at)
		fmt.Fprintf(&exported, "r%d,%.3f,%s,%s.0,%s,2026-11-26\r\n", i, 1_764_115_200+at, f[1], f[2], f[3])
		if i%5 == 0 {
			exported.WriteString("\r\n")
		}
	}
	o := simulateOptions{rate: 1, router: "prioritylru"}
	want := reportJSON(t, simConfig(""), plain, o)
	_, warn, err := simulateWarn(t, simConfig(""), exported.String(), o)
	if err != nil {
		t.Fatal(err)
	}
	if got := reportJSON(t, simConfig(""), exported.String(), o); !bytes.Equal(got, want) {
		t.Errorf("the exported trace replayed differently:\n%s\nthe plain one:\n%s", got, want)
	}
	if !strings.Contains(warn, "request_id, timestamp") {
		t.Errorf("the skipped columns were not named: %q", warn)
	}
	bad := strings.Replace(exported.String(), ",b,", ",zzz,", 1) // line 3; line 3 of the file is the blank one after r0, so r1 is line 4
	if _, _, err := simulateWarn(t, simConfig(""), bad, o); err == nil || !strings.Contains(err.Error(), `trace.csv:4: model: unknown model "zzz"`) {
		t.Errorf("got %v, want the unknown model named at line 4", err)
	}
}

// An output that cannot be created fails before the replay (nothing is
// printed) and leaves no other output behind.
func TestSimulate_AnUnwritableOutputFailsAtOnce(t *testing.T) {
	dir := t.TempDir()
	o := simulateOptions{rate: 1, jsonPath: filepath.Join(dir, "r.json"), htmlPath: filepath.Join(dir, "no", "such", "r.html")}
	out, err := simulateIn(t, simConfig(""), simTrace(5, 1, "a"), o)
	if err == nil || !strings.Contains(err.Error(), "--html") || out != "" {
		t.Fatalf("got %v and output %q; want an error naming --html and no replay", err, out)
	}
	if _, err := os.Stat(o.jsonPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the --json file was left behind: %v", err)
	}
}

func TestSimulate_ModelThatCannotBeSimulatedIsAConfigError(t *testing.T) {
	extra := `  real:
    cmd: /bin/true
    proxy: http://127.0.0.1:9
  tuned:
    cmd: /bin/true
    proxy: http://127.0.0.1:9
    simulate: {load_time: 2s, tokens_per_second: fast}
`
	_, err := simulateIn(t, simConfig(extra), simTrace(3, 1, "a"), simulateOptions{rate: 1})
	if err == nil {
		t.Fatal("a cmd model without a simulate: block was simulated")
	}
	for _, want := range []string{
		"loadout.yaml:14", "models.real.simulate", "needs a simulate: block",
		"loadout.yaml:20", "models.tuned.simulate.tokens_per_second",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestSimulate_AModelThatDoesNotFitIsErroredRequests(t *testing.T) {
	extra := `  huge:
    backend: sim
    options: {load_time: 1s, vram: 40GiB}
`
	out, err := simulateIn(t, simConfig(extra), simTrace(9, 2, "a", "huge", "b"),
		simulateOptions{rate: 1, router: "prioritylru", perModel: true})
	if err != nil {
		t.Fatal(err)
	}
	// huge's three requests fail; the six others complete.
	if !regexp.MustCompile(`prioritylru\s+6\s+3\s`).MatchString(out) {
		t.Fatalf("want 6 completed and 3 errors:\n%s", out)
	}
	if !strings.Contains(out, `"unavailable":3`) {
		t.Fatalf("want the errors by code:\n%s", out)
	}
}

func TestSimulate_CompareAllRoutersAndJSON(t *testing.T) {
	dir := t.TempDir()
	jsonPath := filepath.Join(dir, "out.json")
	out, err := simulateIn(t, simConfig(""), simTrace(60, 1.5, "a", "b", "c", "a", "bee"),
		simulateOptions{rate: 1, compare: []string{"router=all"}, jsonPath: jsonPath})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(out)
	var rep sim.Report
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	routers := builtin.Routers()
	if len(rep.Runs) != len(routers) {
		t.Fatalf("%d runs, want one per built-in router %v", len(rep.Runs), routers)
	}
	for i, run := range rep.Runs {
		if run.Router != "builtin:"+routers[i] || run.Completed != 60 || run.Errors != 0 || run.ColdLoads < 3 {
			t.Errorf("run %d: %+v", i, *run)
		}
	}
	// Three 10 GiB models, 24 GiB: two slots; the bounds are printed.
	if rep.Bounds == nil || rep.Bounds.Slots != 2 || !strings.Contains(out, "LRU") {
		t.Fatalf("bounds %+v", rep.Bounds)
	}
}

// reportJSON replays trace under config with o and returns the --json
// report with what may differ between equal replays blanked: the real
// time taken and the trace file's name.
func reportJSON(t *testing.T, config, trace string, o simulateOptions) []byte {
	t.Helper()
	o.jsonPath = filepath.Join(t.TempDir(), "report.json")
	if _, err := simulateIn(t, config, trace, o); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(o.jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	b = regexp.MustCompile(`"wall_s": [0-9.e-]+`).ReplaceAll(b, []byte(`"wall_s": 0`))
	return regexp.MustCompile(`"file": "[^"]*"`).ReplaceAll(b, []byte(`"file": ""`))
}

func TestSimulate_TheSameInputsGiveTheSameReport(t *testing.T) {
	cfg, trace := simConfig(""), simTrace(120, 0.7, "a", "b", "a", "c")
	var reports [2][]byte
	for i := range reports {
		reports[i] = reportJSON(t, cfg, trace, simulateOptions{rate: 1, compare: []string{"router=group,prioritylru"}})
	}
	if !bytes.Equal(reports[0], reports[1]) {
		a, b := strings.Split(string(reports[0]), "\n"), strings.Split(string(reports[1]), "\n")
		for i := range min(len(a), len(b)) {
			if a[i] != b[i] {
				t.Fatalf("two replays differ at line %d:\n%s\n%s", i+1, a[i], b[i])
			}
		}
		t.Fatalf("two replays differ in length: %d and %d lines", len(a), len(b))
	}
}

// "all" in a --compare list stands for every built-in of the role, beside
// the list's other names (README: router=all,./mine.wasm), each once; a
// scheduler named as a router is refused naming the role's built-ins.
func TestSimulate_CompareAllBesideModules(t *testing.T) {
	pairs, err := policyPairs(simulateOptions{compare: []string{"router=sieve,all,./mine.wasm"}})
	if err != nil {
		t.Fatal(err)
	}
	var routers []string
	for _, p := range pairs {
		routers = append(routers, p.router)
	}
	want := append(builtin.Routers(), "./mine.wasm")
	slices.Sort(want)
	got := slices.Sorted(slices.Values(routers))
	if !slices.Equal(got, want) {
		t.Errorf("router=sieve,all,./mine.wasm compares %v, want each built-in router once and the module: %v", routers, want)
	}
	// The same file twice is replayed once; two files the table would
	// name alike are refused, naming both.
	if pairs, err := policyPairs(simulateOptions{compare: []string{"router=./mine.wasm,mine.wasm"}}); err != nil || len(pairs) != 1 {
		t.Errorf("router=./mine.wasm,mine.wasm: %d pairs, %v; want one", len(pairs), err)
	}
	_, err = policyPairs(simulateOptions{compare: []string{"router=a/mine.wasm,b/mine.wasm"}})
	if err == nil || !strings.Contains(err.Error(), `a/mine.wasm and b/mine.wasm would both be shown as "mine.wasm"`) {
		t.Errorf("router=a/mine.wasm,b/mine.wasm: %v, want them refused", err)
	}
	cfg := &config.Config{}
	_, err = withPolicies(cfg, policyPair{router: "fifo"})
	if err == nil || !strings.Contains(err.Error(), `router "fifo": not a built-in router (`+strings.Join(builtin.Routers(), ", ")+`)`) {
		t.Errorf("router fifo: %v", err)
	}
}

// --compare replays its policies in parallel, each with its own clock and
// policy runtime; the report is byte for byte the serial one.
func TestSimulate_CompareInParallelIsTheSerialReport(t *testing.T) {
	cfg, trace := simConfig(""), simTrace(120, 0.7, "a", "b", "a", "c")
	o := simulateOptions{rate: 1, compare: []string{"router=all"}}
	o.workers = 1
	serial := reportJSON(t, cfg, trace, o)
	o.workers = 4
	if parallel := reportJSON(t, cfg, trace, o); !bytes.Equal(serial, parallel) {
		t.Fatalf("the parallel report differs from the serial one:\n%s\n---\n%s", serial, parallel)
	}
}

// flakyConfig is simConfig with the flaky test scheduler (built into dir)
// under settings, a YAML flow mapping.
func flakyConfig(t *testing.T, dir, settings string) string {
	return simConfig("") + fmt.Sprintf(`routing:
  scheduler:
    wasm: %s
    settings: %s
`, flakyWasm(t, dir), settings)
}

func TestSimulate_ACrashingPolicyIsReportedAndTheFallbackServes(t *testing.T) {
	cfg := flakyConfig(t, t.TempDir(), "{panic_every: 7}")
	out, err := simulateIn(t, cfg, simTrace(200, 0.5, "a", "b", "c"), simulateOptions{rate: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "a policy failed during the replay") || !strings.Contains(out, "group *") {
		t.Fatalf("the crash is not reported:\n%s", out)
	}
	if !regexp.MustCompile(`handed over \(fallback\)`).MatchString(out) {
		t.Fatalf("the fallback's take-over is not reported:\n%s", out)
	}
}

// A policy that crashes at every call, over two days of virtual time with
// a request an hour: a replay retries it after 30 s doubling to a day
// (sim.PolicyBackoff) and disables it at its third crash
// (sim.PolicyMaxCrashes), where serve's cool-down, doubling to 10 minutes,
// retried it at every request (48 retries of six crashes each). A policy
// that loops costs a deadline of wall time per crash, so those retries
// made a replay of weeks take hours.
func TestSimulate_ACrashLoopingPolicyIsRetriedSeldomInAReplay(t *testing.T) {
	cfg := flakyConfig(t, t.TempDir(), "{panic_every: 1}")
	raw := reportJSON(t, cfg, simTrace(48, 3600, "a", "b", "c"), simulateOptions{rate: 1})
	var report struct {
		Runs []struct {
			Completed      int  `json:"completed"`
			Fallback       bool `json:"fallback"`
			PolicyFailures int  `json:"policy_failures"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(raw, &report); err != nil || len(report.Runs) != 1 {
		t.Fatalf("report: %v\n%s", err, raw)
	}
	r := report.Runs[0]
	if !r.Fallback || r.Completed == 0 {
		t.Errorf("run %+v, want the fallback serving", r)
	}
	// Retries after 30 s, 1, 2, 4, 8, 16 and 32 min come at the next
	// hourly request, then after 64 min to a day: about 14 disables of
	// three failed calls each.
	if r.PolicyFailures > 3*16 {
		t.Errorf("%d failed policy calls, want at most %d: the replay retried the policy too often", r.PolicyFailures, 3*16)
	}
}

// A .wasm policy runs with wazero's loop checks, though the built-ins run
// without them in a replay: one that loops is stopped at its deadline,
// the failure reported, and the fallback serves every request.
func TestSimulate_AWasmPolicyThatLoopsIsStopped(t *testing.T) {
	dir := t.TempDir()
	cfg := flakyConfig(t, dir, "{loop_every: 40}")
	o := simulateOptions{rate: 1, jsonPath: filepath.Join(dir, "report.json")}
	o.runtime.CallTimeout = 100 * time.Millisecond
	o.config.path = writeConfig(t, dir, cfg)
	o.tracePath = filepath.Join(dir, "trace.csv")
	if err := os.WriteFile(o.tracePath, []byte(simTrace(120, 0.5, "a", "b", "c")), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- runSimulate(context.Background(), o, &stdout, io.Discard) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute): // a loop without the checks never ends: fail rather than hang the suite
		t.Fatal("the replay has not ended in 2 minutes: the looping .wasm policy was not stopped")
	}
	out := stdout.String()
	if !strings.Contains(out, "a policy failed during the replay") || !strings.Contains(out, "deadline of 100ms exceeded") {
		t.Fatalf("the loop is not reported:\n%s", out)
	}
	var rep struct {
		Runs []struct{ Completed, Errors int } `json:"runs"`
	}
	b, err := os.ReadFile(o.jsonPath)
	if err == nil {
		err = json.Unmarshal(b, &rep)
	}
	if err != nil || len(rep.Runs) != 1 || rep.Runs[0].Completed+rep.Runs[0].Errors != 120 {
		t.Fatalf("report %+v (%v): want all 120 requests accounted for", rep, err)
	}
}

// The built-in policies run without the loop checks in a replay; the same
// module run from a .wasm file, with them, gives the same report.
func TestSimulate_TrustedBuiltinsReportAsTheSandboxedModule(t *testing.T) {
	wasm, err := builtin.Lookup("foresight")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "foresight.wasm")
	if err := os.WriteFile(path, wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, trace := simConfig(""), simTrace(150, 0.7, "a", "b", "a", "c", "b", "a")
	name := regexp.MustCompile(`"(builtin:foresight|` + regexp.QuoteMeta(path) + `)"`)
	trusted := name.ReplaceAll(reportJSON(t, cfg, trace, simulateOptions{rate: 1, router: "foresight"}), []byte(`"R"`))
	sandboxed := name.ReplaceAll(reportJSON(t, cfg, trace, simulateOptions{rate: 1, router: path}), []byte(`"R"`))
	if !bytes.Equal(trusted, sandboxed) {
		t.Fatalf("the built-in's report differs from the .wasm file's:\n%s\n---\n%s", trusted, sandboxed)
	}
}

// A box where no model fits: under every built-in policy pair each
// request is an error counted by code, nothing crashes, and the report
// (text, JSON, HTML) holds no NaN; the same for a trace of one request.
func TestSimulate_NoModelFitsAndOneRequest(t *testing.T) {
	noFit := `gpus:
  - {name: g0, memory: 8GiB}
models:
  a:
    backend: sim
    options: {load_time: 4s, vram: 10GiB, tokens_per_second: 50}
  b:
    backend: sim
    options: {load_time: 6s, vram: 20GiB, tokens_per_second: 40}
`
	for name, tc := range map[string]struct {
		config, trace string
		errors        int
	}{
		"no model fits":           {noFit, simTrace(7, 2, "a", "b"), 7},
		"no model fits, one":      {noFit, simTrace(1, 2, "b"), 1},
		"one request":             {simConfig(""), simTrace(1, 2, "b"), 0},
		"one request, equal size": {strings.ReplaceAll(simConfig(""), "load_time: 6s", "load_time: 4s"), simTrace(1, 2, "a"), 0},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			o := simulateOptions{rate: 1, compare: []string{"router=all", "scheduler=all"},
				jsonPath: filepath.Join(dir, "out.json"), htmlPath: filepath.Join(dir, "out.html")}
			out, err := simulateIn(t, tc.config, tc.trace, o)
			if err != nil {
				t.Fatal(err)
			}
			var rep sim.Report
			readJSON(t, o.jsonPath, &rep)
			if want := len(builtin.Routers()) * len(builtin.Schedulers()); len(rep.Runs) != want {
				t.Fatalf("%d runs, want %d", len(rep.Runs), want)
			}
			for _, run := range rep.Runs {
				codes := 0
				for _, n := range run.ErrorsByCode {
					codes += n
				}
				if run.Errors != tc.errors || codes != tc.errors || run.Completed != run.Requests-tc.errors {
					t.Errorf("%s + %s: %d completed, %d errors %v; want %d errors, counted by code", run.Scheduler, run.Router, run.Completed, run.Errors, run.ErrorsByCode, tc.errors)
				}
			}
			html, err := os.ReadFile(o.htmlPath)
			if err != nil {
				t.Fatal(err)
			}
			for what, text := range map[string]string{"text": out, "HTML": string(html)} {
				if strings.Contains(text, "NaN") || strings.Contains(text, "Inf") {
					t.Errorf("the %s report holds NaN or Inf:\n%s", what, out)
				}
			}
			if tc.errors == 0 && strings.Contains(out, "achievable (") && !strings.Contains(out, "achievable (1 load, ") {
				t.Errorf("the load bound of one request is not one load, in the singular:\n%s", out)
			}
		})
	}
}

// --slots makes the box for the trace: every model it names (ids a
// configuration would have to quote included) becomes an equal slot, the
// anchors count that many slots, and every request is served; with
// --config as well it is refused.
func TestSimulate_SlotsMakeTheBoxForTheTrace(t *testing.T) {
	names := []string{"org/llama-3:8b", "null", "123", "plain", `say "hi"`}
	dir := t.TempDir()
	o := simulateOptions{rate: 1, slots: 2, compare: []string{"router=foresight,ollama"},
		tracePath: filepath.Join(dir, "trace.csv"), jsonPath: filepath.Join(dir, "report.json")}
	var trace bytes.Buffer
	w := csv.NewWriter(&trace)
	_ = w.Write([]string{"arrival_s", "model", "prompt_tokens", "output_tokens"})
	for i := range 60 {
		_ = w.Write([]string{strconv.Itoa(i * 30), names[(i*i+i/7)%len(names)], "100", "20"})
	}
	w.Flush()
	if err := os.WriteFile(o.tracePath, trace.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, warn bytes.Buffer
	if err := runSimulate(context.Background(), o, &out, &warn); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(o.jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Bounds struct{ Slots int }
		Runs   []struct {
			Completed, Errors int
			ColdLoads         int `json:"cold_loads"`
			Models            map[string]json.RawMessage
		}
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Bounds.Slots != 2 || len(rep.Runs) != 2 {
		t.Fatalf("anchors over %d slots, %d runs; want 2 slots, 2 runs:\n%s", rep.Bounds.Slots, len(rep.Runs), out.String())
	}
	for _, r := range rep.Runs {
		if r.Completed != 60 || r.Errors != 0 || r.ColdLoads < len(names) || len(r.Models) != len(names) {
			t.Fatalf("a run: %d completed, %d errors, %d cold loads, %d models; want 60, 0, at least %d, %d:\n%s",
				r.Completed, r.Errors, r.ColdLoads, len(r.Models), len(names), len(names), out.String())
		}
		for _, n := range names {
			if _, ok := r.Models[n]; !ok {
				t.Fatalf("the report has no model %q: %v", n, r.Models)
			}
		}
	}
	o.config.path = writeConfig(t, dir, simConfig(""))
	if err := runSimulate(context.Background(), o, &out, &warn); err == nil || !strings.Contains(err.Error(), "--slots") {
		t.Fatalf("--slots with --config: %v; want an error naming --slots", err)
	}
}

// --sequence replays the trace on the anchors' terms: the LRU router's cold
// loads are the LRU anchor's, no router beats Belady's optimum, every
// request completes, and a TTL that would unload models between the
// spaced-out requests is off. The plain replay of the same overlapping
// trace differs (its requests wait on each other's loads).
func TestSimulate_SequenceReplayMatchesTheAnchors(t *testing.T) {
	// Four models, two slots, a TTL far shorter than the sequence's gap.
	cfg := simConfig(`  d:
    backend: sim
    options: {load_time: 5s, vram: 10GiB, tokens_per_second: 45}
`) + "globalTTL: 3\n"
	var b strings.Builder
	b.WriteString("arrival_s,model,prompt_tokens,output_tokens\n")
	models := []string{"a", "b", "a", "c", "d", "a", "b", "b", "c", "a", "d", "d", "a", "c", "b"}
	for i := range 90 {
		fmt.Fprintf(&b, "%.3f,%s,200,%d\n", float64(i)*0.4, models[(i*7+i/5)%len(models)], 5+i%11)
	}
	o := simulateOptions{rate: 1, sequence: true, compare: []string{"router=ollama,prioritylru,foresight"}}
	var rep sim.Report
	if err := json.Unmarshal(reportJSON(t, cfg, b.String(), o), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Bounds == nil || rep.Bounds.Slots != 2 || rep.SequenceGap < 8 {
		t.Fatalf("bounds %+v, gap %g s: want two slots and a gap past the longest load (8 s)", rep.Bounds, rep.SequenceGap)
	}
	for _, run := range rep.Runs {
		if run.Completed != 90 || run.Errors != 0 {
			t.Errorf("%s: %d completed, %d errors", run.Router, run.Completed, run.Errors)
		}
		if run.ColdLoads < rep.Bounds.Belady {
			t.Errorf("%s: %d cold loads, below Belady's %d", run.Router, run.ColdLoads, rep.Bounds.Belady)
		}
	}
	if lru := rep.Runs[0]; lru.ColdLoads != rep.Bounds.LRU {
		t.Errorf("the LRU router made %d cold loads in a sequence replay, the LRU anchor %d", lru.ColdLoads, rep.Bounds.LRU)
	}
	o.sequence = false
	var plain sim.Report
	if err := json.Unmarshal(reportJSON(t, cfg, b.String(), o), &plain); err != nil {
		t.Fatal(err)
	}
	if plain.SequenceGap != 0 || plain.Runs[0].ColdLoads == rep.Runs[0].ColdLoads {
		t.Errorf("the plain replay: gap %g s, LRU router %d cold loads, want 0 and other than the sequence replay's %d",
			plain.SequenceGap, plain.Runs[0].ColdLoads, rep.Runs[0].ColdLoads)
	}
}
