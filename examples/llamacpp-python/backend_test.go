package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/plugins"
)

// Validate names every unknown key and every bad value, and reads no file.
func TestValidate_Problems(t *testing.T) {
	b := New(slog.New(slog.DiscardHandler))
	for _, tc := range []struct {
		options string
		want    []string
	}{
		{`{"model": "/no/such/file.gguf"}`, nil},
		{`{}`, []string{"model: required: the GGUF file to serve"}},
		{`{"model": "m.gguf", "n_ctxx": 5, "threads": 2}`, []string{"n_ctxx: unknown option", "threads: unknown option"}},
		{`{"model": "m.gguf", "n_ctx": "big"}`, []string{"n_ctx: wrong type: want an integer"}},
		{`{"model": "m.gguf", "n_ctx": 0, "n_gpu_layers": -2}`, []string{"n_ctx: must be positive, got 0", "n_gpu_layers: must be -1 (all) or more, got -2"}},
		{`[1]`, []string{"options must be a mapping"}},
	} {
		problems, err := b.Validate(context.Background(), plugins.ModelSpec{Model: "m", Options: []byte(tc.options)})
		if err != nil {
			t.Fatal(err)
		}
		if len(problems) != len(tc.want) {
			t.Errorf("Validate(%s) = %v, want %d problems %q", tc.options, problems, len(tc.want), tc.want)
			continue
		}
		for i, p := range problems {
			if !strings.HasPrefix(p.String(), tc.want[i]) {
				t.Errorf("Validate(%s)[%d] = %q, want it to start %q", tc.options, i, p, tc.want[i])
			}
		}
	}
}

// ggufFixture returns a tiny GGUF model written by Loadout's
// testdata/llamacpp/make_gguf.py ($LOADOUT_MAKE_GGUF, else the copy two
// directories up, as in Loadout's own tree), or skips t where
// llama-cpp-python or the script is missing (fails it under
// LOADOUT_REQUIRE_LLAMACPP=1, as Loadout's CI sets).
func ggufFixture(t *testing.T) string {
	t.Helper()
	script := os.Getenv("LOADOUT_MAKE_GGUF")
	if script == "" {
		script = "../../testdata/llamacpp/make_gguf.py"
	}
	missing := ""
	if out, err := exec.Command("python3", "-c", "import llama_cpp.server, gguf, numpy").CombinedOutput(); err != nil {
		missing = "llama-cpp-python is not importable: " + strings.TrimSpace(string(out))
	} else if _, err := os.Stat(script); err != nil {
		missing = "no GGUF fixture script (set LOADOUT_MAKE_GGUF to Loadout's testdata/llamacpp/make_gguf.py): " + err.Error()
	}
	if missing != "" {
		if os.Getenv("LOADOUT_REQUIRE_LLAMACPP") == "1" {
			t.Fatal(missing)
		}
		t.Skip(missing)
	}
	dir := t.TempDir()
	if out, err := exec.Command("python3", script, "--out", dir).CombinedOutput(); err != nil {
		t.Fatalf("make_gguf.py: %v\n%s", err, out)
	}
	return filepath.Join(dir, "tiny.gguf")
}

// The backend runs a real llama_cpp.server: Start returns once it serves,
// Estimate is the file plus the KV allowance, Stop ends it, and a server
// that dies is reported with its output's tail.
func TestBackend_StartServeStop(t *testing.T) {
	model := ggufFixture(t)
	b := New(slog.New(slog.DiscardHandler))
	t.Cleanup(func() { _ = b.Close() })
	ctx := context.Background()
	spec := plugins.ModelSpec{Model: "tiny", HealthCheckTimeout: 60 * time.Second,
		Options: []byte(`{"model": "` + model + `", "n_ctx": 256, "n_threads": 1}`)}

	est, err := b.Estimate(ctx, spec)
	fi, _ := os.Stat(model)
	if err != nil || !est.Known || est.BytesPerDevice[0] != uint64(fi.Size())+256*kvBytesPerToken {
		t.Errorf("Estimate = %+v, %v", est, err)
	}
	st, err := b.Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	resp, err := http.Post(st.Upstream+"/v1/completions", "application/json", strings.NewReader(`{"prompt": "hi", "max_tokens": 4}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"text"`) {
		t.Errorf("completion = %d %s", resp.StatusCode, body)
	}
	if _, err := b.Start(ctx, spec); !errors.Is(err, plugins.ErrAlreadyRunning) {
		t.Errorf("second Start = %v, want ErrAlreadyRunning", err)
	}
	if err := b.Stop(ctx, "tiny", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if exit, err := b.Wait(ctx, "tiny"); err != nil || exit.Err() != nil {
		t.Errorf("Wait after Stop = %+v, %v; want a requested exit", exit, err)
	}

	bad := spec
	bad.Model = "broken"
	bad.Options = []byte(`{"model": "` + filepath.Join(t.TempDir(), "missing.gguf") + `"}`)
	if _, err := b.Start(ctx, bad); err == nil || !strings.Contains(err.Error(), "exited unexpectedly") {
		t.Errorf("Start of a missing model = %v; want the server's exit with its output", err)
	}
}
