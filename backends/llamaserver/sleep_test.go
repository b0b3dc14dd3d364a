package llamaserver

import (
	"context"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/pagecache"
	"github.com/loadout-dev/loadout/plugins"
)

// realLlamaServer is llamaServer for tests that need llama.cpp's own
// llama-server: the shim has no --sleep-idle-seconds.
func realLlamaServer(t *testing.T) string {
	t.Helper()
	bin, real := llamaServer(t)
	if !real {
		t.Skip("LOADOUT_LLAMA_SERVER is not set: sleep needs the real llama-server (--sleep-idle-seconds); CI builds it with testdata/llamacpp/build_llama_server.sh")
	}
	return bin
}

func chatOK(t *testing.T, upstream string) {
	t.Helper()
	body := `{"model":"tiny","max_tokens":4,"messages":[{"role":"user","content":"hello"}]}`
	resp, err := http.Post(upstream+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	reply, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(reply), `"completion_tokens"`) {
		t.Fatalf("chat: %d %s", resp.StatusCode, reply)
	}
}

func residencyOf(t *testing.T, b *Backend, model string) plugins.Residency {
	t.Helper()
	r, err := b.Residency(context.Background(), model)
	if err != nil {
		t.Fatalf("Residency: %v", err)
	}
	return r
}

// TestLlamaServer_OnLlamaCpp_SleepWake runs the real llama-server with
// --sleep-idle-seconds: load, serve, sleep (level 2: the server frees its
// model), wake (it reloads), serve; the server falling asleep by itself
// and a request waking it; and a server killed asleep.
func TestLlamaServer_OnLlamaCpp_SleepWake(t *testing.T) {
	dir, _ := ggufFixtures(t)
	bin := realLlamaServer(t)
	b := New(quiet)
	defer b.Close()
	spec := serverSpec(t, bin, "tiny", map[string]any{
		"model": filepath.Join(dir, "tiny.gguf"), "ctx_size": 256, "n_gpu_layers": 0,
		"sleep_idle_seconds": 1, "extra_args": []string{"--threads", "1"},
	})
	ctx := context.Background()
	st, err := b.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	chatOK(t, st.Upstream)
	if err := b.Sleep(ctx, "tiny", plugins.SleepLevel1, 0); !errors.Is(err, plugins.ErrNotSupported) {
		t.Errorf("Sleep(1) = %v, want ErrNotSupported (llama-server keeps no copy in host RAM)", err)
	}

	start := time.Now()
	if err := b.Sleep(ctx, "tiny", plugins.SleepLevel2, 10*time.Second); err != nil {
		t.Fatalf("Sleep(2): %v", err)
	}
	t.Logf("asleep %s after the last request (sleep_idle_seconds 1)", time.Since(start).Round(time.Millisecond))
	if r := residencyOf(t, b, "tiny"); r.State != plugins.ResidencyAsleep || r.Level != plugins.SleepLevel2 {
		t.Errorf("Residency = %+v, want asleep at level 2", r)
	}
	if h, err := b.Health(ctx, "tiny"); err != nil || !h.Ready {
		t.Errorf("Health asleep = %+v, %v; want ready (llama-server's /health answers while it sleeps)", h, err)
	}
	start = time.Now()
	if err := b.Wake(ctx, "tiny", 10*time.Second); err != nil {
		t.Fatalf("Wake: %v", err)
	}
	t.Logf("awake in %s", time.Since(start).Round(time.Millisecond))
	if r := residencyOf(t, b, "tiny"); r.State != plugins.ResidencyRunning {
		t.Errorf("Residency after Wake = %+v, want running", r)
	}
	chatOK(t, st.Upstream)

	// Asleep by itself, while counted running: Residency says so, and a
	// request wakes it.
	deadline := time.Now().Add(10 * time.Second)
	for residencyOf(t, b, "tiny").State != plugins.ResidencyAsleep {
		if time.Now().After(deadline) {
			t.Fatal("the idle server did not fall asleep by itself")
		}
		time.Sleep(50 * time.Millisecond)
	}
	chatOK(t, st.Upstream)

	// Killed asleep: the exit is reported as for a running server.
	if err := b.Sleep(ctx, "tiny", plugins.SleepLevel2, 10*time.Second); err != nil {
		t.Fatalf("Sleep(2): %v", err)
	}
	if err := syscall.Kill(st.Pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	exit, err := b.Wait(ctx, "tiny")
	if err != nil || exit.Requested || exit.Signal == "" {
		t.Fatalf("exit %+v %v, want an unrequested exit by a signal", exit, err)
	}
	if r := residencyOf(t, b, "tiny"); r.State != plugins.ResidencyStopped {
		t.Errorf("Residency = %+v, want stopped", r)
	}
	if err := b.Wake(ctx, "tiny", time.Second); !errors.Is(err, plugins.ErrNotRunning) {
		t.Errorf("Wake of a dead server = %v, want ErrNotRunning", err)
	}
}

// Without sleep_idle_seconds the server cannot sleep: Sleep says so at
// once, and the host stops the model instead.
func TestLlamaServer_OnLlamaCpp_NoSleepConfigured(t *testing.T) {
	dir, _ := ggufFixtures(t)
	bin, _ := llamaServer(t)
	b := New(quiet)
	defer b.Close()
	spec := serverSpec(t, bin, "tiny", map[string]any{
		"model": filepath.Join(dir, "tiny.gguf"), "ctx_size": 256, "extra_args": []string{"--threads", "1"},
	})
	ctx := context.Background()
	if _, err := b.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if err := b.Sleep(ctx, "tiny", plugins.SleepLevel2, 0); !errors.Is(err, plugins.ErrNotSupported) {
		t.Errorf("Sleep = %v, want ErrNotSupported", err)
	}
	if r := residencyOf(t, b, "tiny"); r.State != plugins.ResidencyRunning {
		t.Errorf("Residency = %+v, want running", r)
	}
}

// BenchmarkLlamaServer_OnLlamaCpp_ColdStartVsWake measures, on the real
// llama-server and CPU, a cold start of the large fixture (38 MB GGUF,
// page cache warm: Start until /health answers, then Stop) against its
// nearest-equivalent wake (a level 2 sleep's Wake: the model reloaded in
// the living process). The sleep itself (an idle second) is not timed.
//
//	LOADOUT_LLAMA_SERVER=... go test -run '^$' -bench ColdStartVsWake -benchtime 10x ./backends/llamaserver
func BenchmarkLlamaServer_OnLlamaCpp_ColdStartVsWake(b *testing.B) {
	dir, _ := ggufFixtures(b)
	bin, real := llamaServer(b)
	if !real {
		b.Skip("LOADOUT_LLAMA_SERVER is not set: the benchmark measures the real llama-server")
	}
	be := New(quiet)
	defer be.Close()
	ctx := context.Background()
	spec := func(sleep bool) plugins.ModelSpec {
		o := map[string]any{"model": filepath.Join(dir, "large.gguf"), "ctx_size": 256, "n_gpu_layers": 0,
			"extra_args": []string{"--threads", "1"}}
		if sleep {
			o["sleep_idle_seconds"] = 1
		}
		return serverSpec(b, bin, "large", o)
	}
	// coldStart is one timed Start of s and its untimed Stop.
	coldStart := func(b *testing.B, s plugins.ModelSpec) {
		if _, err := be.Start(ctx, s); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := be.Stop(ctx, "large", 10*time.Second); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.Run("cold_start", func(b *testing.B) {
		s := spec(false)
		for b.Loop() {
			coldStart(b, s)
		}
	})
	// The same cold start with the GGUF dropped from the page cache first
	// (posix_fadvise DONTNEED; what read-ahead, host/pagecache, saves),
	// and with it dropped and then read ahead while nothing is timed.
	for _, readAhead := range []bool{false, true} {
		name := "cold_start_page_cache_dropped"
		if readAhead {
			name = "cold_start_dropped_then_read_ahead"
		}
		b.Run(name, func(b *testing.B) {
			s := spec(false)
			gguf := []string{filepath.Join(dir, "large.gguf")}
			for b.Loop() {
				b.StopTimer()
				if _, err := pagecache.Drop(gguf); err != nil {
					b.Fatal(err)
				}
				if readAhead {
					if _, err := pagecache.Warm(gguf); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				coldStart(b, s)
			}
		})
	}
	b.Run("wake_level_2", func(b *testing.B) {
		if _, err := be.Start(ctx, spec(true)); err != nil {
			b.Fatal(err)
		}
		defer func() { _ = be.Stop(ctx, "large", 10*time.Second) }()
		for b.Loop() {
			b.StopTimer()
			if err := be.Sleep(ctx, "large", plugins.SleepLevel2, 10*time.Second); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if err := be.Wake(ctx, "large", 30*time.Second); err != nil {
				b.Fatal(err)
			}
		}
	})
}
