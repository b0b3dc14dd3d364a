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
// SIGSTOP → the next request answered 200 (not for a peer, which stays
// stopped).
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
		pid, d := stopMidStream(b, s, victim)
		detect += d
		start := time.Now().Add(-d)
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

// A stopped peer, with a stream through A in flight: A's health checks
// (every 5 s, 2 s timeout, 3 in a row) find it hung and the stream ends
// with an error event saying so. detect-s only: the peer does not come
// back by itself (each round starts a new pair).
func BenchmarkHang_PeerSIGSTOP(b *testing.B) {
	var detect time.Duration
	for range b.N {
		peer := startServer(b, writeConfig(b, b.TempDir(), simModels))
		a := startServer(b, writeConfig(b, b.TempDir(), fmt.Sprintf("peers:\n  b: {proxy: %q, models: [a]}\n", peer.base)))
		a.mustChat("a")
		pid, d := stopMidStream(b, a, func() int { return peer.cmd.Process.Pid })
		detect += d
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	b.ReportMetric(detect.Seconds()/float64(b.N), "detect-s/op")
	fmt.Printf("%s: detect %.1f s (mean of %d)\n", b.Name(), detect.Seconds()/float64(b.N), b.N)
}

// stopMidStream opens a stream of model a through s, stops (SIGSTOP) the
// process victim names once its first token arrived, and returns that
// pid and the time until the stream ended, which must be with an error
// event.
func stopMidStream(b *testing.B, s *server, victim func() int) (int, time.Duration) {
	resp, err := http.Post(s.base+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"a","stream":true,"max_tokens":4000,"messages":[{"role":"user","content":"go"}]}`))
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
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
	d := time.Since(start)
	if !strings.Contains(string(rest), `"error"`) {
		b.Fatalf("the stream ended without an error event: %.300s", rest)
	}
	return pid, d
}
