package llamaserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"

	gguf "github.com/gpustack/gguf-parser-go"
)

// ggufMagic opens every GGUF file.
var ggufMagic = []byte("GGUF")

// cacheTypes are the KV cache types llama-server's --cache-type-k/-v take.
var cacheTypes = map[string]gguf.GGMLType{
	"f32":    gguf.GGMLTypeF32,
	"f16":    gguf.GGMLTypeF16,
	"bf16":   gguf.GGMLTypeBF16,
	"q8_0":   gguf.GGMLTypeQ8_0,
	"q4_0":   gguf.GGMLTypeQ4_0,
	"q4_1":   gguf.GGMLTypeQ4_1,
	"iq4_nl": gguf.GGMLTypeIQ4_NL,
	"q5_0":   gguf.GGMLTypeQ5_0,
	"q5_1":   gguf.GGMLTypeQ5_1,
}

// Validate checks a model's options (ModelSpec.Options, a JSON object) and
// its GGUF files without starting anything: the options must be well
// formed and name readable GGUF files (the model, a projector) whose
// metadata parses. `loadout config check` calls it; the error names the
// file.
func Validate(optionsJSON json.RawMessage) error {
	o, err := parseOptions(optionsJSON)
	if err != nil {
		return err
	}
	for _, f := range o.files() {
		if _, err := readGGUF(f); err != nil {
			return err
		}
	}
	return nil
}

// CommandOf is the llama-server command line model's options run, as
// llama-swap's configurations write one (the port left as ${PORT}): what
// /running shows as a llamaserver model's cmd. "" for options that do not
// parse (Validate reports them).
func CommandOf(model string, optionsJSON json.RawMessage) string {
	o, err := parseOptions(optionsJSON)
	if err != nil {
		return ""
	}
	return o.withAlias(model).commandLine()
}

// ValidateCommand checks the GGUF files a llama-server command line names
// (a llama-swap `cmd: llama-server -m FILE.gguf …`, argv its words, env
// the model's KEY=VALUE) as Validate checks the options' files: each must
// be a readable GGUF file whose metadata parses. Nil for a command that is
// not llama-server, or names no file (-hf). Errors: a flag of the
// options it reads with a bad value, or a file, named.
func ValidateCommand(argv, env []string) error {
	o, ok, err := commandOptions(argv, env)
	if !ok || err != nil {
		return err
	}
	for _, f := range o.files() {
		if _, err := readGGUF(f); err != nil {
			return err
		}
	}
	return nil
}

// BinaryOf is the llama-server executable a model's options name (its
// binary option, else DefaultBinary): what Start looks up on PATH, for
// `loadout config check` to look up first. Errors: options that do not
// parse.
func BinaryOf(optionsJSON json.RawMessage) (string, error) {
	o, err := parseOptions(optionsJSON)
	if err != nil {
		return "", err
	}
	return o.Binary, nil
}

// checkGGUF is the cheap check Start makes: the file exists, is a regular
// file and starts with the GGUF magic.
func checkGGUF(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("model file %s: %w", path, unwrapPathError(err))
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return fmt.Errorf("model file %s: is a directory, want a .gguf file", path)
	}
	head := make([]byte, len(ggufMagic))
	if _, err := io.ReadFull(f, head); err != nil || !bytes.Equal(head, ggufMagic) {
		return fmt.Errorf("model file %s: not a GGUF file (it does not start with %q)", path, ggufMagic)
	}
	return nil
}

// unwrapPathError drops the *PathError's repetition of the path.
func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// readGGUF checks path and parses its metadata and tensor infos (not the
// tensor data). The parser panics on some malformed files; that becomes an
// error too.
func readGGUF(path string) (gf *gguf.GGUFFile, err error) {
	if err := checkGGUF(path); err != nil {
		return nil, err
	}
	defer func() {
		if r := recover(); r != nil {
			gf, err = nil, fmt.Errorf("model file %s: malformed GGUF: %v", path, r)
		}
	}()
	gf, err = gguf.ParseGGUFFile(path, gguf.SkipLargeMetadata())
	if err != nil {
		return nil, fmt.Errorf("model file %s: malformed GGUF: %w", path, err)
	}
	return gf, nil
}

// memory is a model's predicted memory on its GPUs, in bytes.
type memory struct {
	Weights   uint64 // tensors placed on the GPUs
	KVCache   uint64 // the KV cache of the offloaded layers
	Projector uint64 // the multimodal projector's tensors (--mmproj)
}

func (m memory) total() uint64 { return m.Weights + m.KVCache + m.Projector }

// projectorBytes is what the projector o names puts on the GPU: all its
// tensors (llama-server offloads the projector whole, whatever
// --n-gpu-layers says), or 0 where it stays on the CPU (ProjectorOnCPU).
// The encoder's compute buffer is not counted, as the model's are not.
// Errors: the projector is missing or not GGUF, named.
func projectorBytes(o options) (uint64, error) {
	if o.MMProj == "" || o.ProjectorOnCPU {
		return 0, nil
	}
	gf, err := readGGUF(o.MMProj)
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, ti := range gf.TensorInfos {
		n += ti.Bytes()
	}
	return n, nil
}

// estimateMemory predicts what llama-server puts on the GPUs for o:
//
//   - weights: the bytes of every tensor of an offloaded layer, by its type
//     (a Q4_K tensor costs its blocks, not 4 bits per weight), as llama.cpp
//     places them: with --n-gpu-layers N, the output layer and the last N-1
//     blocks (auto and all: everything); the token embeddings stay on the
//     CPU unless the output reuses them;
//   - KV cache: for every offloaded block, n_ctx × (n_embd_k_gqa +
//     n_embd_v_gqa) elements of the cache types (f16 by default), where
//     n_ctx is --ctx-size or the model's training context. llama-server's
//     --ctx-size is the cache shared by all --parallel slots (each slot gets
//     ctx_size/parallel), so the slots do not multiply it.
//
// Compute buffers and the CUDA context are not counted; the host measures
// the real figure once the model is loaded.
func estimateMemory(gf *gguf.GGUFFile, o options) (m memory, err error) {
	defer func() {
		if r := recover(); r != nil {
			m, err = memory{}, fmt.Errorf("model file %s: malformed GGUF: %v", o.Model, r)
		}
	}()
	a := gf.Architecture()
	nLayer := a.BlockCount
	if nLayer == 0 {
		return memory{}, fmt.Errorf("model file %s: no %s.block_count in the metadata: not a model llama-server serves", o.Model, a.Architecture)
	}
	offloaded := offloadFilter(o.GPULayers, nLayer)

	hasOutput := false
	for _, ti := range gf.TensorInfos {
		if ti.Name == "output.weight" {
			hasOutput = true
		}
	}
	for _, ti := range gf.TensorInfos {
		layer := nLayer // the output layer
		if rest, ok := strings.CutPrefix(ti.Name, "blk."); ok {
			n, _, _ := strings.Cut(rest, ".")
			if i, err := strconv.ParseUint(n, 10, 64); err == nil {
				layer = i
			}
		} else if strings.HasPrefix(ti.Name, "token_embd") && (hasOutput || ti.Name != "token_embd.weight") {
			continue // the input layer lives on the CPU
		}
		if offloaded(layer) {
			m.Weights += ti.Bytes()
		}
	}

	if a.AttentionRecurrent {
		return m, nil // a recurrent state, not a KV cache: small, not counted
	}
	nCtx := uint64(o.CtxSize)
	if nCtx == 0 {
		nCtx = a.MaximumContextLength
	}
	kType, vType := gguf.GGMLTypeF16, gguf.GGMLTypeF16
	if o.CacheTypeK != "" {
		kType = cacheTypes[o.CacheTypeK]
	}
	if o.CacheTypeV != "" {
		vType = cacheTypes[o.CacheTypeV]
	}
	for i := range nLayer {
		if !offloaded(i) {
			continue
		}
		headsKV := a.AttentionHeadCountKV
		if i < uint64(len(a.AttentionHeadCountKVs)) {
			headsKV = a.AttentionHeadCountKVs[i]
		}
		kGQA := uint64(a.AttentionKeyLength) * headsKV
		vGQA := uint64(a.AttentionValueLength) * headsKV
		m.KVCache += nCtx * (kType.RowSizeOf([]uint64{kGQA}) + vType.RowSizeOf([]uint64{vGQA}))
	}
	return m, nil
}

// offloadFilter says which layers --n-gpu-layers puts on the GPUs: layers
// are numbered 0..nLayer-1 for the blocks and nLayer for the output, and
// llama.cpp offloads the last N of them (all for auto, all and negative N).
func offloadFilter(gpuLayers string, nLayer uint64) func(layer uint64) bool {
	n, err := strconv.ParseInt(gpuLayers, 10, 64)
	if err != nil || n < 0 || uint64(n) > nLayer {
		return func(uint64) bool { return true }
	}
	start := nLayer + 1 - uint64(n)
	return func(layer uint64) bool { return layer >= start }
}

// Facts are what a GGUF file's header says of its model, as Ollama's API
// shows a model's details (api/types.go's ModelDetails, and /api/show's
// model_info).
type Facts struct {
	// Architecture is general.architecture, e.g. "llama", "qwen2".
	Architecture string
	// Parameters is the model's parameter count.
	Parameters uint64
	// Quantization is the file's type as llama.cpp names it, e.g.
	// "Q4_K_M", "F16".
	Quantization string
	// ContextLength is the context it was trained for (ARCH.context_length),
	// in tokens; 0 where the file does not say.
	ContextLength uint64
	// EmbeddingLength is the width of its embeddings
	// (ARCH.embedding_length): an embedding model's vector size, which RAG
	// clients read from /api/show; 0 where the file does not say.
	EmbeddingLength uint64
	// What the model can do, as its header says (Ollama's /api/show
	// capabilities are read from the same): Embedding, a pooling type is
	// set (ARCH.pooling_type: llama-server pools its output into an
	// embedding); Tools, its chat template (tokenizer.chat_template) takes
	// a list of tools; Thinking, the template has a reasoning block
	// (<think>, reasoning_content or enable_thinking, as the reasoning
	// models' templates write it); Insert, its vocabulary has the
	// fill-in-the-middle tokens llama-server's /infill needs
	// (tokenizer.ggml.fim_pre_token_id and fim_suf_token_id); Vision,
	// the file is a projector with a vision encoder (--mmproj's: clip,
	// clip.has_vision_encoder), so the model it serves beside takes
	// images.
	Embedding, Tools, Thinking, Insert, Vision bool
}

// templateTools finds a chat template's use of the request's tools: the
// word tools (a variable, `tools | tojson`, `if tools`).
var templateTools = regexp.MustCompile(`\btools\b`)

// templateThinking finds a chat template's reasoning block.
var templateThinking = regexp.MustCompile(`<think>|reasoning_content|enable_thinking`)

// Describe reads the facts of the GGUF file at path from its header (the
// tensor data is not read). Errors: a file that is missing or not GGUF,
// named.
func Describe(path string) (Facts, error) {
	gf, err := readGGUF(path)
	if err != nil {
		return Facts{}, err
	}
	md, a := gf.Metadata(), gf.Architecture()
	f := Facts{Architecture: md.Architecture, Parameters: uint64(md.Parameters),
		Quantization: md.FileTypeDescriptor, ContextLength: a.MaximumContextLength,
		EmbeddingLength: a.EmbeddingLength}
	kv := gf.Header.MetadataKV
	has := func(key string) bool { _, ok := kv.Get(key); return ok }
	f.Embedding = has(md.Architecture + ".pooling_type")
	f.Insert = has("tokenizer.ggml.fim_pre_token_id") && has("tokenizer.ggml.fim_suf_token_id")
	if v, ok := kv.Get("clip.has_vision_encoder"); ok && v.ValueType == gguf.GGUFMetadataValueTypeBool {
		f.Vision = v.ValueBool()
	}
	if t, ok := kv.Get("tokenizer.chat_template"); ok && t.ValueType == gguf.GGUFMetadataValueTypeString {
		template := t.ValueString()
		f.Tools, f.Thinking = templateTools.MatchString(template), templateThinking.MatchString(template)
	}
	return f, nil
}
