package proxy

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/host/config"
)

func chat(model string) string {
	return `{"model":"` + model + `","messages":[{"role":"user","content":"hi"}]}`
}

// activeOf reads GET /api/profiles' active profile ("" for null).
func (e *env) activeOf() string {
	e.t.Helper()
	resp, b := e.do(request{method: http.MethodGet, path: "/api/profiles"})
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("GET /api/profiles: %d %s", resp.StatusCode, b)
	}
	var out struct {
		Active   *string      `json:"active"`
		Profiles []apiProfile `json:"profiles"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		e.t.Fatalf("GET /api/profiles: %v: %s", err, b)
	}
	if out.Active == nil {
		return ""
	}
	return *out.Active
}

// llama-swap's profiles: no profile at start; a switch (through the run
// loop) makes its pins the names' meaning, a pin without a target
// disables the name, an unknown profile changes nothing, null switches
// off.
func TestProfiles_PinsSwitchedAtRunTime(t *testing.T) {
	e := newEnv(t, envOpts{profiles: map[string]*config.Profile{
		"coding": {ID: "coding", Description: "code", Pins: map[string]string{"llm-code": "first", "a": ""}},
	}})
	if got := e.activeOf(); got != "" {
		t.Fatalf("at start: active %q, want none", got)
	}
	if resp, b := e.do(request{path: "/v1/chat/completions", body: chat("llm-code")}); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("llm-code before the switch: %d %s, want 404", resp.StatusCode, b)
	}

	put := func(body string) (*http.Response, []byte) {
		return e.do(request{method: http.MethodPut, path: "/api/profiles/active", body: body})
	}
	if resp, b := put(`{"name":"coding"}`); resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"active":"coding"`) {
		t.Fatalf("switch: %d %s", resp.StatusCode, b)
	}
	if got := e.router.Profile(); got != "coding" {
		t.Fatalf("the router holds profile %q, want coding", got)
	}
	ec := e.echoOf(request{path: "/v1/chat/completions", body: chat("llm-code")})
	if ec.Server != "a" || !strings.Contains(ec.Body, `"model":"first"`) {
		t.Fatalf("llm-code under coding: served by %q with body %s, want a with the pin's target as the model", ec.Server, ec.Body)
	}
	resp, b := e.do(request{path: "/v1/chat/completions", body: chat("a")})
	if resp.StatusCode != http.StatusNotFound || openAIError(t, b).Code != "model_not_found" || !strings.Contains(string(b), "coding") {
		t.Fatalf("a, disabled by coding: %d %s", resp.StatusCode, b)
	}

	if resp, b := put(`{"name":"missing"}`); resp.StatusCode != http.StatusNotFound || openAIError(t, b).Code != "profile_not_found" {
		t.Fatalf("unknown profile: %d %s", resp.StatusCode, b)
	}
	if resp, b := put(`{"nom":"coding"}`); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("no name: %d %s", resp.StatusCode, b)
	}
	if got := e.activeOf(); got != "coding" {
		t.Fatalf("after refused switches: active %q, want coding", got)
	}
	if resp, b := put(`{"name":null}`); resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"active":null`) {
		t.Fatalf("switch off: %d %s", resp.StatusCode, b)
	}
	if ec := e.echoOf(request{path: "/v1/chat/completions", body: chat("a")}); ec.Server != "a" {
		t.Fatalf("a with no profile: served by %q", ec.Server)
	}
}

// A selector's request reaches the router with its targets
// (Request.Select); the run loop picks the ready one, and the request is
// bound to the pick's entry (its model name, useModelName).
func TestSelectors_WarmPickedByRouter(t *testing.T) {
	e := newEnv(t, envOpts{selectors: map[string]*config.Selector{
		"chat": {ID: "chat", Strategy: config.SelectorWarm, Targets: []string{"a", "b"}, Models: []string{"a", "b"}},
	}})
	// b is ready, a is not: warm picks b.
	e.echoOf(request{path: "/v1/chat/completions", body: chat("b")})
	ec := e.echoOf(request{path: "/v1/chat/completions", body: chat("chat")})
	if ec.Server != "b" || !strings.Contains(ec.Body, `"model":"b-upstream"`) {
		t.Fatalf("chat: served by %q with body %s, want b with its useModelName", ec.Server, ec.Body)
	}
	if req := e.rec.lastRequest(t); req.Select == nil || req.Select.ID != "chat" || req.Select.Strategy != "warm" {
		t.Fatalf("router request %+v: want the selector in Request.Select", req)
	}
	if st := e.status("a").State; st != "stopped" {
		t.Fatalf("a is %s, want stopped (warm does not start a second target)", st)
	}
}
