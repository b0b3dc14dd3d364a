package proxy

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/config"
)

// benchBody is a small chat completion request, the proxy's common case.
const benchBody = `{"model":"a","messages":[{"role":"user","content":"hi"}],"max_tokens":8}`

// newBenchEnv is a Loadout with model a loaded and room for many
// concurrent requests, logging only warnings. native swaps the Wasm
// policies for a minimal Go scheduler.
func newBenchEnv(tb testing.TB, native bool) *env {
	return newBenchEnvWith(tb, envOpts{native: native})
}

// newBenchEnvWith is newBenchEnv with o's other options.
func newBenchEnvWith(tb testing.TB, o envOpts) *env {
	o.limits = map[string]uint32{"a": 1024}
	o.logger = slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))
	e := newEnv(tb, o)
	resp := e.send(request{path: "/v1/chat/completions", body: benchBody})
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("warm-up: status %d", resp.StatusCode)
	}
	return e
}

// post sends one small request on a keep-alive client and drains the
// answer.
func post(client *http.Client, target string) error {
	resp, err := client.Post(target, "application/json", strings.NewReader(benchBody))
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %d", resp.StatusCode)
	}
	return err
}

func benchClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:               nil,
		MaxIdleConns:        conns * 2,
		MaxIdleConnsPerHost: conns * 2,
		DisableCompression:  true,
	}}
}

// BenchmarkProxy_Small is one small non-streaming request through the
// whole path: HTTP in, body parse, router run loop, reverse proxy to a
// model server on 127.0.0.1, release. "wasm" runs the built-in fifo and
// group policies through the Wasm runtime, as Loadout does; "native" runs
// a minimal Go scheduler instead, so the difference is the policies' cost.
func BenchmarkProxy_Small(b *testing.B) {
	for _, native := range []bool{false, true} {
		name := "wasm"
		if native {
			name = "native"
		}
		b.Run(name, func(b *testing.B) {
			e := newBenchEnv(b, native)
			client := benchClient(1)
			defer client.CloseIdleConnections()
			target := e.ts.URL + "/v1/chat/completions"
			b.ReportAllocs()
			start := time.Now()
			n := 0
			for b.Loop() {
				if err := post(client, target); err != nil {
					b.Fatal(err)
				}
				n++
			}
			elapsed := time.Since(start)
			b.ReportMetric(float64(elapsed.Nanoseconds())/float64(n), "ns/req")
			b.ReportMetric(float64(n)/elapsed.Seconds(), "req/s")
		})
	}
}

// BenchmarkProxy_StreamChunk is the cost of one streamed chunk: one SSE
// stream of 200 content chunks per iteration, each flushed by the model
// server 500 µs after the last (as a model server sends tokens: one write
// each, never coalesced), through Loadout ("loadout") and straight from
// the model server ("direct"), read by a client in the same process.
// cpu-ns/chunk is the process's CPU time (user and system) per chunk,
// which client, proxy and model server share: the proxy's own is the
// difference between the two, or its share of a CPU profile:
//
//	go test ./host/proxy -run '^$' -bench StreamChunk -benchtime 10x -cpuprofile cpu.prof
func BenchmarkProxy_StreamChunk(b *testing.B) {
	const chunks = 200
	e := newBenchEnv(b, false)
	body := `{"model":"a","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	for _, path := range []string{"loadout", "direct"} {
		b.Run(path, func(b *testing.B) {
			target := e.ts.URL + "/v1/chat/completions"
			if path == "direct" {
				target = e.status("a").Upstream + "/v1/chat/completions"
			}
			client := benchClient(1)
			defer client.CloseIdleConnections()
			cpu0 := cpuTime(b)
			for b.Loop() {
				req, _ := http.NewRequest(http.MethodPost, target, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Test-Mode", "chunks")
				req.Header.Set("X-Test-Chunks", fmt.Sprint(chunks))
				req.Header.Set("X-Test-Gap", "500us")
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK || n < chunks*50 {
					b.Fatalf("stream: status %d, %d bytes, %v", resp.StatusCode, n, err)
				}
			}
			b.ReportMetric(float64((cpuTime(b)-cpu0).Nanoseconds())/float64(b.N*chunks), "cpu-ns/chunk")
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// overheadRun is one row of the proxy-overhead report.
type overheadRun struct {
	path        string
	concurrency int
	requests    int
	elapsed     time.Duration
	latencies   []time.Duration // sorted
}

func (r overheadRun) percentile(p float64) time.Duration {
	return r.latencies[int(float64(len(r.latencies)-1)*p)]
}

// measure sends n requests to target from conc keep-alive clients at once.
func measure(tb testing.TB, target string, conc, n int) overheadRun {
	client := benchClient(conc)
	defer client.CloseIdleConnections()
	// Warm the connections up.
	for range conc {
		if err := post(client, target); err != nil {
			tb.Fatalf("%s: %v", target, err)
		}
	}
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				t0 := time.Now()
				if err := post(client, target); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				lat[i] = time.Since(t0)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := failed.Load(); err != nil {
		tb.Fatalf("%s at concurrency %d: %v", target, conc, *err)
	}
	slices.Sort(lat)
	return overheadRun{concurrency: conc, requests: n, elapsed: elapsed, latencies: lat}
}

// TestProxyOverheadReport is the three-way proxy benchmark: the same small
// request sent straight to a model server, through a bare
// httputil.ReverseProxy (same transport settings as Loadout's), and
// through Loadout (router, Wasm policies, metrics, logging), each at 1 and
// 32 concurrent keep-alive clients. A fourth row runs Loadout with a
// minimal Go scheduler in place of the Wasm policies, to show what the
// policies cost. It prints a markdown table. Skipped
// unless LOADOUT_BENCH=1 (LOADOUT_BENCH_N sets the requests per row,
// default 20000):
//
//	LOADOUT_BENCH=1 go test -run TestProxyOverheadReport -v ./host/proxy
func TestProxyOverheadReport(t *testing.T) {
	if os.Getenv("LOADOUT_BENCH") != "1" {
		t.Skip("set LOADOUT_BENCH=1 to run the proxy overhead benchmark")
	}
	n := 20000
	if s := os.Getenv("LOADOUT_BENCH_N"); s != "" {
		if _, err := fmt.Sscan(s, &n); err != nil || n <= 0 {
			t.Fatalf("LOADOUT_BENCH_N=%q", s)
		}
	}
	e := newBenchEnv(t, false)
	native := newBenchEnv(t, true)
	upstream, err := url.Parse(e.status("a").Upstream)
	if err != nil || upstream.Host == "" {
		t.Fatalf("model a's upstream %q: %v", e.status("a").Upstream, err)
	}
	bare := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(upstream) },
		Transport:     newTransport(config.DefaultTimeouts),
		FlushInterval: -1,
	})
	defer bare.Close()

	paths := []struct{ name, url string }{
		{"direct", upstream.String() + "/v1/chat/completions"},
		{"httputil.ReverseProxy", bare.URL + "/v1/chat/completions"},
		{"Loadout", e.ts.URL + "/v1/chat/completions"},
		{"Loadout, Go scheduler instead of Wasm", native.ts.URL + "/v1/chat/completions"},
	}
	var runs []overheadRun
	for _, conc := range []int{1, 32} {
		for _, p := range paths {
			r := measure(t, p.url, conc, n)
			r.path = p.name
			runs = append(runs, r)
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n| path | clients | requests | req/s | p50 | p99 |\n|---|---:|---:|---:|---:|---:|\n")
	for _, r := range runs {
		fmt.Fprintf(&sb, "| %s | %d | %d | %.0f | %s | %s |\n", r.path, r.concurrency, r.requests,
			float64(r.requests)/r.elapsed.Seconds(), round(r.percentile(0.50)), round(r.percentile(0.99)))
	}
	fmt.Print(sb.String())
}

func round(d time.Duration) string {
	switch {
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	}
}

// BenchmarkProxy_Filters is BenchmarkProxy_Small's request for a warm
// model with and without llama-swap's filters (filtersA: two fields
// stripped, one replaced in place, one appended), one client ("c1") and
// 32 in parallel ("c32"): the filters' cost per request is the
// difference between "plain" and "filters" at the same concurrency.
//
//	go test ./host/proxy -run '^$' -bench Proxy_Filters -benchtime 3000x
func BenchmarkProxy_Filters(b *testing.B) {
	for _, filtered := range []bool{false, true} {
		for _, conc := range []int{1, 32} {
			name := fmt.Sprintf("plain/c%d", conc)
			if filtered {
				name = fmt.Sprintf("filters/c%d", conc)
			}
			b.Run(name, func(b *testing.B) {
				e := newEnv(b, envOpts{
					limits: map[string]uint32{"a": 1024},
					logger: slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn})),
					edit: func(m *ModelEntry) {
						if filtered && m.ID == "a" {
							m.Filters = filtersA
						}
					},
				})
				client := benchClient(conc)
				defer client.CloseIdleConnections()
				target := e.ts.URL + "/v1/chat/completions"
				if err := post(client, target); err != nil { // loads a
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.SetParallelism((conc + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
				start := time.Now()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := post(client, target); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N), "ns/req")
			})
		}
	}
}

// chatBody is a chat completion request of n messages of about 200 bytes
// each, as a long conversation sends it.
func chatBody(n int) []byte {
	var sb strings.Builder
	sb.WriteString(`{"model":"a","stream":true,"max_tokens":256,"temperature":0.7,"messages":[`)
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		fmt.Fprintf(&sb, `{"role":%q,"content":%q}`, role, strings.Repeat("lorem ipsum ", 16))
	}
	sb.WriteString(`]}`)
	return []byte(sb.String())
}

// BenchmarkParseModelRequest is the one pass over an inference request's
// JSON body on the warm path: finding the model and the extension fields
// and checking the body against the endpoint's schema. "small" is
// benchBody; "chat100" a 100-message conversation (about 22 KB).
//
//	go test ./host/proxy -run '^$' -bench ParseModelRequest -benchmem
func BenchmarkParseModelRequest(b *testing.B) {
	for _, c := range []struct {
		name string
		body []byte
	}{{"small", []byte(benchBody)}, {"chat100", chatBody(100)}} {
		b.Run(c.name, func(b *testing.B) {
			r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
			r.Header.Set("Content-Type", "application/json")
			b.SetBytes(int64(len(c.body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, e := parseModelRequest(r, c.body, schemas["/v1/chat/completions"], nil); e != nil {
					b.Fatal(e)
				}
			}
		})
	}
}
