package llamaserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// DefaultBinary is the server executable run when the options name none,
// looked up on PATH.
const DefaultBinary = "llama-server"

// options are a model's settings, decoded from ModelSpec.Options.
type options struct {
	// Binary is the llama-server executable: a path, or a name looked up
	// on PATH.
	Binary string
	// Model is the GGUF file (the first part of a split model).
	Model string
	// MMProj is --mmproj, the multimodal projector GGUF of a model that
	// takes images or audio; "" for none. Its tensors are counted in the
	// estimate unless ProjectorOnCPU, and a vision projector makes the
	// model's Ollama capabilities say "vision".
	MMProj string
	// ProjectorOnCPU: llama-server keeps the projector in host memory
	// (--no-mmproj-offload in extra_args or, for Estimate, the model's
	// env; projectorOffloaded).
	ProjectorOnCPU bool
	// CtxSize is llama-server's --ctx-size, the KV cache's cells shared by
	// all slots; 0 leaves llama-server's default (the model's training
	// context).
	CtxSize int
	// GPULayers is --n-gpu-layers as written: "" (llama-server's default,
	// auto), "auto", "all" or a decimal number.
	GPULayers string
	// Parallel is --parallel, the number of slots; 0 leaves the default.
	Parallel int
	// FlashAttn is --flash-attn: "", "on", "off" or "auto".
	FlashAttn string
	// CacheTypeK and CacheTypeV are --cache-type-k/-v, e.g. "q8_0"; ""
	// means f16.
	CacheTypeK, CacheTypeV string
	// SleepIdleSeconds is --sleep-idle-seconds: after that many seconds
	// without a task llama-server frees its model and KV cache, keeping its
	// process, and reloads them on the next task; 0 leaves it off (the
	// server cannot sleep).
	SleepIdleSeconds int
	// ExtraArgs are appended to the command line as they are.
	ExtraArgs []string
}

// optionNames are the keys of the options object, for error messages.
var optionNames = []string{"binary", "cache_type_k", "cache_type_v", "ctx_size", "extra_args", "flash_attn", "mmproj", "model", "n_gpu_layers", "parallel", "sleep_idle_seconds"}

// parseOptions decodes and checks a model's options (a JSON object). It does
// not look at the model file.
func parseOptions(raw json.RawMessage) (options, error) {
	var in struct {
		Binary     *string         `json:"binary"`
		Model      *string         `json:"model"`
		MMProj     *string         `json:"mmproj"`
		CtxSize    *int            `json:"ctx_size"`
		GPULayers  json.RawMessage `json:"n_gpu_layers"`
		Parallel   *int            `json:"parallel"`
		FlashAttn  json.RawMessage `json:"flash_attn"`
		CacheTypeK *string         `json:"cache_type_k"`
		CacheTypeV *string         `json:"cache_type_v"`
		ExtraArgs  json.RawMessage `json:"extra_args"`
		SleepIdle  *int            `json:"sleep_idle_seconds"`
	}
	if len(bytes.TrimSpace(raw)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			return options{}, optionsError(err)
		}
	}
	var o options
	if in.Model == nil || strings.TrimSpace(*in.Model) == "" {
		return o, errors.New("llamaserver options: model (the GGUF file) is required")
	}
	o.Model = *in.Model
	if in.MMProj != nil {
		if strings.TrimSpace(*in.MMProj) == "" {
			return o, errors.New("llamaserver options: mmproj is empty (leave it out for a model without a projector)")
		}
		o.MMProj = *in.MMProj
	}
	o.Binary = DefaultBinary
	if in.Binary != nil {
		if strings.TrimSpace(*in.Binary) == "" {
			return o, errors.New("llamaserver options: binary is empty")
		}
		o.Binary = *in.Binary
	}
	if in.CtxSize != nil {
		if *in.CtxSize < 0 {
			return o, fmt.Errorf("llamaserver options: ctx_size %d: want 0 (the model's own) or more", *in.CtxSize)
		}
		o.CtxSize = *in.CtxSize
	}
	if in.Parallel != nil {
		if *in.Parallel < 1 {
			return o, fmt.Errorf("llamaserver options: parallel %d: want 1 or more", *in.Parallel)
		}
		o.Parallel = *in.Parallel
	}
	if in.SleepIdle != nil {
		if *in.SleepIdle < 1 {
			return o, fmt.Errorf("llamaserver options: sleep_idle_seconds %d: want 1 or more (leave it out for a server that never sleeps)", *in.SleepIdle)
		}
		o.SleepIdleSeconds = *in.SleepIdle
	}
	var err error
	if o.GPULayers, err = gpuLayers(in.GPULayers); err != nil {
		return o, err
	}
	if o.FlashAttn, err = flashAttn(in.FlashAttn); err != nil {
		return o, err
	}
	for _, ct := range []struct {
		name string
		val  *string
		dst  *string
	}{{"cache_type_k", in.CacheTypeK, &o.CacheTypeK}, {"cache_type_v", in.CacheTypeV, &o.CacheTypeV}} {
		if ct.val == nil {
			continue
		}
		if _, ok := cacheTypes[strings.ToLower(*ct.val)]; !ok {
			return o, fmt.Errorf("llamaserver options: %s %q: want one of %s", ct.name, *ct.val, strings.Join(cacheTypeNames(), ", "))
		}
		*ct.dst = strings.ToLower(*ct.val)
	}
	if len(in.ExtraArgs) > 0 && string(in.ExtraArgs) != "null" {
		if err := json.Unmarshal(in.ExtraArgs, &o.ExtraArgs); err != nil {
			return o, errors.New("llamaserver options: extra_args: want a list of strings, one word each, e.g. [--threads, \"8\"]")
		}
	}
	for _, a := range o.ExtraArgs {
		flag, _, _ := strings.Cut(a, "=")
		if opt, ok := ownedFlags()[flag]; ok {
			if opt == "" {
				return o, fmt.Errorf("llamaserver options: extra_args: %s is set by the backend", flag)
			}
			return o, fmt.Errorf("llamaserver options: extra_args: %s is set by the %s option; use that instead", flag, opt)
		}
	}
	o.ProjectorOnCPU = !projectorOffloaded(o.ExtraArgs, nil)
	return o, nil
}

// optionsError rewords a JSON decoding error for a config author.
func optionsError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field == "" {
			return fmt.Errorf("llamaserver options: want a JSON object, got a %s", te.Value)
		}
		want := te.Type.String()
		switch te.Type.Kind() {
		case reflect.Int:
			want = "whole number"
		case reflect.String:
			want = "string"
		}
		return fmt.Errorf("llamaserver options: %s: want a %s, got a %s", te.Field, want, te.Value)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return fmt.Errorf("llamaserver options: unknown option %s (known: %s; pass other llama-server flags in extra_args)", name, strings.Join(optionNames, ", "))
	}
	return fmt.Errorf("llamaserver options: want a JSON object: %w", err)
}

// gpuLayers reads n_gpu_layers: a number, "auto" or "all".
func gpuLayers(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "auto" || s == "all" {
			return s, nil
		}
		if n, err := strconv.Atoi(s); err == nil && n >= -2 {
			return strconv.Itoa(n), nil
		}
		return "", fmt.Errorf("llamaserver options: n_gpu_layers %q: want a number of layers, auto or all", s)
	}
	var n int
	if err := json.Unmarshal(raw, &n); err != nil || n < -2 {
		return "", fmt.Errorf("llamaserver options: n_gpu_layers %s: want a number of layers, auto or all", raw)
	}
	return strconv.Itoa(n), nil
}

// flashAttn reads flash_attn: a boolean, or on, off or auto.
func flashAttn(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var b bool
	if json.Unmarshal(raw, &b) == nil {
		if b {
			return "on", nil
		}
		return "off", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil && (s == "on" || s == "off" || s == "auto") {
		return s, nil
	}
	return "", fmt.Errorf("llamaserver options: flash_attn %s: want true, false, on, off or auto", raw)
}

// args returns the llama-server command line, binary first; the port is
// left as the ${PORT} macro the cmd backend substitutes. Each option is
// written as its flag in optionFlags. The host and port come last, so they
// are what llama-server uses.
func (o options) args() []string {
	argv := []string{o.Binary, flagOf("model"), o.Model}
	if o.MMProj != "" {
		argv = append(argv, flagOf("mmproj"), o.MMProj)
	}
	if o.CtxSize > 0 {
		argv = append(argv, flagOf("ctx_size"), strconv.Itoa(o.CtxSize))
	}
	if o.GPULayers != "" {
		argv = append(argv, flagOf("n_gpu_layers"), o.GPULayers)
	}
	if o.Parallel > 0 {
		argv = append(argv, flagOf("parallel"), strconv.Itoa(o.Parallel))
	}
	if o.FlashAttn != "" {
		argv = append(argv, flagOf("flash_attn"), o.FlashAttn)
	}
	if o.CacheTypeK != "" {
		argv = append(argv, flagOf("cache_type_k"), o.CacheTypeK)
	}
	if o.CacheTypeV != "" {
		argv = append(argv, flagOf("cache_type_v"), o.CacheTypeV)
	}
	if o.SleepIdleSeconds > 0 {
		argv = append(argv, flagOf("sleep_idle_seconds"), strconv.Itoa(o.SleepIdleSeconds))
	}
	argv = append(argv, o.ExtraArgs...)
	return append(argv, "--host", "127.0.0.1", "--port", "${PORT}")
}

// files are the GGUF files the options name: the model, then the
// projector where there is one.
func (o options) files() []string {
	if o.MMProj == "" {
		return []string{o.Model}
	}
	return []string{o.Model, o.MMProj}
}

// commandLine joins args into the cmd backend's Cmd: every word quoted for
// its POSIX-style splitting, except the ${PORT} macro.
func (o options) commandLine() string {
	argv := o.args()
	words := make([]string, len(argv))
	for i, w := range argv {
		if w == "${PORT}" {
			words[i] = w
			continue
		}
		words[i] = shellQuote(w)
	}
	return strings.Join(words, " ")
}

// shellQuote quotes s for POSIX-style word splitting when it needs it.
func shellQuote(s string) string {
	if s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,+@%", r))
	}) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func cacheTypeNames() []string {
	names := make([]string, 0, len(cacheTypes))
	for n := range cacheTypes {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
