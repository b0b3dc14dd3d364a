package proxy

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
)

// authorize checks the request's API key when keys are configured. The
// key comes as apiKey finds it, and stays on the request: the model
// server is sent the client's credentials as they came (llama-swap's, so
// that a llama-server or vLLM started with the same --api-key takes
// them; a peer with an apiKey of its own is sent that instead). Keys are compared as SHA-256 digests in constant
// time, every configured key every time, so neither a key's bytes nor its
// length leak through timing.
func (s *Server) authorize(r *http.Request) *apiError {
	hashes := *s.keyHashes.Load()
	if len(hashes) == 0 {
		return nil
	}
	key := apiKey(r)
	if key == "" && r.Header.Get("Authorization") != "" {
		// Credentials were sent, in no form that gives a key (Basic that
		// is not base64 of user:password, an empty token): not missing.
		return &apiError{status: http.StatusUnauthorized, code: "invalid_api_key",
			msg: "invalid API key: the Authorization header gives none (send \"Authorization: Bearer <key>\", or the key as the password of Basic credentials)"}
	}
	if key == "" {
		return &apiError{status: http.StatusUnauthorized, code: "missing_api_key",
			msg: "missing API key: send it as \"Authorization: Bearer <key>\", as the password of \"Authorization: Basic\" credentials (any user name), or as \"X-Api-Key: <key>\""}
	}
	sum := sha256.Sum256([]byte(key))
	match := 0
	for i := range hashes {
		match |= subtle.ConstantTimeCompare(sum[:], hashes[i][:])
	}
	if match != 1 {
		return &apiError{status: http.StatusUnauthorized, code: "invalid_api_key", msg: "invalid API key"}
	}
	return nil
}

// apiKey is the key a request presents, "" for none, in the three ways
// llama-swap takes one: "Authorization: Bearer <key>"; the password of
// "Authorization: Basic" credentials, whatever the user name, which is
// what a browser's login prompt (the Basic challenge of a 401) sends; or,
// for clients that send it that way, "X-Api-Key". Credentials that give
// no key (an empty token, Basic that is not base64 of "user:password")
// fall through to X-Api-Key, as llama-swap's do.
func apiKey(r *http.Request) string {
	if scheme, rest, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok {
		switch {
		case strings.EqualFold(scheme, "Bearer"):
			if key := strings.TrimSpace(rest); key != "" {
				return key
			}
		case strings.EqualFold(scheme, "Basic"):
			if _, password, ok := r.BasicAuth(); ok && password != "" {
				return password
			}
		}
	}
	return r.Header.Get("X-Api-Key")
}

// SetAPIKeys replaces the keys a client must present (none: no key is
// asked for), as a hot reload of apiKeys: a request authorized after it
// returns is checked against the new keys only, so a key removed is
// revoked at once. Errors: an empty key (nothing is changed).
func (s *Server) SetAPIKeys(keys []string) error {
	hashes := make([][sha256.Size]byte, 0, len(keys))
	for i, k := range keys {
		if k == "" {
			return fmt.Errorf("proxy: API key %d is empty", i)
		}
		hashes = append(hashes, sha256.Sum256([]byte(k)))
	}
	s.keyHashes.Store(&hashes)
	return nil
}

// idSource makes request ids: a random per-process prefix and a counter,
// unique and cheap.
type idSource struct {
	prefix string
	n      atomic.Uint64
}

func newIDSource() *idSource {
	var b [10]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	h := hex.EncodeToString(b[:])
	// UUID-shaped (8-4-4-4-12 hex digits, version 4): model servers built
	// on starlette-context, llama-cpp-python's among them, answer 400 to any
	// other X-Request-Id.
	return &idSource{prefix: h[:8] + "-" + h[8:12] + "-4" + h[13:16] + "-" + h[16:20] + "-"}
}

// maxRequestID bounds a client-supplied X-Request-Id.
const maxRequestID = 128

// fromRequest returns the client's X-Request-Id if it is sane (printable
// ASCII without spaces, at most 128 bytes), else a new id.
func (ids *idSource) fromRequest(r *http.Request) string {
	if id := r.Header.Get(requestIDHeader); id != "" && len(id) <= maxRequestID && printable(id) {
		return id
	}
	return ids.prefix + fmt.Sprintf("%012x", ids.n.Add(1)&(1<<48-1))
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}
