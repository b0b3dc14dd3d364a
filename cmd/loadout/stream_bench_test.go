package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestStreamCPUReport measures the proxy's CPU per streamed chunk the way
// the hot-path issue states it: `loadout serve` as its own process, a sim
// model server paced like a real one (500 tokens/s a stream, so chunks do
// not coalesce), 16 streams of 2,000 tokens at once, and the loadout
// process's CPU (user + system, /proc/PID/stat) over the chunks its
// clients received, less what it burns idle for as long. The model
// server's own CPU per chunk is printed beside it. A measurement, not a
// test: it runs only with LOADOUT_BENCH=1.
//
//	LOADOUT_BENCH=1 go test ./cmd/loadout -run TestStreamCPUReport -v
func TestStreamCPUReport(t *testing.T) {
	if os.Getenv("LOADOUT_BENCH") == "" {
		t.Skip("a benchmark: set LOADOUT_BENCH=1")
	}
	const streams, tokens, rounds = 16, 2000, 3
	cfg := writeConfig(t, t.TempDir(), `healthCheckTimeout: 30
startPort: ${env.LOADOUT_E2E_START_PORT}
models:
  m:
    backend: sim
    concurrencyLimit: 32
    options: {load_time: 10ms, ttft: 1ms, tokens_per_second: 500, max_batch: 32}
`)
	s := startServer(t, cfg)
	s.mustChat("m")
	lpid := s.cmd.Process.Pid
	spid := onePid(t, "m")
	body := fmt.Sprintf(`{"model":"m","stream":true,"max_tokens":%d,"messages":[{"role":"user","content":"x"}]}`, tokens)
	run := func() (chunks int, wall time.Duration) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := time.Now()
		for range streams {
			wg.Go(func() {
				resp, err := http.Post(s.base+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err != nil {
					t.Error(err)
					return
				}
				defer resp.Body.Close()
				n := 0
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
					if line := sc.Text(); strings.HasPrefix(line, "data: {") {
						var c struct{ Choices []json.RawMessage }
						if json.Unmarshal([]byte(line[6:]), &c) == nil && len(c.Choices) > 0 {
							n++
						}
					}
				}
				mu.Lock()
				chunks += n
				mu.Unlock()
			})
		}
		wg.Wait()
		return chunks, time.Since(start)
	}
	fmt.Println("| round | chunks | wall | loadout CPU | idle CPU, as long | proxy CPU per chunk | model server CPU per chunk |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|")
	for i := range rounds {
		l0, s0 := cpuTime(t, lpid), cpuTime(t, spid)
		chunks, wall := run()
		l1, s1 := cpuTime(t, lpid), cpuTime(t, spid)
		time.Sleep(wall) // the same time idle: tickers, measuring
		l2 := cpuTime(t, lpid)
		idle := l2 - l1
		per := (l1 - l0 - idle) / time.Duration(max(chunks, 1))
		fmt.Printf("| %d | %d | %v | %v | %v | %.1f µs | %.1f µs |\n", i+1, chunks, wall.Round(time.Millisecond), l1-l0, idle,
			float64(per)/float64(time.Microsecond), float64((s1-s0)/time.Duration(max(chunks, 1)))/float64(time.Microsecond))
	}
}
