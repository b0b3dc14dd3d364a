package proxy

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// gzipped is s compressed with gzip.
func gzipped(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// A gzip-encoded body is decoded before anything reads it: the model
// endpoints, Ollama's translation and /upstream's passthrough all get
// the JSON, and the upstream gets it plain, without the header that
// would say it is compressed.
func TestContentEncoding_GzipIsDecoded(t *testing.T) {
	e := newEnv(t, envOpts{})
	chat := `{"model":"a","messages":[{"role":"user","content":"hi"}]}`
	for _, tt := range []struct {
		name, path, coding string
	}{
		{"chat", "/v1/chat/completions", "gzip"},
		{"its old name", "/v1/chat/completions", "x-gzip"},
		{"with identity", "/v1/chat/completions", "identity, GZIP"},
		{"passthrough", "/upstream/a/v1/chat/completions", "gzip"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ec := e.echoOf(request{path: tt.path, body: gzipped(t, chat), headers: map[string]string{"Content-Encoding": tt.coding}})
			if ec.Body != chat || ec.Headers["Content-Encoding"] != "" {
				t.Errorf("the upstream got %q with Content-Encoding %q; want the JSON, plain", ec.Body, ec.Headers["Content-Encoding"])
			}
			if ec.Length > 0 && ec.Length != int64(len(chat)) {
				t.Errorf("the upstream was told %d bytes, sent %d", ec.Length, len(chat))
			}
		})
	}
	resp, b := e.do(request{path: "/api/chat", body: gzipped(t, `{"model":"a","stream":false,"messages":[{"role":"user","content":"hi"}]}`),
		headers: map[string]string{"Content-Encoding": "gzip"}})
	var answer struct{ Done bool }
	if err := json.Unmarshal(b, &answer); resp.StatusCode != 200 || err != nil || !answer.Done {
		t.Errorf("Ollama's /api/chat, gzipped: %d %s", resp.StatusCode, b)
	}
}

// The body limit bounds the decoded body: a few hundred bytes that
// inflate past it (a decompression bomb) are a 413, never read whole. A
// body that is not gzip is a 400 that says so; another coding is a 415
// naming what is taken.
func TestContentEncoding_LimitsAndRefusals(t *testing.T) {
	e := newEnv(t, envOpts{maxBody: 1024})
	bomb := gzipped(t, `{"model":"a","input":"`+strings.Repeat("x", 256<<10)+`"}`)
	if len(bomb) >= 1024 {
		t.Fatalf("the bomb is %d bytes compressed: not under the limit", len(bomb))
	}
	tooLarge := func(path string) {
		t.Helper()
		resp, b := e.do(request{path: path, body: bomb, headers: map[string]string{"Content-Encoding": "gzip"}})
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("%s: a body inflating past the limit: %d %s, want 413", path, resp.StatusCode, b)
		}
	}
	tooLarge("/v1/embeddings")
	tooLarge("/api/embed")

	resp, b := e.do(request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`, headers: map[string]string{"Content-Encoding": "gzip"}})
	if oe := openAIError(t, b); resp.StatusCode != http.StatusBadRequest || !strings.Contains(oe.Message, "gzip") {
		t.Errorf("a plain body said to be gzip: %d %s", resp.StatusCode, b)
	}

	for _, coding := range []string{"br", "deflate", "zstd", "gzip, gzip", "gzip, br"} {
		resp, b := e.do(request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`, headers: map[string]string{"Content-Encoding": coding}})
		oe := openAIError(t, b)
		if resp.StatusCode != http.StatusUnsupportedMediaType || oe.Code != "unsupported_content_encoding" ||
			!strings.Contains(oe.Message, "Content-Encoding: gzip") || resp.Header.Get("Accept-Encoding") != "gzip" {
			t.Errorf("Content-Encoding %s: %d %v %s, want 415 naming gzip, with Accept-Encoding: gzip", coding, resp.StatusCode, resp.Header, b)
		}
	}
	e.world.expectNone(t) // nothing was loaded for a body it could not read

	// /upstream streams the body to the model's server as it reads it,
	// once the model is loaded, under the same limit.
	tooLarge("/upstream/a/v1/embeddings")
}

// A Content-Encoding on a request without a body has nothing to decode:
// it is not refused (GET /health with one was a 415).
func TestContentEncoding_NoBodyNothingToRefuse(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, path := range []string{"/health", "/v1/models"} {
		resp, b := e.do(request{method: http.MethodGet, path: path, headers: map[string]string{"Content-Encoding": "br"}})
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s with Content-Encoding br: %d %s, want 200", path, resp.StatusCode, b)
		}
	}
}
