package llamaserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/plugins"
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
	// Alias is --alias, the name the server gives its model in its
	// answers ("model" of a completion, /v1/models): the model's id, not
	// the GGUF file's path; set from the model (withAlias), not an
	// option. An --alias or -a in ExtraArgs wins.
	Alias string
}

// withAlias is o with Alias set to the id of the model whose process-table
// row is row (a replica "m@2" answers as m).
func (o options) withAlias(row string) options {
	o.Alias = config.ModelOf(row)
	return o
}

// optionNames are the keys of the options object, for error messages.
var optionNames = []string{"binary", "cache_type_k", "cache_type_v", "ctx_size", "extra_args", "flash_attn", "mmproj", "model", "n_gpu_layers", "parallel", "sleep_idle_seconds"}

// parseOptions decodes and checks a model's options (a JSON object). It does
// not look at the model file. The error is every problem readOptions
// finds, one a line, each "llamaserver options: OPTION: what is wrong".
func parseOptions(raw json.RawMessage) (options, error) {
	o, problems := readOptions(raw)
	if len(problems) == 0 {
		return o, nil
	}
	errs := make([]error, len(problems))
	for i, p := range problems {
		if p.Option == "" {
			errs[i] = errors.New("llamaserver options: " + p.Message)
		} else {
			errs[i] = errors.New("llamaserver options: " + p.Option + ": " + p.Message)
		}
	}
	return o, errors.Join(errs...)
}

// readOptions decodes and checks a model's options, each option on its
// own, and returns every problem, each naming its option ("" for the
// options as a whole), in the options' name order — what Validate reports
// (docs/BACKENDS.md: every problem, each at its option's line).
func readOptions(raw json.RawMessage) (options, []plugins.Problem) {
	var o options
	var problems []plugins.Problem
	bad := func(option, format string, args ...any) {
		problems = append(problems, plugins.Problem{Option: option, Message: fmt.Sprintf(format, args...)})
	}
	fields := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &fields); err != nil {
			bad("", "want a JSON object: %v", err)
			return o, problems
		}
	}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		if !slices.Contains(optionNames, k) {
			bad(k, "unknown option %q (known: %s; pass other llama-server flags in extra_args)", k, strings.Join(optionNames, ", "))
		}
	}
	// text and whole read one option of their type; false when it is
	// absent (or null) or does not decode, which is reported.
	text := func(k string) (string, bool) {
		v, ok := fields[k]
		if !ok || string(v) == "null" {
			return "", false
		}
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			bad(k, "want a string, got %s", v)
			return "", false
		}
		return s, true
	}
	whole := func(k string) (int, bool) {
		v, ok := fields[k]
		if !ok || string(v) == "null" {
			return 0, false
		}
		var n int
		if err := json.Unmarshal(v, &n); err != nil {
			bad(k, "want a whole number, got %s", v)
			return 0, false
		}
		return n, true
	}
	if m, ok := text("model"); ok && strings.TrimSpace(m) != "" {
		o.Model = m
	} else if v := fields["model"]; ok || v == nil || string(v) == "null" { // not one of the wrong type, reported
		bad("model", "required: the GGUF file")
	}
	if m, ok := text("mmproj"); ok {
		if strings.TrimSpace(m) == "" {
			bad("mmproj", "empty (leave it out for a model without a projector)")
		}
		o.MMProj = m
	}
	o.Binary = DefaultBinary
	if b, ok := text("binary"); ok {
		if strings.TrimSpace(b) == "" {
			bad("binary", "empty (leave it out for llama-server on PATH)")
		} else {
			o.Binary = b
		}
	}
	if n, ok := whole("ctx_size"); ok {
		if n < 0 {
			bad("ctx_size", "%d: want 0 (the model's own) or more", n)
		}
		o.CtxSize = n
	}
	if n, ok := whole("parallel"); ok {
		if n < 1 {
			bad("parallel", "%d: want 1 or more", n)
		}
		o.Parallel = n
	}
	if n, ok := whole("sleep_idle_seconds"); ok {
		if n < 1 {
			bad("sleep_idle_seconds", "%d: want 1 or more (leave it out for a server that never sleeps)", n)
		}
		o.SleepIdleSeconds = n
	}
	var err error
	if o.GPULayers, err = gpuLayers(fields["n_gpu_layers"]); err != nil {
		bad("n_gpu_layers", "%v", err)
	}
	if o.FlashAttn, err = flashAttn(fields["flash_attn"]); err != nil {
		bad("flash_attn", "%v", err)
	}
	for _, ct := range []struct {
		name string
		dst  *string
	}{{"cache_type_k", &o.CacheTypeK}, {"cache_type_v", &o.CacheTypeV}} {
		v, ok := text(ct.name)
		if !ok {
			continue
		}
		if _, ok := cacheTypes[strings.ToLower(v)]; !ok {
			bad(ct.name, "%q: want one of %s", v, strings.Join(cacheTypeNames(), ", "))
			continue
		}
		*ct.dst = strings.ToLower(v)
	}
	if v, ok := fields["extra_args"]; ok && string(v) != "null" {
		if err := json.Unmarshal(v, &o.ExtraArgs); err != nil {
			bad("extra_args", "want a list of strings, one word each, e.g. [--threads, \"8\"]")
		}
	}
	for _, a := range o.ExtraArgs {
		flag, _, _ := strings.Cut(a, "=")
		if opt, ok := ownedFlags()[flag]; ok {
			if opt == "" {
				bad("extra_args", "%s is set by the backend", flag)
			} else {
				bad("extra_args", "%s is set by the %s option; use that instead", flag, opt)
			}
		}
	}
	o.ProjectorOnCPU = !projectorOffloaded(o.ExtraArgs, nil)
	return o, problems
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
		return "", fmt.Errorf("%q: want a number of layers, auto or all", s)
	}
	var n int
	if err := json.Unmarshal(raw, &n); err != nil || n < -2 {
		return "", fmt.Errorf("%s: want a number of layers, auto or all", raw)
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
	return "", fmt.Errorf("%s: want true, false, on, off or auto", raw)
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
	if o.Alias != "" && !slices.ContainsFunc(o.ExtraArgs, func(a string) bool {
		return a == "--alias" || a == "-a" || strings.HasPrefix(a, "--alias=")
	}) {
		argv = append(argv, "--alias", o.Alias)
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
