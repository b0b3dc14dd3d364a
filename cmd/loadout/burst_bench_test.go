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
		var mu sync.Mutex
		var lat []time.Duration
		next := make(chan string)
		var wg sync.WaitGroup
		start := time.Now()
		for range clients {
			wg.Go(func() {
				for model := range next {
					t0 := time.Now()
					code, body := s.post("/v1/chat/completions", fmt.Sprintf(`{"model":%q,"max_tokens":4,"messages":[{"role":"user","content":"x"}]}`, model))
					if code != 200 {
						t.Errorf("%s: %d %s", model, code, body)
					}
					mu.Lock()
					lat = append(lat, time.Since(t0))
					mu.Unlock()
				}
			})
		}
		for _, m := range order {
			next <- m
		}
		close(next)
		wg.Wait()
		wall := time.Since(start)
		slices.Sort(lat)
		pct := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1))].Round(time.Millisecond) }
		loads := strings.Count(s.log(), `msg="model loaded"`)
		fmt.Printf("| %s | %d | %d | %d | %v | %v | %v | %v |\n", router, requests, clients, loads, pct(0.5), pct(0.95), pct(0.99), wall.Round(time.Millisecond))
		s.stop()
	}
}
