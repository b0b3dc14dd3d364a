package routermode

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// gguf writes an (empty) file at dir/name; the directory scan and the
// preset look at names and existence only.
func gguf(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("GGUF"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func ids(ms []Model) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.ID)
	}
	return out
}

func byID(t *testing.T, ms []Model, id string) Model {
	t.Helper()
	for _, m := range ms {
		if m.ID == id {
			return m
		}
	}
	t.Fatalf("no model %s in %v", id, ids(ms))
	return Model{}
}

// llama-server's names, as the built llama-server 0.3.36 lists them.
func TestModelsDir_NamesAsLlamaServer(t *testing.T) {
	dir := t.TempDir()
	gguf(t, dir, "tiny.gguf")
	gguf(t, dir, "Qwen3-8B-Q4_K_M.gguf")
	gguf(t, dir, "mmproj-top.gguf")                        // a projector, not a model
	gguf(t, dir, "UPPER.GGUF")                             // the suffix is case-sensitive
	gguf(t, dir, "notes.txt")                              // not a GGUF
	gguf(t, dir, "gemma/gemma.gguf")                       // multimodal
	mm := gguf(t, dir, "gemma/mmproj-F16.gguf")            //
	first := gguf(t, dir, "kimi/kimi-00001-of-00002.gguf") // split
	gguf(t, dir, "kimi/kimi-00002-of-00002.gguf")
	gguf(t, dir, "deep/inner/x.gguf") // two levels down: not looked at
	if err := os.Mkdir(filepath.Join(dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}

	ms, _, err := Load(context.Background(), Input{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"Qwen3-8B-Q4_K_M", "gemma", "kimi", "tiny"}
	if got := ids(ms); !slices.Equal(got, want) {
		t.Fatalf("ids %v, want %v", got, want)
	}
	g := byID(t, ms, "gemma")
	if g.Options["model"] != filepath.Join(dir, "gemma/gemma.gguf") || g.Options["mmproj"] != mm || g.Options["extra_args"] != nil {
		t.Fatalf("gemma options %v", g.Options)
	}
	if k := byID(t, ms, "kimi"); k.Options["model"] != first {
		t.Fatalf("kimi model %v, want the first part %s", k.Options["model"], first)
	}
}

func TestModelsDir_MissingOrEmptyIsAnError(t *testing.T) {
	empty := t.TempDir()
	gguf(t, empty, "mmproj-only.gguf")
	for _, tc := range []struct{ dir, want string }{
		{filepath.Join(empty, "nope"), "does not exist or is not a directory"},
		{empty, "holds no GGUF model"},
	} {
		_, _, err := Load(context.Background(), Input{Dir: tc.dir})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), tc.dir+": ") {
			t.Errorf("%s: err %v, want %q naming the directory", tc.dir, err, tc.want)
		}
	}
}

func TestModelsDir_SplitPartAtTopWarns(t *testing.T) {
	dir := t.TempDir()
	gguf(t, dir, "big-00001-of-00002.gguf")
	gguf(t, dir, "big-00002-of-00002.gguf")
	ms, warns, err := Load(context.Background(), Input{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	// llama-server lists both parts as models; so does Loadout, with a word.
	if got := ids(ms); !slices.Equal(got, []string{"big-00001-of-00002", "big-00002-of-00002"}) {
		t.Fatalf("ids %v", got)
	}
	if len(warns) != 1 || !strings.Contains(warns[0].String(), "big-00002-of-00002.gguf: a later part") {
		t.Fatalf("warnings %v", warns)
	}
}

func writePreset(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "presets.ini")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// The flags of the backend's own options need no llama-server to check
// them: short, long and LLAMA_ARG_* keys, [*] under a model's own section,
// the directory's model under the preset's.
func TestPreset_FlagsBecomeBackendOptions(t *testing.T) {
	dir := t.TempDir()
	gguf(t, dir, "tiny.gguf")
	other := gguf(t, t.TempDir(), "other.gguf")
	p := writePreset(t, `version = 1
; every model
[*]
c = 4096
ngl = 8

[tiny]
LLAMA_ARG_CTX_SIZE = 256   ; overrides [*]
stop-timeout = 3
load-on-startup = true

[custom]
model = `+other+`
np = 2
flash-attn = on # comment
`)
	ms, _, err := Load(context.Background(), Input{Dir: dir, Preset: p, Binary: "/opt/llama-server"})
	if err != nil {
		t.Fatal(err)
	}
	tiny := byID(t, ms, "tiny")
	if tiny.Options["ctx_size"] != 256 || tiny.Options["n_gpu_layers"] != "8" || tiny.Options["binary"] != "/opt/llama-server" ||
		tiny.Options["model"] != filepath.Join(dir, "tiny.gguf") {
		t.Errorf("tiny options %v", tiny.Options)
	}
	if tiny.StopTimeout != 3*time.Second || !tiny.LoadOnStartup || tiny.Line != 7 || tiny.Source != "models dir + preset" {
		t.Errorf("tiny %+v", tiny)
	}
	custom := byID(t, ms, "custom")
	if custom.Options["model"] != other || custom.Options["parallel"] != 2 || custom.Options["flash_attn"] != "on" || custom.Options["ctx_size"] != 4096 {
		t.Errorf("custom options %v", custom.Options)
	}
}

func TestPreset_ErrorsNameFileAndLine(t *testing.T) {
	p := writePreset(t, `[a
[b]
model = /nonexistent/b.gguf
[c]
c = 512
[d]
ctx-size = many
model = `+gguf(t, t.TempDir(), "d.gguf")+`
[e]
oops
[d]
`)
	_, _, err := Load(context.Background(), Input{Preset: p})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		p + `:1: want a section header [name], got "[a"`,
		p + ":3: [b] model: GGUF file /nonexistent/b.gguf: no such file or directory",
		p + ":4: model c: no GGUF file",
		p + ":7: [d] flag --ctx-size: want a whole number",
		p + `:10: want key = value, a [section] or a ; comment, got "oops"`,
		p + ":11: section [d] is already defined at line 6",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestPreset_KeyOutsideSectionIsAnError(t *testing.T) {
	p := writePreset(t, "c = 512\n[x]\nmodel = "+gguf(t, t.TempDir(), "x.gguf")+"\n")
	_, _, err := Load(context.Background(), Input{Preset: p})
	if err == nil || !strings.Contains(err.Error(), p+":1: c is outside any section") {
		t.Fatalf("err %v", err)
	}
}

// Keys that are not the backend's own options are checked against the
// --help of the llama-server that will run them.
func TestPreset_UnknownFlagAgainstRealLlamaServer(t *testing.T) {
	bin := os.Getenv("LOADOUT_LLAMA_SERVER")
	if bin == "" {
		if os.Getenv("LOADOUT_REQUIRE_LLAMACPP") == "1" {
			t.Fatal("LOADOUT_LLAMA_SERVER is not set")
		}
		t.Skip("needs llama.cpp's llama-server (LOADOUT_LLAMA_SERVER)")
	}
	m := gguf(t, t.TempDir(), "m.gguf")
	p := writePreset(t, "[m]\nmodel = "+m+"\nt = 2\njinja = false\nno-kv-offload = true\nhost = 0.0.0.0\nbogus-flag = 1\n")
	_, _, err := Load(context.Background(), Input{Preset: p, Binary: bin})
	if err == nil || !strings.Contains(err.Error(), p+":7: [m] flag bogus-flag is not one of llama-server's flags") {
		t.Fatalf("err %v", err)
	}
	p = writePreset(t, "[m]\nmodel = "+m+"\nt = 2\njinja = false\nno-kv-offload = true\nhost = 0.0.0.0\n")
	ms, warns, err := Load(context.Background(), Input{Preset: p, Binary: bin})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ms[0].Options["extra_args"].([]string), []string{"--threads", "2", "--no-jinja", "--no-kv-offload"}; !slices.Equal(got, want) {
		t.Errorf("extra_args %q, want %q", got, want)
	}
	if len(warns) != 1 || !strings.Contains(warns[0].String(), p+":6: [m] host is ignored") {
		t.Errorf("warnings %v", warns)
	}
}
