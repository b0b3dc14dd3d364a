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
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/loadout-dev/loadout/host/sim"
)

func main() {
	out1 := flag.String("o", "", "write one workload to this file instead of sim.Workloads")
	source := flag.String("source", "conv", "with -o: the Azure trace, conv or code")
	mix := flag.String("mix", sim.MixZipf, "with -o: how models are assigned, zipf or agent")
	models := flag.Int("models", 8, "with -o: how many models, named m1…mN")
	seed := flag.Uint64("seed", 1, "with -o: the mix's seed")
	window := flag.Duration("window", 0, "with -o: the source's first window (0: all of it)")
	azure := flag.String("azure", "../shared/traces/azure-llm-2023", "with -o: the Azure traces' directory")
	flag.Parse()
	if *out1 != "" {
		if err := one(*azure, *out1, *source, *mix, *models, *seed, *window); err != nil {
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
}

// one writes a single workload to path: the first window of the source,
// models m1…mN assigned by the mix with the seed.
func one(azureDir, path, source, mix string, models int, seed uint64, window time.Duration) error {
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
	w := sim.Workload{File: filepath.Base(path), Source: file, Window: window,
		Mix: sim.Mix{Kind: mix, Seed: seed, Models: names}}
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
