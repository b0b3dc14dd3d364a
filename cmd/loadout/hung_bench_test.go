package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The time from a hang to the client's error and to the model serving
// again, with the default liveness settings (docs/BENCHMARKS.md):
//
//	make build && go test -run '^$' -bench Hang -benchtime 3x ./cmd/loadout
//
// detect-s is SIGSTOP → the open stream's end (an error event); serve-s is
// SIGSTOP → the next request answered 200.
func BenchmarkHang_ModelServerSIGSTOP(b *testing.B) {
	s := startServer(b, writeConfig(b, b.TempDir(), simModels))
	benchHang(b, s, func() int { return onePid(b, "a") })
}

// A stopped backend plugin: found by the next call with a deadline (the
// memory measurement every 5 s, bounded by 10 s); its servers die with it.
func BenchmarkHang_PluginSIGSTOP(b *testing.B) {
	s := startServer(b, writeConfig(b, b.TempDir(), simModels))
	benchHang(b, s, func() int { return s.pluginPid("sim") })
}

func benchHang(b *testing.B, s *server, victim func() int) {
	var detect, serve time.Duration
	for range b.N {
		s.mustChat("a")
		resp, err := http.Post(s.base+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"a","stream":true,"max_tokens":4000,"messages":[{"role":"user","content":"go"}]}`))
		if err != nil {
			b.Fatal(err)
		}
		r := bufio.NewReader(resp.Body)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				b.Fatalf("stream ended before its first token: %v", err)
			}
			if strings.Contains(line, `"content"`) {
				break
			}
		}
		pid := victim()
		start := time.Now()
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			b.Fatal(err)
		}
		rest, _ := io.ReadAll(r)
		resp.Body.Close()
		detect += time.Since(start)
		if !strings.Contains(string(rest), `"error"`) {
			b.Fatalf("the stream ended without an error event: %.300s", rest)
		}
		for {
			if code, _ := s.post("/v1/chat/completions", chat("a", false)); code == 200 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		serve += time.Since(start)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	b.ReportMetric(detect.Seconds()/float64(b.N), "detect-s/op")
	b.ReportMetric(serve.Seconds()/float64(b.N), "serve-s/op")
	fmt.Printf("%s: detect %.1f s, serve again %.1f s (mean of %d)\n", b.Name(), detect.Seconds()/float64(b.N), serve.Seconds()/float64(b.N), b.N)
}
