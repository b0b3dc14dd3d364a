package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
)

// llama-swap's captureBuffer: a model request and its response are kept,
// compressed, by request id; credentials are redacted.
func TestCaptures_KeptByRequestID(t *testing.T) {
	e := newEnv(t, envOpts{captureBuffer: 1 << 20})
	body := chat("a")
	resp, answer := e.do(request{path: "/v1/chat/completions", body: body, headers: map[string]string{"Authorization": "Bearer s3cret"}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("chat: %d %s", resp.StatusCode, answer)
	}
	id := resp.Header.Get(requestIDHeader)
	r2, b := e.do(request{method: http.MethodGet, path: "/api/captures/" + id})
	if r2.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/captures/%s: %d %s", id, r2.StatusCode, b)
	}
	var c Capture
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	switch {
	case c.ID != id || c.ReqPath != "/v1/chat/completions" || c.Status != 200:
		t.Fatalf("capture %+v: want id %s, the path, 200", c, id)
	case string(c.ReqBody) != body:
		t.Fatalf("request body %q, want %q", c.ReqBody, body)
	case !bytes.Equal(c.RespBody, answer):
		t.Fatalf("response body %q, want what the client got, %q", c.RespBody, answer)
	case c.ReqHeaders["Authorization"] != "[REDACTED]":
		t.Fatalf("Authorization captured as %q, want it redacted", c.ReqHeaders["Authorization"])
	case c.RespHeaders["Content-Type"] != "application/json":
		t.Fatalf("response headers %v", c.RespHeaders)
	}
	if r3, b := e.do(request{method: http.MethodGet, path: "/api/captures/nope"}); r3.StatusCode != http.StatusNotFound || openAIError(t, b).Code != "capture_not_found" {
		t.Fatalf("unknown id: %d %s", r3.StatusCode, b)
	}
}

// captureBuffer: 0 turns capture off.
func TestCaptures_Off(t *testing.T) {
	e := newEnv(t, envOpts{})
	resp, _ := e.do(request{path: "/v1/chat/completions", body: chat("a")})
	r2, b := e.do(request{method: http.MethodGet, path: "/api/captures/" + resp.Header.Get(requestIDHeader)})
	if r2.StatusCode != http.StatusNotFound || openAIError(t, b).Code != "capture_off" {
		t.Fatalf("capture off: %d %s", r2.StatusCode, b)
	}
}

// The ring never holds more than its budget: the oldest captures go
// first, one larger than the budget is not kept, and a repeated id
// replaces its capture.
func TestCaptureRing_BudgetDropsOldest(t *testing.T) {
	r := newCaptureRing(100)
	for i, id := range []string{"a", "b", "c"} {
		if !r.add(id, make([]byte, 40)) {
			t.Fatalf("capture %d not kept", i)
		}
	}
	if _, ok := r.get("a"); ok {
		t.Fatal("a kept past the budget, want it dropped for c")
	}
	if used, n := r.size(); used != 80 || n != 2 {
		t.Fatalf("ring holds %d bytes in %d captures, want 80 in 2", used, n)
	}
	if r.add("big", make([]byte, 101)) {
		t.Fatal("a capture over the budget was kept")
	}
	r.add("b", make([]byte, 10))
	if used, n := r.size(); used != 50 || n != 2 {
		t.Fatalf("after replacing b: %d bytes in %d captures, want 50 in 2", used, n)
	}
	r.add("d", make([]byte, 60)) // drops the stale b entry, then c
	if _, ok := r.get("b"); !ok {
		t.Fatal("b (replaced) dropped before c")
	}
	if used, _ := r.size(); used > 100 {
		t.Fatalf("ring holds %d bytes, over its budget of 100", used)
	}
}

// BenchmarkProxy_Capture is BenchmarkProxy_Small (wasm policies) with
// capture off and on (captureBuffer 10 MB, llama-swap's default).
func BenchmarkProxy_Capture(b *testing.B) {
	for _, buf := range []int64{0, 10 << 20} {
		b.Run(fmt.Sprintf("captureBuffer=%dMiB", buf>>20), func(b *testing.B) {
			e := newBenchEnvWith(b, envOpts{captureBuffer: buf})
			client := benchClient(1)
			defer client.CloseIdleConnections()
			target := e.ts.URL + "/v1/chat/completions"
			b.ReportAllocs()
			for b.Loop() {
				if err := post(client, target); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
		})
	}
}

// BenchmarkCaptureRing_Full fills a 10 MiB ring with captures of a
// 4 KiB chat exchange and reports what it holds: the compressed bytes
// (the budget), the Go heap it takes (live heap after a GC, less the
// heap before), and the captures kept.
func BenchmarkCaptureRing_Full(b *testing.B) {
	prompt := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 45)
	c := Capture{ReqPath: "/v1/chat/completions", ReqHeaders: map[string]string{"Content-Type": "application/json"},
		ReqBody: []byte(chat(prompt)), RespHeaders: map[string]string{"Content-Type": "application/json"}, Status: 200}
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		r := newCaptureRing(10 << 20)
		for i := 0; ; i++ {
			c.ID = fmt.Sprintf("req-%d", i)
			c.RespBody = fmt.Appendf(nil, `{"id":"%d","choices":[{"message":{"content":%q}}]}`, i, prompt)
			data, err := compressCapture(&c)
			if err != nil {
				b.Fatal(err)
			}
			r.add(c.ID, data)
			if _, n := r.size(); n < i/2 { // wrapped well past full
				break
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		used, n := r.size()
		b.ReportMetric(float64(used), "ring-bytes")
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc), "heap-bytes")
		b.ReportMetric(float64(n), "captures")
		raw, _ := json.Marshal(c)
		b.ReportMetric(float64(len(raw)), "raw-bytes/capture")
		runtime.KeepAlive(r)
	}
}
