package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

var fixtureDir = filepath.Join("..", "..", "testdata", "config")

// load loads a fixture and returns its errors and warnings as strings with the
// fixture directory (relative and absolute) trimmed, so expectations read
// "bad-types.yaml:7:10: models.llama.ttl: ...".
func load(t *testing.T, name string) (*Config, []string, []string) {
	t.Helper()
	cfg, warns, err := Load(filepath.Join(fixtureDir, name))
	abs, _ := filepath.Abs(fixtureDir)
	clean := func(s string) string {
		s = strings.ReplaceAll(s, abs, "DIR")
		return strings.ReplaceAll(s, fixtureDir+string(filepath.Separator), "")
	}
	var errs, ws []string
	if err != nil {
		var list Errors
		if !errors.As(err, &list) {
			t.Fatalf("Load(%s) error is %T, want Errors: %v", name, err, err)
		}
		for _, e := range list {
			errs = append(errs, clean(e.Error()))
		}
		if cfg != nil {
			t.Errorf("Load(%s) returned a config and an error", name)
		}
	} else if cfg == nil {
		t.Fatalf("Load(%s) returned neither config nor error", name)
	}
	for _, w := range warns {
		ws = append(ws, clean(w.String()))
	}
	return cfg, errs, ws
}

func setTestEnv(t *testing.T) {
	t.Setenv("LOADOUT_TEST_KEY", "sk-env")
	t.Setenv("LOADOUT_TEST_MODELS", "/models")
	os.Unsetenv("LOADOUT_TEST_UNSET")
}

func TestParse_Scenario(t *testing.T) {
	setTestEnv(t)
	tests := []struct {
		file      string
		wantErrs  []string
		wantWarns []string
		check     func(t *testing.T, c *Config)
	}{
		{file: "full.yaml", check: checkFull},
		{file: "anchors.yaml", check: func(t *testing.T, c *Config) {
			one, two := c.Models["one"], c.Models["two"]
			eq(t, "one.Cmd", one.Cmd, "server --port 5800 --name one")
			eq(t, "two.Cmd", two.Cmd, "server --port 5801 --name two")
			eq(t, "one.TTL", one.TTL, 5*time.Second)
			eq(t, "two.TTL", two.TTL, 60*time.Second)
		}},
		{file: "routing-wasm.yaml", check: func(t *testing.T, c *Config) {
			abs, _ := filepath.Abs(filepath.Join(fixtureDir, "policies", "custom.wasm"))
			eq(t, "Scheduler.Wasm", c.Routing.Scheduler.Wasm, abs)
			eq(t, "Scheduler.Use", c.Routing.Scheduler.Use, "")
			eq(t, "Router.Use", c.Routing.Router.Use, "prioritylru")
			js, err := c.SchedulerSettingsJSON()
			eq(t, "SchedulerSettingsJSON", string(js), `{"zeta":1,"alpha":["x","y"],"nested":{"b":true,"a":null}}`)
			eq(t, "err", err, nil)
			js, _ = c.RouterSettingsJSON()
			eq(t, "RouterSettingsJSON", string(js), `{"headroom":"2GiB"}`)
			eq(t, "GroupOf(m)", c.GroupOf("m").Name, DefaultGroup)
			eq(t, "m.Port", c.Models["m"].Port, 5800)
		}},
		{file: "matrix.yaml", check: func(t *testing.T, c *Config) {
			eq(t, "Router.Use", c.Routing.Router.Use, RouterMatrix)
			js, _ := c.RouterSettingsJSON()
			// As written: the matrix policy reads llama-swap's shape itself.
			eq(t, "RouterSettingsJSON", string(js), `{"matrix":{"vars":{"g":"gemma","v":"voice"},"evict_costs":{"v":50,"big":30},`+
				`"sets":{"standard":"(g | qwen) \u0026 v","full":"big","more":"+standard | g"}}}`)
			eq(t, "groups", len(c.Groups), 1)
		}},
		{file: "legacy-matrix.yaml", check: func(t *testing.T, c *Config) {
			eq(t, "Router.Use", c.Routing.Router.Use, RouterMatrix)
			js, _ := c.RouterSettingsJSON()
			eq(t, "RouterSettingsJSON", string(js), `{"matrix":{"vars":{"x":"a"},"sets":{"both":"x \u0026 b"}}}`)
			eq(t, "notes", c.notes, []string{"legacy top-level matrix → routing.router use: matrix, settings.matrix"})
		}},
		{file: "bad-types.yaml", wantErrs: []string{
			`bad-types.yaml:1:11: logLevel: want one of debug, info, warn, error, got "verbose"`,
			`bad-types.yaml:2:12: startPort: want a port number from 1 to 65535, got 0`,
			`bad-types.yaml:3:12: globalTTL: want a whole number of seconds >= 0, got -5`,
			`bad-types.yaml:7:10: models.llama.ttl: want a whole number of seconds, got "abc"`,
			`bad-types.yaml:8:20: models.llama.unloadTimeout: want a whole number of seconds, got "30s" (llama-swap counts this key in seconds: write 30)`,
			`bad-types.yaml:9:15: models.llama.unlisted: want true or false, got "yes"`,
			`bad-types.yaml:10:23: models.llama.concurrencyLimit: want 0 (the default) or more, got -1`,
			`bad-types.yaml:11:11: models.llama.env[0]: want NAME=value, got "NOEQUALS"`,
			`bad-types.yaml:12:20: models.llama.checkEndpoint: want a path starting with / (or none to skip health checks), got "health"`,
			`bad-types.yaml:15:12: models.remote.proxy: want an http:// or https:// URL with a host, like http://127.0.0.1:8080, got "localhost:8080"`,
			`bad-types.yaml:16:3: models.nothing: cmd is required (or name a backend: cmd, sim, llamaserver, vllm, or a plugin path)`,
			`bad-types.yaml:19:14: models.typo.backend: unknown backend "simm": want cmd, sim, llamaserver, vllm, or the path of a plugin binary; did you mean "sim"?`,
		}},
		{file: "bad-unknown-keys.yaml", wantErrs: []string{
			`bad-unknown-keys.yaml:1:1: helthCheckTimeout: unknown key "helthCheckTimeout"; did you mean "healthCheckTimeout"?`,
			`bad-unknown-keys.yaml:5:5: models.llama.check_endpoint: unknown key "check_endpoint"; did you mean "checkEndpoint"?`,
			`bad-unknown-keys.yaml:6:5: models.llama.bogus: unknown key "bogus"`,
			`bad-unknown-keys.yaml:8:3: routing.scheduler: want use: NAME (built-in: fifo) or wasm: PATH`,
			`bad-unknown-keys.yaml:9:5: routing.scheduler.usee: unknown key "usee"; did you mean "use"?`,
		}},
		{file: "bad-aliases.yaml", wantErrs: []string{
			`bad-aliases.yaml:4:23: models.a.aliases[1]: alias "b" of model a is the id of model b (line 5)`,
			`bad-aliases.yaml:4:33: models.a.aliases[3]: duplicate alias "twice" (already listed at line 4)`,
			`bad-aliases.yaml:8:9: models.b.aliases[0]: alias "shared" of model b is already an alias of model a (line 4)`,
		}},
		{file: "bad-groups.yaml", wantErrs: []string{
			`bad-groups.yaml:6:18: groups.one.members[1]: model "missing" is not defined`,
			`bad-groups.yaml:6:27: groups.one.members[2]: "alias-a" is an alias of model a; groups list model ids`,
			// The rest of bad-groups.yaml is the group policy's to refuse:
			// cmd/loadout's TestConfigCheck_PolicySettingsErrors.
		}},
		{file: "bad-groups-router.yaml", wantErrs: []string{
			`bad-groups-router.yaml:3:1: groups: legacy top-level groups cannot be combined with routing.router (line 6); move them to routing.router.settings.groups`,
		}},
		{file: "bad-refs.yaml", wantWarns: []string{
			`bad-refs.yaml:10:15: hooks.on_startup.preload[0]: model "lama" is not defined, so it is not preloaded; did you mean "llama"?`,
		}, wantErrs: []string{
			`bad-refs.yaml:17:16: routing.scheduler.settings.fifo.priority.big: priority 9 for model llama contradicts its priority: 5 (line 5)`,
			`bad-refs.yaml:18:11: routing.scheduler.settings.fifo.priority.qwn: model "qwn" is not defined; did you mean "qwen"?`,
		}},
		{file: "bad-routing.yaml", wantErrs: []string{
			`bad-routing.yaml:5:10: routing.scheduler.use: unknown built-in scheduler "fif0": want fifo, or wasm: PATH for a policy module; did you mean "fifo"?`,
			`bad-routing.yaml:7:11: routing.router.wasm: policy module policies/missing.wasm (resolved against DIR): no such file`,
			`bad-routing.yaml:8:15: routing.router.settings: settings must be a mapping, got a list`,
		}},
		{file: "bad-routing-both.yaml", wantErrs: []string{
			`bad-routing-both.yaml:6:11: routing.scheduler.wasm: set either use (a built-in scheduler) or wasm (a module), not both`,
			`bad-routing-both.yaml:7:3: routing.router: want use: NAME (built-in: adaptive, foresight, gdsf, group, matrix, ollama, prioritylru, s3fifo, sieve) or wasm: PATH`,
		}},
		{file: "bad-macros.yaml", wantErrs: []string{
			`bad-macros.yaml:2:3: macros.PORT: PORT is a reserved macro name (PORT, MODEL_ID and PID are set by Loadout)`,
			`bad-macros.yaml:3:3: macros."bad name": macro names may only use letters, digits, _ and - (llama-swap's ^[a-zA-Z0-9_-]+$)`,
			`bad-macros.yaml:4:10: macros.early: uses ${late}, which is not defined above it (a macro may only use macros defined before it)`,
			`bad-macros.yaml:6:9: macros.list: a macro value must be a string, number or boolean, got a list`,
			`bad-macros.yaml:9:10: models.llama.cmd: unknown macro ${foo}`,
			`bad-macros.yaml:9:10: models.llama.cmd: unknown macro ${HOME}; for an environment variable write ${env.HOME}`,
			`bad-macros.yaml:11:11: models.llama.name: unknown macro ${PID}; ${PID} is only available in cmdStop`,
			`bad-macros.yaml:12:18: models.llama.description: environment variable LOADOUT_TEST_UNSET is not set (used as ${env.LOADOUT_TEST_UNSET})`,
		}},
		{file: "bad-port.yaml", wantErrs: []string{
			`bad-port.yaml:4:12: models.fixed.proxy: ${PORT} is used in proxy but not in cmd; llama-swap rejects this too: pass --port ${PORT} in cmd, or set proxy to the URL the server listens on`,
		}},
		{file: "bad-cmd.yaml", wantErrs: []string{
			`bad-cmd.yaml:3:10: models.quote.cmd: unterminated quote`,
			`bad-cmd.yaml:5:10: models.empty.cmd: the command is empty`,
		}},
		{file: "bad-syntax.yaml", wantErrs: []string{
			`bad-syntax.yaml:3: did not find expected ',' or ']'`,
		}},
		{file: "bad-duplicate-key.yaml", wantErrs: []string{
			`bad-duplicate-key.yaml:5:5: models.llama.ttl: duplicate key (first defined at line 4)`,
		}},
		{file: "bad-sizes.yaml", wantErrs: []string{
			`bad-sizes.yaml:4:11: models.m.vram: size "24XB": unknown unit "XB" (want B, KiB, MiB, GiB, TiB, KB, MB, GB, TB, or K, M, G, T for powers of 1024)`,
			`bad-sizes.yaml:8:5: gpus[1]: GPU name "a" is already used (line 6)`,
			`bad-sizes.yaml:9:13: gpus[1].memory: size "-1" is negative`,
			`bad-sizes.yaml:10:5: gpus[2]: memory is required (for example memory: 24GiB)`,
			`bad-sizes.yaml:12:13: gpus[3].memory: a GPU of 0 holds no model: want its memory, for example 24GiB`,
		}},
		{file: "bad-empty.yaml", wantErrs: []string{
			`bad-empty.yaml: models: the configuration is empty: at least one model is required`,
		}},
		{file: "bad-multidoc.yaml", wantErrs: []string{
			`bad-multidoc.yaml:3:1: a configuration is one YAML document; remove the second one (---)`,
		}},
	}
	for _, tt := range tests {
		t.Run(strings.TrimSuffix(tt.file, ".yaml"), func(t *testing.T) {
			cfg, errs, warns := load(t, tt.file)
			eq(t, "errors", errs, tt.wantErrs)
			eq(t, "warnings", warns, tt.wantWarns)
			if tt.check != nil && cfg != nil {
				tt.check(t, cfg)
			}
		})
	}
}

func checkFull(t *testing.T, c *Config) {
	eq(t, "HealthCheckTimeout", c.HealthCheckTimeout, 30*time.Second)
	eq(t, "LogLevel", c.LogLevel, "debug")
	eq(t, "StartPort", c.StartPort, 9000)
	eq(t, "GlobalTTL", c.GlobalTTL, 600*time.Second)
	eq(t, "UnloadTimeout", c.UnloadTimeout, 5*time.Second)
	eq(t, "SendLoadingState", c.SendLoadingState, true)
	eq(t, "IncludeAliasesInList", c.IncludeAliasesInList, true)
	eq(t, "APIKeys", c.APIKeys, []string{"sk-one", "sk-env"})
	eq(t, "Macros", c.Macros, []Macro{
		{"server", "/opt/llama/llama-server --port ${PORT}"},
		{"ctx", int64(4096)},
		{"args", "--ctx-size ${ctx}"},
		{"models_dir", "/models"},
	})
	eq(t, "ModelIDs", c.ModelIDs(), []string{"alpha", "beta", "gamma", "sim-one"})

	// Ports count up in sorted id order over the models that use ${PORT};
	// beta's cmd does not, and non-cmd backends always get one.
	for id, port := range map[string]int{"alpha": 9000, "beta": 0, "gamma": 9001, "sim-one": 9002} {
		eq(t, id+".Port", c.Models[id].Port, port)
	}

	g := c.Models["gamma"]
	eq(t, "gamma.Backend", g.Backend, BackendCmd)
	// Model macro ctx overrides the global one even inside the global args
	// macro (llama-swap's last-defined-first substitution); comments and
	// continuation backslashes are gone.
	eq(t, "gamma.Cmd", g.Cmd, "/opt/llama/llama-server --port 9001 --model /models/gamma.gguf --ctx-size 8192 --temp 0.7 --alias gamma")
	eq(t, "gamma.Proxy", g.Proxy, "http://127.0.0.1:9001")
	eq(t, "gamma.Aliases", g.Aliases, []string{"g", "gamma-latest"})
	eq(t, "gamma.Env", g.Env, []string{"CUDA_VISIBLE_DEVICES=1"})
	eq(t, "gamma.TTL", g.TTL, 600*time.Second)
	eq(t, "gamma.CheckEndpoint", g.CheckEndpoint, "/health")
	eq(t, "gamma.Metadata", g.Metadata, map[string]any{
		"port":        int64(9001),
		"temperature": 0.7,
		"note":        "model gamma on 9001",
		"list":        []any{0.7, false},
	})
	eq(t, "gamma.VRAM", g.VRAM, int64(12<<30))
	eq(t, "gamma.Pinned", g.Pinned, true)
	eq(t, "gamma.Priority", g.Priority, 3) // from fifo.priority, keyed by its alias

	a := c.Models["alpha"]
	eq(t, "alpha.CheckEndpoint", a.CheckEndpoint, "")
	eq(t, "alpha.TTL", a.TTL, time.Duration(0))
	eq(t, "alpha.UnloadTimeout", a.UnloadTimeout, 30*time.Second)
	eq(t, "alpha.SendLoadingState", a.SendLoadingState, false)
	eq(t, "alpha.ConcurrencyLimit", a.ConcurrencyLimit, 4)
	eq(t, "alpha.UseModelName", a.UseModelName, "org/alpha")
	eq(t, "alpha.Name", a.Name, "Alpha alpha")
	eq(t, "alpha.Description", a.Description, "first")
	eq(t, "alpha.Unlisted", a.Unlisted, true)
	eq(t, "alpha.Priority", a.Priority, 7)

	b := c.Models["beta"]
	eq(t, "beta.Cmd", b.Cmd, "docker run --rm --name beta -p 8999:8080 image:latest")
	eq(t, "beta.CmdStop", b.CmdStop, "docker stop beta || kill ${PID}")
	eq(t, "beta.Proxy", b.Proxy, "http://127.0.0.1:8999")
	eq(t, "beta.CheckEndpoint", b.CheckEndpoint, "/v1/models")
	eq(t, "beta.TTL", b.TTL, 20*time.Second)
	eq(t, "beta.UnloadTimeout", b.UnloadTimeout, 5*time.Second)
	eq(t, "beta.SendLoadingState", b.SendLoadingState, true)

	s := c.Models["sim-one"]
	eq(t, "sim-one.Backend", s.Backend, BackendSim)
	eq(t, "sim-one.Proxy", s.Proxy, "")
	opts, err := s.OptionsJSON()
	eq(t, "sim-one.OptionsJSON", string(opts), `{"listen":":9002","load_time":"2s","tokens_per_second":40,"vram":"8GiB"}`)
	eq(t, "err", err, nil)

	eq(t, "Groups", c.Groups, []*Group{
		{Name: "pair", Swap: false, Exclusive: true, Members: []string{"alpha", "beta"}, Pos: Pos{c.File, 73, 3}},
		{Name: "keep", Swap: true, Exclusive: false, Persistent: true, Members: []string{"sim-one"}, Pos: Pos{c.File, 76, 3}},
		{Name: DefaultGroup, Swap: true, Exclusive: true, Members: []string{"gamma"}, Implicit: true, Pos: Pos{c.File, 21, 3}},
	})
	eq(t, "GroupOf(gamma)", c.GroupOf("gamma").Name, DefaultGroup)
	eq(t, "GroupOf(beta)", c.GroupOf("beta").Name, "pair")
	if c.GroupOf("nope") != nil {
		t.Errorf("GroupOf(nope) = %v, want nil", c.GroupOf("nope"))
	}
	for name, want := range map[string]string{"gamma-latest": "gamma", "g": "gamma", "alpha": "alpha", "nope": ""} {
		id, ok := c.ResolveModel(name)
		eq(t, "ResolveModel("+name+")", id, want)
		eq(t, "ResolveModel("+name+") ok", ok, want != "")
	}

	js, _ := c.SchedulerSettingsJSON()
	eq(t, "SchedulerSettingsJSON", string(js), `{"fifo":{"priority":{"alpha":7,"gamma":3}}}`)
	js, _ = c.RouterSettingsJSON()
	eq(t, "RouterSettingsJSON", string(js), `{"groups":{`+
		`"pair":{"swap":false,"members":["alpha","beta"]},`+
		`"keep":{"persistent":true,"exclusive":false,"members":["sim-one"]}}}`)
	js, _ = c.GroupSettingsJSON()
	eq(t, "GroupSettingsJSON", string(js), `{"groups":{`+
		`"pair":{"swap":false,"exclusive":true,"persistent":false,"members":["alpha","beta"]},`+
		`"keep":{"swap":true,"exclusive":false,"persistent":true,"members":["sim-one"]}}}`)

	eq(t, "GPUs", c.GPUs, []GPU{{"a", 24 << 30}, {"gpu1", 1_500_000_000}})
	eq(t, "Preload", c.Preload, []string{"gamma", "alpha"})
}

func eq[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got  %#v\n want %#v", what, got, want)
	}
}

// Every exported field of Config says what a hot reload does with it (its
// reload tag, Config's doc): a new setting left out would be neither
// applied nor reported as waiting for a restart.
func TestConfig_EveryFieldHasAReloadTag(t *testing.T) {
	for _, f := range reflect.VisibleFields(reflect.TypeFor[Config]()) {
		if !f.IsExported() {
			continue
		}
		class, key, _ := strings.Cut(f.Tag.Get("reload"), ",")
		switch {
		case class == "restart" && key != "":
		case (class == "source" || class == "model" || class == "live") && key == "":
		default:
			t.Errorf("Config.%s: reload tag %q: want source, model, live or restart,KEY", f.Name, f.Tag.Get("reload"))
		}
	}
}
