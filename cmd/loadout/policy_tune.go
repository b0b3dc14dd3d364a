package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/host/sim"
)

// maxTunePoints caps a sweep's grid: every point is a full replay.
const maxTunePoints = 1000

// tuneOptions are policy tune's flags: simulate's inputs, the sweep and
// the objective.
type tuneOptions struct {
	simulateOptions
	sets      []string
	objective string
	// maxP95 is --max-p95: a point whose p95 queueing delay is above it
	// ranks below every point within it (0: no limit).
	maxP95 time.Duration
}

// tuneObjectives are the objectives --objective takes, in the order
// ties are broken.
var tuneObjectives = []string{"cold-loads", "load-seconds", "p95-wait"}

func newPolicyTuneCmd(f *policyFlags) *cobra.Command {
	o := tuneOptions{objective: "cold-loads"}
	cmd := &cobra.Command{
		Use:   "tune --config FILE --trace FILE.csv --set router.KEY=V1,V2,… [--set …]",
		Short: "Sweep a policy's settings over a recorded trace and print the best",
		Long: `tune fits a policy's settings to your own traffic: it replays a request
trace (serve --record-trace writes one) under every combination of the
values given by --set, exactly as 'loadout simulate' replays it — the same
run loop and policy modules, model servers simulated in virtual time,
one replay per core at once — and prints every point ranked by the
objective (a point whose policy failed during its replay, its figures
partly the fallback's, below every other), then the best settings as YAML
to paste into the configuration.

--set router.KEY=V1,V2,… sweeps a setting of the router
(routing.router.settings), --set scheduler.KEY=… one of the scheduler.
KEY is a path into the settings: fifo.priority.MODEL, or with a key that
is not a plain name, fifo.priority["qwen2.5-7b"]. Each value is read as
YAML, as it would be written under settings: (30s, 0.5, 100, true; ~ for
the policy's default). Repeat --set for a grid: every combination is
replayed, at most 1000. The settings not swept are the configuration's;
--router NAME (or --scheduler) tunes another policy than the configured
one, from its defaults.

Every value is shown to the policy before any replay: a setting it does
not know is refused with the ones it knows, a value it refuses (not a
number, a duration that does not parse, out of range) with its reason.

--objective: cold-loads (the default), load-seconds (each cold load
weighted by its model's load time) or p95-wait (the 95th percentile of
the queueing delay, arrival to grant). A point that fails more requests
ranks below one that fails fewer, whatever its objective; ties go to
fewer cold loads, then load seconds, then p95 wait, then grid order.

--max-p95 DURATION is the wait you accept: a point whose p95 queueing
delay is above it ranks below every point within it (after errors), so
the best is the fewest cold loads (or load seconds) at that wait. It is
how to fit a setting that trades waits for cold loads, such as
foresight's patience: --set router.patience=0,0.1,0.25,0.5,1
--max-p95 20s.

--json FILE writes every point's figures (simulate --json's, per point).`,
		Example: `  loadout policy tune -c loadout.yaml -t traffic.csv --router adaptive --set router.decay=0.5,0.8,0.9,0.97 --set router.rate=0.1,0.45,1
  loadout policy tune -c loadout.yaml -t traffic.csv --set scheduler.max_wait=15s,60s,5m --objective p95-wait --json tune.json
  loadout policy tune -c loadout.yaml -t traffic.csv --router foresight --set router.patience=0,0.25,1 --max-p95 20s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.runtime.CacheDir, o.runtime.MemoryLimitPages = f.cacheDir, f.memPages
			if cmd.Flags().Changed("timeout") {
				o.runtime.CallTimeout = f.timeout
			}
			return runTune(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	o.config.addFlags(cmd)
	fl.StringVarP(&o.tracePath, "trace", "t", "", "request trace (CSV: arrival_s,model,prompt_tokens,output_tokens[,priority,client])")
	fl.StringArrayVar(&o.sets, "set", nil, "sweep a setting: router.KEY=V1,V2,… or scheduler.KEY=…; repeat for a grid")
	fl.StringVar(&o.objective, "objective", o.objective, "rank by: "+strings.Join(tuneObjectives, ", "))
	fl.DurationVar(&o.maxP95, "max-p95", 0, "rank points whose p95 queueing delay is above this (e.g. 20s) below the rest; 0: no limit")
	fl.StringVar(&o.scheduler, "scheduler", "", "scheduler policy instead of the configuration's: a built-in name or a .wasm file")
	fl.StringVar(&o.router, "router", "", "router policy instead of the configuration's: a built-in name or a .wasm file")
	fl.StringVar(&o.jsonPath, "json", "", "write every point's figures as JSON to this file")
	fl.StringArrayVar(&o.gpus, "gpu", nil, "a simulated GPU of this size (e.g. 24GiB), instead of the configuration's gpus:; repeat for more")
	positiveIntVar(fl, &o.slots, "slots", 0, slotsUsage)
	fl.Float64Var(&o.rate, "rate", 1, "replay the trace at this multiple of its request rate")
	fl.BoolVar(&o.sequence, "sequence", false, sequenceUsage)
	fl.BoolVar(&o.runtime.Trusted, "trust-policies", false, trustUsage)
	_ = cmd.MarkFlagRequired("trace")
	_ = cmd.MarkFlagRequired("set")
	return cmd
}

// sweptSetting is one --set: a policy's setting and the values to try.
type sweptSetting struct {
	flag   string            // as written: router.decay
	role   string            // "scheduler" or "router"
	path   string            // the settings path: decay
	text   []string          // the values as written
	values []json.RawMessage // the values as JSON
}

// parseSet reads one --set ROLE.PATH=V1,V2,…; each value is a YAML
// scalar, as under settings:.
func parseSet(s string) (sweptSetting, error) {
	key, list, ok := strings.Cut(s, "=")
	role, path, _ := strings.Cut(key, ".")
	st := sweptSetting{flag: strings.TrimSpace(key), role: role, path: strings.TrimSpace(path)}
	if !ok || (role != "router" && role != "scheduler") || st.path == "" {
		return st, fmt.Errorf("--set %q: want router.KEY=V1,V2,… or scheduler.KEY=V1,V2,…", s)
	}
	for v := range strings.SplitSeq(list, ",") {
		v = strings.TrimSpace(v)
		if v == "" {
			return st, fmt.Errorf("--set %q: an empty value (~ is the policy's default)", s)
		}
		var x any
		if err := yaml.Unmarshal([]byte(v), &x); err != nil {
			return st, fmt.Errorf("--set %s: value %q is not YAML: %w", st.flag, v, err)
		}
		raw, err := json.Marshal(x)
		if err != nil {
			return st, fmt.Errorf("--set %s: value %q: %w", st.flag, v, err)
		}
		for i, seen := range st.values {
			if string(seen) == string(raw) {
				return st, fmt.Errorf("--set %s: value %q is %q again: each point would be replayed twice", st.flag, v, st.text[i])
			}
		}
		st.text, st.values = append(st.text, v), append(st.values, raw)
	}
	return st, nil
}

// tunePoint is one point of the grid: a value index per swept setting.
type tunePoint []int

// grid is every combination of the settings' values, the first setting
// varying slowest.
func grid(sets []sweptSetting) []tunePoint {
	points := []tunePoint{nil}
	for _, s := range sets {
		var next []tunePoint
		for _, p := range points {
			for i := range s.values {
				next = append(next, append(slices.Clone(p), i))
			}
		}
		points = next
	}
	return points
}

// withSettings is cfg with the policies of pair and the settings
// values[i] of sets[i] (a negative index leaves that setting as it is).
func withSettings(cfg *config.Config, pair policyPair, sets []sweptSetting, point tunePoint) (*config.Config, error) {
	c, err := withPolicies(cfg, pair)
	if err != nil {
		return nil, err
	}
	for i, s := range sets {
		if point[i] < 0 {
			continue
		}
		p := &c.Routing.Router
		if s.role == "scheduler" {
			p = &c.Routing.Scheduler
		}
		if *p, err = p.WithSetting(s.path, s.values[point[i]]); err != nil {
			return nil, fmt.Errorf("--set %s: %w", s.flag, err)
		}
	}
	return c, nil
}

// runTune replays the trace at every point of the sweep and writes the
// ranking and the best settings to out.
func runTune(ctx context.Context, o tuneOptions, out, warn io.Writer) (err error) {
	if !slices.Contains(tuneObjectives, o.objective) {
		return fmt.Errorf("--objective %q: want one of %s", o.objective, strings.Join(tuneObjectives, ", "))
	}
	if o.maxP95 < 0 {
		return fmt.Errorf("--max-p95 %s: want a duration of 0 or more (0: no limit)", o.maxP95)
	}
	var sets []sweptSetting
	points := 1
	for _, s := range o.sets {
		st, err := parseSet(s)
		if err != nil {
			return err
		}
		if slices.ContainsFunc(sets, func(x sweptSetting) bool { return x.role == st.role && x.path == st.path }) {
			return fmt.Errorf("--set %s: given twice", st.flag)
		}
		sets = append(sets, st)
		if points *= len(st.values); points > maxTunePoints {
			return fmt.Errorf("--set: the grid has more than %d points; sweep fewer values", maxTunePoints)
		}
	}
	if len(sets) == 0 {
		return errors.New("--set: name a setting to sweep (router.KEY=V1,V2,…)")
	}
	pair := policyPair{scheduler: o.scheduler, router: o.router}
	if _, err := withPolicies(&config.Config{}, pair); err != nil {
		return err
	}
	outputs, err := createOutputs(simulateOptions{jsonPath: o.jsonPath})
	if err != nil {
		return err
	}
	defer closeOutputs(outputs, &err)
	in, err := loadReplayInputs(ctx, o.simulateOptions, warn)
	if err != nil {
		return err
	}
	if err := in.checkSettings(ctx, o.simulateOptions, pair, sets); err != nil {
		return err
	}
	grid := grid(sets)
	jobs := make([]replayJob, len(grid))
	for i, p := range grid {
		cfg, err := withSettings(in.cfg, pair, sets, p)
		if err != nil {
			return err
		}
		// The policies are in cfg already; the pair would replace them
		// again, without the settings.
		jobs[i] = replayJob{cfg: cfg}
	}
	runs, errs := in.replayEach(ctx, o.simulateOptions, jobs)
	for i, e := range errs {
		if e != nil {
			errs[i] = fmt.Errorf("%s: %w", pointLabel(sets, grid[i]), e)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	t := newTuneReport(in, o, sets, grid, jobs, runs)
	t.print(out)
	if f := outputs["--json"]; f != nil {
		enc := json.NewEncoder(f)
		enc.SetIndent("", "  ")
		if err := enc.Encode(t); err != nil {
			return fmt.Errorf("--json %s: %w", f.Name(), err)
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("--json %s: %w", f.Name(), err)
		}
	}
	return nil
}

// checkSettings shows every value of every swept setting to its policy,
// each alone over the configuration's other settings, before any replay:
// a replay of no requests, which runs the policies' init and nothing
// else. The first refusal is the error, naming the --set and saying what
// the policy said: for a key it does not know, the keys it knows.
func (in *replayInputs) checkSettings(ctx context.Context, o simulateOptions, pair policyPair, sets []sweptSetting) error {
	var jobs []replayJob
	var what []string
	var which []int
	for i, s := range sets {
		for j := range s.values {
			point := make(tunePoint, len(sets))
			for k := range point {
				point[k] = -1
			}
			point[i] = j
			cfg, err := withSettings(in.cfg, pair, sets, point)
			if err != nil {
				return err
			}
			jobs = append(jobs, replayJob{cfg: cfg})
			what = append(what, s.flag+"="+s.text[j])
			which = append(which, i)
		}
	}
	none := *in
	none.trace = nil
	_, errs := none.replayEach(ctx, o, jobs)
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("--set %s: %s", what[i], settingProblem(err, sets[which[i]].path))
		}
	}
	return nil
}

// settingProblem is what a policy's init said about the setting at path
// (its message, without the configuration file's position, which the
// setting does not come from), or the whole error where it said nothing
// about that path.
func settingProblem(err error, path string) string {
	var all config.Errors
	if errors.As(err, &all) {
		for _, e := range all {
			if e.Key == path || strings.HasSuffix(e.Key, "."+path) || strings.HasPrefix(path, e.Key+".") {
				return e.Message
			}
		}
	}
	return err.Error()
}

// pointLabel names a point: router.decay=0.5 router.rate=1.
func pointLabel(sets []sweptSetting, p tunePoint) string {
	parts := make([]string, len(sets))
	for i, s := range sets {
		parts[i] = s.flag + "=" + s.text[p[i]]
	}
	return strings.Join(parts, " ")
}

// tuneReport is what policy tune prints and --json writes.
type tuneReport struct {
	Trace     sim.TraceInfo `json:"trace"`
	Objective string        `json:"objective"`
	// MaxP95 is --max-p95 in seconds; absent without one.
	MaxP95 float64     `json:"max_p95_s,omitempty"`
	Sweep  []tuneSweep `json:"sweep"`
	// Points are the points of the grid, best first.
	Points []tuneResult `json:"points"`
	// Best is the first point's settings, as the YAML to paste into the
	// configuration.
	Best      string         `json:"best_yaml"`
	Bounds    *sim.ColdLoads `json:"bounds,omitempty"`
	LoadBound *sim.LoadBound `json:"load_bound,omitempty"`
	// SequenceGap is simulate's sequence_gap_s: with --sequence, the
	// seconds between the replay's arrivals.
	SequenceGap float64 `json:"sequence_gap_s,omitempty"`
	sets        []sweptSetting
	report      *sim.Report
}

// tuneSweep is one swept setting and its values.
type tuneSweep struct {
	Setting string            `json:"setting"`
	Values  []json.RawMessage `json:"values"`
}

// tuneResult is one point's settings and figures.
type tuneResult struct {
	Rank     int                        `json:"rank"`
	Settings map[string]json.RawMessage `json:"settings"`
	// LoadS is the run's cold loads weighted by each model's load time,
	// seconds.
	LoadS float64 `json:"load_s"`
	// OverMaxP95 is whether the run's p95 queueing delay is above
	// --max-p95: it ranks below every point within it.
	OverMaxP95 bool `json:"over_max_p95,omitempty"`
	// RatioToBound is as simulate's ratios_to_bound; absent where no bound
	// applies.
	RatioToBound *float64    `json:"ratio_to_bound,omitempty"`
	Run          *sim.Result `json:"run"`
	point        tunePoint
	index        int
}

// newTuneReport ranks the runs of the grid by o's objective.
func newTuneReport(in *replayInputs, o tuneOptions, sets []sweptSetting, grid []tunePoint, jobs []replayJob, runs []*sim.Result) *tuneReport {
	rep := in.report(o.tracePath)
	rep.Runs = runs
	t := &tuneReport{Trace: rep.Trace, Objective: o.objective, MaxP95: o.maxP95.Seconds(), Bounds: rep.Bounds, LoadBound: rep.LoadBound, SequenceGap: rep.SequenceGap, sets: sets, report: rep}
	for _, s := range sets {
		t.Sweep = append(t.Sweep, tuneSweep{Setting: s.flag, Values: s.values})
	}
	for i, run := range runs {
		r := tuneResult{Settings: map[string]json.RawMessage{}, LoadS: sim.LoadSeconds(run, in.models), Run: run, point: grid[i], index: i}
		for j, s := range sets {
			r.Settings[s.flag] = s.values[grid[i][j]]
		}
		if x, _, ok := rep.RatioToBound(run); ok {
			r.RatioToBound = &x
		}
		r.OverMaxP95 = t.MaxP95 > 0 && run.QueueWait.P95 > t.MaxP95
		t.Points = append(t.Points, r)
	}
	figures := map[string]func(r tuneResult) float64{
		"cold-loads":   func(r tuneResult) float64 { return float64(r.Run.ColdLoads) },
		"load-seconds": func(r tuneResult) float64 { return r.LoadS },
		"p95-wait":     func(r tuneResult) float64 { return r.Run.QueueWait.P95 },
	}
	order := append([]string{o.objective}, slices.DeleteFunc(slices.Clone(tuneObjectives), func(s string) bool { return s == o.objective })...)
	slices.SortStableFunc(t.Points, func(a, b tuneResult) int {
		// A point whose policy failed measured its fallback in part:
		// below every point whose policy did not.
		if a.Run.Fallback != b.Run.Fallback {
			if a.Run.Fallback {
				return 1
			}
			return -1
		}
		if c := cmp.Compare(a.Run.Errors, b.Run.Errors); c != 0 {
			return c
		}
		if a.OverMaxP95 != b.OverMaxP95 {
			if a.OverMaxP95 {
				return 1
			}
			return -1
		}
		for _, name := range order {
			if c := cmp.Compare(figures[name](a), figures[name](b)); c != 0 {
				return c
			}
		}
		return cmp.Compare(a.index, b.index)
	})
	for i := range t.Points {
		t.Points[i].Rank = i + 1
	}
	t.Best = bestYAML(jobs[t.Points[0].index].cfg, sets)
	return t
}

// bestYAML is the routing: block of cfg for the roles sets sweep: each
// policy with all its settings, as a configuration file writes it.
func bestYAML(cfg *config.Config, sets []sweptSetting) string {
	routing := &yaml.Node{Kind: yaml.MappingNode}
	for _, role := range []string{"scheduler", "router"} {
		if !slices.ContainsFunc(sets, func(s sweptSetting) bool { return s.role == role }) {
			continue
		}
		p := cfg.Routing.Router
		if role == "scheduler" {
			p = cfg.Routing.Scheduler
		}
		node := &yaml.Node{Kind: yaml.MappingNode}
		if p.Wasm != "" {
			node.Content = append(node.Content, scalar("wasm"), scalar(p.Wasm))
		} else {
			node.Content = append(node.Content, scalar("use"), scalar(p.Use))
		}
		raw := []byte(p.Settings)
		if len(raw) == 0 {
			raw = []byte("{}")
		}
		var settings yaml.Node
		if err := yaml.Unmarshal(raw, &settings); err == nil && len(settings.Content) == 1 {
			block(settings.Content[0])
			node.Content = append(node.Content, scalar("settings"), settings.Content[0])
		}
		routing.Content = append(routing.Content, scalar(role), node)
	}
	doc := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{scalar("routing"), routing}}
	var b strings.Builder
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return err.Error()
	}
	return b.String()
}

// scalar is a YAML string node.
func scalar(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

// block turns n, read from JSON (flow mappings, quoted strings), into
// block style, as a configuration file is written.
func block(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		block(c)
	}
}

// print writes the ranking as a table, and the best settings.
func (t *tuneReport) print(w io.Writer) {
	fmt.Fprintf(w, "trace %s: %d requests, %d models, %.0f s\n", t.Trace.File, t.Trace.Requests, t.Trace.Models, t.Trace.Duration)
	run := t.Points[0].Run
	within := ""
	if t.MaxP95 > 0 {
		within = ", then a p95 wait within " + sim.FormatSeconds(t.MaxP95)
	}
	fmt.Fprintf(w, "%s + %s: %d points, ranked by %s (fewest errors first%s)\n\n", sim.PolicyLabel(run.Scheduler), sim.PolicyLabel(run.Router), len(t.Points), t.Objective, within)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := []string{"rank"}
	for _, s := range t.sets {
		head = append(head, s.flag)
	}
	head = append(head, "errors", "cold loads", "load s", "÷ bound", "wait p50", "p95", "p99", "TTFT p95", "wall")
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	var failed []string
	for _, p := range t.Points {
		row := []string{fmt.Sprint(p.Rank)}
		if p.Run.Fallback {
			row[0] += " *"
			failed = append(failed, fmt.Sprintf("* rank %d (%s): a policy failed during the replay (%d failed calls); the figures are partly its fallback's",
				p.Rank, pointLabel(t.sets, p.point), p.Run.PolicyFailures))
		}
		for i, s := range t.sets {
			row = append(row, s.text[p.point[i]])
		}
		ratio := "–"
		if p.RatioToBound != nil {
			ratio = fmt.Sprintf("%.2f", *p.RatioToBound)
		}
		r := p.Run
		row = append(row, fmt.Sprint(r.Errors), fmt.Sprint(r.ColdLoads), fmt.Sprintf("%.0f", p.LoadS), ratio,
			sim.FormatSeconds(r.QueueWait.P50), sim.FormatSeconds(r.QueueWait.P95), sim.FormatSeconds(r.QueueWait.P99),
			sim.FormatSeconds(r.TTFT.P95), fmt.Sprintf("%.1fs", r.WallS))
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	tw.Flush()
	if len(failed) > 0 {
		fmt.Fprintf(w, "\n%s\n", strings.Join(failed, "\n"))
	}
	if t.same() {
		fmt.Fprintf(w, "\nevery point gave the same figures: the policy may not read these settings, or they make no difference on this trace\n")
	}
	if t.Bounds == nil && t.LoadBound != nil {
		fmt.Fprintln(w)
	}
	if over := t.over(); over > 0 {
		fmt.Fprintf(w, "\n%d of %d points have a p95 wait above --max-p95 %s and rank below the rest", over, len(t.Points), sim.FormatSeconds(t.MaxP95))
		if over == len(t.Points) {
			fmt.Fprint(w, ": none is within it, the best is over it too")
		}
		fmt.Fprintln(w)
	}
	printBounds(w, t.report)
	if t.Points[0].Run.Fallback {
		fmt.Fprintf(w, "\nthe policy failed at every point: the figures are partly its fallback's, and the best below is no fit\n")
	}
	fmt.Fprintf(w, "\nbest: %s\n%s", pointLabel(t.sets, t.Points[0].point), t.Best)
}

// over is how many points have a p95 wait above --max-p95.
func (t *tuneReport) over() int {
	n := 0
	for _, p := range t.Points {
		if p.OverMaxP95 {
			n++
		}
	}
	return n
}

// same reports whether every point's figures are the same (wall time
// aside).
func (t *tuneReport) same() bool {
	if len(t.Points) < 2 {
		return false
	}
	key := func(r *sim.Result) string {
		c := *r
		c.WallS = 0
		b, _ := json.Marshal(c)
		return string(b)
	}
	first := key(t.Points[0].Run)
	for _, p := range t.Points[1:] {
		if key(p.Run) != first {
			return false
		}
	}
	return true
}
