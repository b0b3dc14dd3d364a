package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// exampleConfig writes a config serving tiny and small through the example
// backend plugin (examples/llamacpp-python), one at a time, with extra
// appended to tiny's options.
func exampleConfig(t *testing.T, example, ggufDir, extra string) string {
	t.Helper()
	cfg := fmt.Sprintf(`healthCheckTimeout: 60
startPort: %d
gpus: [{name: sim0, memory: 8GiB}]
models:
  tiny:
    backend: %s
    options:
      model: %s
      n_ctx: 256
      n_threads: 1%s
  small:
    backend: %s
    options: {model: %s, n_ctx: 512, n_threads: 1}
routing:
  scheduler: {use: fifo}
  router:
    use: group
    settings: {groups: {one: {swap: true, exclusive: true, members: [tiny, small]}}}
`, lowFreePort(t, 4), example, filepath.Join(ggufDir, "tiny.gguf"), extra, example, filepath.Join(ggufDir, "small.gguf"))
	p := filepath.Join(t.TempDir(), "loadout.yaml")
	if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// The example backend end to end through `loadout serve`: its estimate is
// the model's VRAM need, a request loads and is served by a real
// llama_cpp.server, a request for the other model swaps, and a server that
// crashes is started again by the next request.
func TestBackendExample_EndToEnd(t *testing.T) {
	ggufDir := requireLlamaCpp(t)
	_, example := buildTestBinaries(t)
	s := startLlamaCpp(t, exampleConfig(t, example, ggufDir, ""))

	_, body := s.get("/api/models")
	fi, err := os.Stat(filepath.Join(ggufDir, "tiny.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf(`"vram_bytes":%d`, uint64(fi.Size())+256*64<<10); !strings.Contains(body, want) {
		t.Errorf("/api/models lacks tiny's estimate %s:\n%s", want, body)
	}

	chat := func(model string) {
		t.Helper()
		code, body := s.post("/v1/chat/completions", llamaChat(model, 4, false))
		var resp struct {
			Choices []json.RawMessage `json:"choices"`
		}
		if code != 200 || json.Unmarshal([]byte(body), &resp) != nil || len(resp.Choices) != 1 {
			t.Fatalf("chat %s: %d %s", model, code, body)
		}
	}
	chat("tiny")
	tiny := oneLlamaPid(t, "tiny")
	chat("small") // exclusive: tiny goes
	small := oneLlamaPid(t, "small")
	eventually(t, "tiny's server to exit", func() bool { return !alive(tiny) })

	if err := syscall.Kill(small, syscall.SIGKILL); err != nil { // the server crashes
		t.Fatal(err)
	}
	eventually(t, "the crash to be noticed", func() bool { return strings.Contains(s.log(), "model server exited unexpectedly") })
	chat("small")
	if again := oneLlamaPid(t, "small"); again == small {
		t.Fatalf("small was not restarted after its crash (pid %d)", small)
	}
}

// Options the example backend does not know are config errors naming the
// key, at its line.
func TestBackendExample_UnknownOptionAtItsLine(t *testing.T) {
	_, example := buildTestBinaries(t)
	cfg := exampleConfig(t, example, t.TempDir(), "\n      n_ctxx: 5")
	out, err := exec.Command(loadoutBin, "config", "check", cfg).CombinedOutput()
	want := cfg + ":11:7: models.tiny.options.n_ctxx: unknown option (known: extra_args, model, n_ctx, n_gpu_layers, n_threads, python)"
	if err == nil || !strings.Contains(string(out), want) {
		t.Fatalf("config check: %v\n%s\nwant %q", err, out, want)
	}
}
