package main

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestPeerOverheadReport measures what a peer costs, for docs/SCALING.md:
// the same requests to a model on server B, sent to B directly and
// through server A, which forwards them (A's peer B): latency per small
// request, time to the first streamed chunk and the cost per chunk of a
// stream that runs as fast as the servers can go; and how long A takes to
// mark B down after B is killed, with no traffic (the poller alone) and
// with a request in flight (the failed request checks at once), and to
// mark it up again after it restarts. Real processes on 127.0.0.1; skipped
// unless LOADOUT_BENCH=1.
//
//	LOADOUT_BENCH=1 go test ./cmd/loadout -run TestPeerOverheadReport -v
func TestPeerOverheadReport(t *testing.T) {
	if os.Getenv("LOADOUT_BENCH") == "" {
		t.Skip("a benchmark: set LOADOUT_BENCH=1")
	}
	bcfg := writeConfig(t, t.TempDir(), "healthCheckTimeout: 30\nstartPort: ${env.LOADOUT_E2E_START_PORT}\nmodels:\n"+
		"  m: {backend: sim, options: {load_time: 50ms, ttft: 1ms, tokens_per_second: 1000000, max_batch: 64}}\n")
	b := startServer(t, bcfg)
	const interval = time.Second
	acfg := writeConfig(t, t.TempDir(), "healthCheckTimeout: 30\nstartPort: ${env.LOADOUT_E2E_START_PORT}\nmodels:\n"+
		"  alocal: {backend: sim}\n"+
		fmt.Sprintf("peers:\n  b: {proxy: %q, models: [m], health: {interval: %s, timeout: 500ms}}\n", b.base, interval))
	a := startServer(t, acfg)
	b.mustChat("m")
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}

	// Small requests, one at a time.
	small := func(base string) time.Duration {
		start := time.Now()
		resp, err := client.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(chat("m", false)))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = bufio.NewReader(resp.Body).WriteTo(new(strings.Builder))
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		return time.Since(start)
	}
	// A stream of n tokens: the time to its first chunk, and in all.
	stream := func(base string, n int) (first, total time.Duration, chunks int) {
		start := time.Now()
		body := fmt.Sprintf(`{"model":"m","stream":true,"max_tokens":%d,"messages":[{"role":"user","content":"x"}]}`, n)
		resp, err := client.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "data: ") {
				if chunks == 0 {
					first = time.Since(start)
				}
				chunks++
			}
		}
		return first, time.Since(start), chunks
	}
	pct := func(d []time.Duration, p float64) time.Duration {
		d = slices.Clone(d)
		slices.Sort(d)
		return d[int(float64(len(d)-1)*p)]
	}
	const nSmall, nStreams, tokens = 2000, 40, 2000
	for range 50 { // warm the connections and both run loops
		small(b.base)
		small(a.base + "")
	}
	var direct, via []time.Duration
	for i := range nSmall { // interleaved, so drift hits both alike
		if i%2 == 0 {
			direct = append(direct, small(b.base))
			via = append(via, small(a.base))
		} else {
			via = append(via, small(a.base))
			direct = append(direct, small(b.base))
		}
	}
	t.Logf("small requests (%d each, one at a time): direct p50 %s p99 %s; through the peer p50 %s p99 %s; the hop adds %s at p50",
		nSmall, pct(direct, .5), pct(direct, .99), pct(via, .5), pct(via, .99), pct(via, .5)-pct(direct, .5))

	var dFirst, vFirst, dTotal, vTotal []time.Duration
	var chunks int
	var aCPU, bCPU time.Duration // A's CPU while streams pass through it, B's while they come from it
	for range nStreams {
		b0 := cpuTime(t, b.cmd.Process.Pid)
		f, tot, c := stream(b.base, tokens)
		bCPU += cpuTime(t, b.cmd.Process.Pid) - b0
		dFirst, dTotal = append(dFirst, f), append(dTotal, tot)
		a0 := cpuTime(t, a.cmd.Process.Pid)
		f, tot, c2 := stream(a.base, tokens)
		aCPU += cpuTime(t, a.cmd.Process.Pid) - a0
		vFirst, vTotal = append(vFirst, f), append(vTotal, tot)
		if c != c2 {
			t.Fatalf("chunks: %d direct, %d through the peer", c, c2)
		}
		chunks = c
	}
	perChunk := func(d []time.Duration) time.Duration { return pct(d, .5) / time.Duration(chunks) }
	all := time.Duration(nStreams * chunks)
	t.Logf("streams of %d tokens (%d chunks, %d each): first chunk direct p50 %s, through the peer %s; whole stream direct p50 %s (%s a chunk), through the peer %s (%s a chunk); CPU a chunk: %s in B (serving it), %s in A (forwarding it)",
		tokens, chunks, nStreams, pct(dFirst, .5), pct(vFirst, .5), pct(dTotal, .5), perChunk(dTotal), pct(vTotal, .5), perChunk(vTotal), bCPU/all, aCPU/all)

	// Detection: B killed with nothing in flight (the poller finds it),
	// then with a request in flight (it checks at once), and B back.
	evs := readSSE(t, t.Context(), a.base+"/api/events", "")
	addr := strings.TrimPrefix(b.base, "http://")
	var idle, busy, back []time.Duration
	for i := range 6 {
		killed := time.Now()
		if err := b.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			code, _ := a.post("/v1/chat/completions", chat("b/m", false))
			if code != 502 && code != 503 {
				t.Fatalf("a request while b dies: %d", code)
			}
		}
		awaitEvent(t, evs, "peer", func(d string) bool { return strings.Contains(d, `"state":"down"`) })
		if i%2 == 1 {
			busy = append(busy, time.Since(killed))
		} else {
			idle = append(idle, time.Since(killed))
		}
		<-b.exit
		b = startServer(t, bcfg, "--listen", addr)
		up := time.Now()
		awaitEvent(t, evs, "peer", func(d string) bool { return strings.Contains(d, `"state":"up"`) })
		back = append(back, time.Since(up))
		b.mustChat("m")
	}
	t.Logf("peer killed, checked every %s: marked down after %v with nothing in flight, %v with a request; marked up %v after it listens again",
		interval, roundAll(idle), roundAll(busy), roundAll(back))
}

// cpuTime is a process's user and system CPU time so far, from
// /proc/PID/stat (clock ticks of 10 ms).
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	var utime, stime int64
	fmt.Sscan(f[11], &utime)
	fmt.Sscan(f[12], &stime)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

func roundAll(d []time.Duration) []time.Duration {
	out := make([]time.Duration, len(d))
	for i, x := range d {
		out[i] = x.Round(time.Millisecond)
	}
	return out
}
