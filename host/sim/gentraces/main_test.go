package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/host/sim"
)

const azureDir = "../../../../shared/traces/azure-llm-2023"

// One workload written with -o from the flags that describe a committed
// one is that file byte for byte: the longer workloads docs/BENCHMARKS.md
// gives commands for come from the same generator.
func TestOne_ReproducesTheCommittedWorkloads(t *testing.T) {
	if _, err := os.Stat(azureDir); err != nil {
		t.Skipf("the shared traces are not beside the checkout: %v", err)
	}
	for _, w := range sim.Workloads {
		source := map[string]string{"AzureLLMInferenceTrace_conv.csv": "conv", "AzureLLMInferenceTrace_code.csv": "code"}[w.Source]
		if source == "" || w.Mix.ZipfS != 0 {
			t.Fatalf("%s: not expressible with gentraces' flags (source %s, zipf exponent %g)", w.File, w.Source, w.Mix.ZipfS)
		}
		out := filepath.Join(t.TempDir(), w.File)
		if err := one(azureDir, out, source, sim.Mix{Kind: w.Mix.Kind, Seed: w.Mix.Seed}, len(w.Mix.Models), w.Window); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join("../../../testdata/traces", w.File))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("-o %s differs from testdata/traces/%s", w.File, w.File)
		}
	}
}

func TestOne_BadFlags(t *testing.T) {
	for _, c := range []struct {
		source, mix string
		models      int
		want        string
	}{
		{"chat", sim.MixZipf, 8, "-source"},
		{"conv", sim.MixZipf, 0, "-models"},
		{"conv", "uniform", 8, "unknown kind"},
	} {
		err := one(azureDir, filepath.Join(t.TempDir(), "x.csv"), c.source, sim.Mix{Kind: c.mix, Seed: 1}, c.models, 0)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			if c.want == "unknown kind" && err != nil && os.IsNotExist(err) {
				continue // no shared traces: the mix is checked after the source is read
			}
			t.Errorf("source %q mix %q models %d: error %v, want one naming %q", c.source, c.mix, c.models, err, c.want)
		}
	}
}
