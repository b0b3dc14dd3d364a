package main

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// TestReplicaBurstReport sends the same burst of requests for one model to
// a box that runs it as one replica and as two (two simulated 80 GiB
// devices, a 40 GiB model serving 2 sequences at once at 100 tokens/s
// each), and prints tokens/s and latency percentiles as a Markdown table.
// A measurement, not a test: it runs only with LOADOUT_BENCH=1.
//
//	LOADOUT_BENCH=1 go test ./cmd/loadout -run TestReplicaBurstReport -v
func TestReplicaBurstReport(t *testing.T) {
	if os.Getenv("LOADOUT_BENCH") == "" {
		t.Skip("a benchmark: set LOADOUT_BENCH=1")
	}
	const requests, clients, tokens = 96, 8, 50
	fmt.Println("| replicas | requests | clients | tokens/s | p50 | p95 | p99 | wall |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, n := range []int{1, 2} {
		cfg := writeConfig(t, t.TempDir(), fmt.Sprintf(`healthCheckTimeout: 30
startPort: ${env.LOADOUT_E2E_START_PORT}
gpus: [{memory: 80GiB}, {memory: 80GiB}]
models:
  big:
    backend: sim
    replicas: %d
    concurrencyLimit: 2
    options: {load_time: 200ms, vram: 40GiB, ttft: 20ms, tokens_per_second: 100, max_batch: 2}
routing: {scheduler: {use: fifo}, router: {use: prioritylru}}
`, n))
		s := startServer(t, cfg)
		s.mustChat("big")
		eventually(t, "the replicas to be ready", func() bool {
			v := s.replicas("big")
			return v.ReadyReplicas == n || n == 1 && v.State == "ready" // one replica: no replica fields
		})
		lat, wall := burst(t, s, clients, make([]int, requests), func(int) string {
			return fmt.Sprintf(`{"model":"big","max_tokens":%d,"messages":[{"role":"user","content":"x"}]}`, tokens)
		})
		pct := func(p float64) time.Duration { return percentile(lat, p) }
		fmt.Printf("| %d | %d | %d | %.0f | %v | %v | %v | %v |\n", n, requests, clients,
			float64(requests*tokens)/wall.Seconds(), pct(0.5), pct(0.95), pct(0.99), wall.Round(time.Millisecond))
		s.stop()
	}
}
