package config

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// parse parses inline YAML named c.yaml and returns its error lines and
// warning lines.
func parse(t *testing.T, src string) (*Config, []string, []string) {
	t.Helper()
	return parseWith(t, src, Options{})
}

func TestParse_SyntaxErrors(t *testing.T) {
	// yaml.v3 numbers parser errors from 0 and scanner errors from 1; both
	// must come out as the 1-based line of the problem.
	tests := []struct{ src, want string }{
		{"models:\n  a:\n    cmd: [x\n", "c.yaml:3: did not find expected ',' or ']'"},
		{"a: 1\nb: [x\nc: 2\n", "c.yaml:2: did not find expected ',' or ']'"},
		{"a: 1\n- b\n", "c.yaml:2: did not find expected key"},
		{"a:\n  b: 1\n c: 2\n", "c.yaml:3: did not find expected key"},
		{"a: 1\nb: 2\nc: d: e\n", "c.yaml:3: mapping values are not allowed in this context"},
		{"a: 1\nb:\n\t- x\n", "c.yaml:3: found character that cannot start any token (the line is indented with a tab: YAML indents with spaces only)"},
		{"a: 1\nb: @x\n", "c.yaml:2: found character that cannot start any token"},
		{"a: 1\nb: *nope\n", "c.yaml:2: unknown anchor 'nope' referenced (no anchor &nope is defined before it)"},
		{"a: &nopex 1\nb: [*nopex]\nc: [*nope, 1]\n", "c.yaml:3: unknown anchor 'nope' referenced (no anchor &nope is defined before it)"},
	}
	for _, tt := range tests {
		_, errs, _ := parse(t, tt.src)
		eq(t, tt.src, errs, []string{tt.want})
	}
}

func TestParse_NotAMapping(t *testing.T) {
	for src, want := range map[string]string{
		"- a\n- b\n":                             "c.yaml:1:1: want a mapping of settings at the top level, got a list",
		"# only comments\n":                      "c.yaml: models: the configuration is empty: at least one model is required",
		"models:\n":                              "c.yaml:1:1: models: no models defined: at least one model, or a peer under peers:, is required",
		"models: {}\n":                           "c.yaml:1:1: models: no models defined: at least one model, or a peer under peers:, is required",
		"models: [a]\n":                          "c.yaml:1:9: models: want a mapping, got a list",
		"models:\n  a: 1\n":                      "c.yaml:2:6: models.a: want a mapping with at least cmd (or backend), got a number",
		"models:\n  \"\": {backend: sim}\n":      `c.yaml:2:3: models."": a model id cannot be empty`,
		"models:\n  \"a\\tb\": {backend: sim}\n": `c.yaml:2:3: models."a\tb": a model id cannot hold a control character ("\t" at byte 1)`,
	} {
		_, errs, _ := parse(t, src)
		eq(t, src, errs, []string{want})
	}
}

// A vram: with no unit is bytes; one under a MiB is surely a missing unit.
func TestParse_VRAMWithoutAUnit(t *testing.T) {
	_, errs, warns := parse(t, "models:\n  a: {backend: sim, vram: 12}\n  b: {backend: sim, vram: 12GiB}\n  c: {backend: sim, vram: 12884901888}\n")
	eq(t, "errors", errs, []string(nil))
	eq(t, "warnings", warns, []string{"c.yaml:2:27: models.a.vram: 12 is 12 bytes; write the unit, e.g. 12GiB"})
}

func TestParse_EnvRetypesPlainScalars(t *testing.T) {
	t.Setenv("LOADOUT_TEST_TTL", "60")
	t.Setenv("LOADOUT_TEST_FLAG", "true")
	cfg, errs, _ := parse(t, `
globalTTL: ${env.LOADOUT_TEST_TTL}
sendLoadingState: ${env.LOADOUT_TEST_FLAG}
models:
  m:
    backend: sim
    name: "${env.LOADOUT_TEST_TTL}"
    ttl: "${env.LOADOUT_TEST_TTL}"
`)
	// A quoted scalar stays a string, as the author wrote it.
	eq(t, "errors", errs, []string{`c.yaml:8:10: models.m.ttl: want a whole number of seconds, got "60"`})
	_ = cfg
	cfg, errs, _ = parse(t, "globalTTL: ${env.LOADOUT_TEST_TTL}\nsendLoadingState: ${env.LOADOUT_TEST_FLAG}\nmodels: {m: {backend: sim}}\n")
	eq(t, "errors", errs, nil)
	eq(t, "GlobalTTL", cfg.GlobalTTL, time.Minute)
	eq(t, "SendLoadingState", cfg.SendLoadingState, true)
	eq(t, "m.TTL", cfg.Models["m"].TTL, time.Minute)
}

func TestParse_EnvMalformed(t *testing.T) {
	_, errs, _ := parse(t, "models: {m: {backend: sim, name: \"${env.1X}\"}}\n")
	eq(t, "errors", errs, []string{`c.yaml:1:34: models.m.name: malformed environment macro ${env.1X}: want ${env.NAME} with NAME a letter or _ followed by letters, digits or _`})
}

func TestParse_HealthCheckTimeoutMinimum(t *testing.T) {
	cfg, errs, warns := parse(t, "healthCheckTimeout: 5\nmodels: {m: {backend: sim}}\n")
	eq(t, "errors", errs, nil)
	eq(t, "HealthCheckTimeout", cfg.HealthCheckTimeout, 15*time.Second)
	eq(t, "warnings", warns, []string{"c.yaml:1:21: healthCheckTimeout: raised from 5 to 15 seconds, llama-swap's minimum"})
}

func TestParse_Defaults(t *testing.T) {
	cfg, errs, warns := parse(t, "models:\n  m:\n    cmd: server --port ${PORT}\n")
	eq(t, "errors", errs, nil)
	eq(t, "warnings", warns, nil)
	eq(t, "HealthCheckTimeout", cfg.HealthCheckTimeout, 120*time.Second)
	eq(t, "LogLevel", cfg.LogLevel, "info")
	eq(t, "StartPort", cfg.StartPort, 5800)
	eq(t, "GlobalTTL", cfg.GlobalTTL, time.Duration(0))
	eq(t, "UnloadTimeout", cfg.UnloadTimeout, 10*time.Second)
	m := cfg.Models["m"]
	eq(t, "Backend", m.Backend, BackendCmd)
	eq(t, "Proxy", m.Proxy, "http://127.0.0.1:5800")
	eq(t, "CheckEndpoint", m.CheckEndpoint, "/health")
	eq(t, "UnloadTimeout", m.UnloadTimeout, 10*time.Second)
	eq(t, "Routing", cfg.Routing.Scheduler.Use+"/"+cfg.Routing.Router.Use, "fifo/group")
	eq(t, "Settings", string(cfg.Routing.Router.Settings), "{}")
	js, _ := cfg.RouterSettingsJSON()
	eq(t, "RouterSettingsJSON", string(js), `{"groups":{}}`)
	js, _ = cfg.SchedulerSettingsJSON()
	eq(t, "SchedulerSettingsJSON", string(js), `{}`)
}

func TestParse_PortRules(t *testing.T) {
	// ${PORT} only in cmdStop: not assigned, so it is left over.
	_, errs, _ := parse(t, "models:\n  m:\n    cmd: server --port 1\n    proxy: http://127.0.0.1:1\n    cmdStop: stop ${PORT}\n")
	eq(t, "errors", errs, []string{"c.yaml:5:14: models.m.cmdStop: unknown macro ${PORT}; ${PORT} is only assigned to a model whose cmd uses it (llama-swap's rule)"})

	// ${PORT} reached through a macro counts as used in cmd.
	cfg, errs, _ := parse(t, "startPort: 7000\nmacros:\n  srv: \"server --port ${PORT}\"\nmodels:\n  m:\n    cmd: ${srv}\n")
	eq(t, "errors", errs, nil)
	eq(t, "Cmd", cfg.Models["m"].Cmd, "server --port 7000")
	eq(t, "Proxy", cfg.Models["m"].Proxy, "http://127.0.0.1:7000")

	// Running out of ports is an error, not a wrap-around.
	_, errs, _ = parse(t, "startPort: 65535\nmodels:\n  a: {cmd: \"a --port ${PORT}\"}\n  b: {cmd: \"b --port ${PORT}\"}\n")
	eq(t, "errors", errs, []string{"c.yaml:4:3: models.b: ran out of ports: startPort 65535 plus one per model passes 65535"})
}

func TestParse_ModelMacroCannotUseLaterMacro(t *testing.T) {
	_, errs, _ := parse(t, "models:\n  m:\n    macros:\n      a: \"${b}\"\n      b: x\n    cmd: run ${a}\n    proxy: http://127.0.0.1:1\n")
	eq(t, "errors", errs, []string{
		"c.yaml:4:10: models.m.macros.a: uses ${b}, which is not defined above it (a macro may only use macros defined before it)",
		"c.yaml:6:10: models.m.cmd: unknown macro ${a}",
	})
}

func TestParse_MacroExpansionIsBounded(t *testing.T) {
	// Each macro uses the one before it twice: 2^40 copies unless bounded.
	var b strings.Builder
	b.WriteString("macros:\n  m0: xxxxxxxxxx\n")
	for i := 1; i < 40; i++ {
		b.WriteString("  m" + strconv.Itoa(i) + ": \"${m" + strconv.Itoa(i-1) + "}${m" + strconv.Itoa(i-1) + "}\"\n")
	}
	b.WriteString("models: {a: {backend: sim, name: \"${m39}\"}}\n")
	_, errs, _ := parse(t, b.String())
	eq(t, "errors", errs, []string{"c.yaml:42:34: models.a.name: substituting ${m22} makes the value longer than 1048576 bytes"})
}

func TestParse_AnchorSharedAcrossModels(t *testing.T) {
	// The anchor's node is shared in YAML; each model must get its own copy
	// before ${MODEL_ID} is substituted.
	cfg, errs, _ := parse(t, "models:\n  a: &base\n    cmd: run ${MODEL_ID} --port ${PORT}\n  b: *base\n")
	eq(t, "errors", errs, nil)
	eq(t, "a.Cmd", cfg.Models["a"].Cmd, "run a --port 5800")
	eq(t, "b.Cmd", cfg.Models["b"].Cmd, "run b --port 5801")
}

func TestParse_AliasBombFailsCleanly(t *testing.T) {
	src := "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
	prev := "a"
	for _, n := range []string{"b", "c", "d", "e", "f", "g", "h"} {
		src += n + ": &" + n + " [" + strings.Repeat("*"+prev+", ", 9) + "*" + prev + "]\n"
		prev = n
	}
	src += "models: {m: {backend: sim}}\n"
	start := time.Now()
	_, errs, _ := parse(t, src)
	if len(errs) == 0 || !strings.Contains(strings.Join(errs, "\n"), "document too large after expanding anchors") {
		t.Fatalf("errors = %q, want a too-large error", errs)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatalf("took %v", time.Since(start))
	}
}

func TestParse_AnchorsThatContainThemselves(t *testing.T) {
	tests := []struct{ src, want string }{
		{"x-a: &a [*a, 1]\nmodels: {m: {backend: sim}}\n", "c.yaml:1:10: x-a[0]: anchor &a contains itself"},
		{"x-a: &a {b: *a}\nmodels: {m: {backend: sim}}\n", "c.yaml:1:13: x-a.b: anchor &a contains itself"},
		{"x-a: &a {<<: *a}\nmodels: {m: {backend: sim}}\n", "c.yaml:1:14: x-a.<<: anchor &a contains itself"},
		{"models: {m: {<<: [1], backend: sim}}\n", "c.yaml:1:19: models.m.<<: merge key wants a mapping or a list of mappings, got a list holding a number"},
		{"models: {m: {<<: x, backend: sim}}\n", "c.yaml:1:18: models.m.<<: merge key wants a mapping or a list of mappings, got a string"},
		{"x-deep: " + strings.Repeat("[", 70) + strings.Repeat("]", 70) + "\nmodels: {m: {backend: sim}}\n", "c.yaml:1:71: x-deep[0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0]: nested more than 64 levels deep"},
	}
	for _, tt := range tests {
		_, errs, _ := parse(t, tt.src)
		if len(errs) == 0 || errs[0] != tt.want {
			t.Errorf("%q: errors %q, want first %q", tt.src, errs, tt.want)
		}
	}
}

func TestParse_ErrorInAnchorReportedOnce(t *testing.T) {
	_, errs, _ := parse(t, "x-a: &a {backend: sim, ttl: 1, ttl: 2}\nmodels:\n  m: {<<: *a}\n  n: {<<: *a}\n")
	eq(t, "errors", errs, []string{"c.yaml:1:32: x-a.ttl: duplicate key (first defined at line 1)"})
}

func TestParse_MergeKeyOverrides(t *testing.T) {
	cfg, errs, _ := parse(t, `
x-common: &common
  backend: sim
  ttl: 10
  options: {vram: 1GiB}
models:
  m:
    <<: [*common]
    ttl: 20
`)
	eq(t, "errors", errs, nil)
	eq(t, "TTL", cfg.Models["m"].TTL, 20*time.Second)
	eq(t, "Options", cfg.Models["m"].Options, map[string]any{"vram": "1GiB"})
}

func TestParse_LegacyGroupsAndMatrix(t *testing.T) {
	_, errs, _ := parse(t, "models: {a: {backend: sim}}\ngroups: {g: {members: [a]}}\nmatrix: {sets: {s: a}}\n")
	eq(t, "errors", errs, []string{"c.yaml:3:1: matrix: a configuration cannot use both groups (line 2) and matrix (llama-swap's rule)"})
}

func TestParse_BackendPlugin(t *testing.T) {
	_, errs, _ := parse(t, "models: {a: {backend: ./plugins/nope}}\n")
	eq(t, "errors", errs, []string{"c.yaml:1:23: models.a.backend: backend plugin ./plugins/nope: no such file"})
	// Relative to the configuration's directory, not the working directory.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "mybackend"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := Parse(filepath.Join(dir, "inline.yaml"), []byte("models: {a: {backend: ./mybackend}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "Backend", cfg.Models["a"].Backend, filepath.Join(dir, "mybackend"))
	eq(t, "Port", cfg.Models["a"].Port, 5800)
	_, _, err = Parse(filepath.Join(fixtureDir, "inline.yaml"), []byte("models: {a: {backend: ./policies}}\n"))
	if err == nil || !strings.HasSuffix(err.Error(), "models.a.backend: backend plugin ./policies is a directory") {
		t.Fatalf("err = %v, want a directory error", err)
	}
}

// A backend path that is not executable is a config error at its line.
func TestParse_BackendPluginNotExecutable(t *testing.T) {
	_, _, err := Parse(filepath.Join(fixtureDir, "inline.yaml"), []byte("models:\n  a:\n    backend: policies/custom.wasm\n"))
	if err == nil || !strings.HasSuffix(err.Error(), "inline.yaml:3:14: models.a.backend: backend plugin policies/custom.wasm is not executable (chmod +x it, or name the binary rather than its source)") {
		t.Fatalf("err = %v, want a not-executable error at line 3", err)
	}
}

func TestParse_ProxyIgnoredForNonCmdBackend(t *testing.T) {
	cfg, errs, warns := parse(t, "models: {a: {backend: sim, proxy: \"http://127.0.0.1:1\"}}\n")
	eq(t, "errors", errs, nil)
	eq(t, "warnings", warns, []string{"c.yaml:1:28: models.a.proxy: ignored for backend sim, which reports its own URL"})
	eq(t, "Proxy", cfg.Models["a"].Proxy, "")
}

func TestParse_MetadataNotJSONable(t *testing.T) {
	_, errs, _ := parse(t, "models: {a: {backend: sim, options: {x: .inf}}}\n")
	eq(t, "errors", errs, []string{"c.yaml:1:41: models.a.options.x: .inf cannot be passed on as JSON"})
}

func TestDefaultYAML_ParsesWithoutWarnings(t *testing.T) {
	cfg, warns, err := Parse("default.yaml", DefaultYAML())
	if err != nil || len(warns) != 0 {
		t.Fatalf("Parse(DefaultYAML) = %v, warnings %v", err, warns)
	}
	eq(t, "ModelIDs", cfg.ModelIDs(), []string{"embed", "medium", "small"})
	for _, id := range cfg.ModelIDs() {
		m := cfg.Models[id]
		eq(t, id+".Backend", m.Backend, BackendSim)
		for _, k := range []string{"load_time", "vram", "tokens_per_second"} {
			if _, ok := m.Options[k]; !ok {
				t.Errorf("%s has no options.%s", id, k)
			}
		}
	}
	eq(t, "GroupOf(small)", cfg.GroupOf("small").Name, cfg.GroupOf("medium").Name)
	g := cfg.GroupOf("small")
	eq(t, "chat group swap/exclusive", g.Swap && g.Exclusive, true)
	eq(t, "embed persistent", cfg.GroupOf("embed").Persistent, true)
	js, err := cfg.RouterSettingsJSON()
	if err != nil || !json.Valid(js) {
		t.Fatalf("RouterSettingsJSON = %s, %v", js, err)
	}
	// Callers get their own copy.
	b := DefaultYAML()
	b[0] = 'X'
	if DefaultYAML()[0] == 'X' {
		t.Fatal("DefaultYAML returned the embedded slice")
	}
}

func TestReport_Default(t *testing.T) {
	cfg, warns, err := Parse("default.yaml", DefaultYAML())
	if err != nil {
		t.Fatal(err)
	}
	warns = append(warns, Warning{Pos: Pos{"default.yaml", 3, 1}, Key: "peers", Message: "example"})
	r := Report(cfg, warns)
	for _, want := range []string{
		"default.yaml: 3 models, 2 groups, 1 GPU",
		"  embed   sim      5800  embeddings  never",
		"  small   sim      5802  chat        5m",
		`  small: backend sim, options {"load_time":"1s","tokens_per_second":80,"vram":"6GiB"}`,
		"  chat        yes   yes        no          small, medium",
		"  scheduler: fifo (built-in)",
		`      settings {}`,
		"  router: group (built-in)",
		"  sim0: 24GiB",
		"Preload at startup: embed",
		"1 warning\n  default.yaml:3:1: peers: example",
	} {
		if !strings.Contains(r, want) {
			t.Errorf("report lacks %q:\n%s", want, r)
		}
	}
	if strings.Contains(r, "sk-") {
		t.Error("report shows an API key")
	}
}

func TestReport_LegacyAndCmd(t *testing.T) {
	cfg, _, err := Parse("c.yaml", []byte("apiKeys: [sk-secret]\nmodels:\n  a: {cmd: \"run --port ${PORT}\", vram: 1.5GiB, pinned: true}\n  b: {backend: sim}\ngroups: {g: {members: [a]}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := Report(cfg, nil)
	for _, want := range []string{
		"1 key required",
		"  a   cmd      5800  g",
		"1.5GiB",
		"0 pinned",
		"  a: run --port 5800\n      proxy http://127.0.0.1:5800, health check /health",
		"(default) (implicit: models in no group)",
		"legacy top-level groups → routing.router use: group, settings.groups",
	} {
		if !strings.Contains(r, want) {
			t.Errorf("report lacks %q:\n%s", want, r)
		}
	}
	if strings.Contains(r, "sk-secret") {
		t.Error("report shows an API key")
	}
}

func TestError_Format(t *testing.T) {
	e := &Error{Pos: Pos{"config.yaml", 14, 5}, Key: "models.llama.ttl", Message: `want a whole number of seconds, got "abc"`}
	eq(t, "Error()", e.Error(), `config.yaml:14:5: models.llama.ttl: want a whole number of seconds, got "abc"`)
	eq(t, "no key", (&Error{Pos: Pos{"c.yaml", 2, 0}, Message: "m"}).Error(), "c.yaml:2: m")
	eq(t, "no line", (&Error{Pos: Pos{File: "c.yaml"}, Message: "m"}).Error(), "c.yaml: m")
	// A configuration made in memory (policy tune's) has no file.
	eq(t, "no file", (&Error{Key: "routing", Message: "m"}).Error(), "routing: m")
	var err error = Errors{e, {Pos: Pos{"c", 1, 1}, Message: "x"}}
	eq(t, "Errors", err.Error(), e.Error()+"\nc:1:1: x")
	var first *Error
	if !errors.As(err, &first) || first != e {
		t.Fatalf("errors.As did not find the first *Error")
	}
}

func TestSuggest_Table(t *testing.T) {
	known := []string{"healthCheckTimeout", "checkEndpoint", "use", "ttl", "models"}
	for in, want := range map[string]string{
		"helthCheckTimeout":    "healthCheckTimeout",
		"healthchecktimeout":   "healthCheckTimeout",
		"health_check_timeout": "healthCheckTimeout",
		"check_endpoint":       "checkEndpoint",
		"usee":                 "use",
		"tll":                  "ttl",
		"model":                "models",
		"bogus":                "",
		"x":                    "",
	} {
		eq(t, in, suggest(in, known), want)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(DefaultYAML())
	for _, s := range []string{
		"models: {a: {cmd: \"x --port ${PORT}\"}}\n",
		"a: &a [x]\nb: [*a, *a]\nmodels: {m: {<<: {backend: sim}}}\n",
		"models:\n  a: {cmd: x, proxy: \"http://h:${PORT}\"}\ngroups: {g: {members: [a, a]}}\n",
		"macros: {a: \"${b}\", b: 1}\nmodels: {m: {backend: sim, macros: {c: \"${a}\"}, name: \"${c}\"}}\n",
		"routing: {router: {use: matrix, settings: {matrix: {vars: {x: m}, sets: {s: \"(x | +s) & x\"}}}}}\nmodels: {m: {backend: sim}}\n",
		"routing: {scheduler: {use: fifo, settings: {fifo: {priority: {m: 1}}}}}\nmodels: {m: {backend: sim, priority: 2}}\n",
		"gpus: [{memory: 1GiB}, {name: x, memory: 1.5GB}]\nmodels: {m: {backend: sim, vram: 24G}}\n",
		"models:\n  m:\n    cmd: |\n      # c\n      a \\\n      'b\n",
		"- [\n",
		"a: &a [*a,*a]\nmodels: {m: {<<: {backend: sim}}}\n",
		"x-a: &a {<<: *a}\nmodels: {m: {backend: sim}}\n",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, warns, err := Parse("fuzz.yaml", data)
		for _, w := range warns {
			_ = w.String()
		}
		if err != nil {
			var list Errors
			if !errors.As(err, &list) || len(list) == 0 {
				t.Fatalf("error %T %v is not a non-empty Errors", err, err)
			}
			if cfg != nil {
				t.Fatal("config returned with an error")
			}
			return
		}
		for _, js := range [][]byte{must(cfg.SchedulerSettingsJSON()), must(cfg.RouterSettingsJSON())} {
			if !json.Valid(js) {
				t.Fatalf("settings JSON is not valid: %s", js)
			}
		}
		for _, m := range cfg.Models {
			if js := must(m.OptionsJSON()); !json.Valid(js) {
				t.Fatalf("options JSON is not valid: %s", js)
			}
			if g := cfg.GroupOf(m.ID); g == nil {
				t.Fatalf("model %s has no group", m.ID)
			}
		}
		_ = Report(cfg, warns)
	})
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// A cmd: model's sleep and wake steps may use the macros substituted when
// a step runs (${level}, ${PID}; docs/BACKENDS.md's example), which the
// check refused as unknown; elsewhere they are still unknown, and a
// misspelt one in a step still is.
func TestParse_SleepStepMacros(t *testing.T) {
	_, errs, _ := parse(t, "models:\n  m:\n    cmd: server --port ${PORT}\n    options:\n"+
		"      sleep: POST /sleep?level=${level}\n      wake: [POST /wake_up, './reload.sh ${PORT} ${PID}']\n      sleep_levels: [1, 2]\n")
	eq(t, "errors", errs, []string(nil))
	_, errs, _ = parse(t, "models:\n  m:\n    cmd: server --port ${PORT} ${level}\n    options:\n      sleep: POST /sleep?level=${levle}\n")
	eq(t, "errors", errs, []string{"c.yaml:3:10: models.m.cmd: unknown macro ${level}", "c.yaml:5:14: models.m.options.sleep: unknown macro ${levle}"})
}
