package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/loadout-dev/loadout/host/router"
	"github.com/loadout-dev/loadout/sdk"
)

// apiError is an error as a client sees it: an HTTP status and the OpenAI
// error object {"error":{"message","type","code"}}.
type apiError struct {
	status int
	code   string // machine-readable, e.g. "model_not_found"
	msg    string
	// param is the request-body member at fault, as OpenAI's error object
	// names it (e.g. "messages[0].role"); "" for none.
	param string
}

func (e *apiError) Error() string { return e.msg }

// maxEchoed is the most of a client-given name (a model, a path) that an
// error message, and so the request's log line, repeats: 128 bytes.
const maxEchoed = 128

// echoed is a client-given name as an error message repeats it: quoted
// (strconv.Quote) whole when it is at most maxEchoed bytes, else its first
// maxEchoed bytes (cut at a character boundary), quoted, then an ellipsis
// and its length — "\"llama…\"… (1048576 bytes)" — so a 1 MB model name
// costs neither a 1 MB error body nor a 1 MB log line.
func echoed(name string) string {
	head, cut := clip(name, maxEchoed)
	if !cut {
		return strconv.Quote(name)
	}
	return strconv.Quote(head) + "… (" + strconv.Itoa(len(name)) + " bytes)"
}

// bounded is a client-given string as a log attribute repeats it: whole
// up to maxEchoed bytes, else cut like echoed's, unquoted.
func bounded(s string) string {
	head, cut := clip(s, maxEchoed)
	if !cut {
		return s
	}
	return head + "… (" + strconv.Itoa(len(s)) + " bytes)"
}

// clip returns s's first n bytes or fewer, cut at a character boundary,
// and whether anything was cut.
func clip(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n], true
}

// errorType is the OpenAI error type for a status.
func errorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status >= 500:
		return "server_error"
	default:
		return "invalid_request_error"
	}
}

type errorBody struct {
	Error errorObject `json:"error"`
}

type errorObject struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Param   string `json:"param,omitempty"`
	Code    string `json:"code,omitempty"`
}

// errorShape is the error format of the API a request belongs to: each
// client reads errors in its own API's shape.
type errorShape uint8

const (
	// shapeOpenAI: {"error":{"message","type","code"}}, OpenAI's API
	// reference; every endpoint but those below.
	shapeOpenAI errorShape = iota
	// shapeAnthropic: {"type":"error","error":{"type","message"}},
	// Anthropic's Messages API (docs.claude.com/en/api/errors), for
	// /v1/messages and /v1/messages/count_tokens.
	shapeAnthropic
	// shapeLlamaServer: {"error":{"code":<status>,"message","type"}},
	// llama-server's (tools/server/README.md), for its router mode's
	// model-management API under /models.
	shapeLlamaServer
	// shapeOllama: {"error": MESSAGE}, Ollama's API (docs/api.md), for
	// its paths (ollamaPaths).
	shapeOllama
)

// shapeOf is the error shape of a request path: the one rule, applied in
// ServeHTTP before anything can fail (an API key check included).
func shapeOf(path string) errorShape {
	switch {
	case path == "/v1/messages" || strings.HasPrefix(path, "/v1/messages/"):
		return shapeAnthropic
	case path == "/models" || strings.HasPrefix(path, "/models/"):
		return shapeLlamaServer
	case strings.HasPrefix(path, "/api/") && slices.Contains(ollamaPaths, path):
		return shapeOllama
	}
	return shapeOpenAI
}

// anthropicErrorType is the Messages API's error type for a status, from
// its table (docs.claude.com/en/api/errors): other 4xx are
// invalid_request_error, other 5xx api_error.
func anthropicErrorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status == http.StatusServiceUnavailable || status == 529:
		return "overloaded_error"
	case status >= 500:
		return "api_error"
	default:
		return "invalid_request_error"
	}
}

// llamaServerErrorType is llama-server's error type for a status, as its
// format_error_response names them (tools/server/server-common.cpp).
func llamaServerErrorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusServiceUnavailable:
		return "unavailable_error"
	case status >= 500:
		return "server_error"
	default:
		return "invalid_request_error"
	}
}

type anthropicErrorBody struct {
	Type  string               `json:"type"` // always "error"
	Error anthropicErrorObject `json:"error"`
}

type anthropicErrorObject struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

type llamaServerErrorBody struct {
	Error llamaServerErrorObject `json:"error"`
}

type llamaServerErrorObject struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Type    string `json:"type"`
}

// body is e as JSON in the given API's error shape.
func (e *apiError) body(shape errorShape) []byte {
	var v any
	switch shape {
	case shapeAnthropic:
		v = anthropicErrorBody{Type: "error", Error: anthropicErrorObject{Type: anthropicErrorType(e.status), Message: e.msg}}
	case shapeLlamaServer:
		v = llamaServerErrorBody{llamaServerErrorObject{Code: e.status, Message: e.msg, Type: llamaServerErrorType(e.status)}}
	case shapeOllama:
		v = map[string]string{"error": e.msg}
	default:
		v = errorBody{errorObject{Message: e.msg, Type: errorType(e.status), Param: e.param, Code: e.code}}
	}
	b, err := json.Marshal(v)
	if err != nil { // strings and numbers always marshal
		panic(err)
	}
	return b
}

// writeError sends e as the response and records it for the request's log
// line. A client that already left gets nothing.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, e *apiError) {
	ex := exchangeOf(r)
	if e.code == codeClientGone {
		ex.fail(statusClientGone, e.msg)
		return
	}
	ex.fail(e.status, e.msg)
	if ex.sse != nil { // the response started as an SSE stream
		ex.sse.sendError(e)
		return
	}
	b := append(e.body(ex.shape), '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Del("Content-Encoding")
	switch {
	case e.code == codeModelUnloaded:
		// An operator's forced unload: a client that retries at once
		// (the OpenAI SDKs retry a 503, sooner with Retry-After) would
		// load back the model just stopped. x-should-retry is the SDKs'
		// own "do not".
		h.Set("X-Should-Retry", "false")
	case e.status == http.StatusTooManyRequests || e.status == http.StatusServiceUnavailable:
		h.Set("Retry-After", "1")
	}
	if e.status == http.StatusUnauthorized {
		h["WWW-Authenticate"] = challenges(r)
	}
	w.WriteHeader(e.status)
	_, _ = w.Write(b)
}

// challenges are a 401's WWW-Authenticate challenges (RFC 9110 §11.6.1),
// one a field line. Bearer is how API clients send a key. Basic, whose
// password authorize takes as the key, is offered too, as llama-swap
// offers it, so that a browser opening an endpoint prompts for the key —
// but not to a page's own script (a Sec-Fetch-Mode other than navigate):
// a browser prompts for a fetch's 401 too, over the web UI's own key
// prompt, which keeps the key and sends it as a Bearer token. Nor on the
// jobs API, whose token is only ever a Bearer token.
func challenges(r *http.Request) []string {
	bearer := `Bearer realm="loadout"`
	if mode := r.Header.Get("Sec-Fetch-Mode"); mode != "" && mode != "navigate" || isJobsPath(r.URL.Path) {
		return []string{bearer}
	}
	return []string{bearer, `Basic realm="loadout"`}
}

// acquireError turns an error from Router.Acquire (or Unload) into what the
// client sees. ctx is the request's context (Abort may have ended it);
// model is the requested model, for messages.
func acquireError(ctx context.Context, err error, model string) *apiError {
	var re *router.Error
	switch {
	case errors.As(err, &re):
		return routerError(re)
	case abortedBy(ctx) != nil: // whatever the router made of the cancellation
		return abortedError(ctx)
	case errors.Is(err, context.Canceled):
		return &apiError{status: statusClientGone, code: codeClientGone, msg: "client went away while waiting for model " + model}
	case errors.Is(err, context.DeadlineExceeded):
		return &apiError{status: http.StatusGatewayTimeout, code: "timeout", msg: fmt.Sprintf("timed out waiting for model %s", model)}
	default:
		return &apiError{status: http.StatusInternalServerError, code: "internal_error", msg: fmt.Sprintf("model %s: %v", model, err)}
	}
}

// errorCodes is the one table from a policy's error code to the HTTP
// status and OpenAI error code a client sees; a code not in it (only
// CodeInternal, since the router refuses unknown codes) is a 500.
var errorCodes = map[sdk.ErrorCode]struct {
	status int
	code   string
}{
	sdk.CodeModelNotFound:    {http.StatusNotFound, "model_not_found"},
	sdk.CodeQueueFull:        {http.StatusTooManyRequests, "queue_full"},
	sdk.CodeConcurrencyLimit: {http.StatusTooManyRequests, "concurrency_limit"},
	sdk.CodeUnavailable:      {http.StatusServiceUnavailable, "unavailable"},
	sdk.CodeSwapFailed:       {http.StatusBadGateway, "model_load_failed"},
	sdk.CodeTimeout:          {http.StatusGatewayTimeout, "timeout"},
	sdk.CodeTooLarge:         {http.StatusInsufficientStorage, "model_too_large"},
}

// ClientError is the HTTP status and OpenAI error code a client gets for
// a policy's error code (e.g. 503, "unavailable"), from the one table
// errorCodes; CodeInternal and anything unknown is 500, "internal_error".
func ClientError(code sdk.ErrorCode) (status int, name string) {
	if c, ok := errorCodes[code]; ok {
		return c.status, c.code
	}
	return http.StatusInternalServerError, "internal_error"
}

// routerError is what the client sees of a router or policy error.
func routerError(re *router.Error) *apiError {
	status, code := ClientError(re.Code)
	return &apiError{status: status, code: code, msg: re.Message}
}
