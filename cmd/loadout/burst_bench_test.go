package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestBurstReport replays the same burst of mixed-model requests against
// two routings of four simulated 5 GiB models on one simulated 24 GiB GPU:
// llama-swap's implicit exclusive group (one model at a time) and
// prioritylru (packs by VRAM). It prints cold loads and latency percentiles
// as a Markdown table. A measurement, not a test: it runs only with
// LOADOUT_BENCH=1.
//
//	LOADOUT_BENCH=1 go test ./cmd/loadout -run TestBurstReport -v
func TestBurstReport(t *testing.T) {
	if os.Getenv("LOADOUT_BENCH") == "" {
		t.Skip("a benchmark: set LOADOUT_BENCH=1")
	}
	const requests, clients = 400, 8
	rng := rand.New(rand.NewPCG(7, 11))
	zipf := rand.NewZipf(rng, 1.2, 1, 3) // four models, skewed popularity
	order := make([]string, requests)
	for i := range order {
		order[i] = fmt.Sprintf("w%d", zipf.Uint64()+1)
	}
	fmt.Println("| router | requests | clients | cold loads | p50 | p95 | p99 | wall |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, router := range []string{"group", "prioritylru"} {
		s := startServer(t, "../../testdata/e2e/burst-"+router+".yaml")
		lat, wall := burst(t, s, clients, order, func(model string) string {
			return fmt.Sprintf(`{"model":%q,"max_tokens":4,"messages":[{"role":"user","content":"x"}]}`, model)
		})
		pct := func(p float64) time.Duration { return percentile(lat, p) }
		loads := strings.Count(s.log(), `msg="model loaded"`)
		fmt.Printf("| %s | %d | %d | %d | %v | %v | %v | %v |\n", router, requests, clients, loads, pct(0.5), pct(0.95), pct(0.99), wall.Round(time.Millisecond))
		s.stop()
	}
}

// burst sends one chat completion per item of items from clients
// concurrent clients to s, the body made by body, and returns each
// request's latency, sorted, and the wall time of the whole burst. A
// response other than 200 fails the test.
func burst[T any](t *testing.T, s *server, clients int, items []T, body func(T) string) ([]time.Duration, time.Duration) {
	var mu sync.Mutex
	var lat []time.Duration
	next := make(chan T)
	var wg sync.WaitGroup
	start := time.Now()
	for range clients {
		wg.Go(func() {
			for it := range next {
				t0 := time.Now()
				code, resp := s.post("/v1/chat/completions", body(it))
				if code != 200 {
					t.Errorf("%v: %d %s", it, code, resp)
				}
				mu.Lock()
				lat = append(lat, time.Since(t0))
				mu.Unlock()
			}
		})
	}
	for _, it := range items {
		next <- it
	}
	close(next)
	wg.Wait()
	wall := time.Since(start)
	slices.Sort(lat)
	return lat, wall
}

// percentile is the p-th (0 to 1) of sorted latencies, to the millisecond.
func percentile(sorted []time.Duration, p float64) time.Duration {
	return sorted[int(p*float64(len(sorted)-1))].Round(time.Millisecond)
}
