package llamaserver

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cmdbackend "github.com/loadout-dev/loadout/backends/cmd"
	"github.com/loadout-dev/loadout/internal/proctest"
	"github.com/loadout-dev/loadout/plugins"
)

// The GGUF fixtures come from testdata/llamacpp/make_gguf.py (Python, the
// gguf package); tests that need them skip without it, and fail under
// LOADOUT_REQUIRE_LLAMACPP=1.

var fixtures struct {
	once     sync.Once
	dir      string
	manifest manifest
	err      error
	missing  string
}

// manifest is make_gguf.py's manifest.json: what it wrote, computed in
// Python independently of the Go GGUF parser.
type manifest struct {
	Models []struct {
		Name          string
		File          string
		NLayer        uint64            `json:"n_layer"`
		NHeadKV       uint64            `json:"n_head_kv"`
		HeadDim       uint64            `json:"head_dim"`
		ContextLength uint64            `json:"context_length"`
		TiedOutput    bool              `json:"tied_output"`
		NEmbd         uint64            `json:"n_embd"`
		NHead         uint64            `json:"n_head"`
		NFF           uint64            `json:"n_ff"`
		NVocab        uint64            `json:"n_vocab"`
		FileType      string            `json:"file_type"`
		TensorBytes   map[string]uint64 `json:"tensor_bytes"`
		// What the header says the model can do (make_gguf.py's chat
		// and embed models).
		Tools, Thinking, FIM, Embedding bool
	}
	// Projectors are its --mmproj files: their tensors' bytes.
	Projectors []struct {
		File        string
		TensorBytes uint64 `json:"tensor_bytes"`
		Vision      bool
	}
}

func ggufFixtures(t testing.TB) (string, manifest) {
	t.Helper()
	fixtures.once.Do(func() {
		if out, err := exec.Command("python3", "-c", "import gguf, numpy").CombinedOutput(); err != nil {
			fixtures.missing = fmt.Sprintf("python3 with gguf and numpy is needed to write the GGUF fixtures (pip install -r testdata/llamacpp/requirements.txt): %v: %s", err, lastLine(string(out)))
			return
		}
		fixtures.dir, fixtures.err = filepath.Abs("../../testdata/gguf")
		if fixtures.err != nil {
			return
		}
		if out, err := exec.Command("python3", "../../testdata/llamacpp/make_gguf.py", "--out", fixtures.dir).CombinedOutput(); err != nil {
			fixtures.err = fmt.Errorf("make_gguf.py: %v\n%s", err, out)
			return
		}
		raw, err := os.ReadFile(filepath.Join(fixtures.dir, "manifest.json"))
		if err == nil {
			err = json.Unmarshal(raw, &fixtures.manifest)
		}
		fixtures.err = err
	})
	if fixtures.missing != "" {
		if os.Getenv("LOADOUT_REQUIRE_LLAMACPP") == "1" {
			t.Fatal(fixtures.missing)
		}
		t.Skip(fixtures.missing)
	}
	if fixtures.err != nil {
		t.Fatal(fixtures.err)
	}
	return fixtures.dir, fixtures.manifest
}

func TestLlamaServer_EstimateFromGGUF(t *testing.T) {
	dir, m := ggufFixtures(t)
	if len(m.Models) != 5 {
		t.Fatalf("manifest lists %d models, want 5", len(m.Models))
	}
	b := New(quiet)
	for _, model := range m.Models {
		// What llama.cpp puts on the GPU, from the generator's own byte
		// counts: every tensor but the input embeddings (unless the output
		// reuses them), and f16 K and V rows of n_head_kv × head_dim per
		// layer and context cell.
		var weights, outputLayer uint64
		for name, n := range model.TensorBytes {
			if name == "token_embd.weight" && !model.TiedOutput {
				continue
			}
			weights += n
			if !strings.HasPrefix(name, "blk.") {
				outputLayer += n
			}
		}
		perBlock := (weights - outputLayer) / model.NLayer // the blocks are alike
		kvRow := model.NHeadKV * model.HeadDim             // elements per cell, K or V
		for _, tc := range []struct {
			name    string
			options string
			devices []int
			want    uint64
		}{
			{"the model's own context", `{}`, nil,
				weights + model.NLayer*model.ContextLength*2*kvRow*2},
			{"ctx_size 128, parallel slots share it", `{"ctx_size": 128, "parallel": 4}`, nil,
				weights + model.NLayer*128*2*kvRow*2},
			{"q8_0 cache", `{"ctx_size": 128, "cache_type_k": "q8_0", "cache_type_v": "q8_0"}`, nil,
				weights + model.NLayer*128*2*(kvRow/32*34)},
			{"f32 keys", `{"ctx_size": 128, "cache_type_k": "f32"}`, nil,
				weights + model.NLayer*128*(kvRow*4+kvRow*2)},
			{"no GPU layers", `{"ctx_size": 128, "n_gpu_layers": 0}`, nil, 0},
			{"output layer and the last block", `{"ctx_size": 128, "n_gpu_layers": 2}`, nil,
				outputLayer + perBlock + 128*2*kvRow*2},
			{"all layers", `{"ctx_size": 128, "n_gpu_layers": "all"}`, nil,
				weights + model.NLayer*128*2*kvRow*2},
			{"split over two GPUs", `{"ctx_size": 128}`, []int{0, 1},
				weights + model.NLayer*128*2*kvRow*2},
		} {
			t.Run(model.Name+"/"+tc.name, func(t *testing.T) {
				var opts map[string]any
				if err := json.Unmarshal([]byte(tc.options), &opts); err != nil {
					t.Fatal(err)
				}
				opts["model"] = filepath.Join(dir, model.File)
				raw, _ := json.Marshal(opts)
				spec := plugins.ModelSpec{Model: model.Name, Options: raw, Devices: tc.devices}
				est, err := b.Estimate(context.Background(), spec)
				if err != nil {
					t.Fatal(err)
				}
				var sum uint64
				for _, n := range est.BytesPerDevice {
					sum += n
				}
				if !est.Known || len(est.BytesPerDevice) != max(1, len(tc.devices)) {
					t.Fatalf("estimate %+v", est)
				}
				// An even split rounds up on each device.
				if sum < tc.want || sum > tc.want+uint64(len(tc.devices)) {
					t.Fatalf("estimate %d bytes (%v), want %d", sum, est.BytesPerDevice, tc.want)
				}
			})
		}
		if err := Validate(json.RawMessage(fmt.Sprintf(`{"model": %q}`, filepath.Join(dir, model.File)))); err != nil {
			t.Errorf("Validate %s: %v", model.File, err)
		}
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// quiet is the backends' logger in tests.
var quiet = slog.New(slog.DiscardHandler)

// writeFile writes data to a file in a temporary directory.
func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLlamaServer_BadModelFile(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		path string
		want string
	}{
		{"missing", filepath.Join(dir, "nope.gguf"), "no such file or directory"},
		{"a directory", dir, "is a directory"},
		{"empty", writeFile(t, "empty.gguf", nil), "not a GGUF file"},
		{"safetensors", writeFile(t, "m.safetensors", []byte(`{"__metadata__":{}}`)), "not a GGUF file"},
		{"truncated GGUF", writeFile(t, "cut.gguf", []byte("GGUF\x03\x00\x00\x00\x05")), "malformed GGUF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := json.RawMessage(fmt.Sprintf(`{"model": %q, "binary": "true"}`, tc.path))
			check := func(what string, err error, wantDetail string) {
				t.Helper()
				if err == nil || !strings.Contains(err.Error(), tc.path) || !strings.Contains(err.Error(), wantDetail) {
					t.Errorf("%s: error %v, want one naming %s and saying %q", what, err, tc.path, wantDetail)
				}
			}
			check("Validate", Validate(raw), tc.want)
			b := New(quiet)
			_, err := b.Estimate(context.Background(), plugins.ModelSpec{Model: "m", Options: raw})
			check("Estimate", err, tc.want)
			if tc.name == "truncated GGUF" {
				return // Start checks only the magic; llama-server's load fails on it
			}
			_, err = b.Start(context.Background(), plugins.ModelSpec{Model: "m", Options: raw})
			check("Start", err, tc.want)
			// The same file as a projector beside a model Start accepts.
			model := writeFile(t, "model.gguf", []byte("GGUF\x03\x00\x00\x00"))
			raw = json.RawMessage(fmt.Sprintf(`{"model": %q, "mmproj": %q, "binary": "true"}`, model, tc.path))
			_, err = b.Start(context.Background(), plugins.ModelSpec{Model: "m", Options: raw})
			check("Start, as the projector", err, tc.want)
		})
	}
}

func TestLlamaServer_MissingBinary(t *testing.T) {
	model := writeFile(t, "m.gguf", []byte("GGUF\x03\x00\x00\x00"))
	raw := json.RawMessage(fmt.Sprintf(`{"model": %q, "binary": "llama-server-that-is-not-installed"}`, model))
	_, err := New(quiet).Start(context.Background(), plugins.ModelSpec{Model: "m", Options: raw})
	if err == nil || !strings.Contains(err.Error(), "llama-server-that-is-not-installed") || !strings.Contains(err.Error(), "install llama.cpp, or set the binary option") {
		t.Fatalf("error %v", err)
	}
}

// FuzzReadGGUF feeds arbitrary files to the GGUF reading and the estimate:
// an error is fine, a panic or a hang is not.
func FuzzReadGGUF(f *testing.F) {
	f.Add([]byte("GGUF"))
	f.Add([]byte("GGUF\x03\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Add([]byte("GGUF\x03\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00"))
	if tiny, err := os.ReadFile("../../testdata/gguf/tiny.gguf"); err == nil {
		f.Add(tiny[:min(len(tiny), 64<<10)])
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "f.gguf")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		gf, err := readGGUF(path)
		if err != nil {
			return
		}
		_, _ = estimateMemory(gf, options{Model: path, CtxSize: 16})
	})
}

// A llama-server run by the cmd backend (llama-swap's `cmd:`) is estimated
// from its command line as this backend estimates its options: the same
// GGUF file and the flags of the same options, written either way, or as
// their LLAMA_ARG_* (the command line wins); a command that is no
// llama-server's, or names no local file, is not estimated.
func TestLlamaServer_EstimateCommand(t *testing.T) {
	dir, m := ggufFixtures(t)
	model := m.Models[0]
	var weights uint64
	for name, n := range model.TensorBytes {
		if name != "token_embd.weight" || model.TiedOutput {
			weights += n
		}
	}
	kv := func(ctx uint64) uint64 { return model.NLayer * ctx * 2 * model.NHeadKV * model.HeadDim * 2 } // f16 K and V
	cb := cmdbackend.New(quiet)
	cb.Estimator = EstimateCommand
	name := strings.TrimSuffix(model.File, ".gguf")
	for _, tc := range []struct {
		cmd  string
		env  []string
		want uint64 // 0: not estimated
	}{
		{"llama-server --port ${PORT} -m " + dir + "/${MODEL_ID}.gguf -c 128 --jinja", nil, weights + kv(128)},
		{"/opt/llama.cpp/bin/llama-server --model=" + filepath.Join(dir, model.File) + " --ctx-size=64 -fa -np 4", nil, weights + kv(64)},
		{"llama-server -m " + filepath.Join(dir, model.File) + " -ngl 99", []string{"LLAMA_ARG_CTX_SIZE=32"}, weights + kv(32)},
		{"llama-server -m " + filepath.Join(dir, model.File) + " -c 128", []string{"LLAMA_ARG_CTX_SIZE=32"}, weights + kv(128)},
		{"llama-server", []string{"LLAMA_ARG_MODEL=" + filepath.Join(dir, model.File), "LLAMA_ARG_CTX_SIZE=16"}, weights + kv(16)},
		{"llama-server -m " + filepath.Join(dir, model.File) + " -c 128 --mmproj " + filepath.Join(dir, m.Projectors[0].File), nil, weights + kv(128) + m.Projectors[0].TensorBytes},
		{"llama-server -m " + filepath.Join(dir, model.File) + " -c 128", []string{"LLAMA_ARG_MMPROJ=" + filepath.Join(dir, m.Projectors[0].File)}, weights + kv(128) + m.Projectors[0].TensorBytes},
		// The projector kept on the CPU: as llama.cpp's common/arg.cpp
		// reads --mmproj-offload, the environment first, then the last
		// of the flags.
		{"llama-server -m " + filepath.Join(dir, model.File) + " -c 128 --mmproj " + filepath.Join(dir, m.Projectors[0].File) + " --no-mmproj-offload", nil, weights + kv(128)},
		{"llama-server -m " + filepath.Join(dir, model.File) + " -c 128 --no-mmproj-offload --mmproj " + filepath.Join(dir, m.Projectors[0].File) + " --mmproj-offload", nil, weights + kv(128) + m.Projectors[0].TensorBytes},
		{"llama-server -m " + filepath.Join(dir, model.File) + " -c 128 --mmproj " + filepath.Join(dir, m.Projectors[0].File), []string{"LLAMA_ARG_MMPROJ_OFFLOAD=off"}, weights + kv(128)},
		{"llama-server -m " + filepath.Join(dir, model.File) + " -c 128 --mmproj " + filepath.Join(dir, m.Projectors[0].File), []string{"LLAMA_ARG_NO_MMPROJ_OFFLOAD=1", "LLAMA_ARG_MMPROJ_OFFLOAD=1"}, weights + kv(128)},
		{"llama-server -m " + filepath.Join(dir, model.File) + " -c 128 --mmproj " + filepath.Join(dir, m.Projectors[0].File) + " --mmproj-offload", []string{"LLAMA_ARG_MMPROJ_OFFLOAD=0"}, weights + kv(128) + m.Projectors[0].TensorBytes},
		{"llama-server --port ${PORT} -hf ggml-org/gemma-3-1b-it-GGUF", nil, 0},
		{"python3 -m vllm.entrypoints.openai.api_server --model " + filepath.Join(dir, model.File), nil, 0},
	} {
		e, err := cb.Estimate(context.Background(), plugins.ModelSpec{Model: name, Cmd: tc.cmd, Env: tc.env})
		if err != nil {
			t.Errorf("%s %v: %v", tc.cmd, tc.env, err)
			continue
		}
		var got uint64
		for _, b := range e.BytesPerDevice {
			got += b
		}
		if e.Known != (tc.want > 0) || got != tc.want {
			t.Errorf("%s %v: estimate %+v (%d bytes), want %d", tc.cmd, tc.env, e, got, tc.want)
		}
	}
	if _, err := cb.Estimate(context.Background(), plugins.ModelSpec{Model: "gone", Cmd: "llama-server -m " + dir + "/gone.gguf"}); err == nil || !strings.Contains(err.Error(), "gone.gguf") {
		t.Errorf("a missing model file: %v, want an error naming it", err)
	}
	if _, err := cb.Estimate(context.Background(), plugins.ModelSpec{Model: "x", Cmd: "llama-server -m " + filepath.Join(dir, model.File) + " -c lots"}); err == nil || !strings.Contains(err.Error(), "flag -c:") {
		t.Errorf("a bad --ctx-size: %v, want an error naming the flag", err)
	}
}

// Describe reads a GGUF file's facts from its header: the architecture,
// the parameters (counted here from the generator's shapes: embeddings, per
// block two norms, Q, K, V, the attention output and three feed-forward
// matrices, the output norm and, untied, the output), the file type, the
// trained context, and what the model can do: tools and reasoning from
// its chat template, fill-in-the-middle from its tokens, embeddings from
// its pooling type (the generator's chat and embed models; the others
// have none of these).
func TestLlamaServer_Describe(t *testing.T) {
	dir, m := ggufFixtures(t)
	for _, model := range m.Models {
		hd := model.HeadDim
		block := 2*model.NEmbd + 2*model.NHead*hd*model.NEmbd + 2*model.NHeadKV*hd*model.NEmbd + 3*model.NFF*model.NEmbd
		params := model.NVocab*model.NEmbd + model.NLayer*block + model.NEmbd
		if !model.TiedOutput {
			params += model.NVocab * model.NEmbd
		}
		f, err := Describe(filepath.Join(dir, model.File))
		want := Facts{Architecture: "llama", Parameters: params, Quantization: model.FileType, ContextLength: model.ContextLength, EmbeddingLength: model.NEmbd,
			Embedding: model.Embedding, Tools: model.Tools, Thinking: model.Thinking, Insert: model.FIM}
		if err != nil || f != want {
			t.Errorf("%s: %+v, %v; want %+v", model.File, f, err, want)
		}
	}
	if _, err := Describe(filepath.Join(dir, "manifest.json")); err == nil || !strings.Contains(err.Error(), "manifest.json") {
		t.Errorf("a file that is not GGUF: %v, want an error naming it", err)
	}
}

// A projector (--mmproj) adds its tensors to the estimate, whatever
// --n-gpu-layers says, and nothing with --no-mmproj-offload; a missing one
// is an error naming it; it is among the command's files; and extra_args
// may not name it beside the option.
func TestLlamaServer_EstimateCountsTheProjector(t *testing.T) {
	dir, m := ggufFixtures(t)
	model, proj := filepath.Join(dir, m.Models[0].File), filepath.Join(dir, m.Projectors[0].File)
	total := func(opts map[string]any) (uint64, error) {
		opts["model"] = model
		raw, _ := json.Marshal(opts)
		o, err := parseOptions(raw)
		if err != nil {
			return 0, err
		}
		e, err := estimate(o, 1)
		if err != nil {
			return 0, err
		}
		return e.BytesPerDevice[0], nil
	}
	for _, layers := range []any{nil, 0} {
		base := map[string]any{"ctx_size": 64}
		if layers != nil {
			base["n_gpu_layers"] = layers
		}
		without, err := total(base)
		if err != nil {
			t.Fatal(err)
		}
		base["mmproj"] = proj
		with, err := total(base)
		if err != nil || with-without != m.Projectors[0].TensorBytes {
			t.Errorf("n_gpu_layers %v: the projector adds %d bytes (%v), want its tensors' %d", layers, with-without, err, m.Projectors[0].TensorBytes)
		}
		base["extra_args"] = []string{"--no-mmproj-offload"}
		if kept, err := total(base); err != nil || kept != without {
			t.Errorf("n_gpu_layers %v, --no-mmproj-offload: %d bytes (%v), want %d", layers, kept, err, without)
		}
	}
	// Through the backend: the model's env keeps it on the CPU too, and a
	// later --mmproj-offload in extra_args puts it back.
	b := New(quiet)
	noProj, err := total(map[string]any{"ctx_size": 64})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		env   []string
		extra []string
		proj  bool
	}{{nil, nil, true}, {[]string{"LLAMA_ARG_MMPROJ_OFFLOAD=false"}, nil, false}, {[]string{"LLAMA_ARG_MMPROJ_OFFLOAD=false"}, []string{"--mmproj-offload"}, true}} {
		raw, _ := json.Marshal(map[string]any{"model": model, "mmproj": proj, "ctx_size": 64, "extra_args": tc.extra})
		e, err := b.Estimate(context.Background(), plugins.ModelSpec{Model: "vlm", Options: raw, Env: tc.env})
		if err != nil {
			t.Fatalf("env %v: %v", tc.env, err)
		}
		if got := e.BytesPerDevice[0] != noProj; got != tc.proj {
			t.Errorf("env %v, extra_args %v: the projector counted %v, want %v", tc.env, tc.extra, got, tc.proj)
		}
	}
	if _, err := total(map[string]any{"mmproj": filepath.Join(dir, "gone-mmproj.gguf")}); err == nil || !strings.Contains(err.Error(), "gone-mmproj.gguf") {
		t.Errorf("a missing projector: %v, want an error naming it", err)
	}
	if got := CommandFiles([]string{"llama-server", "-m", model, "-mm", proj}, nil); !slices.Equal(got, []string{model, proj}) {
		t.Errorf("CommandFiles: %q, want the model and its projector", got)
	}
	if _, err := parseOptions([]byte(`{"model": "m.gguf", "extra_args": ["--mmproj", "p.gguf"]}`)); err == nil || !strings.Contains(err.Error(), "mmproj option") {
		t.Errorf("--mmproj in extra_args: %v, want an error pointing to the option", err)
	}
	if f, err := Describe(proj); err != nil || !f.Vision || f.Architecture != "clip" {
		t.Errorf("Describe(projector): %+v, %v; want a clip file with a vision encoder", f, err)
	}
}

// The llamaserver backend's estimate of a model file whose read hangs
// ends at its bound too, with an error naming the model.
func TestLlamaServer_EstimateOfAFileThatHangs(t *testing.T) {
	fifo := proctest.StalledFile(t, "stalled.gguf")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	e, err := New(quiet).Estimate(ctx, plugins.ModelSpec{Model: "stalled", Options: json.RawMessage(fmt.Sprintf(`{"model": %q}`, fifo))})
	if err == nil || e.Known || !strings.Contains(err.Error(), `model "stalled"`) || !strings.Contains(err.Error(), "did not end in time") {
		t.Errorf("estimate %+v, %v; want none, and an error saying the read did not end", e, err)
	}
}

// Start's check of a model file whose read hangs ends at the bound too,
// with an error naming the model and saying the read did not end, so the
// plugin answers the host before the host's deadline for the call (past
// which it would kill the plugin, every server it runs with it).
func TestLlamaServer_StartOnAFileThatHangs(t *testing.T) {
	fifo := proctest.StalledFile(t, "stalled.gguf")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	b := New(quiet)
	defer b.Close()
	_, err := b.Start(ctx, plugins.ModelSpec{Model: "stalled", Port: 1, Options: json.RawMessage(fmt.Sprintf(`{"model": %q}`, fifo))})
	if err == nil || !strings.Contains(err.Error(), `model "stalled"`) || !strings.Contains(err.Error(), "did not end in time") {
		t.Errorf("start: %v; want an error saying the read of its model files did not end", err)
	}
}

// A model file whose read hangs (a FIFO no one writes, as a stalled
// network share would) ends the cmd backend's estimate at its bound with
// an error naming the model, so the plugin answers its caller in time.
func TestLlamaServer_EstimateCommandOfAFileThatHangs(t *testing.T) {
	fifo := proctest.StalledFile(t, "stalled.gguf")
	cb := cmdbackend.New(quiet)
	cb.Estimator = EstimateCommand
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	e, err := cb.Estimate(ctx, plugins.ModelSpec{Model: "stalled", Cmd: "llama-server -m " + fifo})
	if err == nil || e.Known || !strings.Contains(err.Error(), `model "stalled"`) || !strings.Contains(err.Error(), "did not end in time") {
		t.Errorf("estimate %+v, %v; want none, and an error saying the read did not end", e, err)
	}
}
