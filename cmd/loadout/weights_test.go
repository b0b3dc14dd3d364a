package main

import (
	"log/slog"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/host/proxy"
	"github.com/loadout-dev/loadout/internal/proctest"
)

// A model's weight files (read ahead while a request waits for it, read
// for Ollama's details): its weights:, else the llamaserver backend's
// model, else the GGUF file a cmd: running llama-server names — llama-
// swap's configurations, which name no weights: — and none for another
// command. A server's relative path is left as the server takes it, from
// the working directory, not the configuration's.
func TestWeightFiles(t *testing.T) {
	dir := t.TempDir()
	cfg, _, err := config.Parse(filepath.Join(dir, "loadout.yaml"), []byte(`
models:
  swap:
    cmd: /opt/llama.cpp/llama-server --port ${PORT} -m /models/${MODEL_ID}.gguf -c 8192
  env:
    cmd: llama-server --port ${PORT}
    env: [LLAMA_ARG_MODEL=/models/env.gguf]
  declared:
    cmd: llama-server --port ${PORT} -m /models/a.gguf
    weights: [/models/b.gguf]
  backend:
    backend: llamaserver
    options: {model: rel.gguf}
  vlm:
    cmd: llama-server --port ${PORT} -m /models/vlm.gguf --mmproj /models/vlm-mmproj.gguf
  vlm-backend:
    backend: llamaserver
    options: {model: vlm.gguf, mmproj: vlm-mmproj.gguf}
  vllm:
    cmd: vllm serve /models/hf --port ${PORT}
`))
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string][]string{
		"swap":        {"/models/swap.gguf"},
		"env":         {"/models/env.gguf"},
		"declared":    {"/models/b.gguf"},
		"backend":     {"rel.gguf"},
		"vlm":         {"/models/vlm.gguf", "/models/vlm-mmproj.gguf"},
		"vlm-backend": {"vlm.gguf", "vlm-mmproj.gguf"},
		"vllm":        nil,
	} {
		if got := weightFiles(cfg.Models[id]); !slices.Equal(got, want) {
			t.Errorf("%s: %q, want %q", id, got, want)
		}
	}
}

// A model file whose read hangs (a FIFO no one writes, as a stalled
// network share would) does not hold up serve: its details are given up
// at the bound, with an error naming the file.
func TestDescribeWithin_AFileThatHangs(t *testing.T) {
	fifo := proctest.StalledFile(t, "stalled.gguf")
	if _, err := describeWithin(fifo, 100*time.Millisecond); err == nil || !strings.Contains(err.Error(), "stalled.gguf") {
		t.Errorf("%v, want an error naming the file that did not answer", err)
	}
}

// The check of a llamaserver model's files (serve's start-up, `config
// check`) gives a file whose read hangs up at the bound, with an error
// naming the model and saying the read did not end, and goes on to the
// next model.
func TestCheckModelFiles_AFileThatHangs(t *testing.T) {
	fifo := proctest.StalledFile(t, "stalled.gguf")
	dir := t.TempDir()
	cfg, _, err := config.Parse(filepath.Join(dir, "loadout.yaml"), []byte(`
models:
  a-stalled:
    backend: llamaserver
    options: {model: `+fifo+`}
  b-missing:
    backend: llamaserver
    options: {model: `+filepath.Join(dir, "gone.gguf")+`}
  c-cmd:
    cmd: llama-server --port ${PORT} -m `+filepath.Join(dir, "also-gone.gguf")+`
  d-other:
    cmd: my-server --port ${PORT} --weights `+filepath.Join(dir, "not-a-gguf-server.bin")+`
`))
	if err != nil {
		t.Fatal(err)
	}
	err = checkModelFiles(cfg, 100*time.Millisecond)
	// A llama-swap cmd: running llama-server is checked as the backend's
	// options are, at the model's line; another command is not read.
	if err == nil || !regexp.MustCompile(`loadout\.yaml:\d+:\d+: models\.c-cmd\.cmd: .*also-gone\.gguf`).MatchString(err.Error()) || strings.Contains(err.Error(), "d-other") {
		t.Errorf("%v, want c-cmd's missing file named at its line, and nothing of d-other", err)
	}
	if err == nil || !strings.Contains(err.Error(), "models.a-stalled") || !strings.Contains(err.Error(), "did not end in time") {
		t.Errorf("%v, want an error saying the read of a-stalled's files did not end", err)
	}
	if err == nil || !strings.Contains(err.Error(), "gone.gguf") {
		t.Errorf("%v, want b-missing's missing file named too", err)
	}
}

// What a model's GGUF header says it can do reaches Ollama's API: a
// llama-swap cmd: running llama-server on the fixture with a chat
// template of tools and reasoning and fill-in-the-middle tokens, the
// llamaserver backend on the embedding fixture, a cmd: with a vision
// projector (--mmproj); a file of none of these says nothing.
func TestModelDetails_WhatTheFileCanDo(t *testing.T) {
	dir := requireLlamaCpp(t)
	cfg, _, err := config.Parse(filepath.Join(t.TempDir(), "loadout.yaml"), []byte(`
models:
  chat:
    cmd: llama-server --port ${PORT} -m `+filepath.Join(dir, "chat.gguf")+`
  embed:
    backend: llamaserver
    options: {model: `+filepath.Join(dir, "embed.gguf")+`}
  tiny:
    backend: llamaserver
    options: {model: `+filepath.Join(dir, "tiny.gguf")+`}
  vlm:
    cmd: llama-server --port ${PORT} -m `+filepath.Join(dir, "tiny.gguf")+` --mmproj `+filepath.Join(dir, "mmproj.gguf")+`
`))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	for id, want := range map[string]proxy.ModelDetails{
		"chat":  {Tools: true, Thinking: true, Insert: true},
		"embed": {Embedding: true},
		"tiny":  {},
		"vlm":   {Vision: true},
	} {
		d := modelDetails(cfg.Models[id], log)
		if d.Format != "gguf" || d.Family != "llama" {
			t.Errorf("%s: details %+v, want a llama GGUF's", id, d)
		}
		if got := (proxy.ModelDetails{Embedding: d.Embedding, Tools: d.Tools, Thinking: d.Thinking, Insert: d.Insert, Vision: d.Vision}); got != want {
			t.Errorf("%s: can do %+v, want %+v", id, got, want)
		}
	}
}
