package config

import (
	"strings"
	"testing"
)

func TestExternal_AloneMakesTheConfiguration(t *testing.T) {
	x := External{ID: "tiny", Pos: Pos{File: "models/tiny.gguf"}, Source: "models dir", Backend: BackendLlamaServer,
		Options: map[string]any{"model": "/m/tiny.gguf"}, Preload: true}
	cfg, _, err := ParseWith("models", nil, Options{Models: []External{x}})
	if err != nil {
		t.Fatal(err)
	}
	m := cfg.Models["tiny"]
	if m == nil || m.Backend != BackendLlamaServer || m.Pos.File != "models/tiny.gguf" || m.Port == 0 {
		t.Fatalf("model %+v", m)
	}
	if g := cfg.GroupOf("tiny"); g == nil || !g.Swap {
		t.Fatalf("group %+v: want the implicit swap group", g)
	}
	if len(cfg.Preload) != 1 || cfg.Preload[0] != "tiny" {
		t.Fatalf("preload %v", cfg.Preload)
	}
	if r := Report(cfg, nil); !strings.Contains(r, "tiny: from the models dir (models/tiny.gguf), group (default)") || !strings.Contains(r, "one model at a time") {
		t.Fatalf("report:\n%s", r)
	}
}

func TestExternal_IDInBothIsAnErrorNamingBoth(t *testing.T) {
	yaml := "models:\n  other:\n    cmd: x --port ${PORT}\n  tiny:\n    cmd: y --port ${PORT}\n"
	x := External{ID: "tiny", Pos: Pos{File: "presets.ini", Line: 7}, Source: "preset", Backend: BackendLlamaServer,
		Options: map[string]any{"model": "/m/tiny.gguf"}}
	_, _, err := ParseWith("loadout.yaml", []byte(yaml), Options{Models: []External{x}})
	if err == nil || !strings.Contains(err.Error(), "loadout.yaml:4:3: models.tiny: model tiny is defined here and by the preset at presets.ini:7") {
		t.Fatalf("err %v", err)
	}
}
