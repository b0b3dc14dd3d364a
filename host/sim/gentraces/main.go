// Command gentraces writes the workloads of host/sim (sim.Workloads) under
// testdata/traces from the Azure 2023 traces in shared/traces. Run it from
// the repository's root, with shared/ beside the checkout:
//
//	go generate ./host/sim
//
// With -o it writes one other workload instead, by the same generator
// (sim.Workload): another source, window, mix or seed, e.g. the longer
// workloads of docs/BENCHMARKS.md ("A better policy"), which are too large
// to commit:
//
//	go run ./host/sim/gentraces -source conv -mix zipf -models 8 -seed 3 -window 30m -o conv-zipf8-30m-s3.csv
//
// With -workload it writes a generated production-like workload
// (sim.Productions) and its box: NAME.csv and NAME.yaml (or -o's path and
// the same path ending .yaml); -seed, -drift, -releases and -turns, when
// given, replace its own (sim.Production's Seed, Drift, Releases, Turns):
//
//	go run ./host/sim/gentraces -workload prod-3w
//	loadout simulate -c prod-3w.yaml -t prod-3w.csv --compare router=all
//	go run ./host/sim/gentraces -workload prod-3w -turns 4 -drift 0.3 -o chatty.csv
//
// go generate also writes the small -sample workloads of sim.Productions,
// with their boxes under testdata/simulate.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/loadout-dev/loadout/host/sim"
)

func main() {
	out1 := flag.String("o", "", "write one workload to this file instead of sim.Workloads")
	source := flag.String("source", "conv", "with -o: the Azure trace, conv or code")
	mix := flag.String("mix", sim.MixZipf, "with -o: how models are assigned, zipf, agent or tenants (chat users and agents on one box)")
	models := flag.Int("models", 8, "with -o: how many models, named m1…mN")
	seed := flag.Uint64("seed", 1, "with -o: the mix's seed")
	maxSet := flag.Int("max-set", 3, "with -o and -mix agent or tenants: the largest working set (each burst uses 2 to this many models)")
	shuffle := flag.Bool("shuffle", false, "with -o and -mix agent or tenants: draw each request's model from the burst's set at random instead of cycling through it")
	agents := flag.Int("agents", 2, "with -o and -mix tenants: how many agents")
	chatShare := flag.Float64("chat-share", 0.5, "with -o and -mix tenants: the share of requests from chat users (a Zipf law over the models), in [0, 1]")
	window := flag.Duration("window", 0, "with -o: the source's first window (0: all of it)")
	azure := flag.String("azure", "../shared/traces/azure-llm-2023", "with -o: the Azure traces' directory")
	workload := flag.String("workload", "", "write this generated workload (prod-sample, prod-mixed-sample, prod-3w, prod-mixed-1w, prod-drift-3w, prod-mixed-drift-1w, prod-chat-3w, prod-mixed-chat-1w) and its box")
	drift := flag.Float64("drift", 0, "with -workload: how far popularity moves, the daily standard deviation of each model's log weight (sim.Production.Drift)")
	releases := flag.Int("releases", 0, "with -workload: how many models are released during the trace (sim.Production.Releases)")
	turns := flag.Float64("turns", 0, "with -workload: the mean length of a user's conversation with one model, in requests (sim.Production.Turns; 0 or 1: none)")
	flag.Parse()
	if *workload != "" {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		edit := func(p *sim.Production) error {
			if set["seed"] {
				p.Seed = *seed
			}
			if set["drift"] {
				p.Drift = *drift
			}
			if set["releases"] {
				p.Releases = *releases
			}
			if set["turns"] {
				p.Turns = *turns
			}
			return p.Check()
		}
		if err := production(*workload, *out1, edit); err != nil {
			fmt.Fprintln(os.Stderr, "gentraces:", err)
			os.Exit(1)
		}
		return
	}
	if *out1 != "" {
		if err := one(*azure, *out1, *source, sim.Mix{Kind: *mix, Seed: *seed, MaxSet: *maxSet, Shuffle: *shuffle, Agents: *agents, ChatShare: *chatShare}, *models, *window); err != nil {
			fmt.Fprintln(os.Stderr, "gentraces:", err)
			os.Exit(1)
		}
		return
	}
	azureDir, out := *azure, "testdata/traces"
	if flag.NArg() == 2 {
		azureDir, out = flag.Arg(0), flag.Arg(1)
	}
	for _, w := range sim.Workloads {
		b, err := w.Generate(azureDir)
		if err == nil {
			err = os.WriteFile(filepath.Join(out, w.File), b, 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "gentraces:", err)
			os.Exit(1)
		}
		fmt.Println("wrote", filepath.Join(out, w.File))
	}
	for _, p := range sim.Productions {
		if !strings.HasSuffix(p.Name, "-sample") {
			continue
		}
		if err := writeProduction(p, filepath.Join(out, p.Name+".csv"), filepath.Join(filepath.Dir(out), "simulate", p.Name+".yaml")); err != nil {
			fmt.Fprintln(os.Stderr, "gentraces:", err)
			os.Exit(1)
		}
	}
}

// production writes the named workload to path (NAME.csv when empty) and
// its box beside it, after edit (the flags that replace its settings).
func production(name, path string, edit func(*sim.Production) error) error {
	p, ok := sim.ProductionByName(name)
	if !ok {
		var names []string
		for _, p := range sim.Productions {
			names = append(names, p.Name)
		}
		return fmt.Errorf("-workload %q: want one of %s", name, strings.Join(names, ", "))
	}
	if err := edit(&p); err != nil {
		return fmt.Errorf("-workload %s: %w", name, err)
	}
	if path == "" {
		path = name + ".csv"
	}
	return writeProduction(p, path, strings.TrimSuffix(path, filepath.Ext(path))+".yaml")
}

func writeProduction(p sim.Production, trace, config string) error {
	b, err := p.Trace()
	if err != nil {
		return err
	}
	if err := os.WriteFile(trace, b, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(config, p.Config(), 0o644); err != nil {
		return err
	}
	fmt.Println("wrote", trace, "and", config)
	return nil
}

// one writes a single workload to path: the first window of the source,
// models m1…mN assigned by mix (its Models filled in here).
func one(azureDir, path, source string, mix sim.Mix, models int, window time.Duration) error {
	file, ok := map[string]string{"conv": "AzureLLMInferenceTrace_conv.csv", "code": "AzureLLMInferenceTrace_code.csv"}[source]
	if !ok {
		return fmt.Errorf("-source %q: want conv or code", source)
	}
	if models < 1 {
		return fmt.Errorf("-models %d: want at least 1", models)
	}
	names := make([]string, models)
	for i := range names {
		names[i] = fmt.Sprintf("m%d", i+1)
	}
	mix.Models = names
	w := sim.Workload{File: filepath.Base(path), Source: file, Window: window, Mix: mix}
	b, err := w.Generate(azureDir)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return err
	}
	fmt.Println("wrote", path)
	return nil
}
