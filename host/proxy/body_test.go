package proxy

import (
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/host/config"
)

func TestRewriteJSON_Scenario(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		rename string // "" keeps the model
		want   string
	}{
		{"drop first", `{"x_priority":1,"model":"a"}`, "", `{"model":"a"}`},
		{"drop middle", `{"model":"a", "x_client_id":"c", "n":1}`, "", `{"model":"a", "n":1}`},
		{"drop last", `{"model":"a","x_priority":1}`, "", `{"model":"a"}`},
		{"drop all", `{ "x_priority":1 , "x_client_id":"c" }`, "", `{ }`},
		{"pretty", "{\n  \"model\": \"a\",\n  \"x_priority\": 3,\n  \"stream\": true\n}", "", "{\n  \"model\": \"a\",\n  \"stream\": true\n}"},
		{"nested kept", `{"model":"a","tools":[{"x_priority":1}],"meta":{"x_client_id":"z"}}`, "", `{"model":"a","tools":[{"x_priority":1}],"meta":{"x_client_id":"z"}}`},
		{"case-insensitive", `{"X_Priority":1,"model":"a"}`, "", `{"model":"a"}`},
		{"rename", `{"model" : "a","n":1}`, "served/name", `{"model" : "served/name","n":1}`},
		{"rename escapes", `{"model":"a"}`, `we"ird\`, `{"model":"we\"ird\\"}`},
		{"rename and drop", `{"x_client_id":"c","model":"a\u0041"}`, "b", `{"model":"b"}`},
		{"numbers keep their spelling", `{"model":"a","t":1.50,"x_priority":2,"big":12345678901234567890}`, "", `{"model":"a","t":1.50,"big":12345678901234567890}`},
		{"trailing whitespace", "{\"x_priority\":1}  \n", "", "{}  \n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := rewriteJSON([]byte(tt.in), tt.rename != "", tt.rename, &config.Filters{}, "")
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("rewriteJSON(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if !json.Valid(got) {
				t.Errorf("output is not valid JSON: %q", got)
			}
		})
	}
}

// FuzzRewriteJSON checks, for any JSON object, that the rewrite is valid
// JSON with the extension fields gone, the model renamed, and every other
// top-level member unchanged.
func FuzzRewriteJSON(f *testing.F) {
	for _, s := range []string{
		`{"model":"a","x_priority":1,"x_client_id":"c"}`,
		`{}`,
		`{"a":[1,{"x_priority":2}],"model":null}`,
		"{\n\t\"x_priority\" : -1 ,\"model\":\"m\"\n}",
		`{"model":"a","model":"b"}`,
	} {
		f.Add([]byte(s), "renamed")
	}
	f.Fuzz(func(t *testing.T, in []byte, rename string) {
		var before map[string]json.RawMessage
		if json.Unmarshal(in, &before) != nil || before == nil {
			return
		}
		hasModel := false
		for k := range before {
			if strings.EqualFold(k, "model") {
				hasModel = true
			}
		}
		out, err := rewriteJSON(in, rename != "", rename, &config.Filters{}, "")
		if err != nil {
			t.Fatalf("rewriteJSON(%q): %v", in, err)
		}
		var after map[string]json.RawMessage
		if err := json.Unmarshal(out, &after); err != nil {
			t.Fatalf("rewriteJSON(%q) = %q: invalid JSON: %v", in, out, err)
		}
		want := map[string]string{}
		for k, v := range before {
			if isExtensionField(k) {
				continue
			}
			want[k] = compact(t, v)
		}
		got := map[string]string{}
		for k, v := range after {
			got[k] = compact(t, v)
		}
		if rename != "" && hasModel {
			b, _ := json.Marshal(rename)
			for k := range want {
				if strings.EqualFold(k, "model") {
					want[k] = compact(t, b)
				}
			}
		}
		if !maps.Equal(got, want) {
			t.Fatalf("rewriteJSON(%q, %q) = %q\ngot  %v\nwant %v", in, rename, out, got, want)
		}
	})
}

func compact(t *testing.T, v json.RawMessage) string {
	var sb strings.Builder
	var x any
	if err := json.Unmarshal(v, &x); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(x)
	sb.Write(b)
	return sb.String()
}

// FuzzParseModelRequest checks that no body makes the parser panic, and
// that a body it accepts can be rewritten.
func FuzzParseModelRequest(f *testing.F) {
	f.Add([]byte(`{"model":"a","stream":true,"x_priority":3,"x_client_id":"c"}`), "application/json")
	f.Add([]byte("--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\na\r\n--b--\r\n"), "multipart/form-data; boundary=b")
	f.Add([]byte(`{"model":`), "application/json")
	f.Fuzz(func(t *testing.T, body []byte, ctype string) {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions?model=q", nil)
		r.Header.Set("Content-Type", ctype)
		mr, e := parseModelRequest(r, body, schemas[r.URL.Path], nil)
		if e != nil {
			if e.status != http.StatusBadRequest {
				t.Fatalf("status %d for a parse error", e.status)
			}
			return
		}
		if mr.model == "" {
			t.Fatal("accepted without a model")
		}
		if _, err := mr.rewriteBody(r, body, &ModelEntry{UseModelName: "renamed"}); err != nil {
			t.Fatalf("rewriting an accepted body: %v", err)
		}
	})
}
