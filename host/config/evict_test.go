package config

import (
	"strings"
	"testing"
	"time"
)

func TestParseEvict(t *testing.T) {
	for in, want := range map[string]Evict{"auto": EvictAuto, "stop": EvictStop, "Sleep": EvictSleep, " sleep2": EvictSleep2} {
		if got, err := ParseEvict(in); err != nil || got != want {
			t.Errorf("ParseEvict(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseEvict("hibernate"); err == nil {
		t.Error(`ParseEvict("hibernate") succeeded`)
	}
}

func TestEvict_ConfigCheck(t *testing.T) {
	cfg, warnings, err := Parse("t.yaml", []byte(`
evict: sleep
hostMemory: 64GiB
models:
  s:
    backend: sim
  c:
    cmd: server --port ${PORT}
  l:
    cmd: server --port ${PORT}
    evict: stop
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HostMemory != 64<<30 || cfg.Models["s"].Evict != EvictSleep || cfg.Models["l"].Evict != EvictStop {
		t.Fatalf("hostMemory %d, s %s, l %s; want 64 GiB, sleep, stop", cfg.HostMemory, cfg.Models["s"].Evict, cfg.Models["l"].Evict)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0].String(), "c cannot sleep") {
		t.Fatalf("warnings %v, want one naming c, whose backend cannot sleep", warnings)
	}

	_, _, err = Parse("t.yaml", []byte(`
models:
  c:
    cmd: server --port ${PORT}
    evict: sleep2
`))
	if err == nil || !strings.Contains(err.Error(), "t.yaml:5:12") || !strings.Contains(err.Error(), "cannot sleep") {
		t.Fatalf("an explicit sleep for a backend that cannot: %v; want an error at t.yaml:5:12", err)
	}
	_, _, err = Parse("t.yaml", []byte("evict: hibernate\nmodels:\n  s:\n    backend: sim\n"))
	if err == nil || !strings.Contains(err.Error(), "t.yaml:1:8") {
		t.Fatalf("evict: hibernate: %v; want an error at t.yaml:1:8", err)
	}
	cfg, _, err = Parse("t.yaml", []byte("models:\n  s:\n    backend: sim\n"))
	if err != nil || cfg.HostMemory != HostMemoryAuto || cfg.Models["s"].Evict != EvictAuto {
		t.Fatalf("defaults: %v, hostMemory %d, evict %s; want auto, auto", err, cfg.HostMemory, cfg.Models["s"].Evict)
	}
}

// wakeTimeout: global and per model, whole seconds like unloadTimeout,
// default DefaultWakeTimeout; a bad value is an error at its line.
func TestWakeTimeout(t *testing.T) {
	cfg, _, err := Parse("t.yaml", []byte(`
wakeTimeout: 90
models:
  a:
    backend: sim
  b:
    backend: sim
    wakeTimeout: 5
`))
	if err != nil {
		t.Fatal(err)
	}
	if a, b := cfg.Models["a"].WakeTimeout, cfg.Models["b"].WakeTimeout; a != 90*time.Second || b != 5*time.Second {
		t.Fatalf("wakeTimeout a %s, b %s; want 1m30s (global), 5s (its own)", a, b)
	}
	cfg, _, err = Parse("t.yaml", []byte("models:\n  a:\n    backend: sim\n"))
	if err != nil || cfg.Models["a"].WakeTimeout != DefaultWakeTimeout {
		t.Fatalf("default: %v, %s; want %s", err, cfg.Models["a"].WakeTimeout, DefaultWakeTimeout)
	}
	for _, c := range []struct{ yaml, at string }{
		{"wakeTimeout: 30s\nmodels:\n  a:\n    backend: sim\n", "t.yaml:1:14"},
		{"wakeTimeout: 0\nmodels:\n  a:\n    backend: sim\n", "t.yaml:1:14"},
		{"models:\n  a:\n    backend: sim\n    wakeTimeout: soon\n", "t.yaml:4:18"},
	} {
		if _, _, err := Parse("t.yaml", []byte(c.yaml)); err == nil || !strings.Contains(err.Error(), c.at) || !strings.Contains(err.Error(), "wakeTimeout") {
			t.Errorf("%q: %v; want an error naming wakeTimeout at %s", c.yaml, err, c.at)
		}
	}
}

// An evict: a model cannot do says what would let it: the level its
// options give, or the options that give one; a llama-server whose idle
// sleep comes no sooner than its wakeTimeout is warned of.
func TestEvict_WhatWouldLetItSleep(t *testing.T) {
	for _, tc := range []struct{ model, want string }{
		{"backend: llamaserver\n    evict: sleep\n    options: {model: m.gguf, sleep_idle_seconds: 5}", "its options give level 2: use evict: sleep2"},
		{"backend: llamaserver\n    evict: sleep2\n    options: {model: m.gguf}", "set it and use evict: sleep2 or auto"},
		{"cmd: server --port ${PORT}\n    evict: sleep", "give its options sleep: steps"},
	} {
		_, _, err := Parse("t.yaml", []byte("models:\n  a:\n    "+tc.model+"\n"))
		if err == nil || !strings.Contains(err.Error(), "model a cannot sleep") || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "can only be stopped") {
			t.Errorf("%q: %v; want the advice %q", tc.model, err, tc.want)
		}
	}
	_, warnings, err := Parse("t.yaml", []byte("wakeTimeout: 5\nmodels:\n  a:\n    backend: llamaserver\n    options: {model: m.gguf, sleep_idle_seconds: 20}\n  b:\n    backend: llamaserver\n    options: {model: m.gguf, sleep_idle_seconds: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0].String(), "t.yaml:5:30: models.a.options.sleep_idle_seconds: 20 is not below the model's wakeTimeout (5s)") {
		t.Errorf("warnings %v, want one at a's sleep_idle_seconds", warnings)
	}
}
