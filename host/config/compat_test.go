package config

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCompat_LlamaSwap loads every llama-swap reference configuration (copies
// in testdata/config/llama-swap, see its README). Each either loads, with
// warnings for the keys Loadout does not act on (and for a preload of an
// undefined model, which llama-swap skips without a word), or fails with
// the errors llama-swap also rejects it for: models referenced but not
// defined, and ${PORT} in the proxy but not in cmd.
func TestCompat_LlamaSwap(t *testing.T) {
	// The examples read these; set, so that what remains is what llama-swap
	// itself rejects.
	for _, v := range []string{"HOME", "API_KEY_1", "API_KEY_2", "OPENROUTER_API_KEY"} {
		t.Setenv(v, "x-"+v)
	}
	const not = "accepted for llama-swap compatibility but not honoured: "
	ls := "llama-swap/"
	warnExample := func(file string) []string { return []string{} }
	undefinedGroupMembers := func(file string, line int) []string {
		return []string{
			file + ":" + strconv.Itoa(line) + ":15: routing.router.settings.groups.group2.members[1]: model \"modelA\" is not defined",
			file + ":" + strconv.Itoa(line+1) + ":15: routing.router.settings.groups.group2.members[2]: model \"modelB\" is not defined",
			file + ":" + strconv.Itoa(line+15) + ":15: routing.router.settings.groups.forever.members[0]: model \"forever-modelA\" is not defined",
			file + ":" + strconv.Itoa(line+16) + ":15: routing.router.settings.groups.forever.members[1]: model \"forever-modelB\" is not defined",
			file + ":" + strconv.Itoa(line+17) + ":15: routing.router.settings.groups.forever.members[2]: model \"forever-modelc\" is not defined",
		}
	}
	fifo := func(file string, line int) []string {
		var out []string
		for i, m := range []string{"A", "B", "C", "D"} {
			out = append(out, file+":"+strconv.Itoa(line+i)+":11: routing.scheduler.settings.fifo.priority."+m+": model \""+m+"\" is not defined")
		}
		return out
	}
	cat := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}

	tests := map[string]struct {
		wantErrs  []string
		wantWarns []string // checked when not nil
		check     func(t *testing.T, c *Config)
	}{
		"aider-qwq-coder.groups.9b3a33d7.yaml": {
			wantWarns: []string{ls + "aider-qwq-coder.groups.9b3a33d7.yaml:5:5: profiles.aider: llama-swap's old list form of a profile (models run together, asked for as aider:MODEL) is not acted on, and newer llama-swap refuses it: write description and pins"},
			check: func(t *testing.T, c *Config) {
				eq(t, "HealthCheckTimeout", c.HealthCheckTimeout, 300*time.Second)
				eq(t, "LogLevel", c.LogLevel, "debug")
				eq(t, "ModelIDs", c.ModelIDs(), []string{"QwQ", "qwen-coder-32B"})
				id, _ := c.ResolveModel("coder")
				eq(t, "ResolveModel(coder)", id, "qwen-coder-32B")
				q := c.Models["qwen-coder-32B"]
				eq(t, "Proxy", q.Proxy, "http://127.0.0.1:8999")
				eq(t, "Port", q.Port, 0)
				eq(t, "Env", q.Env, []string{"CUDA_VISIBLE_DEVICES=0"})
				eq(t, "Cmd", strings.HasPrefix(q.Cmd, "/path/to/llama-server --host 127.0.0.1 --port 8999 --flash-attn --slots --ctx-size 16000"), true)
				eq(t, "GroupOf", c.GroupOf("QwQ").Name, DefaultGroup)
				args, err := SplitCommand(c.Models["QwQ"].Cmd)
				eq(t, "err", err, nil)
				i := slices.Index(args, "--samplers")
				eq(t, "QwQ --samplers value", args[i+1], "top_k;top_p;min_p;temperature;dry;typ_p;xtc")
			},
		},
		"docker-unified.config.example.9b3a33d7.yaml": {
			wantErrs: []string{
				ls + "docker-unified.config.example.9b3a33d7.yaml:21:3: models.image.proxy: ${PORT} is used in proxy (default http://127.0.0.1:${PORT}) but not in cmd; llama-swap rejects this too: pass --port ${PORT} in cmd, or set proxy to the URL the server listens on",
			},
			wantWarns: []string{ls + "docker-unified.config.example.9b3a33d7.yaml:3:1: logRequests: " + not + "an old llama-swap key; Loadout does not log request bodies"},
		},
		"config.example.9b3a33d7.yaml": {
			wantErrs: cat(
				[]string{
					ls + "config.example.9b3a33d7.yaml:414:15: routing.router.settings.groups.group1.members[0]: model \"llama\" is not defined",
				},
				undefinedGroupMembers(ls+"config.example.9b3a33d7.yaml", 428),
				fifo(ls+"config.example.9b3a33d7.yaml", 527),
			),
			wantWarns: warnExample(ls + "config.example.9b3a33d7.yaml"),
		},
		"config.example.HEAD-0bdb3720.yaml": {
			wantErrs: cat(
				[]string{
					// Profiles and selectors naming models the example
					// leaves undefined, as llama-swap reports them.
					ls + "config.example.HEAD-0bdb3720.yaml:192:19: profiles.coding.pins.llm-plan: target \"qwen-unlisted\" is not a model, an alias, a peer's model or a selector",
					ls + "config.example.HEAD-0bdb3720.yaml:208:9: selectors.coding-model.targets[1]: target \"qwen-unlisted\" is not a model, an alias or a peer's model",
					ls + "config.example.HEAD-0bdb3720.yaml:227:9: selectors.llama.targets[1]: target \"modelA\" is not a model, an alias or a peer's model",
					ls + "config.example.HEAD-0bdb3720.yaml:228:9: selectors.llama.targets[2]: target \"modelB\" is not a model, an alias or a peer's model",
					ls + "config.example.HEAD-0bdb3720.yaml:458:3: models.unlisted-model.proxy: ${PORT} is used in proxy (default http://127.0.0.1:${PORT}) but not in cmd; llama-swap rejects this too: pass --port ${PORT} in cmd, or set proxy to the URL the server listens on",
					ls + "config.example.HEAD-0bdb3720.yaml:556:15: routing.router.settings.groups.group1.members[0]: model \"llama\" is not defined",
					ls + "config.example.HEAD-0bdb3720.yaml:557:15: routing.router.settings.groups.group1.members[1]: model \"qwen-unlisted\" is not defined",
				},
				undefinedGroupMembers(ls+"config.example.HEAD-0bdb3720.yaml", 570),
				fifo(ls+"config.example.HEAD-0bdb3720.yaml", 669),
			),
		},
		"config.example.legacy-toplevel-matrix.0cfe5a66.yaml": {
			// matrix.vars naming undefined models is the matrix policy's
			// to refuse at init (loadout config check). A preload of an
			// undefined model is skipped, as llama-swap skips it.
			wantWarns: func() []string {
				f := ls + "config.example.legacy-toplevel-matrix.0cfe5a66.yaml"
				return []string{
					f + ":60:1: performance: " + not + "Loadout polls nothing on a timer: GPU and system figures are read when /metrics is scraped, so the scrape interval is the polling interval",
					f + `:447:9: hooks.on_startup.preload[0]: model "llama" is not defined, so it is not preloaded`,
				}
			}(),
			check: func(t *testing.T, c *Config) { eq(t, "Preload", c.Preload, []string(nil)) },
		},
	}

	files, err := filepath.Glob(filepath.Join(fixtureDir, "llama-swap", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no llama-swap fixtures: %v", err)
	}
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			tt, ok := tests[name]
			if !ok {
				t.Fatalf("no expectation for %s: add one to TestCompat_LlamaSwap", name)
			}
			cfg, errs, warns := load(t, filepath.Join("llama-swap", name))
			eq(t, "errors", errs, tt.wantErrs)
			if tt.wantWarns != nil {
				// The first warnings, in file order; the examples have more.
				if len(warns) < len(tt.wantWarns) {
					t.Fatalf("warnings: got %q, want at least %q", warns, tt.wantWarns)
				}
				eq(t, "warnings", warns[:len(tt.wantWarns)], tt.wantWarns)
			}
			if tt.check != nil && cfg != nil {
				tt.check(t, cfg)
			}
		})
	}
}

// TestCompat_CopiesAreCurrent checks, where the shared originals are present,
// that testdata holds an identical copy of each.
func TestCompat_CopiesAreCurrent(t *testing.T) {
	originals, _ := filepath.Glob("/work/shared/compat/llama-swap/*.yaml")
	if len(originals) == 0 {
		t.Skip("shared llama-swap originals not present on this machine")
	}
	for _, o := range originals {
		want, err := os.ReadFile(o)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(fixtureDir, "llama-swap", filepath.Base(o)))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("testdata/config/llama-swap/%s is missing or differs from %s: copy it", filepath.Base(o), o)
		}
	}
}

// TestCompat_NotHonouredKeysWarn: every llama-swap key Loadout accepts without
// acting on gives exactly one warning naming it, never an error.
func TestCompat_NotHonouredKeysWarn(t *testing.T) {
	var b bytes.Buffer
	for _, k := range slices.Sorted(maps.Keys(notHonoured)) {
		b.WriteString(k + ": {}\n")
	}
	b.WriteString("models:\n  m:\n    backend: sim\n")
	for _, k := range slices.Sorted(maps.Keys(modelNotHonoured)) {
		b.WriteString("    " + k + ": {}\n")
	}
	_, warns, err := Parse("c.yaml", b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	want := len(notHonoured) + len(modelNotHonoured)
	if len(warns) != want {
		t.Fatalf("got %d warnings, want %d: %v", len(warns), want, warns)
	}
	for i, k := range append(slices.Sorted(maps.Keys(notHonoured)), slices.Sorted(maps.Keys(modelNotHonoured))...) {
		if w := warns[i]; w.Key != k && w.Key != "models.m."+k {
			t.Errorf("warning %d names %q, want %q", i, w.Key, k)
		}
	}
}

// TestCompat_EveryKeyActedOn loads a configuration that holds every key
// llama-swap documents (its example configuration, made loadable) and
// holds it to "no key ignored": every warning is one of the keys that are
// one that cannot apply
// and says why (performance: nothing polls on a timer), or a peer's
// timeouts and filters, which the peers work acts on.
func TestCompat_EveryKeyActedOn(t *testing.T) {
	t.Setenv("OPENROUTER_API_KEY", "x")
	for _, v := range []string{"HOME", "API_KEY_1", "API_KEY_2"} {
		t.Setenv(v, "x-"+v)
	}
	cfg, warns, err := Load(filepath.Join(fixtureDir, "llama-swap-every-key.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	allowed := []string{"performance",
		"peers.openrouter.timeouts", "peers.openrouter.filters"}
	for _, w := range warns {
		if !slices.Contains(allowed, w.Key) {
			t.Errorf("key ignored: %s", w)
		}
	}
	m := cfg.Models["gpt-oss-120b"]
	eq(t, "StripParams", m.Filters.StripParams, []string{"temperature", "top_k", "top_p"})
	eq(t, "SetParamsByID", sortedKeys(m.Filters.SetParamsByID), []string{"gpt-oss-120b", "gpt-oss-120b:high", "gpt-oss-120b:low"})
	eq(t, "Timeouts.ResponseHeader", m.Timeouts.ResponseHeader, 60*time.Second)
	eq(t, "Timeouts.KeepAlive", m.Timeouts.KeepAlive, time.Duration(0))
	eq(t, "Capabilities.Context", m.Capabilities.Context, 32000)
	eq(t, "IgnoreWebsockets", m.IgnoreWebsockets, true)
	eq(t, "Metadata.port", m.Metadata["port"], any(int64(m.Port)))
	eq(t, "Metadata.temperature", m.Metadata["temperature"], any(0.7))
	eq(t, "LogToStdout", cfg.LogToStdout, LogProxy)
	eq(t, "LogTime", *cfg.LogTime, "")
	eq(t, "EventRing", cfg.EventRing, 1000)
	eq(t, "IgnorePaths", len(cfg.IgnorePaths), 2)
	eq(t, "SessionHeaders", cfg.SessionHeaders, []string{"X-Session-ID", "X-Litellm-Session-Id"})
	r := Report(cfg, warns)
	for _, want := range []string{
		"logToStdout             proxy",
		"filters (JSON bodies): strip temperature, top_k, top_p",
		"timeouts connect 30s, keepalive off, responseHeader 1m",
		"compat.ignoreWebsockets",
		"capabilities (in /v1/models): in text+audio+image, out text+audio+image, tools, context 32000",
		"metadata (in /v1/models meta.llamaswap)",
		"routing.router.settings.matrix (line",
		"metricsMaxInMemory",
	} {
		if !strings.Contains(r, want) {
			t.Errorf("report lacks %q:\n%s", want, r)
		}
	}
}
