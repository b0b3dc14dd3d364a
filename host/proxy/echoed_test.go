package proxy

import (
	"net/http"
	"strings"
	"testing"
)

// TestErrors_LongModelNameBounded: a client-given name of any length is
// repeated in the 404 and in the request's log line as its first 128
// bytes, an ellipsis and its length (issue 27: a 1 MB model name was
// echoed whole into both).
func TestErrors_LongModelNameBounded(t *testing.T) {
	long := strings.Repeat("m", 1<<20)
	tests := []struct {
		name string
		rq   request
		want string // how the message ends the name
	}{
		{"JSON body", request{path: "/v1/chat/completions", body: `{"model":"` + long + `","messages":[]}`}, `mmm"… (1048576 bytes)`},
		{"/upstream path", request{method: http.MethodGet, path: "/upstream/" + long[:16<<10] + "/health"}, `mmm"… (16384 bytes)`},
		{"unknown endpoint", request{method: http.MethodGet, path: "/" + long[:16<<10]}, `mmm… (16385 bytes)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, envOpts{})
			tt.rq.headers = map[string]string{requestIDHeader: "long"}
			resp, b := e.do(tt.rq)
			if resp.StatusCode != http.StatusNotFound {
				t.Fatalf("status %d, want 404: %.200s", resp.StatusCode, b)
			}
			oe := openAIError(t, b)
			if len(oe.Message) > 400 || !strings.Contains(oe.Message, tt.want) {
				t.Errorf("message of %d bytes, want the name's first 128 bytes ending %s: %.400s", len(oe.Message), tt.want, oe.Message)
			}
			line := e.logs.requestLine(t, "long")
			for _, k := range []string{"err", "path"} {
				if len(line.attrs[k]) > 400 {
					t.Errorf("log line's %s is %d bytes: %.200s…", k, len(line.attrs[k]), line.attrs[k])
				}
			}
		})
	}
}
