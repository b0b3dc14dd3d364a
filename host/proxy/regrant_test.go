package proxy

import (
	"net/http"
	"testing"
)

// TestUpstream_LostBeforeAnswerGrantedAgain: a model server whose process
// dies with the request's connection accepted (reset, or closed, before a
// response byte) answered nothing, like one that refused the connection:
// the request is granted again, here to the restarted model, and served —
// not failed with a 502 (issue 27, "a replica killed with requests
// queued for it").
func TestUpstream_LostBeforeAnswerGrantedAgain(t *testing.T) {
	for _, mode := range []string{"rst", "eof"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, envOpts{})
			e.world.dies["a"] = []string{mode}
			body := `{"model":"a","messages":[{"role":"user","content":"hi"}]}`
			ec := e.echoOf(request{path: "/v1/chat/completions", body: body})
			if ec.Server != "a" || ec.Body != body {
				t.Errorf("answered by %q with body %q, want a with the request's body", ec.Server, ec.Body)
			}
			e.world.expect(t, "start a", "stop a", "start a") // died, restarted
		})
	}
}

// TestUpstream_LostConnectionNotGrantedAgain: what is not granted again
// after a lost connection — a request whose server already sent a
// response byte (it was answering), one whose body cannot be sent again
// (/upstream streams the client's body), and a second loss of the same
// request (it may be what kills the servers): each is a 502.
func TestUpstream_LostConnectionNotGrantedAgain(t *testing.T) {
	tests := []struct {
		name   string
		dies   []string
		rq     request
		starts int // how many of the dying servers the request reached
	}{
		{"after a response byte", []string{"header"},
			request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`}, 1},
		{"body not replayable", []string{"rst"},
			request{path: "/upstream/a/v1/chat/completions", body: `{"model":"a","messages":[]}`}, 1},
		{"lost twice", []string{"rst", "eof", "rst"},
			request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, envOpts{})
			e.world.dies["a"] = tt.dies
			resp, b := e.do(tt.rq)
			if resp.StatusCode != http.StatusBadGateway {
				t.Fatalf("status %d, want 502: %s", resp.StatusCode, b)
			}
			if oe := openAIError(t, b); oe.Code != "upstream_error" {
				t.Errorf("error %+v, want upstream_error", oe)
			}
			e.world.mu.Lock()
			left := len(e.world.dies["a"])
			e.world.mu.Unlock()
			if want := len(tt.dies) - tt.starts; left != want {
				t.Errorf("%d of %d dying servers started, want %d", len(tt.dies)-left, len(tt.dies), tt.starts)
			}
		})
	}
}
