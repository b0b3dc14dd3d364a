package sim

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// bigTrace is the Azure conversation and code traces, whole (about 28,000
// requests over an hour), merged by arrival, with a Zipf mix over 8 models.
func bigTrace(tb testing.TB) []Request {
	tb.Helper()
	var all []Request
	for _, name := range []string{"AzureLLMInferenceTrace_conv.csv", "AzureLLMInferenceTrace_code.csv"} {
		f, err := os.Open(filepath.Join(azureDir, name))
		if err != nil {
			tb.Skipf("the Azure traces: %v", err)
		}
		reqs, err := ReadAzure(name, f, 24*time.Hour)
		f.Close()
		if err != nil {
			tb.Fatal(err)
		}
		all = append(all, reqs...)
	}
	sortByArrival(all)
	out, err := Assign(all, Mix{Kind: MixZipf, Seed: 3, Models: modelNames(8)})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// eightModels are testdata/simulate/eight-models.yaml's models: 12 GiB
// each, loads of 6–20 s, 100–65 tokens/s, batches of 32.
func eightModels() map[string]Model {
	out := map[string]Model{}
	for i := range 8 {
		m := simModel(12*gib, time.Duration(6+2*i)*time.Second, float64(100-5*i), 32)
		m.Decode.TTFT = 80 * time.Millisecond
		m.Decode.PrefillTokensPerSecond = 8000
		m.Config.ConcurrencyLimit = 32
		out[fmt.Sprintf("m%d", i+1)] = m
	}
	return out
}

// BenchmarkReplay_Azure28k replays the merged Azure traces (about 28,000
// requests over 8 models) with fifo and prioritylru through Wasm; the
// simulate issue's target is ≤ 10 s for 26,000 requests on 2 cores.
//
//	go test ./host/sim -run '^$' -bench Replay -benchtime 1x
//
// Sub-benchmarks: the scheduler ticked periodically (as before ticks on
// demand) and on demand.
func BenchmarkReplay_Azure28k(b *testing.B) {
	trace := bigTrace(b)
	models := eightModels()
	for _, mode := range []string{"periodic", "on_demand"} {
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				s := setup(b, "prioritylru", "{}", models, []uint64{24 * gib, 24 * gib}, trace)
				s.Router.PeriodicTicks = mode == "periodic"
				res, err := Run(s)
				if err != nil {
					b.Fatal(err)
				}
				if res.Completed+res.Errors != len(trace) {
					b.Fatalf("%d completed + %d errors of %d", res.Completed, res.Errors, len(trace))
				}
				b.ReportMetric(float64(len(trace)), "requests")
			}
		})
	}
}

// sortByArrival sorts reqs by arrival, stably.
func sortByArrival(reqs []Request) {
	slices.SortStableFunc(reqs, func(a, b Request) int { return cmp.Compare(a.Arrival, b.Arrival) })
}

// BenchmarkReplay_IdleDay replays two requests a day apart: 86,400 ticks
// of an idle box through the Wasm policies, what a long, quiet real trace
// spends most of its replay on.
//
//	go test ./host/sim -run '^$' -bench IdleDay -benchtime 1x
//
// Sub-benchmarks: the scheduler ticked periodically (as before ticks on
// demand: 86,400 Wasm calls) and on demand (fifo asks for none).
func BenchmarkReplay_IdleDay(b *testing.B) {
	trace := []Request{{Model: "m1", PromptTokens: 10, OutputTokens: 10}, {Arrival: 86400, Model: "m2", PromptTokens: 10, OutputTokens: 10}}
	models := eightModels()
	for _, mode := range []string{"periodic", "on_demand"} {
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				s := setup(b, "prioritylru", "{}", models, []uint64{24 * gib, 24 * gib}, trace)
				s.Router.PeriodicTicks = mode == "periodic"
				res, err := Run(s)
				if err != nil {
					b.Fatal(err)
				}
				if res.Completed != len(trace) {
					b.Fatalf("%d completed of %d", res.Completed, len(trace))
				}
			}
		})
	}
}
