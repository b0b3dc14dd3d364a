//go:build soak

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The soak (`make soak`, build tag soak; not part of `make test`): mixed
// streaming and non-streaming traffic over six simulated models on two
// simulated 24 GiB GPUs, with random client disconnects, model servers that
// crash after a number of tokens, model servers that hang (SIGSTOP: some
// for good, found by the liveness probes and killed; some for a second,
// shorter than the liveness bound, which must cost nothing), operator
// unloads, and a scheduler that panics on 1% of its events. It runs for SOAK_DURATION (default 10m) and
// then checks that every request ended exactly once, as the client and
// /metrics both count it; that goroutines and heap are back near their
// baseline; and that no process is left. docs/RELIABILITY.md has the
// figures.

const soakModels = 6

func soakConfig(wasm string, panicEvery int) string {
	return fmt.Sprintf(`healthCheckTimeout: 30
startPort: ${env.LOADOUT_E2E_START_PORT}
sendLoadingState: true
gpus:
  - {name: sim0, memory: 24GiB}
  - {name: sim1, memory: 24GiB}
models:
  m1: {backend: sim, options: {load_time: 100ms, vram: 8GiB, ttft: 10ms, tokens_per_second: 200, max_batch: 8}}
  m2: {backend: sim, options: {load_time: 200ms, vram: 10GiB, ttft: 20ms, tokens_per_second: 150, max_batch: 8, crash_after_tokens: 300}}
  m3: {backend: sim, options: {load_time: 300ms, vram: 12GiB, ttft: 20ms, tokens_per_second: 120, max_batch: 8}}
  m4: {backend: sim, options: {load_time: 150ms, vram: 14GiB, ttft: 10ms, tokens_per_second: 250, max_batch: 8}}
  m5: {backend: sim, options: {load_time: 100ms, vram: 6GiB, ttft: 10ms, tokens_per_second: 300, max_batch: 8, crash_after_tokens: 150}}
  m6: {backend: sim, options: {load_time: 400ms, vram: 16GiB, ttft: 30ms, tokens_per_second: 100, max_batch: 8}}
liveness: {probeInterval: 1, probeTimeout: 1, failures: 3, streamIdle: 10}
routing:
  scheduler:
    wasm: %s
    settings: {panic_every: %d}
  router: {use: prioritylru}
`, wasm, panicEvery)
}

// outcome is how one request ended, as its client saw it.
type outcome int

const (
	outOK        outcome = iota // 200 and a complete response
	outError                    // a clean, OpenAI-shaped error (status or SSE event)
	outLeft                     // the client left after the response began: the server saw it
	outLeftMaybe                // the client left before any response: the server may not have seen it
	outBroken                   // anything else: a bug
)

type soakTally struct {
	mu      sync.Mutex
	n       [5]int
	errs    map[string]int // "status: message prefix"
	ids     map[string]outcome
	broken  []string
	streams int
}

func (t *soakTally) add(o outcome, stream bool, detail, id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n[o]++
	if id != "" {
		t.ids[id] = o
	}
	if stream {
		t.streams++
	}
	switch o {
	case outError:
		t.errs[detail]++
	case outBroken:
		if len(t.broken) < 20 {
			t.broken = append(t.broken, detail)
		}
	}
}

// errKey shortens an error for the tally: status and the message's first
// words, without ids and numbers that make every message unique.
func errKey(status int, msg string) string {
	f := strings.Fields(msg)
	if len(f) > 6 {
		f = f[:6]
	}
	for i, w := range f {
		if strings.ContainsAny(w, "0123456789") {
			f[i] = "…"
		}
	}
	return fmt.Sprintf("%d %s", status, strings.Join(f, " "))
}

// soakRequest sends one request and classifies its end.
func soakRequest(client *http.Client, base string, rng *rand.Rand) (o outcome, stream bool, detail, id string) {
	model := fmt.Sprintf("m%d", 1+rng.IntN(soakModels))
	stream = rng.IntN(2) == 0
	leave := rng.IntN(10) == 0 // 10% of clients disconnect
	body := fmt.Sprintf(`{"model":%q,"stream":%v,"max_tokens":%d,"messages":[{"role":"user","content":"soak %d"}]}`,
		model, stream, 8+rng.IntN(41), rng.IntN(1000))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if leave && !stream {
		ctx, cancel = context.WithTimeout(ctx, time.Duration(rng.IntN(400))*time.Millisecond)
		defer cancel()
	}
	if rng.IntN(4) == 0 { // a quarter of the clients speak Ollama's API
		return soakOllama(ctx, cancel, client, base, rng, model, stream, leave)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return outLeftMaybe, stream, "", ""
		}
		return outBroken, stream, "transport: " + err.Error(), ""
	}
	defer resp.Body.Close()
	rid := resp.Header.Get("X-Request-Id")
	idAttr := " request_id=" + rid
	if resp.StatusCode != 200 {
		b, err := io.ReadAll(resp.Body)
		if err != nil && ctx.Err() != nil {
			return outLeft, stream, "", rid
		}
		var e struct {
			Error struct{ Message string } `json:"error"`
		}
		if json.Unmarshal(b, &e) != nil || e.Error.Message == "" {
			return outBroken, stream, fmt.Sprintf("%d without an OpenAI error: %.200s", resp.StatusCode, b) + idAttr, rid
		}
		return outError, stream, errKey(resp.StatusCode, e.Error.Message), rid
	}
	if !stream {
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			if ctx.Err() != nil {
				return outLeft, stream, "", rid
			}
			return outBroken, stream, "reading body: " + err.Error() + idAttr, rid
		}
		var r struct {
			Choices []json.RawMessage `json:"choices"`
		}
		if json.Unmarshal(b, &r) != nil || len(r.Choices) == 0 {
			return outBroken, stream, fmt.Sprintf("200 without choices: %.200s", b) + idAttr, rid
		}
		return outOK, stream, "", rid
	}
	leaveAfter := -1
	if leave {
		leaveAfter = rng.IntN(8) // events read before leaving
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	events := 0
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			// Read on to the end of the response, as a client that keeps
			// its connection does: one that closes at [DONE] may be
			// counted as gone by the server (see docs/RELIABILITY.md).
			if _, err := io.Copy(io.Discard, resp.Body); err != nil {
				return outBroken, stream, "after [DONE]: " + err.Error() + idAttr, rid
			}
			return outOK, stream, "", rid
		}
		var e struct {
			Error *struct{ Message string } `json:"error"`
		}
		if json.Unmarshal([]byte(data), &e) == nil && e.Error != nil {
			return outError, stream, errKey(200, e.Error.Message), rid
		}
		if events++; events == leaveAfter {
			cancel()
			return outLeft, stream, "", rid
		}
	}
	return outBroken, stream, fmt.Sprintf("stream ended after %d events without [DONE] or an error event (%v)", events, sc.Err()) + idAttr, rid
}

// soakOllama sends one chat through Ollama's API and classifies its end
// as soakRequest does: a clean error is Ollama's {"error": …}, with its
// status or as a line of the stream; a stream is complete at its line
// with "done": true.
func soakOllama(ctx context.Context, cancel context.CancelFunc, client *http.Client, base string, rng *rand.Rand, model string, stream, leave bool) (o outcome, _ bool, detail, id string) {
	body := fmt.Sprintf(`{"model":%q,"stream":%v,"options":{"num_predict":%d},"messages":[{"role":"user","content":"soak %d"}]}`,
		model, stream, 8+rng.IntN(41), rng.IntN(1000))
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/chat", strings.NewReader(body))
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return outLeftMaybe, stream, "", ""
		}
		return outBroken, stream, "ollama transport: " + err.Error(), ""
	}
	defer resp.Body.Close()
	rid := resp.Header.Get("X-Request-Id")
	idAttr := " request_id=" + rid
	type line struct {
		Error   *string `json:"error"`
		Done    bool    `json:"done"`
		Message *struct {
			Role string `json:"role"`
		} `json:"message"`
	}
	if resp.StatusCode != 200 {
		b, err := io.ReadAll(resp.Body)
		if err != nil && ctx.Err() != nil {
			return outLeft, stream, "", rid
		}
		var l line
		if json.Unmarshal(b, &l) != nil || l.Error == nil || *l.Error == "" {
			return outBroken, stream, fmt.Sprintf("ollama %d without an Ollama error: %.200s", resp.StatusCode, b) + idAttr, rid
		}
		return outError, stream, errKey(resp.StatusCode, *l.Error), rid
	}
	leaveAfter := -1
	if leave && stream {
		leaveAfter = rng.IntN(8) // lines read before leaving
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	lines := 0
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return outBroken, stream, fmt.Sprintf("ollama line %d is not JSON: %.200s", lines, sc.Text()) + idAttr, rid
		}
		switch {
		case l.Error != nil:
			return outError, stream, errKey(200, *l.Error), rid
		case l.Message == nil || l.Message.Role != "assistant":
			return outBroken, stream, fmt.Sprintf("ollama line %d has no assistant message: %.200s", lines, sc.Text()) + idAttr, rid
		case l.Done:
			if _, err := io.Copy(io.Discard, resp.Body); err != nil {
				return outBroken, stream, "ollama after done: " + err.Error() + idAttr, rid
			}
			return outOK, stream, "", rid
		}
		if lines++; lines == leaveAfter {
			cancel()
			return outLeft, stream, "", rid
		}
	}
	if ctx.Err() != nil {
		return outLeft, stream, "", rid
	}
	return outBroken, stream, fmt.Sprintf("ollama answer ended after %d lines without done or an error (%v)", lines, sc.Err()) + idAttr, rid
}

// promSample is the part of /metrics the soak reads.
type promSample struct {
	byCode     map[string]float64 // loadout_requests_total summed over models
	inFlight   float64
	goroutines float64
	heap       float64
	rss        float64
}

func (p promSample) total() (n float64) {
	for _, v := range p.byCode {
		n += v
	}
	return n
}

func scrape(tb testing.TB, base string) promSample {
	tb.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		tb.Fatalf("/metrics: %v", err)
	}
	defer resp.Body.Close()
	p := promSample{byCode: map[string]float64{}}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		if i < 0 || strings.HasPrefix(line, "#") {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		name := line[:i]
		switch {
		case strings.HasPrefix(name, "loadout_requests_total{"):
			_, rest, _ := strings.Cut(name, `code="`)
			code, _, _ := strings.Cut(rest, `"`)
			p.byCode[code] += v
		case strings.HasPrefix(name, "loadout_in_flight_requests{"):
			p.inFlight += v
		case name == "go_goroutines":
			p.goroutines = v
		case name == "go_memstats_heap_alloc_bytes":
			p.heap = v
		case name == "process_resident_memory_bytes":
			p.rss = v
		}
	}
	return p
}

// waitFor polls cond (no event exists for "the server's counters settled")
// until it holds or d passes, and reports whether it held.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func TestSoak_MixedTrafficWithFaults(t *testing.T) {
	duration := 10 * time.Minute
	if v := os.Getenv("SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("SOAK_DURATION=%q: %v", v, err)
		}
		duration = d
	}
	workers := envInt("SOAK_CLIENTS", 12)
	panicEvery := envInt("SOAK_PANIC_EVERY", 100) // 1% of events
	seed := uint64(envInt("SOAK_SEED", int(time.Now().UnixNano()%1e9)))
	t.Logf("soak: %s, %d clients, scheduler panics every %d events, seed %d", duration, workers, panicEvery, seed)

	dir := t.TempDir()
	s := startServer(t, writeConfig(t, dir, soakConfig(flakyWasm(t, dir), panicEvery)))
	transport := &http.Transport{MaxIdleConnsPerHost: workers}
	client := &http.Client{Transport: transport}
	models := make([]string, soakModels)
	for i := range models {
		models[i] = fmt.Sprintf("m%d", i+1)
	}

	// Warm-up: every model loaded once (the first requests compile and
	// instantiate what stays), then all unloaded: the baseline.
	tally := &soakTally{errs: map[string]int{}, ids: map[string]outcome{}}
	for _, m := range models {
		code, body := s.post("/v1/chat/completions", chat(m, false))
		if code != 200 {
			t.Logf("warm-up %s: %d %.200s", m, code, body)
		}
	}
	if code, body := s.post("/unload", ""); code != 200 {
		t.Fatalf("/unload: %d %s", code, body)
	}
	if !waitFor(10*time.Second, func() bool { return scrape(t, s.base).total() == soakModels }) {
		t.Fatalf("/metrics did not count the %d warm-up requests", soakModels)
	}
	base := scrape(t, s.base)
	peak := base
	t.Logf("baseline: %.0f goroutines, heap %.1f MiB, rss %.1f MiB", base.goroutines, base.heap/(1<<20), base.rss/(1<<20))

	start := time.Now()
	end := start.Add(duration)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for time.Now().Before(end) {
				o, stream, detail, id := soakRequest(client, s.base, rng)
				tally.add(o, stream, detail, id)
			}
		})
	}
	unloads := map[string]int{}
	wg.Go(func() { // the operator
		rng := rand.New(rand.NewPCG(seed, 1<<32))
		for time.Now().Before(end) {
			time.Sleep(time.Duration(2000+rng.IntN(3000)) * time.Millisecond) // the operator's pace, not an event
			path := "/unload"
			if rng.IntN(4) != 0 {
				path = "/api/models/unload/" + models[rng.IntN(soakModels)]
			}
			resp, err := client.Post(s.base+path, "application/json", nil)
			key := "error"
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				key = strconv.Itoa(resp.StatusCode)
			}
			unloads[key]++
		}
	})
	hangs := map[string]int{}
	wg.Go(func() { // the hangs: a model server stops answering
		rng := rand.New(rand.NewPCG(seed, 1<<33))
		for time.Now().Before(end) {
			time.Sleep(time.Duration(5000+rng.IntN(10000)) * time.Millisecond) // the fault's pace, not an event
			pids := modelPids(t, models[rng.IntN(soakModels)])
			if len(pids) == 0 {
				continue
			}
			pid := pids[0]
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				continue
			}
			if rng.IntN(2) == 0 { // a pause shorter than the liveness bound
				time.Sleep(time.Second)
				_ = syscall.Kill(pid, syscall.SIGCONT)
				hangs["paused 1 s"]++
				continue
			}
			hangs["stopped"]++ // for good: the liveness probes must find it
		}
	})
	wg.Go(func() { // peaks, every 5 s
		for time.Now().Before(end) {
			time.Sleep(5 * time.Second)
			p := scrape(t, s.base)
			peak.goroutines = max(peak.goroutines, p.goroutines)
			peak.heap = max(peak.heap, p.heap)
			peak.rss = max(peak.rss, p.rss)
		}
	})
	wg.Wait()
	elapsed := time.Since(start)

	// Settle: the server finishes what clients left, then everything is
	// unloaded and idle connections closed.
	if code, body := s.post("/unload", ""); code != 200 {
		t.Errorf("final /unload: %d %s", code, body)
	}
	transport.CloseIdleConnections()
	sent := tally.n[outOK] + tally.n[outError] + tally.n[outLeft] + tally.n[outLeftMaybe] + tally.n[outBroken]
	var fin promSample
	settled := waitFor(30*time.Second, func() bool {
		fin = scrape(t, s.base)
		got := int(fin.total() - base.total())
		return fin.inFlight == 0 && got >= sent-tally.n[outLeftMaybe] && got <= sent
	})
	waitFor(30*time.Second, func() bool {
		fin = scrape(t, s.base)
		return fin.goroutines <= base.goroutines+10 && fin.heap <= 2*base.heap+32<<20
	})
	_, pol := s.get("/api/policies")
	logs := s.log()

	server := map[string]int{} // this run's requests, without the warm-up
	for code, v := range fin.byCode {
		if n := int(v - base.byCode[code]); n > 0 {
			server[code] = n
		}
	}
	srvTotal := int(fin.total() - base.total())
	srvErr := srvTotal - server["200"] - server["499"]

	var b strings.Builder
	fmt.Fprintf(&b, "soak figures (%s, %d clients, panic every %d events, seed %d)\n", elapsed.Round(time.Second), workers, panicEvery, seed)
	fmt.Fprintf(&b, "  client:  %d requests (%.1f/s, %d streaming): %d ok, %d clean errors, %d left mid-response, %d left before a response, %d broken\n",
		sent, float64(sent)/elapsed.Seconds(), tally.streams, tally.n[outOK], tally.n[outError], tally.n[outLeft], tally.n[outLeftMaybe], tally.n[outBroken])
	fmt.Fprintf(&b, "  server:  %d requests: %d ok (200), %d client gone (499), %d errors; by code %v\n", srvTotal, server["200"], server["499"], srvErr, server)
	keys := make([]string, 0, len(tally.errs))
	for k := range tally.errs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return tally.errs[keys[i]] > tally.errs[keys[j]] })
	for _, k := range keys {
		fmt.Fprintf(&b, "    %6d × %s\n", tally.errs[k], k)
	}
	fmt.Fprintf(&b, "  events:  %d model loads, %d model servers exited unexpectedly, %d scheduler failures, fallback took over: %v, operator unloads %v\n",
		strings.Count(logs, `msg="model loaded"`), strings.Count(logs, `msg="model server exited unexpectedly"`),
		strings.Count(logs, `msg="scheduler policy failed; failing the requests it held"`), strings.Contains(logs, "the fallback takes over"), unloads)
	fmt.Fprintf(&b, "  hangs:   injected %v; model servers found hung and killed: %d\n", hangs, strings.Count(logs, `msg="model server hung; killing it"`))
	fmt.Fprintf(&b, "  policies: %s\n", pol)
	fmt.Fprintf(&b, "  goroutines: baseline %.0f, peak %.0f, end %.0f\n", base.goroutines, peak.goroutines, fin.goroutines)
	fmt.Fprintf(&b, "  heap:       baseline %.1f MiB, peak %.1f MiB, end %.1f MiB\n", base.heap/(1<<20), peak.heap/(1<<20), fin.heap/(1<<20))
	fmt.Fprintf(&b, "  rss:        baseline %.1f MiB, peak %.1f MiB, end %.1f MiB\n", base.rss/(1<<20), peak.rss/(1<<20), fin.rss/(1<<20))
	// Requests the server logged as failed or gone that the client saw
	// succeed.
	mismatched := 0
	for _, line := range strings.Split(logs, "\n") {
		_, rest, ok := strings.Cut(line, "request_id=")
		if !ok || !strings.Contains(line, "path=/v1/chat/completions") {
			continue
		}
		id, _, _ := strings.Cut(rest, " ")
		if tally.ids[id] == outOK {
			if _, seen := tally.ids[id]; seen {
				if mismatched++; mismatched <= 5 {
					fmt.Fprintf(&b, "  client ok, server logged: %.300s\n", line)
				}
			}
		}
	}
	fmt.Fprintf(&b, "  requests the client saw succeed that the server logged as failed or gone: %d\n", mismatched)
	for _, d := range tally.broken {
		fmt.Fprintf(&b, "  broken: %s\n", d)
	}
	t.Log(b.String())
	fmt.Println(b.String()) // figures for the operator, also without -v
	if path := os.Getenv("SOAK_LOG"); path != "" {
		if err := os.WriteFile(path, []byte(logs), 0o644); err != nil {
			t.Error(err)
		}
	}

	// Every request ended exactly once, and the two counts agree: what the
	// client knows exactly (ok, clean error) the server counted the same
	// way; a client that left may have been counted as anything, once; one
	// that left before any response may never have reached the server.
	// A broken response (reported above) may be a 200 to the server.
	left := tally.n[outLeft] + tally.n[outLeftMaybe] + tally.n[outBroken]
	if tally.n[outBroken] > 0 {
		t.Errorf("%d requests ended neither in success nor in a clean error", tally.n[outBroken])
	}
	if !settled {
		t.Errorf("the server counted %d requests (in flight %v), want %d..%d", srvTotal, fin.inFlight, sent-tally.n[outLeftMaybe], sent)
	}
	if server["200"] < tally.n[outOK] || server["200"] > tally.n[outOK]+left {
		t.Errorf("server 200s %d, want %d..%d (client ok, plus clients that left)", server["200"], tally.n[outOK], tally.n[outOK]+left)
	}
	if srvErr < tally.n[outError] || srvErr > tally.n[outError]+left {
		t.Errorf("server errors %d, want %d..%d (client errors, plus clients that left)", srvErr, tally.n[outError], tally.n[outError]+left)
	}
	if server["499"] > left {
		t.Errorf("server 499s %d, more than the %d clients that left", server["499"], left)
	}
	if fin.goroutines > base.goroutines+10 {
		t.Errorf("goroutines %0.f at the end, baseline %.0f", fin.goroutines, base.goroutines)
	}
	if fin.heap > 2*base.heap+32<<20 {
		t.Errorf("heap %.1f MiB at the end, baseline %.1f MiB", fin.heap/(1<<20), base.heap/(1<<20))
	}
	for k, n := range unloads {
		if k != "200" {
			t.Errorf("%d operator unloads ended with %s", n, k)
		}
	}

	s.stop()
	eventually(t, "every process loadout started to exit", func() bool {
		return len(pidsMatching(t, func(args []string) bool { return args[0] == loadoutBin })) == 0
	})
}
