package llamaserver

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/google/shlex"

	"github.com/loadout-dev/loadout/plugins"
)

func TestLlamaServer_CommandLine(t *testing.T) {
	for _, tc := range []struct {
		name    string
		options string
		want    []string
	}{
		{
			name:    "model only",
			options: `{"model": "/models/q.gguf"}`,
			want:    []string{"llama-server", "--model", "/models/q.gguf", "--host", "127.0.0.1", "--port", "${PORT}"},
		},
		{
			name: "every option",
			options: `{"model": "/m/a.gguf", "binary": "/opt/llama.cpp/bin/llama-server", "ctx_size": 8192,
				"n_gpu_layers": 99, "parallel": 4, "flash_attn": true, "cache_type_k": "q8_0", "cache_type_v": "Q8_0",
				"extra_args": ["--threads", "8", "--jinja"]}`,
			want: []string{"/opt/llama.cpp/bin/llama-server", "--model", "/m/a.gguf", "--ctx-size", "8192",
				"--n-gpu-layers", "99", "--parallel", "4", "--flash-attn", "on", "--cache-type-k", "q8_0",
				"--cache-type-v", "q8_0", "--threads", "8", "--jinja", "--host", "127.0.0.1", "--port", "${PORT}"},
		},
		{
			name:    "sleep when idle",
			options: `{"model": "m.gguf", "sleep_idle_seconds": 30}`,
			want:    []string{"llama-server", "--model", "m.gguf", "--sleep-idle-seconds", "30", "--host", "127.0.0.1", "--port", "${PORT}"},
		},
		{
			name:    "gpu layers all, flash attention auto",
			options: `{"model": "m.gguf", "n_gpu_layers": "all", "flash_attn": "auto"}`,
			want:    []string{"llama-server", "--model", "m.gguf", "--n-gpu-layers", "all", "--flash-attn", "auto", "--host", "127.0.0.1", "--port", "${PORT}"},
		},
		{
			name:    "no gpu layers, flash attention off, ctx_size 0 is the default",
			options: `{"model": "m.gguf", "n_gpu_layers": 0, "flash_attn": false, "ctx_size": 0}`,
			want:    []string{"llama-server", "--model", "m.gguf", "--n-gpu-layers", "0", "--flash-attn", "off", "--host", "127.0.0.1", "--port", "${PORT}"},
		},
		{
			name:    "words that need quoting survive the cmd backend's splitting",
			options: `{"model": "/my models/it's.gguf", "extra_args": ["--alias", "a b", "--chat-template", "{{ x }}\"", ""]}`,
			want:    []string{"llama-server", "--model", "/my models/it's.gguf", "--alias", "a b", "--chat-template", "{{ x }}\"", "", "--host", "127.0.0.1", "--port", "${PORT}"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseOptions([]byte(tc.options))
			if err != nil {
				t.Fatal(err)
			}
			if got := o.args(); !slices.Equal(got, tc.want) {
				t.Fatalf("args:\n got %q\nwant %q", got, tc.want)
			}
			// The cmd backend splits Cmd as a POSIX shell would.
			split, err := shlex.Split(o.commandLine())
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(split, tc.want) {
				t.Fatalf("commandLine %s splits into\n %q\nwant %q", o.commandLine(), split, tc.want)
			}
		})
	}
}

func TestLlamaServer_BadOptions(t *testing.T) {
	for _, tc := range []struct {
		name, options, want string
	}{
		{"no options", ``, "model: required: the GGUF file"},
		{"no model", `{"ctx_size": 4096}`, "model: required: the GGUF file"},
		{"empty model", `{"model": " "}`, "model: required: the GGUF file"},
		{"unknown option", `{"model": "m.gguf", "ctx": 4096}`, `unknown option "ctx" (known: binary, cache_type_k`},
		{"not an object", `[1]`, "want a JSON object"},
		{"ctx_size a string", `{"model": "m.gguf", "ctx_size": "4k"}`, `ctx_size: want a whole number, got "4k"`},
		{"negative ctx_size", `{"model": "m.gguf", "ctx_size": -1}`, "ctx_size: -1: want 0"},
		{"zero parallel", `{"model": "m.gguf", "parallel": 0}`, "parallel: 0: want 1 or more"},
		{"zero sleep_idle_seconds", `{"model": "m.gguf", "sleep_idle_seconds": 0}`, "sleep_idle_seconds: 0: want 1 or more"},
		{"sleep flag in extra_args", `{"model": "m.gguf", "extra_args": ["--sleep-idle-seconds", "5"]}`, "--sleep-idle-seconds is set by the sleep_idle_seconds option"},
		{"gpu layers word", `{"model": "m.gguf", "n_gpu_layers": "most"}`, `n_gpu_layers: "most"`},
		{"gpu layers fraction", `{"model": "m.gguf", "n_gpu_layers": 1.5}`, "n_gpu_layers: 1.5"},
		{"flash_attn word", `{"model": "m.gguf", "flash_attn": "yes"}`, "flash_attn: \"yes\": want true, false, on, off or auto"},
		{"cache type", `{"model": "m.gguf", "cache_type_k": "q3_k"}`, `cache_type_k: "q3_k": want one of bf16, f16, f32`},
		{"extra_args a string", `{"model": "m.gguf", "extra_args": "--threads 8"}`, "extra_args: want a list of strings"},
		{"extra_args sets the port", `{"model": "m.gguf", "extra_args": ["--port", "80"]}`, "--port is set by the backend"},
		{"extra_args sets the context", `{"model": "m.gguf", "extra_args": ["-c=4096"]}`, "-c is set by the ctx_size option"},
		{"empty binary", `{"model": "m.gguf", "binary": ""}`, "binary: empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseOptions([]byte(tc.options))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "llamaserver options: ") {
				t.Fatalf("error %q does not say it is about the llamaserver options", err)
			}
		})
	}
}

// Validate reports every problem, each naming its option, in the same
// order every time (the options arrive as a JSON object from a map: a
// decoder that stops at the first problem named a different one each run).
func TestLlamaServer_ValidateReportsEveryProblem(t *testing.T) {
	raw := []byte(`{"model": "m.gguf", "flash_attn": "maybe", "modle": "x", "parallel": 0, "ctx_size": 1.5, "n_gpu_layers": -1}`)
	want := []plugins.Problem{
		{Option: "modle", Message: `unknown option "modle" (known: ` + strings.Join(optionNames, ", ") + `; pass other llama-server flags in extra_args)`},
		{Option: "ctx_size", Message: "want a whole number, got 1.5"},
		{Option: "parallel", Message: "0: want 1 or more"},
		{Option: "flash_attn", Message: `"maybe": want true, false, on, off or auto`},
	}
	for range 5 {
		got, err := New(nil).Validate(context.Background(), plugins.ModelSpec{Model: "m", Options: raw})
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("Validate = %+v, %v;\nwant %+v", got, err, want)
		}
	}
}

// CommandOf is the command line Start runs, for /running's cmd, the
// model's id its --alias (a replica's, its model's: the server names its
// model in its answers, which named the GGUF file's path); "" for options
// that do not parse.
func TestLlamaServer_CommandOf(t *testing.T) {
	o, err := parseOptions([]byte(`{"model": "/m/a b.gguf", "ctx_size": 4096}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{"qwen", "qwen@2"} {
		got := CommandOf(row, []byte(`{"model": "/m/a b.gguf", "ctx_size": 4096}`))
		if got != o.withAlias(row).commandLine() || !strings.Contains(got, "'/m/a b.gguf'") || !strings.Contains(got, "${PORT}") || !strings.Contains(got, "--alias qwen ") {
			t.Errorf("CommandOf(%s) = %q, want the options' command line with --alias qwen", row, got)
		}
	}
	if got := CommandOf("qwen", []byte(`{"model": "/m/a.gguf", "extra_args": ["-a", "mine"]}`)); strings.Contains(got, "--alias") {
		t.Errorf("CommandOf with an alias of the options' own = %q, want theirs alone", got)
	}
	if got := CommandOf("qwen", []byte(`{"ctx_size": 4096}`)); got != "" {
		t.Errorf("CommandOf without a model = %q, want empty", got)
	}
}
