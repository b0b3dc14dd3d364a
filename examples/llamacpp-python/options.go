package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
)

// Options are a model's `options:` as this backend reads them.
type Options struct {
	// Model is the GGUF file the server loads (required).
	Model string `json:"model"`
	// NCtx is the context size in tokens (default 512).
	NCtx int `json:"n_ctx"`
	// NGPULayers is the number of layers offloaded to the GPU; -1 is all
	// (default 0: CPU only).
	NGPULayers int `json:"n_gpu_layers"`
	// NThreads is the number of CPU threads; 0 leaves the server's default.
	NThreads int `json:"n_threads"`
	// Python is the interpreter that imports llama_cpp (default python3).
	Python string `json:"python"`
	// ExtraArgs are more server flags, one word each.
	ExtraArgs []string `json:"extra_args"`
}

// defaultNCtx is n_ctx when the options set none.
const defaultNCtx = 512

// problem is one thing wrong with the options: the key and what is wrong.
type problem struct{ option, message string }

// parseOptions decodes raw (a JSON object, or empty) with the defaults
// applied, and returns every problem with it: unknown keys by name, values
// of the wrong type, a missing model, a non-positive n_ctx. It reads no
// file: Validate runs it at `loadout config check`, where the model file
// may live on another machine.
func parseOptions(raw json.RawMessage) (Options, []problem) {
	o := Options{NCtx: defaultNCtx, Python: "python3"}
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("{}")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		whole := problem{"", "options must be a mapping: " + err.Error()}
		return o, []problem{whole}
	}
	known := map[string]any{
		"model": &o.Model, "n_ctx": &o.NCtx, "n_gpu_layers": &o.NGPULayers,
		"n_threads": &o.NThreads, "python": &o.Python, "extra_args": &o.ExtraArgs,
	}
	var problems []problem
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys) // problems in a stable order
	for _, k := range keys {
		dst, ok := known[k]
		if !ok {
			problems = append(problems, problem{k, "unknown option (known: extra_args, model, n_ctx, n_gpu_layers, n_threads, python)"})
			continue
		}
		if err := json.Unmarshal(fields[k], dst); err != nil {
			problems = append(problems, problem{k, fmt.Sprintf("wrong type: %s", typeWanted(k))})
		}
	}
	if o.Model == "" {
		problems = append(problems, problem{"model", "required: the GGUF file to serve"})
	}
	if o.NCtx <= 0 {
		problems = append(problems, problem{"n_ctx", "must be positive, got " + strconv.Itoa(o.NCtx)})
	}
	if o.NGPULayers < -1 {
		problems = append(problems, problem{"n_gpu_layers", "must be -1 (all) or more, got " + strconv.Itoa(o.NGPULayers)})
	}
	if o.NThreads < 0 {
		problems = append(problems, problem{"n_threads", "must not be negative, got " + strconv.Itoa(o.NThreads)})
	}
	return o, problems
}

func typeWanted(k string) string {
	switch k {
	case "model", "python":
		return "want a string"
	case "extra_args":
		return "want a list of strings"
	}
	return "want an integer"
}

// argv is the server's command line for options o on port.
func (o Options) argv(model string, port int) []string {
	args := []string{o.Python, "-m", "llama_cpp.server",
		"--model", o.Model, "--model_alias", model,
		"--host", "127.0.0.1", "--port", strconv.Itoa(port),
		"--n_ctx", strconv.Itoa(o.NCtx), "--n_gpu_layers", strconv.Itoa(o.NGPULayers),
		"--verbose", "false",
	}
	if o.NThreads > 0 {
		args = append(args, "--n_threads", strconv.Itoa(o.NThreads), "--n_threads_batch", strconv.Itoa(o.NThreads))
	}
	return append(args, o.ExtraArgs...)
}

// estimateBytes predicts the memory the model takes: its file's size (the
// weights, memory-mapped) plus the KV cache, which llama.cpp allocates for
// n_ctx tokens. Without the model's shape (a GGUF parser would give it),
// the KV cache is taken as kvBytesPerToken a token: generous for the small
// models this example serves, and replaced by measurement once loaded.
func estimateBytes(o Options) (uint64, error) {
	fi, err := os.Stat(o.Model)
	if err != nil {
		return 0, err
	}
	return uint64(fi.Size()) + uint64(o.NCtx)*kvBytesPerToken, nil
}

// kvBytesPerToken is estimateBytes' KV cache allowance per context token.
const kvBytesPerToken = 64 << 10
