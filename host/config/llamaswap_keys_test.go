package config

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// parseErrs parses src as c.yaml and returns its errors as strings.
func parseErrs(t *testing.T, src string) (*Config, []string) {
	t.Helper()
	cfg, _, err := Parse("c.yaml", []byte(src))
	var out []string
	var list Errors
	if errors.As(err, &list) {
		for _, e := range list {
			out = append(out, e.Error())
		}
	} else if err != nil {
		t.Fatal(err)
	}
	return cfg, out
}

func TestFilters_Decode(t *testing.T) {
	cfg, errs := parseErrs(t, `
macros: {temp: 0.7}
models:
  m:
    cmd: run --port ${PORT}
    aliases: [m-alias]
    filters:
      stripParams: "top_k, temperature, ,top_k"
      setParams:
        temperature: ${temp}
        provider: {zdr: true}
      setParamsByID:
        "${MODEL_ID}": {effort: medium}
        "${MODEL_ID}:high": {effort: high}
        m-alias: {effort: low}
`)
	eq(t, "errors", errs, nil)
	if cfg == nil {
		t.FailNow()
	}
	f := cfg.Models["m"].Filters
	eq(t, "StripParams", f.StripParams, []string{"temperature", "top_k"})
	eq(t, "SetParams", f.SetParams, []Param{{"provider", json.RawMessage(`{"zdr":true}`)}, {"temperature", json.RawMessage(`0.7`)}})
	eq(t, "SetParamsByID[m:high]", f.SetParamsByID["m:high"], []Param{{"effort", json.RawMessage(`"high"`)}})
	eq(t, "SetParamsByID[m]", f.SetParamsByID["m"], []Param{{"effort", json.RawMessage(`"medium"`)}})
	id, ok := cfg.ResolveModel("m:high")
	eq(t, "ResolveModel(m:high)", id+" "+map[bool]string{true: "ok"}[ok], "m ok")
	eq(t, "Aliases", cfg.Models["m"].Aliases, []string{"m-alias", "m:high"})
	if r := Report(cfg, nil); !strings.Contains(r, `filters (JSON bodies): strip temperature, top_k; set provider={"zdr":true}, temperature=0.7; as m set effort="medium"`) {
		t.Errorf("report does not show the filters:\n%s", r)
	}
}

func TestFilters_LegacyStripParams(t *testing.T) {
	cfg, errs := parseErrs(t, "models:\n  m:\n    backend: sim\n    filters: {strip_params: \"a,b\"}\n")
	eq(t, "errors", errs, nil)
	eq(t, "StripParams", cfg.Models["m"].Filters.StripParams, []string{"a", "b"})
}

func TestFilters_Errors(t *testing.T) {
	_, errs := parseErrs(t, `models:
  m:
    backend: sim
    aliases: [shared]
  n:
    backend: sim
    filters:
      stripParams: "temperature, model"
      setParams:
        Model: x
        x_priority: 3
        chat_template_kwargs.enable_thinking: false
      setParamsByID:
        m: {a: 1}
        shared: {a: 1}
        n@2: {a: 1}
        ok: {model: y}
      stripe: x
`)
	eq(t, "errors", errs, []string{
		`c.yaml:8:20: models.n.filters.stripParams: a filter cannot strip "model": the proxy routes by it (useModelName renames it) (llama-swap protects model too)`,
		`c.yaml:10:9: models.n.filters.setParams.Model: a filter cannot set "Model": the proxy routes by it (useModelName renames it) (llama-swap protects model too)`,
		`c.yaml:11:9: models.n.filters.setParams.x_priority: a filter cannot set "x_priority": it is Loadout's request field, read by the proxy and never sent upstream (llama-swap protects model too)`,
		`c.yaml:12:9: models.n.filters.setParams."chat_template_kwargs.enable_thinking": "chat_template_kwargs.enable_thinking" is a path: Loadout's filters set top-level fields only (to change a nested field, set the whole object)`,
		`c.yaml:14:9: models.n.filters.setParamsByID.m: setParamsByID name (an alias, as in llama-swap) "m" of model n is the id of model m (line 2)`,
		`c.yaml:15:9: models.n.filters.setParamsByID.shared: setParamsByID name (an alias, as in llama-swap) "shared" of model n is already an alias of model m (line 4)`,
		`c.yaml:16:9: models.n.filters.setParamsByID.n@2: setParamsByID name (an alias, as in llama-swap) "n@2" may not end in @ and a number: that names a replica (replica 2 of model m is m@2)`,
		`c.yaml:17:14: models.n.filters.setParamsByID.ok.model: a filter cannot set "model": the proxy routes by it (useModelName renames it) (llama-swap protects model too)`,
		`c.yaml:18:7: models.n.filters.stripe: unknown key "stripe"`,
	})
}

func TestTimeouts_Decode(t *testing.T) {
	cfg, errs := parseErrs(t, "models:\n  m:\n    backend: sim\n    timeouts: {connect: 3, keepalive: 0, responseHeader: 60}\n  n: {backend: sim}\n")
	eq(t, "errors", errs, nil)
	want := DefaultTimeouts
	want.Connect, want.KeepAlive, want.ResponseHeader = 3*time.Second, 0, 60*time.Second
	eq(t, "m.Timeouts", cfg.Models["m"].Timeouts, want)
	eq(t, "n.Timeouts", cfg.Models["n"].Timeouts, DefaultTimeouts)

	_, errs = parseErrs(t, "models:\n  m:\n    backend: sim\n    timeouts:\n      connect: -1\n      idleConn: 90s\n      idle: 3\n")
	eq(t, "errors", errs, []string{
		"c.yaml:5:16: models.m.timeouts.connect: want a whole number of seconds >= 0, got -1",
		`c.yaml:6:17: models.m.timeouts.idleConn: want a whole number of seconds, got "90s" (llama-swap counts this key in seconds: write 90)`,
		`c.yaml:7:7: models.m.timeouts.idle: unknown key "idle"`,
	})
}

func TestCapabilities_Decode(t *testing.T) {
	cfg, errs := parseErrs(t, "models:\n  m:\n    backend: sim\n    capabilities: {in: [text, image], out: [text], tools: true, context: 32000}\n    compat: {ignoreWebsockets: true}\n")
	eq(t, "errors", errs, nil)
	eq(t, "Capabilities", cfg.Models["m"].Capabilities, Capabilities{In: []string{"text", "image"}, Out: []string{"text"}, Tools: true, Context: 32000})
	eq(t, "IgnoreWebsockets", cfg.Models["m"].IgnoreWebsockets, true)

	_, errs = parseErrs(t, "models:\n  m:\n    backend: sim\n    capabilities: {in: [video], context: -1, tool: true}\n    compat: {ignoreWebsocket: true}\n")
	eq(t, "errors", errs, []string{
		`c.yaml:4:25: models.m.capabilities.in[0]: want one of text, audio, image, got "video"`,
		"c.yaml:4:42: models.m.capabilities.context: want 0 or more tokens, got -1",
		`c.yaml:4:46: models.m.capabilities.tool: unknown key "tool"; did you mean "tools"?`,
		`c.yaml:5:14: models.m.compat.ignoreWebsocket: unknown key "ignoreWebsocket"; did you mean "ignoreWebsockets"?`,
	})
}

func TestTopLevelKeys_Decode(t *testing.T) {
	cfg, errs := parseErrs(t, `logToStdout: both
logTimeFormat: RFC3339
metricsMaxInMemory: 500
upstream: {ignorePaths: ['^/ws$']}
ui: {activity: {session_id: [X-Chat]}}
models: {m: {backend: sim}}
`)
	eq(t, "errors", errs, nil)
	eq(t, "LogToStdout", cfg.LogToStdout, LogBoth)
	eq(t, "LogTime", *cfg.LogTime, time.RFC3339)
	eq(t, "EventRing", cfg.EventRing, 500)
	eq(t, "IgnorePaths", len(cfg.IgnorePaths) == 1 && cfg.IgnorePaths[0].String() == "^/ws$", true)
	eq(t, "SessionHeaders", cfg.SessionHeaders, []string{"X-Chat"})

	cfg, errs = parseErrs(t, "logTimeFormat: \"\"\nmodels: {m: {backend: sim}}\n")
	eq(t, "errors", errs, nil)
	eq(t, "LogTime", *cfg.LogTime, "")
	eq(t, "LogToStdout", cfg.LogToStdout, LogProxy)
	eq(t, "IgnorePaths", cfg.IgnorePaths[0].String(), DefaultIgnorePaths[0])
	eq(t, "SessionHeaders", cfg.SessionHeaders, DefaultSessionHeaders)

	_, errs = parseErrs(t, `logToStdout: stdout
logTimeFormat: iso
metricsMaxInMemory: 0
upstream: {ignorePaths: ['(']}
ui: {activity: {session_id: ["a b"]}}
models: {m: {backend: sim}}
`)
	eq(t, "errors", errs, []string{
		`c.yaml:1:14: logToStdout: want one of proxy, upstream, both, none, got "stdout"`,
		`c.yaml:2:16: logTimeFormat: want "" (no timestamp) or one of ansic, kitchen, rfc1123, rfc1123z, rfc3339, rfc3339nano, rfc822, rfc822z, rfc850, rubydate, stamp, stampmicro, stampmilli, stampnano, unixdate, got "iso"`,
		"c.yaml:3:21: metricsMaxInMemory: want 1 or more records, got 0",
		"c.yaml:4:26: upstream.ignorePaths[0]: not a regular expression (RE2): error parsing regexp: missing closing ): `(`",
		`c.yaml:5:30: ui.activity.session_id[0]: want a header name, got "a b"`,
	})
}

// TestRouting_GroupsAndMatrixBoth: llama-swap's example keeps both engines'
// settings under routing.router.settings; the one use: names runs, and
// the other is not handed to it.
func TestRouting_GroupsAndMatrixBoth(t *testing.T) {
	for _, use := range []string{"group", "matrix"} {
		cfg, errs := parseErrs(t, `models: {a: {backend: sim}, b: {backend: sim}}
routing:
  router:
    use: `+use+`
    settings:
      groups: {g: {members: [a]}}
      matrix: {sets: {s: "a & b"}}
`)
		eq(t, "errors", errs, nil)
		js, _ := cfg.RouterSettingsJSON()
		other := map[string]string{"group": `"matrix"`, "matrix": `"groups"`}[use]
		if strings.Contains(string(js), other) {
			t.Errorf("use: %s: router settings %s carry the unused %s", use, js, other)
		}
		if r := Report(cfg, nil); !strings.Contains(r, "is kept but unused: use: "+use) {
			t.Errorf("use: %s: report does not say the other engine is unused:\n%s", use, r)
		}
	}
}

// The model llama-swap serves at /comfyui/ gets what llama-swap gives it
// whatever its entry says: a concurrencyLimit of at least 50 and
// compat.ignoreWebsockets. Other models are left as written.
func TestComfyUI_ModelDefaults(t *testing.T) {
	cfg, errs := parseErrs(t, `
models:
  comfyui_auto:
    cmd: comfy --port ${PORT}
    concurrencyLimit: 4
  big:
    cmd: comfy --port ${PORT}
    concurrencyLimit: 4
`)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if m := cfg.Models[ComfyUIModel]; m.ConcurrencyLimit != 50 || !m.IgnoreWebsockets {
		t.Errorf("comfyui_auto: concurrencyLimit %d, ignoreWebsockets %v; want 50, true", m.ConcurrencyLimit, m.IgnoreWebsockets)
	}
	if m := cfg.Models["big"]; m.ConcurrencyLimit != 4 || m.IgnoreWebsockets {
		t.Errorf("big: concurrencyLimit %d, ignoreWebsockets %v; want 4, false", m.ConcurrencyLimit, m.IgnoreWebsockets)
	}
	cfg, _ = parseErrs(t, "models:\n  comfyui_auto:\n    cmd: comfy --port ${PORT}\n    concurrencyLimit: 80\n")
	if n := cfg.Models[ComfyUIModel].ConcurrencyLimit; n != 80 {
		t.Errorf("comfyui_auto with concurrencyLimit 80: %d, want it kept", n)
	}
}
