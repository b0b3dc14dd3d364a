package proxy

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"slices"
	"testing"
)

// basicAuth is an Authorization header of Basic credentials.
func basicAuth(user, password string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
}

// As llama-swap takes it, the key may come as the password of Basic
// credentials, whatever the user name (what a browser's login prompt
// sends); a wrong one is an invalid key, not a missing one. The upstream
// is sent the credentials as the client sent them (llama-swap's: a
// llama-server started with the same --api-key takes them; they were
// removed).
func TestAuth_BasicCredentials(t *testing.T) {
	e := newEnv(t, envOpts{apiKeys: []string{"key-one", "key-two"}})
	chat := `{"model":"a","messages":[]}`
	for _, tt := range []struct {
		name, auth string
		status     int
		code       string
	}{
		{"any user", basicAuth("someone", "key-two"), 200, ""},
		{"no user", basicAuth("", "key-one"), 200, ""},
		{"scheme in lower case", "basic " + base64.StdEncoding.EncodeToString([]byte("u:key-one")), 200, ""},
		{"wrong key", basicAuth("u", "key-three"), 401, "invalid_api_key"},
		{"the key as the user: the password is the key", basicAuth("key-one", ""), 401, "invalid_api_key"},
		{"Basic that is not base64: sent, not missing", "Basic !!!", 401, "invalid_api_key"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, b := e.do(request{path: "/v1/chat/completions", body: chat, headers: map[string]string{"Authorization": tt.auth}})
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, b)
			}
			if tt.status != 200 {
				if oe := openAIError(t, b); oe.Code != tt.code {
					t.Errorf("error %+v, want code %s", oe, tt.code)
				}
				return
			}
			var ec echo
			if err := json.Unmarshal(b, &ec); err != nil || ec.Headers["Authorization"] != tt.auth {
				t.Errorf("the upstream was sent Authorization %q, want the client's %q", ec.Headers["Authorization"], tt.auth)
			}
		})
	}
}

// A 401 offers Basic beside Bearer, so that a browser opening an
// endpoint prompts for the key, as llama-swap's does — but not to the
// web UI's own fetches, which have a key prompt of their own, nor on the
// jobs API, which takes a Bearer job token only.
func TestAuth_ChallengesOfferBasic(t *testing.T) {
	e := newEnv(t, envOpts{apiKeys: []string{"key-one"}})
	bearer, basic := `Bearer realm="loadout"`, `Basic realm="loadout"`
	for _, tt := range []struct {
		name string
		rq   request
		want []string
	}{
		{"an API client", request{method: http.MethodGet, path: "/v1/models"}, []string{bearer, basic}},
		{"a browser opening the page", request{method: http.MethodGet, path: "/v1/models", headers: map[string]string{"Sec-Fetch-Mode": "navigate"}}, []string{bearer, basic}},
		{"a wrong key", request{method: http.MethodGet, path: "/running", headers: map[string]string{"Authorization": basicAuth("u", "nope")}}, []string{bearer, basic}},
		{"the web UI's fetch", request{method: http.MethodGet, path: "/api/summary", headers: map[string]string{"Sec-Fetch-Mode": "cors"}}, []string{bearer}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, b := e.do(tt.rq)
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			if got := resp.Header.Values("WWW-Authenticate"); !slices.Equal(got, tt.want) {
				t.Errorf("WWW-Authenticate %q, want %q", got, tt.want)
			}
		})
	}
	// The key a browser's prompt sends is taken.
	resp, b := e.do(request{method: http.MethodGet, path: "/v1/models", headers: map[string]string{"Authorization": basicAuth("me", "key-one")}})
	if resp.StatusCode != 200 {
		t.Errorf("GET /v1/models with the key as Basic's password: %d %s", resp.StatusCode, b)
	}
}
