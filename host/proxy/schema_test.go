package proxy

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A body that fails its endpoint's schema is refused with a 400 naming
// the member, before the router hears of it: b (in a's exclusive group)
// is not swapped in, a is not evicted, no process starts or stops (issue
// 25: any client could force swaps with garbage).
func TestSchema_BadBodyRefusedBeforeAnySwap(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.echoOf(request{path: "/v1/chat/completions", body: `{"model":"a","messages":[{"role":"user","content":"hi"}]}`})
	e.world.expect(t, "start a")
	e.rec.lastRequest(t) // drain
	tests := []struct {
		path, body, param string
	}{
		{"/v1/chat/completions", `{"model":"b","messages":"bad"}`, "messages"},
		{"/v1/chat/completions", `{"model":"b"}`, "messages"},
		{"/v1/chat/completions", `{"model":"b","messages":null}`, "messages"},
		{"/v1/chat/completions", `{"model":"b","messages":["hi"]}`, "messages"},
		{"/v1/chat/completions", `{"model":"b","messages":[{"content":"hi"}]}`, "messages[0].role"},
		{"/v1/chat/completions", `{"model":"b","messages":[{"role":"user"},{"role":7}]}`, "messages[1].role"},
		{"/v1/chat/completions", `{"model":"b","messages":[],"stream":"yes"}`, "stream"},
		{"/v1/chat/completions", `{"model":"b","messages":[],"max_tokens":"8"}`, "max_tokens"},
		{"/v1/chat/completions", `{"model":"b","messages":[],"max_tokens":1.5}`, "max_tokens"},
		{"/v1/chat/completions", `{"model":"b","messages":[],"n":true}`, "n"},
		{"/v1/chat/completions", `{"model":"b","messages":[],"temperature":"hot"}`, "temperature"},
		{"/v1/chat/completions", `{"model":"b","messages":[],"stop":5}`, "stop"},
		{"/v1/chat/completions", `{"model":"b","messages":[],"logprobs":3}`, "logprobs"},
		{"/v1/completions", `{"model":"b"}`, "prompt"},
		{"/v1/completions", `{"model":"b","prompt":{"text":"x"}}`, "prompt"},
		{"/v1/completions", `{"model":"b","prompt":[ ]}`, "prompt"}, // it loaded the model to refuse it
		{"/v1/embeddings", `{"model":"b","input":[]}`, "input"},
		{"/v1/completions", `{"model":"b","prompt":"x","logprobs":true}`, "logprobs"},
		{"/v1/embeddings", `{"model":"b"}`, "input"},
		{"/v1/embeddings", `{"model":"b","input":3}`, "input"},
		{"/v1/responses", `{"model":"b","input":3}`, "input"},
		{"/v1/rerank", `{"model":"b","query":"q"}`, "documents"},
		{"/v1/audio/speech", `{"model":"b"}`, "input"},
		{"/v1/images/generations", `{"model":"b","prompt":["x"]}`, "prompt"},
	}
	for _, tt := range tests {
		resp, b := e.do(request{path: tt.path, body: tt.body})
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s %s: status %d, want 400: %s", tt.path, tt.body, resp.StatusCode, b)
			continue
		}
		eo := openAIError(t, b)
		if eo.Type != "invalid_request_error" || eo.Param != tt.param || !strings.Contains(eo.Message, `"`+tt.param+`"`) {
			t.Errorf("%s %s: error %+v, want an invalid_request_error naming %q", tt.path, tt.body, eo, tt.param)
		}
	}
	select {
	case req := <-e.rec.requests:
		t.Errorf("the router was asked for %q by a refused body", req.Model)
	default:
	}
	if st := e.status("b"); st.State != "stopped" {
		t.Errorf("b is %s, want stopped: a refused body loaded it", st.State)
	}
	if st := e.status("a"); st.State != "ready" {
		t.Errorf("a is %s, want ready: a refused body evicted it", st.State)
	}
	e.world.expectNone(t)
}

// Bodies real clients send pass: unknown members, null where OpenAI's
// schema says nullable, integers spelt 8.0, empty arrays, every
// endpoint's minimal body.
func TestSchema_LenientBodiesPass(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, tt := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"a","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_tokens":8.0,"n":null,"temperature":1,"stop":null,"stream":false,"stream_options":null,"x_vendor":{"k":1}}`},
		{"/v1/chat/completions", `{"model":"a","messages":[],"tools":[],"response_format":{"type":"json_object"},"logprobs":true,"top_logprobs":2,"seed":1e3}`},
		{"/v1/completions", `{"model":"a","prompt":[1,2,3],"logprobs":2,"echo":true,"best_of":null}`},
		{"/v1/completions", `{"model":"a","prompt":null}`},
		{"/v1/embeddings", `{"model":"a","input":["x","y"],"encoding_format":"float","dimensions":256}`},
		{"/v1/responses", `{"model":"a","instructions":null,"max_output_tokens":16}`},
		{"/v1/rerank", `{"model":"a","query":"q","documents":["x"],"top_n":1}`},
		{"/v1/audio/speech", `{"model":"a","input":"hi","voice":"alloy"}`},
		{"/v1/images/generations", `{"model":"a","prompt":"a cat","n":1}`},
		// Other servers' names for a required member, which llama-swap
		// passes on: llama-server's embeddings "content", TEI's rerank
		// "texts" (both refused as missing "input", "documents").
		{"/v1/embeddings", `{"model":"a","content":"hello"}`},
		{"/rerank", `{"model":"a","query":"q","texts":["x","y"]}`},
	} {
		if ec := e.echoOf(request{path: tt.path, body: tt.body}); ec.Body != tt.body {
			t.Errorf("%s: upstream got %q, want the body as sent", tt.path, ec.Body)
		}
	}
}

// jsonType names its sets as the error messages do.
func TestSchema_TypeNames(t *testing.T) {
	for _, tt := range []struct {
		t    jsonType
		want string
	}{
		{intOrNull, "an integer or null"},
		{numberOrNull, "a number or null"},
		{textOrList, "a string or an array"},
		{typeFraction, "a number"},
		{stringOrNull | typeArray, "a string, an array or null"},
	} {
		if got := tt.t.String(); got != tt.want {
			t.Errorf("%08b: %q, want %q", tt.t, got, tt.want)
		}
	}
}

// FuzzSchema checks that no body makes the schema check panic on any
// endpoint, and that what it refuses is a 400 naming a member.
func FuzzSchema(f *testing.F) {
	f.Add([]byte(`{"model":"a","messages":[{"role":"user"}],"max_tokens":1e400}`), "/v1/chat/completions")
	f.Add([]byte(`{"model":"a","messages":[null,{"role":null}]}`), "/v1/chat/completions")
	f.Add([]byte(`{"model":"a","prompt":-0.0e-1}`), "/v1/completions")
	f.Fuzz(func(t *testing.T, body []byte, path string) {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
		r.Header.Set("Content-Type", "application/json")
		_, e := parseModelRequest(r, body, schemas[path], nil)
		if e != nil && e.status != http.StatusBadRequest {
			t.Fatalf("status %d", e.status)
		}
	})
}
