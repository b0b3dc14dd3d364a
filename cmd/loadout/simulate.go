package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	simbackend "github.com/loadout-dev/loadout/backends/sim"
	"github.com/loadout-dev/loadout/host/backend"
	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/host/gpu"
	"github.com/loadout-dev/loadout/host/policy"
	"github.com/loadout-dev/loadout/host/proxy"
	"github.com/loadout-dev/loadout/host/router"
	"github.com/loadout-dev/loadout/host/sim"
	"github.com/loadout-dev/loadout/policies/builtin"
	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/settings"
)

type simulateOptions struct {
	config    configSource // --config, --config-dir
	tracePath string
	scheduler string
	router    string
	compare   []string
	jsonPath  string
	htmlPath  string
	gpus      []string
	slots     int
	logLevel  string
	perModel  bool
	rate      float64
	// sequence replays the trace's model sequence one request at a time
	// (sim.Sequence), TTLs off: the anchors' terms.
	sequence bool
	// workers is how many replays run at once; 0: one per core
	// (GOMAXPROCS). Tests set 1 to compare a serial run.
	workers int
	// runtime is each replay's policy runtime's options beyond its clock
	// and logger (policy tune's --cache-dir, --memory-pages, --timeout); a
	// zero CallTimeout is sim.PolicyCallTimeout.
	runtime policy.Options
}

func newSimulateCmd() *cobra.Command {
	var o simulateOptions
	cmd := &cobra.Command{
		Use:   "simulate --config FILE --trace FILE.csv [--compare router=a,b]",
		Short: "Replay a request trace in virtual time through the real run loop and policies",
		Long: `Replay a request trace through Loadout's run loop and the configured scheduler
and router policies — the same Wasm modules and code paths as serve — with
model servers simulated in virtual time: load time, VRAM, prefill, decode
speed and continuous batching (the sim backend's timing model, package
backends/sim/decode). A trace of an hour replays in seconds, and the same
inputs give the same figures.

The trace is CSV with a header: arrival_s,model,prompt_tokens,output_tokens
and optionally priority,client (serve --record-trace writes one); other
columns are skipped, and the replay starts at the first arrival. Models
may be named by id or alias.

A model of backend sim is simulated by its options; any other needs a
simulate: block in the configuration with the same keys (load_time,
tokens_per_second, ttft, prefill_tokens_per_second, max_batch, vram). VRAM
comes from the model's vram:, else the block or options, else its
backend's estimate. GPUs are the configuration's gpus: (or --gpu); the
machine's own are never read. --slots K replaces the configuration with
a box of K equal slots made for the trace (every model it names a
12 GiB sim model loading in 10 s).

Policies: --scheduler and --router replace the configuration's (a built-in
name or a .wasm file); --compare router=a,b,c.wasm (and scheduler=…, or
router=all for every built-in router) replays the trace under each and
prints one table. Beside it, when every model needs the same VRAM (K
equal slots), the cold loads of Belady's offline optimum and of the
classical online rules (LRU, decayed LFU, LRU-2, ARC, S3-FIFO, SIEVE,
LeCaR, GDSF) on the trace's model sequence, served in arrival order; when
models differ in size or load time, a lower bound on the load seconds
(Berger et al.'s flow relaxation) and a feasible schedule above it. Each
run's "÷ bound" is its cost over the bound. --sequence replays the trace on
the anchors' terms instead: its model sequence one request at a time, each
arriving once the one before has finished, TTLs off — so each router's
cold loads compare with the anchors' exactly (the LRU router makes LRU's),
and the difference from the plain replay is what the run loop's timing
costs (a victim still loading, requests that overlap).

Speed: built-in policies run without wazero's loop checks in a replay
(they are this repository's tested code, and the checks cost a Go policy
two to four times its run time); a .wasm policy runs with them, so one
that loops is stopped at its deadline and the replay goes on under the
fallback. --trust-policies runs .wasm policies without them too.

Sleeping models: with hostMemory: SIZE in the configuration (the simulated
box's host memory; auto means none here), an evicted model whose backend
can sleep (sim: wake_time) is put to sleep instead of stopped, as serve
does, and the next request for it wakes it. --compare evict=stop,sleep
replays the trace with every model's evict: set to each; the table shows
cold loads, wakes and swap seconds (the time requests waited on loads and
wakes).`,
		Example: `  loadout simulate --config loadout.yaml --trace testdata/traces/conv-zipf8-5m.csv
  loadout simulate -c loadout.yaml -t traffic.csv --compare router=all --json out.json --html out.html
  loadout simulate -c loadout.yaml -t traffic.csv --compare router=prioritylru,./mine.wasm
  loadout simulate -c testdata/simulate/sleep.yaml -t testdata/traces/prod-sample.csv --compare evict=stop,auto
  loadout simulate -c testdata/simulate/prod-sample.yaml -t testdata/traces/prod-sample.csv --sequence --compare router=all`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSimulate(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	o.config.addFlags(cmd)
	f.StringVarP(&o.tracePath, "trace", "t", "", "request trace (CSV: arrival_s,model,prompt_tokens,output_tokens[,priority,client])")
	f.StringVar(&o.scheduler, "scheduler", "", "scheduler policy instead of the configuration's: a built-in name or a .wasm file")
	f.StringVar(&o.router, "router", "", "router policy instead of the configuration's: a built-in name or a .wasm file")
	f.StringArrayVar(&o.compare, "compare", nil, "replay under each policy: router=a,b,c.wasm or scheduler=a,b (all: every built-in of the role, e.g. router=all,./mine.wasm), or each evict: (evict=stop,sleep,sleep2,auto); repeat to combine")
	f.StringVar(&o.jsonPath, "json", "", "write the results as JSON to this file")
	f.StringVar(&o.htmlPath, "html", "", "write a self-contained HTML report (GPU memory timeline, queue, swaps) to this file")
	f.StringArrayVar(&o.gpus, "gpu", nil, "a simulated GPU of this size (e.g. 24GiB), instead of the configuration's gpus:; repeat for more")
	positiveIntVar(f, &o.slots, "slots", 0, slotsUsage)
	f.Float64Var(&o.rate, "rate", 1, "replay the trace at this multiple of its request rate (arrival times divided by it): 2 is twice the traffic, 0.1 a tenth")
	f.BoolVar(&o.sequence, "sequence", false, sequenceUsage)
	f.BoolVar(&o.runtime.Trusted, "trust-policies", false, trustUsage)
	f.BoolVar(&o.perModel, "per-model", false, "also print each model's requests, cold loads and queue wait, per run")
	f.StringVar(&o.logLevel, "log-level", "", "log the run loop and policies at this level (debug, info, warn, error); default: quiet")
	_ = cmd.MarkFlagRequired("trace")
	return cmd
}

// trustUsage is the help of --trust-policies (simulate, policy tune).
const trustUsage = "run .wasm policies without the loop checks too, as the built-in ones always run in a replay: two to four times faster, but a policy that loops hangs the replay instead of being stopped at its deadline (an overrun that ends is still caught)"

// sequenceUsage is the help of --sequence (simulate, policy tune).
const sequenceUsage = "replay the trace's model sequence one request at a time (each arrives once the one before has finished, with one output token; TTLs off): the terms the anchors and Belady's optimum are computed on, so each router's cold loads compare with theirs exactly (the LRU router makes LRU's)"

// slotsUsage is the help of --slots (simulate, policy tune).
const slotsUsage = "replay on a box of this many equal slots made for the trace, instead of --config: every model the trace names a 12 GiB sim model loading in 10 s (80 tokens/s), routed by prioritylru"

// policyPair is one scheduler and router to replay under; "" keeps the
// configuration's.
// policyPair is one replay of a comparison: a scheduler, a router, and
// an evict: for every model ("" keeps the configuration's).
type policyPair struct{ scheduler, router, evict string }

// runSimulate replays the trace under each policy pair and writes the
// report to out; warnings (columns of the trace it skips) go to warn.
func runSimulate(ctx context.Context, o simulateOptions, out, warn io.Writer) (err error) {
	pairs, err := policyPairs(o)
	if err != nil {
		return err
	}
	outputs, err := createOutputs(o)
	if err != nil {
		return err
	}
	defer closeOutputs(outputs, &err)
	in, err := loadReplayInputs(ctx, o, warn)
	if err != nil {
		return err
	}
	report := in.report(o.tracePath)
	jobs := make([]replayJob, len(pairs))
	for i, p := range pairs {
		jobs[i] = replayJob{cfg: in.cfg, pair: p}
	}
	if report.Runs, err = in.replayAll(ctx, o, jobs); err != nil {
		return err
	}

	printSimReport(out, report, o.perModel)
	return writeOutputs(outputs, report)
}

// writeOutputs writes report to the --json and --html files of
// createOutputs and closes them. Errors name the flag and the file.
func writeOutputs(outputs map[string]*os.File, report *sim.Report) error {
	var errs []error
	for flag, f := range outputs {
		write := report.WriteJSON
		if flag == "--html" {
			write = report.WriteHTML
		}
		if werr := write(f); werr != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", flag, f.Name(), werr))
		}
		if cerr := f.Close(); cerr != nil && !errors.Is(cerr, os.ErrClosed) {
			errs = append(errs, fmt.Errorf("%s %s: %w", flag, f.Name(), cerr))
		}
	}
	return errors.Join(errs...)
}

// replayInputs is what every replay of one simulate (or policy tune) run
// shares, read-only: the configuration, the trace (scaled by --rate), the
// simulated GPUs and how each model is simulated.
type replayInputs struct {
	cfg     *config.Config
	trace   []sim.Request // what is replayed
	devices []gpu.DeclaredDevice
	models  map[string]sim.Model
	// bounded is the trace the report describes and bounds: trace, or
	// with --sequence the trace as read (scaled by --rate).
	bounded []sim.Request
	// sequenceGap is --sequence's seconds between arrivals; 0 without it.
	sequenceGap float64
}

// loadReplayInputs reads o's configuration and trace and works out the
// GPUs and models to simulate; warnings (columns of the trace it skips)
// go to warn. Errors: the configuration's, the trace's (file:line), a bad
// --rate, --gpu or --log-level.
func loadReplayInputs(ctx context.Context, o simulateOptions, warn io.Writer) (*replayInputs, error) {
	cfg, err := replayConfig(ctx, o)
	if err != nil {
		return nil, err
	}
	trace, err := readTrace(o.tracePath, cfg, warn)
	if err != nil {
		return nil, err
	}
	if err := sim.Scale(trace, o.rate); err != nil {
		return nil, fmt.Errorf("--rate: %w", err)
	}
	devices, err := simulatedGPUs(cfg, o.gpus)
	if err != nil {
		return nil, err
	}
	if o.logLevel != "" {
		if _, err := newLoggerAt(o.logLevel, &sim.Clock{}); err != nil {
			return nil, err
		}
	}
	models, err := simulatedModels(ctx, cfg, len(devices) > 0, simLogger(o, &sim.Clock{}))
	if err != nil {
		return nil, err
	}
	in := &replayInputs{cfg: cfg, trace: trace, devices: devices, models: models, bounded: trace}
	if o.sequence {
		if in.trace, in.sequenceGap, err = sim.Sequence(trace, models); err != nil {
			return nil, fmt.Errorf("--sequence: %w", err)
		}
		for name, m := range models {
			m.Config.TTL = 0 // the anchors have no TTL
			models[name] = m
		}
	}
	return in, nil
}

// replayConfig is the configuration to replay on: --config's (else the
// embedded example), or with --slots a box of equal slots for the models
// the trace names (sim.SlotsConfig). Errors: the configuration's, the
// trace's, --slots with --config or below 1.
func replayConfig(ctx context.Context, o simulateOptions) (*config.Config, error) {
	if o.slots == 0 {
		cfg, _, err := loadConfig(ctx, o.config, defaultListen, routerModeOptions{})
		return cfg, err
	}
	if o.config.path != "" || o.config.dir != "" {
		return nil, errors.New("--slots makes the box for the trace: give --slots or --config, not both")
	}
	f, err := os.Open(o.tracePath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t, err := sim.ParseTrace(o.tracePath, f)
	if err != nil {
		return nil, err
	}
	var names []string
	seen := map[string]bool{}
	for _, r := range t.Requests {
		if !seen[r.Model] {
			seen[r.Model] = true
			names = append(names, r.Model)
		}
	}
	box, err := sim.SlotsConfig(names, o.slots)
	if err != nil {
		return nil, fmt.Errorf("--slots %d: %w", o.slots, err)
	}
	cfg, _, err := config.ParseWith(fmt.Sprintf("the --slots %d box", o.slots), box, hostOptions(defaultListen))
	return cfg, err
}

// report is a report on the trace read from file, with its offline
// bounds and no runs yet.
func (in *replayInputs) report(file string) *sim.Report {
	r := &sim.Report{Trace: sim.Describe(file, in.bounded), SequenceGap: in.sequenceGap}
	r.Bounds, r.LoadBound = sim.BoxBounds(in.bounded, in.models, deviceMemory(in.devices))
	return r
}

// replayJob is one replay of the trace: a configuration (the inputs' own,
// or one with other policy settings) and the policies to replace its own
// with (policyPair; "" keeps them).
type replayJob struct {
	cfg  *config.Config
	pair policyPair
}

// replayAll replays the trace once per job and returns the results in the
// jobs' order. Each replay has its own virtual clock and policy runtime,
// so the jobs replay in parallel, one per core, each exactly as it would
// alone (sim.Run reads nothing another run moves; the inputs are shared
// read-only). With --log-level they replay one after another, so the log
// reads in order. Errors: every job's that failed, joined.
func (in *replayInputs) replayAll(ctx context.Context, o simulateOptions, jobs []replayJob) ([]*sim.Result, error) {
	runs, errs := in.replayEach(ctx, o, jobs)
	return runs, errors.Join(errs...)
}

// replayEach is replayAll with each job's error in the jobs' order (nil
// where it replayed).
func (in *replayInputs) replayEach(ctx context.Context, o simulateOptions, jobs []replayJob) ([]*sim.Result, []error) {
	workers := runtime.GOMAXPROCS(0)
	if o.workers > 0 {
		workers = o.workers
	}
	if o.logLevel != "" {
		workers = 1
	}
	runs := make([]*sim.Result, len(jobs))
	errs := make([]error, len(jobs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, len(jobs)) {
		wg.Go(func() {
			for i := range next {
				runs[i], errs[i] = replayPair(ctx, o, jobs[i].cfg, jobs[i].pair, in.trace, in.models, in.devices)
			}
		})
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	return runs, errs
}

// closeOutputs closes the files createOutputs made and, when *err is set
// (the command failed), removes them: nothing was written to them.
func closeOutputs(outputs map[string]*os.File, err *error) {
	for _, f := range outputs {
		f.Close()
		if *err != nil {
			os.Remove(f.Name())
		}
	}
}

// createOutputs creates the --json and --html files before the replay,
// so that a path that cannot be written fails at once rather than after
// a long replay, by flag. Errors name the flag; what it created before
// one failed is removed.
func createOutputs(o simulateOptions) (map[string]*os.File, error) {
	out := map[string]*os.File{}
	for _, p := range []struct{ flag, path string }{{"--json", o.jsonPath}, {"--html", o.htmlPath}} {
		if p.path == "" {
			continue
		}
		f, err := os.Create(p.path)
		if err != nil {
			for _, g := range out {
				g.Close()
				os.Remove(g.Name())
			}
			return nil, fmt.Errorf("%s: %w", p.flag, err)
		}
		out[p.flag] = f
	}
	return out, nil
}

// readTrace reads the trace at path and resolves its model names (ids or
// aliases) against cfg; the columns it skips are named on warn. Errors
// name the file and line.
func readTrace(path string, cfg *config.Config, warn io.Writer) ([]sim.Request, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t, err := sim.ParseTrace(path, f)
	if err != nil {
		return nil, err
	}
	if len(t.Ignored) > 0 {
		fmt.Fprintf(warn, "%s: skipping column(s) outside the trace format: %s\n", path, strings.Join(t.Ignored, ", "))
	}
	trace := t.Requests
	var errs []error
	for i := range trace {
		id, ok := cfg.ResolveModel(trace[i].Model)
		if !ok {
			if len(errs) < 10 {
				errs = append(errs, &sim.TraceError{File: path, Line: t.Lines[i], Column: sim.ColModel,
					Msg: fmt.Sprintf("unknown model %q (the configuration has %s)", trace[i].Model, strings.Join(cfg.ServedIDs(), ", "))})
			}
			continue
		}
		trace[i].Model = id
	}
	return trace, errors.Join(errs...)
}

// policyPairs is every scheduler × router to replay under, from
// --scheduler, --router and --compare.
// distinctLabels returns names (the policies of --compare flag c, each
// once: expandAll) unless two of them would be shown alike in the report
// (sim.PolicyLabel: a/mine.wasm and b/mine.wasm), whose rows could not
// be told apart.
func distinctLabels(c string, names []string) ([]string, error) {
	seen := map[string]string{}
	for _, n := range names {
		label := sim.PolicyLabel(n)
		if prev, ok := seen[label]; ok {
			return nil, fmt.Errorf("--compare %q: %s and %s would both be shown as %q; give one of them another file name", c, prev, n, label)
		}
		seen[label] = n
	}
	return names, nil
}

func policyPairs(o simulateOptions) ([]policyPair, error) {
	scheds, routers, evicts := []string{o.scheduler}, []string{o.router}, []string{""}
	for _, c := range o.compare {
		role, list, ok := strings.Cut(c, "=")
		var names []string
		for n := range strings.SplitSeq(list, ",") {
			if n = strings.TrimSpace(n); n != "" {
				names = append(names, n)
			}
		}
		if !ok || len(names) == 0 {
			return nil, fmt.Errorf("--compare %q: want router=NAME,…, scheduler=NAME,… or evict=MODE,…", c)
		}
		var err error
		switch role {
		case "router":
			routers, err = distinctLabels(c, expandAll(names, builtin.Routers()))
		case "scheduler":
			scheds, err = distinctLabels(c, expandAll(names, builtin.Schedulers()))
		case "evict":
			for _, n := range names {
				if _, err := config.ParseEvict(n); err != nil {
					return nil, fmt.Errorf("--compare %q: %w", c, err)
				}
			}
			evicts = names
		default:
			return nil, fmt.Errorf("--compare %q: %q is not router, scheduler or evict", c, role)
		}
		if err != nil {
			return nil, err
		}
	}
	var out []policyPair
	for _, s := range scheds {
		for _, r := range routers {
			for _, e := range evicts {
				out = append(out, policyPair{scheduler: s, router: r, evict: e})
			}
		}
	}
	return out, nil
}

// expandAll is names with "all" replaced by every built-in of the role
// (builtins), in place, so "all,./mine.wasm" compares a module with every
// built-in; a name already in the list is not run twice.
func expandAll(names, builtins []string) []string {
	var out []string
	for _, n := range names {
		add := []string{n}
		if n == "all" {
			add = builtins
		}
		for _, a := range add {
			if !slices.ContainsFunc(out, func(o string) bool { return filepath.Clean(o) == filepath.Clean(a) }) {
				out = append(out, a) // a name given twice (./m.wasm, m.wasm; all and foresight) once
			}
		}
	}
	return out
}

// withPolicies is cfg with p's policies in place of its own: a built-in
// name, or a path to a .wasm file. A policy replaced by another gets no
// settings (the built-in group router reads the configuration's groups).
func withPolicies(cfg *config.Config, p policyPair) (*config.Config, error) {
	c := *cfg
	var err error
	if c.Routing.Scheduler, err = policyFlag(cfg.Routing.Scheduler, p.scheduler, "scheduler", builtin.Schedulers()); err != nil {
		return nil, err
	}
	if c.Routing.Router, err = policyFlag(cfg.Routing.Router, p.router, "router", builtin.Routers()); err != nil {
		return nil, err
	}
	return &c, nil
}

func policyFlag(configured config.Policy, flag, role string, builtins []string) (config.Policy, error) {
	switch {
	case flag == "" || flag == configured.Use || (configured.Wasm != "" && flag == configured.Wasm):
		return configured, nil
	case strings.HasSuffix(flag, ".wasm") || strings.ContainsRune(flag, os.PathSeparator):
		abs, err := filepath.Abs(flag)
		if err != nil {
			return config.Policy{}, err
		}
		return config.Policy{Wasm: abs}, nil
	case slices.Contains(builtins, flag):
		return config.Policy{Use: flag}, nil
	default:
		return config.Policy{}, fmt.Errorf("%s %q: not a built-in %s (%s) nor a .wasm file", role, flag, role, strings.Join(builtins, ", "))
	}
}

// simulatedGPUs are the devices a replay accounts VRAM on: --gpu sizes,
// else the configuration's gpus:.
func simulatedGPUs(cfg *config.Config, flags []string) ([]gpu.DeclaredDevice, error) {
	var out []gpu.DeclaredDevice
	for i, f := range flags {
		n, err := settings.ParseSize(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("--gpu %q: want a size such as 24GiB", f)
		}
		out = append(out, gpu.DeclaredDevice{Name: fmt.Sprintf("sim%d", i), Memory: uint64(n)})
	}
	if len(out) > 0 {
		return out, nil
	}
	for _, g := range cfg.GPUs {
		out = append(out, gpu.DeclaredDevice{Name: g.Name, Memory: uint64(max(g.Memory, 0))})
	}
	return out, nil
}

// simulatedModels is how the replay simulates each configured model: the sim
// backend's options, or the model's simulate: block (which wins), parsed
// by the sim backend's own option parser. VRAM: the model's vram:, else
// the block's or options' vram, else (with GPUs) its backend's estimate.
// Errors are configuration errors at file:line, all at once.
func simulatedModels(ctx context.Context, cfg *config.Config, gpus bool, log *slog.Logger) (map[string]sim.Model, error) {
	launchers := map[string]*backend.PluginLauncher{}
	defer func() {
		for _, l := range launchers {
			l.Close()
		}
	}()
	out := map[string]sim.Model{}
	var errs config.Errors
	for _, id := range cfg.ModelIDs() {
		m := cfg.Models[id]
		raw, err := m.SimulateJSON()
		if err != nil {
			return nil, err
		}
		problem := m.SimulateError
		if raw == nil && m.Backend == config.BackendSim {
			if raw, err = m.OptionsJSON(); err != nil {
				return nil, err
			}
			problem = m.OptionError
		}
		if raw == nil {
			errs = append(errs, m.SimulateError("", fmt.Sprintf("a model of backend %s needs a simulate: block to be simulated (load_time, tokens_per_second; optional ttft, prefill_tokens_per_second, max_batch, vram)", m.Backend)))
			continue
		}
		opts, problems := simbackend.ParseOptions(raw)
		for _, p := range problems {
			errs = append(errs, problem(p.Option, p.Message))
		}
		if problems != nil {
			continue
		}
		vram := uint64(max(m.VRAM, 0))
		if vram == 0 {
			vram = uint64(max(opts.VRAM, 0))
		}
		if vram == 0 && gpus && m.Backend != config.BackendSim {
			launcher, err := backendLauncher(launchers, m.Backend, log)
			if err != nil {
				return nil, fmt.Errorf("model %s: %w", id, err)
			}
			spec, err := modelSpec(cfg, m)
			if err != nil {
				return nil, fmt.Errorf("model %s: %w", id, err)
			}
			vram = backendEstimate(ctx, launcher, spec, log)
		}
		mc := modelConfig(cfg, m, vram)
		wake2 := opts.WakeTimeLevel2
		if wake2 == 0 {
			wake2 = opts.LoadTime // the sim server's default: a level-2 wake reads the weights again
		}
		mc.LoadTime, mc.WakeTime = opts.LoadTime, [2]time.Duration{opts.WakeTime, wake2}
		if opts.HostBytes > 0 {
			mc.SleepOverhead = uint64(opts.HostBytes)
		}
		out[id] = sim.Model{Config: mc, Load: opts.LoadTime, Decode: opts.Decode(), Wake: mc.WakeTime}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
}

// deviceMemory is each device's memory, bytes.
func deviceMemory(devices []gpu.DeclaredDevice) []uint64 {
	out := make([]uint64, len(devices))
	for i, d := range devices {
		out[i] = d.Memory
	}
	return out
}

// printSimReport writes the runs as one table, and the bounds under it.
func printSimReport(w io.Writer, r *sim.Report, perModel bool) {
	fmt.Fprintf(w, "trace %s: %d requests, %d models, %.0f s\n\n", r.Trace.File, r.Trace.Requests, r.Trace.Models, r.Trace.Duration)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scheduler\trouter\tcompleted\terrors\tcold loads\twakes\tswap s\tevictions\t÷ bound\twait p50\tp95\tp99\tworst model p95\tTTFT p50\tp95\te2e p95\tGPU busy\twall\t")
	for _, run := range r.Runs {
		mark := ""
		if run.Fallback {
			mark = " *"
		}
		worst := ""
		if name, mr, ok := run.WorstModel(); ok {
			worst = fmt.Sprintf("%s (%s)", sim.FormatSeconds(mr.QueueWait.P95), name)
		}
		ratio := "–"
		if x, _, ok := r.RatioToBound(run); ok {
			ratio = fmt.Sprintf("%.2f", x)
		}
		router := sim.PolicyLabel(run.Router) + sim.EvictLabel(run.Evict)
		fmt.Fprintf(tw, "%s\t%s%s\t%d\t%d\t%d\t%d\t%.0f\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f%%\t%.1fs\t\n",
			sim.PolicyLabel(run.Scheduler), router, mark, run.Completed, run.Errors, run.ColdLoads, run.Wakes, run.SwapS, run.Evictions, ratio,
			sim.FormatSeconds(run.QueueWait.P50), sim.FormatSeconds(run.QueueWait.P95), sim.FormatSeconds(run.QueueWait.P99), worst,
			sim.FormatSeconds(run.TTFT.P50), sim.FormatSeconds(run.TTFT.P95), sim.FormatSeconds(run.E2E.P95), 100*run.GPUBusyFraction, run.WallS)
	}
	tw.Flush()
	for _, run := range r.Runs {
		if run.Fallback {
			fmt.Fprintf(w, "\n* %s + %s: a policy failed during the replay (%d failed calls); the figures are partly its fallback's:\n",
				sim.PolicyLabel(run.Scheduler), sim.PolicyLabel(run.Router), run.PolicyFailures)
			for _, e := range run.PolicyEvents {
				fmt.Fprintf(w, "    %s\n", e)
			}
		}
		if len(run.ErrorsByCode) > 0 {
			b, _ := json.Marshal(run.ErrorsByCode)
			fmt.Fprintf(w, "errors of %s + %s by code: %s\n", sim.PolicyLabel(run.Scheduler), sim.PolicyLabel(run.Router), b)
		}
	}
	if perModel {
		for _, run := range r.Runs {
			fmt.Fprintf(w, "\n%s + %s, per model:\n", sim.PolicyLabel(run.Scheduler), sim.PolicyLabel(run.Router))
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "model\trequests\tcompleted\terrors\tcold loads\twait p50\tp95\tp99\t")
			names := slices.Sorted(maps.Keys(run.Models))
			for _, name := range names {
				mr := run.Models[name]
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t\n", name, mr.Requests, mr.Completed, mr.Errors, mr.ColdLoads,
					sim.FormatSeconds(mr.QueueWait.P50), sim.FormatSeconds(mr.QueueWait.P95), sim.FormatSeconds(mr.QueueWait.P99))
			}
			tw.Flush()
		}
	}
	printBounds(w, r)
}

// printBounds writes the trace's offline bounds and the classical anchors
// under the table, and what "÷ bound" divides by.
func printBounds(w io.Writer, r *sim.Report) {
	if r.SequenceGap > 0 {
		fmt.Fprintf(w, "\nsequence replay: the trace's model sequence one request at a time, %s apart, one output token each, TTLs off (waits are load times)\n", sim.FormatSeconds(r.SequenceGap))
	}
	if b := r.Bounds; b != nil {
		fmt.Fprintf(w, "\ncold-load limits for %d equal slots, requests served in arrival order: LRU %d, Belady's optimum %d\n",
			b.Slots, b.LRU, b.Belady)
		var parts []string
		for _, a := range b.Anchors {
			parts = append(parts, fmt.Sprintf("%s %d (%s)", a.Name, a.ColdLoads, sim.FormatSeconds(a.LoadS)))
		}
		fmt.Fprintf(w, "classical anchors, cold loads (load time): %s\n", strings.Join(parts, ", "))
		if r.SequenceGap == 0 {
			var routers, rules []string
			for _, a := range sim.AnchorRouters {
				routers, rules = append(routers, a.Router), append(rules, a.Anchor)
			}
			fmt.Fprintf(w, "(limits and anchors load in no time and never find a victim busy: --sequence replays a router on their terms; routers %s are the %s anchors' rules on the loop's)\n",
				strings.Join(routers, ", "), strings.Join(rules, ", "))
		}
	}
	if lb := r.LoadBound; lb != nil {
		loads := "loads"
		if lb.FeasibleLoads == 1 {
			loads = "load"
		}
		fmt.Fprintf(w, "load-time bounds, requests served in arrival order: at least %s (flow bound, Berger et al. 2018), %s achievable (%d %s, size- and cost-aware Belady)\n",
			sim.FormatSeconds(lb.Lower), sim.FormatSeconds(lb.Feasible), lb.FeasibleLoads, loads)
	}
	if len(r.Runs) > 0 {
		if _, what, ok := r.RatioToBound(r.Runs[0]); ok {
			fmt.Fprintf(w, "÷ bound: a run's %s over the offline bound's\n", what)
		}
	}
}

// simLogger is a replay's logger: quiet, or at --log-level with the
// replay's virtual clock on every line (runSimulate refuses an invalid
// level before any replay).
func simLogger(o simulateOptions, clock *sim.Clock) *slog.Logger {
	if o.logLevel == "" {
		return slog.New(slog.DiscardHandler)
	}
	log, err := newLoggerAt(o.logLevel, clock)
	if err != nil {
		return slog.New(slog.DiscardHandler)
	}
	return log
}

// builtinPolicies reports whether every policy a replay of pc loads is
// built in: its scheduler and router (the fallbacks always are). Such a
// replay's runtime is Trusted (no loop checks, two to four times faster):
// the built-ins are this repository's tested code, and it is an operator's
// .wasm that a replay must be able to stop mid-loop.
func builtinPolicies(pc *config.Config) bool {
	return pc.Routing.Scheduler.Use != "" && pc.Routing.Router.Use != ""
}

// replayPair replays trace under one policy pair with its own virtual
// clock and policy runtime (compiled modules come from the runtime's
// disk cache after the first), and measures the wall time it took.
// Errors: the policies' loading or initialisation, named by the pair.
func replayPair(ctx context.Context, o simulateOptions, cfg *config.Config, p policyPair, trace []sim.Request,
	models map[string]sim.Model, devices []gpu.DeclaredDevice) (*sim.Result, error) {
	clock := &sim.Clock{}
	log := simLogger(o, clock)
	pc, err := withPolicies(cfg, p)
	if err != nil {
		return nil, err
	}
	ro := o.runtime
	ro.Logger, ro.Clock = log, clock.Now
	if ro.CallTimeout <= 0 {
		ro.CallTimeout = sim.PolicyCallTimeout
	}
	if ro.MaxCrashes <= 0 {
		ro.MaxCrashes = sim.PolicyMaxCrashes
	}
	ro.Trusted = ro.Trusted || builtinPolicies(pc)
	rt, err := policy.NewRuntime(ctx, ro)
	if err != nil {
		return nil, err
	}
	defer rt.Close(context.Background())
	ps, err := loadPolicies(ctx, rt, pc)
	if err != nil {
		return nil, err
	}
	ps.backoff = sim.PolicyBackoff
	rc := router.Config{Logger: log}
	if pc.HostMemory > 0 { // auto means this machine's, not the simulated box's: none
		rc.HostMemory = uint64(pc.HostMemory)
	}
	if p.evict != "" {
		e, _ := config.ParseEvict(p.evict) // checked by policyPairs
		if e != config.EvictStop && rc.HostMemory == 0 {
			return nil, fmt.Errorf("--compare evict=%s: the configuration gives no hostMemory: SIZE, so nothing can sleep in a replay", p.evict)
		}
		models = maps.Clone(models)
		for name, m := range models {
			m.Config.Evict = e
			models[name] = m
		}
	}
	if len(devices) > 0 {
		rc.Ledger = gpu.NewLedger(gpu.NewDeclared(devices), 0)
		if err := applyPlacement(pc, rc.Ledger.Inventory(), rc.Ledger); err != nil {
			return nil, err
		}
	}
	ps.routerConfig(ctx, &rc)
	started := time.Now()
	res, err := sim.Run(sim.Setup{Trace: trace, Models: models, Router: rc, Clock: clock,
		CodeName: func(c sdk.ErrorCode) string { _, name := proxy.ClientError(c); return name }})
	if res != nil {
		res.Evict = p.evict
	}
	if err != nil {
		return nil, fmt.Errorf("%s + %s: %w", rc.SchedulerName, rc.SwapperName, err)
	}
	res.WallS = time.Since(started).Seconds()
	return res, nil
}
