package llamaserver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/plugins"
)

// The backend against real llama.cpp. Where LOADOUT_LLAMA_SERVER names
// llama.cpp's own llama-server (CI builds it: .ci/run runs
// testdata/llamacpp/build_llama_server.sh), the tests start that binary;
// elsewhere testdata/llamacpp/llama_server_shim.py stands in for it. The
// shim takes llama-server's flags, answers /health with 503 while the
// model loads and 200 after, exits with the loader's error on stderr, and
// serves the OpenAI endpoints with llama.cpp through llama-cpp-python.
// Only TestLlamaServer_ShimOnLlamaCpp_NeverHealthy needs the shim itself
// (a load held for a minute, --shim-load-delay).

const shim = "../../testdata/llamacpp/llama_server_shim.py"

// requireShim skips (fails under LOADOUT_REQUIRE_LLAMACPP=1) without
// llama-cpp-python and returns the GGUF fixtures' directory.
func requireShim(t testing.TB) string {
	t.Helper()
	dir, _ := ggufFixtures(t)
	if out, err := exec.Command("python3", "-c", "import llama_cpp.server.app, uvicorn").CombinedOutput(); err != nil {
		msg := fmt.Sprintf("llama-cpp-python[server] is not importable (pip install -r testdata/llamacpp/requirements.txt): %v: %s", err, lastLine(string(out)))
		if os.Getenv("LOADOUT_REQUIRE_LLAMACPP") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return dir
}

// llamaServer returns the server binary the tests run and whether it is
// the real llama-server: $LOADOUT_LLAMA_SERVER when set (it must then run:
// `--version` succeeds), else the shim (skipping without
// llama-cpp-python). Under LOADOUT_REQUIRE_LLAMACPP=1 the real binary
// must be there.
func llamaServer(t testing.TB) (bin string, real bool) {
	t.Helper()
	if bin := os.Getenv("LOADOUT_LLAMA_SERVER"); bin != "" {
		if out, err := exec.Command(bin, "--version").CombinedOutput(); err != nil {
			t.Fatalf("LOADOUT_LLAMA_SERVER=%s does not run: %v: %s", bin, err, lastLine(string(out)))
		}
		return bin, true
	}
	if os.Getenv("LOADOUT_REQUIRE_LLAMACPP") == "1" {
		t.Fatal("LOADOUT_LLAMA_SERVER is not set: build llama-server with testdata/llamacpp/build_llama_server.sh and export its path")
	}
	requireShim(t)
	bin, err := filepath.Abs(shim)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("LOADOUT_LLAMA_SERVER is not set: running the shim %s", shim)
	return bin, false
}

// freePort returns a free loopback port below the kernel's ephemeral range
// (32768 and up): the server binds it a second later, and a port in that
// range may meanwhile be taken as the source port of an outgoing connection.
func freePort(t testing.TB) int {
	t.Helper()
	for range 100 {
		port := 20000 + rand.IntN(12000)
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
			l.Close()
			return port
		}
	}
	t.Fatal("no free loopback port between 20000 and 32000")
	return 0
}

func shimSpec(t *testing.T, model string, options map[string]any) plugins.ModelSpec {
	t.Helper()
	bin, err := filepath.Abs(shim)
	if err != nil {
		t.Fatal(err)
	}
	return serverSpec(t, bin, model, options)
}

// serverSpec is a spec for model that runs bin with options.
func serverSpec(t testing.TB, bin, model string, options map[string]any) plugins.ModelSpec {
	t.Helper()
	options["binary"] = bin
	raw, err := json.Marshal(options)
	if err != nil {
		t.Fatal(err)
	}
	return plugins.ModelSpec{Model: model, Port: freePort(t), Options: raw, HealthCheckTimeout: 60 * time.Second}
}

func TestLlamaServer_OnLlamaCpp_StartServeStop(t *testing.T) {
	dir, _ := ggufFixtures(t)
	bin, real := llamaServer(t)
	b := New(quiet)
	defer b.Close()
	extra := []string{"--threads", "1"}
	if !real {
		// The shim's load is delayed so that /health answers 503 for a
		// while first.
		extra = append(extra, "--shim-load-delay", "0.5")
	}
	spec := serverSpec(t, bin, "tiny", map[string]any{
		"model": filepath.Join(dir, "tiny.gguf"), "ctx_size": 256, "n_gpu_layers": 0, "extra_args": extra,
	})
	ctx := context.Background()
	started := time.Now()
	st, err := b.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(started); !real && took < 500*time.Millisecond {
		t.Fatalf("Start returned after %v, before the model loaded", took)
	}
	if want := fmt.Sprintf("http://127.0.0.1:%d", spec.Port); st.Upstream != want || len(st.Pids) != 1 {
		t.Fatalf("started %+v, want upstream %s and one pid", st, want)
	}
	if h, err := b.Health(ctx, "tiny"); err != nil || !h.Ready {
		t.Fatalf("health %+v %v", h, err)
	}
	body := `{"model":"tiny","max_tokens":8,"messages":[{"role":"user","content":"hello"}]}`
	resp, err := http.Post(st.Upstream+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	reply, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(reply), `"completion_tokens"`) {
		t.Fatalf("chat: %d %s", resp.StatusCode, reply)
	}
	if err := b.Stop(ctx, "tiny", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	exit, err := b.Wait(ctx, "tiny")
	if err != nil || !exit.Requested {
		t.Fatalf("exit %+v %v", exit, err)
	}
}

// TestLlamaServer_OnLlamaCpp_Crash: a server killed while serving is an
// exit the backend reports (not requested, by its signal), and the model
// starts again on the same port.
func TestLlamaServer_OnLlamaCpp_Crash(t *testing.T) {
	dir, _ := ggufFixtures(t)
	bin, _ := llamaServer(t)
	b := New(quiet)
	defer b.Close()
	spec := serverSpec(t, bin, "tiny", map[string]any{
		"model": filepath.Join(dir, "tiny.gguf"), "ctx_size": 256, "extra_args": []string{"--threads", "1"},
	})
	ctx := context.Background()
	st, err := b.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(st.Pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	exit, err := b.Wait(ctx, "tiny")
	if err != nil || exit.Requested || exit.Signal == "" {
		t.Fatalf("exit %+v %v, want an unrequested exit by a signal", exit, err)
	}
	if _, err := b.Start(ctx, spec); err != nil {
		t.Fatalf("start after the crash: %v", err)
	}
	if err := b.Stop(ctx, "tiny", 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestLlamaServer_OnLlamaCpp_ExitDuringLoad(t *testing.T) {
	dir, _ := ggufFixtures(t)
	bin, _ := llamaServer(t)
	// A GGUF cut short: it passes Start's quick check, and llama.cpp's
	// loader fails on it.
	whole, err := os.ReadFile(filepath.Join(dir, "tiny.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(t.TempDir(), "cut.gguf")
	if err := os.WriteFile(cut, whole[:len(whole)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	b := New(quiet)
	defer b.Close()
	_, err = b.Start(context.Background(), serverSpec(t, bin, "cut", map[string]any{"model": cut}))
	if err == nil || !strings.Contains(err.Error(), "exited while starting") || !strings.Contains(err.Error(), "failed to load model") {
		t.Fatalf("error %v, want the server's exit with its stderr tail", err)
	}
}

// TestLlamaServer_ShimOnLlamaCpp_NeverHealthy runs the shim, whose load
// can be held (--shim-load-delay), real llama-server or not.
func TestLlamaServer_ShimOnLlamaCpp_NeverHealthy(t *testing.T) {
	dir := requireShim(t)
	b := New(quiet)
	defer b.Close()
	spec := shimSpec(t, "slow", map[string]any{
		"model": filepath.Join(dir, "tiny.gguf"), "extra_args": []string{"--shim-load-delay", "60"},
	})
	spec.HealthCheckTimeout = 4 * time.Second
	errc := make(chan error, 1)
	go func() {
		_, err := b.Start(context.Background(), spec)
		errc <- err
	}()
	// While Start waits, the server is up and says it is loading.
	saw503 := false
	for deadline := time.Now().Add(4 * time.Second); !saw503 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/health", spec.Port))
		if err == nil {
			saw503 = resp.StatusCode == http.StatusServiceUnavailable
			resp.Body.Close()
		}
	}
	err := <-errc
	if !saw503 {
		t.Error("the server never answered 503 while loading")
	}
	if err == nil || !strings.Contains(err.Error(), "not ready after 4s") {
		t.Fatalf("error %v, want a health-check timeout", err)
	}
	if exit, err := b.Wait(context.Background(), "slow"); err != nil || exit.Code == 0 && exit.Signal == "" {
		t.Fatalf("the server was not killed: %+v %v", exit, err)
	}
}
