package proxy

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestScaleReport streams 1,000 concurrent clients over 8 simulated models
// (issue 14): every client one SSE stream of 50 chunks, 20 ms apart, first
// straight from the model servers and then through Loadout with the Wasm
// fifo and group policies. It fails on any error, and on goroutines or heap
// that do not come back down after the streams; it prints the time to the
// first chunk (p50, p99) both ways, peak goroutines and heap. A report, not
// a test of speed: run it on purpose.
//
//	LOADOUT_BENCH=1 go test -run TestScaleReport -v ./host/proxy
func TestScaleReport(t *testing.T) {
	if os.Getenv("LOADOUT_BENCH") != "1" {
		t.Skip("set LOADOUT_BENCH=1 to run the 1,000-client scale report")
	}
	const clients, chunks, gap = 1000, 50, "20ms"
	var models []string
	limits := map[string]uint32{}
	for i := range 8 {
		m := fmt.Sprintf("s%d", i)
		models = append(models, m)
		limits[m] = clients
	}
	e := newEnv(t, envOpts{extra: models, limits: limits, logger: quietLogger()})
	for _, m := range models { // load them all first: the report is about serving
		resp := e.send(request{path: "/v1/chat/completions", body: `{"model":"` + m + `","messages":[]}`})
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients, DisableCompression: true}}
	defer client.CloseIdleConnections()
	base := runtime.NumGoroutine()

	run := func(name string, target func(model string) string) {
		var wg sync.WaitGroup
		var errs atomic.Int64
		var firstErr atomic.Value
		var peakG atomic.Int64
		var peakHeap uint64
		ttfb := make([]time.Duration, clients)
		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() { // peak goroutines and heap while the streams run
			defer close(sampled)
			var ms runtime.MemStats
			for {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				peakG.Store(max(peakG.Load(), int64(runtime.NumGoroutine())))
				runtime.ReadMemStats(&ms)
				peakHeap = max(peakHeap, ms.HeapInuse)
			}
		}()
		start := time.Now()
		for i := range clients {
			wg.Go(func() {
				model := models[i%len(models)]
				body := `{"model":"` + model + `","stream":true,"messages":[]}`
				req, _ := http.NewRequest(http.MethodPost, target(model), strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Test-Mode", "chunks")
				req.Header.Set("X-Test-Chunks", fmt.Sprint(chunks))
				req.Header.Set("X-Test-Gap", gap)
				sent := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					return
				}
				defer resp.Body.Close()
				buf := make([]byte, 512)
				n, err := resp.Body.Read(buf)
				ttfb[i] = time.Since(sent)
				rest, err2 := io.Copy(io.Discard, resp.Body)
				if resp.StatusCode != http.StatusOK {
					firstErr.CompareAndSwap(nil, fmt.Sprintf("status %d from %s", resp.StatusCode, req.URL))
				}
				if resp.StatusCode != http.StatusOK || n == 0 || (err != nil && err != io.EOF) || err2 != nil ||
					strings.Count(string(buf[:n]), "data: {")+int(rest)/64 < chunks/2 {
					errs.Add(1)
				}
			})
		}
		wg.Wait()
		wall := time.Since(start)
		close(stop)
		<-sampled
		slices.Sort(ttfb)
		fmt.Printf("| %s | %d | %d | %s | %s | %s | %d | %.0f MiB |\n", name, clients, errs.Load(), wall.Round(time.Millisecond),
			round(ttfb[clients/2]), round(ttfb[clients*99/100]), peakG.Load(), float64(peakHeap)/(1<<20))
		if errs.Load() > 0 {
			t.Errorf("%s: %d of %d streams failed (first: %v)", name, errs.Load(), clients, firstErr.Load())
		}
	}
	upstream := map[string]string{}
	for _, m := range models {
		upstream[m] = e.status(m).Upstream
	}
	fmt.Printf("\n| path | clients | errors | wall | first chunk p50 | p99 | peak goroutines | peak heap |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	run("direct", func(m string) string { return upstream[m] + "/v1/chat/completions" })
	run("Loadout", func(string) string { return e.ts.URL + "/v1/chat/completions" })

	// Bounded: once the streams end and the idle keep-alive pools are
	// closed (up to 256 connections per model server, each with its
	// goroutines), goroutines return to where they were.
	fmt.Printf("goroutines: %d before, %d after the streams with idle connections pooled\n", base, runtime.NumGoroutine())
	client.CloseIdleConnections()
	e.srv.upstreams.closeIdle()
	e.ts.CloseClientConnections()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > base+50 && time.Now().Before(deadline) {
		runtime.Gosched()
		time.Sleep(10 * time.Millisecond) // polling the runtime: no event says "goroutines exited"
	}
	if g := runtime.NumGoroutine(); g > base+50 {
		t.Errorf("%d goroutines after the streams, %d before: not bounded", g, base)
	}
}
