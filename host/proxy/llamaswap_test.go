package proxy

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/config"
)

// filtersA are llama-swap's filters on model a (aliases alpha, first):
// strip temperature and top_k, set top_p and a nested object, and per
// requested name set effort (overriding setParams' for alpha).
var filtersA = config.Filters{
	StripParams: []string{"temperature", "top_k"},
	SetParams:   []config.Param{{Key: "effort", Value: json.RawMessage(`"low"`)}, {Key: "top_p", Value: json.RawMessage(`0.9`)}},
	SetParamsByID: map[string][]config.Param{
		"alpha": {{Key: "effort", Value: json.RawMessage(`"high"`)}},
	},
}

func TestFilters_AppliedToBody(t *testing.T) {
	e := newEnv(t, envOpts{edit: func(m *ModelEntry) {
		if m.ID == "a" {
			m.Filters = filtersA
		}
	}})
	form, formType := multipartBody(t, [][2]string{{"model", "a"}, {"temperature", "0.1"}})
	tests := []struct {
		name string
		rq   request
		want string
	}{
		{"by id: strip, replace in place, append the rest in key order",
			request{path: "/v1/chat/completions", body: `{"model": "a", "temperature": 0.2, "top_p": 1, "messages": [], "top_k": 5}`},
			`{"model": "a", "top_p": 0.9, "messages": [],"effort":"low"}`},
		{"by alias: setParamsByID overrides setParams",
			request{path: "/v1/chat/completions", body: `{"model":"alpha","effort":"none","x_priority":3,"messages":[]}`},
			`{"model":"alpha","effort":"high","messages":[],"top_p":0.9}`},
		{"a body without the set fields gets them",
			request{path: "/v1/completions?model=first", body: `{"prompt":""}`},
			`{"prompt":"","effort":"low","top_p":0.9}`},
		{"a form is not filtered (llama-swap filters JSON only)",
			request{path: "/v1/audio/transcriptions", body: form, ctype: formType},
			form},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ec := e.echoOf(tt.rq)
			if ec.Server != "a" || ec.Body != tt.want {
				t.Errorf("upstream %s got body\n%s\nwant\n%s", ec.Server, ec.Body, tt.want)
			}
			if ec.Length != int64(len(ec.Body)) {
				t.Errorf("Content-Length %d for a %d-byte body", ec.Length, len(ec.Body))
			}
		})
	}
	// Another model's body is untouched.
	if ec := e.echoOf(request{path: "/v1/chat/completions", body: `{"model":"d","temperature":0.2,"messages":[]}`}); ec.Body != `{"model":"d","temperature":0.2,"messages":[]}` {
		t.Errorf("model d's body changed: %s", ec.Body)
	}
}

func TestModelsList_MetadataAndCapabilities(t *testing.T) {
	e := newEnv(t, envOpts{aliasesInList: true, edit: func(m *ModelEntry) {
		if m.ID == "a" {
			m.Metadata = map[string]any{"port": int64(5800), "temperature": 0.7, "tags": []any{"x", 1}}
			m.Capabilities = config.Capabilities{In: []string{"text", "image"}, Out: []string{"text"}, Tools: true, Context: 32000}
		}
	}})
	_, b := e.do(request{method: http.MethodGet, path: "/v1/models"})
	var list struct {
		Data []map[string]any `json:"data"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, m := range list.Data {
		delete(m, "created")
		js, _ := json.Marshal(m)
		got[m["id"].(string)] = string(js)
	}
	want := map[string]string{
		"a":     `{"architecture":{"input_modalities":["text","image"],"modality":"text+image-\u003etext","output_modalities":["text"]},"capabilities":{"function_calling":true,"vision":true},"context_length":32000,"description":"the first model","id":"a","meta":{"llamaswap":{"aliases":["alpha","first"],"port":5800,"tags":["x",1],"temperature":0.7,"type":"model"},"n_ctx":32000},"name":"Model A","object":"model","owned_by":"loadout","status":{"value":"unloaded"},"supported_parameters":["tools","tool_choice"]}`,
		"alpha": `{"architecture":{"input_modalities":["text","image"],"modality":"text+image-\u003etext","output_modalities":["text"]},"capabilities":{"function_calling":true,"vision":true},"context_length":32000,"description":"the first model","id":"alpha","meta":{"llamaswap":{"modelID":"a","port":5800,"tags":["x",1],"temperature":0.7,"type":"alias"},"n_ctx":32000},"name":"Model A","object":"model","owned_by":"loadout","status":{"value":"unloaded"},"supported_parameters":["tools","tool_choice"]}`,
		"d":     `{"id":"d","meta":{"llamaswap":{"type":"model"}},"object":"model","owned_by":"loadout","status":{"value":"unloaded"}}`,
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("/v1/models %s:\n got %s\nwant %s", id, got[id], w)
		}
	}
}

func TestTimeouts_ResponseHeader(t *testing.T) {
	e := newEnv(t, envOpts{edit: func(m *ModelEntry) {
		if m.ID == "a" {
			tm := config.DefaultTimeouts
			tm.ResponseHeader = 200 * time.Millisecond
			m.Timeouts = &tm
		}
	}})
	// A server that sends no headers: 504 once the bound passes.
	resp, b := e.do(request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`, headers: map[string]string{"X-Test-Mode": "hold"}})
	if resp.StatusCode != http.StatusGatewayTimeout || openAIError(t, b).Code != "upstream_timeout" {
		t.Fatalf("status %d, body %s; want 504 upstream_timeout", resp.StatusCode, b)
	}
	e.world.waitHolding(t, "a") // its announcement; the server holds it until the test ends
	// Model d keeps the defaults (no response-header bound): released, it answers.
	done := make(chan *http.Response, 1)
	go func() {
		done <- e.send(request{path: "/v1/chat/completions", body: `{"model":"d","messages":[]}`, headers: map[string]string{"X-Test-Mode": "hold"}})
	}()
	e.world.waitHolding(t, "d")
	e.world.releaseOne(t)
	if resp := <-done; resp.StatusCode != http.StatusOK {
		t.Errorf("model d: status %d, want 200", resp.StatusCode)
	} else {
		resp.Body.Close()
	}
}

func TestUpstream_IgnorePathsNeverLoad(t *testing.T) {
	e := newEnv(t, envOpts{ignorePaths: []*regexp.Regexp{regexp.MustCompile(`\.js$`)}})
	resp, b := e.do(request{method: http.MethodGet, path: "/upstream/a/app.js"})
	if resp.StatusCode != http.StatusConflict || openAIError(t, b).Code != "model_not_loaded" {
		t.Fatalf("stopped model: status %d, body %s; want 409 model_not_loaded", resp.StatusCode, b)
	}
	if st := e.status("a").State; st != "stopped" {
		t.Fatalf("an ignored path loaded model a: state %s", st)
	}
	// Another path loads it; then the ignored path is served.
	if resp, b := e.do(request{method: http.MethodGet, path: "/upstream/a/index.html"}); resp.StatusCode != http.StatusOK {
		t.Fatalf("load: status %d: %s", resp.StatusCode, b)
	}
	if resp, b := e.do(request{method: http.MethodGet, path: "/upstream/a/app.js"}); resp.StatusCode != http.StatusOK {
		t.Fatalf("ready model: status %d: %s", resp.StatusCode, b)
	}
}

func TestUpstream_IgnoreWebsockets(t *testing.T) {
	e := newEnv(t, envOpts{edit: func(m *ModelEntry) { m.IgnoreWebsockets = m.ID == "a" }})
	ws := map[string]string{"Upgrade": "websocket", "Connection": "Upgrade"}
	resp, b := e.do(request{method: http.MethodGet, path: "/upstream/a/ws", headers: ws})
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("stopped model: status %d, body %s; want 409", resp.StatusCode, b)
	}
	if st := e.status("a").State; st != "stopped" {
		t.Fatalf("a WebSocket loaded model a: state %s", st)
	}
	if resp, _ := e.do(request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`}); resp.StatusCode != http.StatusOK {
		t.Fatalf("load: status %d", resp.StatusCode)
	}
	// Ready: proxied without a grant, so it is not in flight while held.
	done := make(chan *http.Response, 1)
	go func() {
		done <- e.send(request{method: http.MethodGet, path: "/upstream/a/ws", headers: map[string]string{"Upgrade": "websocket", "Connection": "Upgrade", "X-Test-Mode": "hold"}})
	}()
	e.world.waitHolding(t, "a")
	if n := e.status("a").InFlight; n != 0 {
		t.Errorf("a WebSocket is counted in flight: %d", n)
	}
	e.world.releaseOne(t)
	if resp := <-done; resp.Body != nil {
		resp.Body.Close()
	}
}

func TestInference_SessionHeaderIsClient(t *testing.T) {
	e := newEnv(t, envOpts{sessionHeaders: []string{"X-Session-ID", "X-Other"}})
	e.do(request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`, headers: map[string]string{"X-Other": "s2"}})
	if got := e.rec.lastRequest(t).Client; got != "s2" {
		t.Errorf("client %q, want the session header's s2", got)
	}
	e.do(request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`, headers: map[string]string{"X-Other": "s2", headerClient: "c"}})
	if got := e.rec.lastRequest(t).Client; got != "c" {
		t.Errorf("client %q, want X-Loadout-Client's c", got)
	}
}

// llama-swap's ComfyUI passthrough: /comfyui/{path} is
// /upstream/comfyui_auto/{path}, /comfyui redirects to /comfyui/, and only
// the root page loads the model; its assets, APIs and WebSocket get 409
// until it is ready, then pass with their paths as escaped.
func TestComfyUI_OnlyTheRootPageLoads(t *testing.T) {
	e := newEnv(t, envOpts{extra: []string{config.ComfyUIModel}, edit: func(m *ModelEntry) {
		m.IgnoreWebsockets = m.ID == config.ComfyUIModel
	}})
	for method, code := range map[string]int{http.MethodGet: http.StatusMovedPermanently, http.MethodPost: http.StatusPermanentRedirect} {
		resp, _ := e.do(request{method: method, path: "/comfyui?token=v"})
		if resp.StatusCode != code || resp.Header.Get("Location") != "/comfyui/?token=v" {
			t.Errorf("%s /comfyui: status %d Location %q, want %d to /comfyui/?token=v", method, resp.StatusCode, resp.Header.Get("Location"), code)
		}
	}
	for _, rq := range []request{
		{method: http.MethodGet, path: "/comfyui/api/prompt"},
		{method: http.MethodGet, path: "/comfyui/ws", headers: map[string]string{"Upgrade": "websocket", "Connection": "Upgrade"}},
	} {
		resp, b := e.do(rq)
		if resp.StatusCode != http.StatusConflict || openAIError(t, b).Code != "model_not_loaded" {
			t.Fatalf("%s before the model is loaded: status %d, body %s; want 409 model_not_loaded", rq.path, resp.StatusCode, b)
		}
	}
	if st := e.status(config.ComfyUIModel).State; st != "stopped" {
		t.Fatalf("a ComfyUI asset loaded the model: state %s", st)
	}
	if ec := e.echoOf(request{method: http.MethodGet, path: "/comfyui/?token=v"}); ec.Server != config.ComfyUIModel || ec.Path != "/" || ec.Query != "token=v" {
		t.Fatalf("the root page reached %+v", ec)
	}
	ec := e.echoOf(request{method: http.MethodPost, path: "/comfyui/api/userdata/workflows%2Fa%252Fb.json?preview=1", body: "{}"})
	if ec.Server != config.ComfyUIModel || ec.Path != "/api/userdata/workflows%2Fa%252Fb.json" || ec.Query != "preview=1" || ec.Body != "{}" {
		t.Errorf("an API call once loaded reached %+v", ec)
	}
}

// /comfyui/ serves the model of that exact id: without one it is a 404,
// and an alias of that name does not count.
func TestComfyUI_NeedsTheModel(t *testing.T) {
	e := newEnv(t, envOpts{edit: func(m *ModelEntry) {
		if m.ID == "a" {
			m.Aliases = append(m.Aliases, config.ComfyUIModel)
		}
	}})
	resp, b := e.do(request{method: http.MethodGet, path: "/comfyui/"})
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(openAIError(t, b).Message, "no model comfyui_auto") {
		t.Fatalf("status %d, body %s; want 404 naming comfyui_auto", resp.StatusCode, b)
	}
	if st := e.status("a").State; st != "stopped" {
		t.Errorf("the alias's model was loaded: state %s", st)
	}
}

// The paths of today's llama-swap and llama-server beside /v1: llama-swap's
// versionless /v/… (the /v dropped on the way up) and /audioapi/…,
// llama-server's OpenAI routes without /v1 (checked as with it) and its
// native ones, each routed by the model it names, and /v1/health.
func TestRoutes_LlamaSwapAndLlamaServerPaths(t *testing.T) {
	e := newEnv(t, envOpts{apiKeys: []string{"k"}})
	key := map[string]string{"Authorization": "Bearer k"}
	for _, tt := range []struct {
		method, path, body, upstream string
	}{
		{http.MethodPost, "/v/chat/completions", `{"model":"a","messages":[]}`, "/chat/completions"},
		{http.MethodPost, "/v/embeddings", `{"model":"a","input":"x"}`, "/embeddings"},
		{http.MethodPost, "/v/messages", `{"model":"a","max_tokens":8,"messages":[]}`, "/messages"},
		{http.MethodPost, "/audioapi/v1/tasks/run", `{"model":"a"}`, "/v1/tasks/run"},
		{http.MethodPost, "/chat/completions", `{"model":"a","messages":[]}`, "/chat/completions"},
		{http.MethodPost, "/responses", `{"model":"a","input":"x"}`, "/responses"},
		{http.MethodPost, "/tokenize", `{"model":"a","content":"x"}`, "/tokenize"},
		{http.MethodPost, "/embedding", `{"model":"a","content":"x"}`, "/embedding"},
		{http.MethodPost, "/slots/0?action=save", `{"model":"a","filename":"s.bin"}`, "/slots/0"},
		{http.MethodGet, "/slots?model=a", "", "/slots"},
		{http.MethodGet, "/lora-adapters?model=a", "", "/lora-adapters"},
	} {
		ec := e.echoOf(request{method: tt.method, path: tt.path, body: tt.body, headers: key})
		if ec.Server != "a" || ec.Path != tt.upstream || ec.Method != tt.method {
			t.Errorf("%s %s reached %s %s on %s, want %s on a", tt.method, tt.path, ec.Method, ec.Path, ec.Server, tt.upstream)
		}
	}
	// Checked against the /v1 schema before anything loads.
	for _, path := range []string{"/v/chat/completions", "/chat/completions"} {
		resp, b := e.do(request{path: path, body: `{"model":"b","messages":"hi"}`, headers: key})
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s with a bad body: status %d, want 400: %s", path, resp.StatusCode, b)
		}
	}
	if st := e.status("b").State; st != "stopped" {
		t.Errorf("a bad body loaded model b: state %s", st)
	}
	if resp, b := e.do(request{method: http.MethodGet, path: "/v1/health"}); resp.StatusCode != http.StatusOK {
		t.Errorf("/v1/health without a key: status %d: %s", resp.StatusCode, b)
	}
}

// /v1/models says whether each model is loaded (llama-server's router mode
// and llama-swap do), and lists the selectors (by the status of the target
// a request would take) and the active profile's pins, as llama-swap does.
func TestModelsList_StatusSelectorsAndPins(t *testing.T) {
	e := newEnv(t, envOpts{
		selectors: map[string]*config.Selector{
			"coder": {ID: "coder", Strategy: config.SelectorWarm, Targets: []string{"b", "alpha"}, Models: []string{"b", "a"},
				Name: "Coder", Metadata: map[string]any{"purpose": "coding"}},
			"hidden": {ID: "hidden", Strategy: config.SelectorPin, Targets: []string{"a"}, Models: []string{"a"}, Unlisted: true},
		},
		profiles: map[string]*config.Profile{"p": {ID: "p", Pins: map[string]string{"llm-plan": "a", "a": "b", "off": ""}}},
	})
	list := func() map[string]map[string]any {
		t.Helper()
		_, b := e.do(request{method: http.MethodGet, path: "/v1/models"})
		var out struct {
			Data []map[string]any `json:"data"`
		}
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		got := map[string]map[string]any{}
		for _, m := range out.Data {
			got[m["id"].(string)] = m
		}
		return got
	}
	status := func(m map[string]any) any { return m["status"].(map[string]any)["value"] }
	got := list()
	if got["hidden"] != nil || got["llm-plan"] != nil {
		t.Errorf("listed an unlisted selector or an inactive profile's pin: %v", got)
	}
	c := got["coder"]
	if c == nil || c["name"] != "Coder" || status(c) != "unloaded" {
		t.Fatalf("selector coder: %v", c)
	}
	meta := c["meta"].(map[string]any)["llamaswap"].(map[string]any)
	if meta["type"] != "selector" || meta["strategy"] != "warm" || meta["purpose"] != "coding" {
		t.Errorf("selector coder's meta: %v", meta)
	}
	e.echoOf(request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`})
	if resp, b := e.do(request{method: http.MethodPut, path: "/api/profiles/active", body: `{"name":"p"}`}); resp.StatusCode != http.StatusOK {
		t.Fatalf("activate p: %d %s", resp.StatusCode, b)
	}
	got = list()
	if status(got["a"]) != "loaded" || status(got["b"]) != "unloaded" || status(got["coder"]) != "loaded" {
		t.Errorf("after a loaded: a %v, b %v, coder %v", got["a"]["status"], got["b"]["status"], got["coder"]["status"])
	}
	pin := got["llm-plan"]
	if pin == nil || pin["meta"].(map[string]any)["llamaswap"].(map[string]any)["type"] != "profile" {
		t.Errorf("the active profile's pin llm-plan: %v", pin)
	}
	if got["off"] != nil || got["a"]["meta"].(map[string]any)["llamaswap"].(map[string]any)["type"] != "model" {
		t.Errorf("a disabled pin is listed, or a pin shadows model a: %v %v", got["off"], got["a"])
	}
}
