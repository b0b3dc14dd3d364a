package proxy

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/loadout-dev/loadout/host/router"
	"github.com/loadout-dev/loadout/sdk"
)

// Ollama's native API (github.com/ollama/ollama, docs/api.md), so that a
// client written for Ollama — its Python and JavaScript libraries, and
// the many tools that speak only its API — works against Loadout
// unchanged. A request is translated to its OpenAI-compatible form and
// served by the same pipeline as /v1/chat/completions, /v1/completions
// or /v1/embeddings (the queue, the policies, the liveness guards, the
// activity log), and the answer is translated back: a stream of SSE
// chunks becomes Ollama's NDJSON lines as they arrive, an error
// {"error": MESSAGE} with its status. What Ollama does with model files
// (pull, push, create, copy, delete) has no counterpart: Loadout serves
// the models its configuration names. GET /api/version stays llama-swap's
// ({"version", "commit", "build_date"}: Loadout's build).

// ollamaPaths are Ollama's API paths; errors there have its shape
// (shapeOllama).
var ollamaPaths = []string{
	"/api/tags", "/api/ps", "/api/show", "/api/chat", "/api/generate",
	"/api/embed", "/api/embeddings", "/api/pull", "/api/push", "/api/create", "/api/copy", "/api/delete",
}

// What an Ollama request becomes.
const (
	ollamaChat       = iota // /api/chat → /v1/chat/completions
	ollamaGenerate          // /api/generate → /v1/chat/completions (or /v1/completions when raw)
	ollamaEmbed             // /api/embed → /v1/embeddings
	ollamaEmbeddings        // /api/embeddings (the older form) → /v1/embeddings
)

// ollamaRequest is the body of /api/chat, /api/generate, /api/embed and
// /api/embeddings: the fields Loadout reads.
type ollamaRequest struct {
	Model     string          `json:"model"`
	Name      string          `json:"name"` // /api/show and /api/pull's older field
	Messages  []ollamaMessage `json:"messages"`
	Prompt    *string         `json:"prompt"`
	Suffix    string          `json:"suffix"` // /api/generate's fill-in-the-middle: refused (ollamaInference)
	System    string          `json:"system"`
	Raw       bool            `json:"raw"`
	Images    []string        `json:"images"`
	Stream    *bool           `json:"stream"` // Ollama's default is true
	Format    json.RawMessage `json:"format"`
	Options   map[string]any  `json:"options"`
	Tools     json.RawMessage `json:"tools"`
	KeepAlive json.RawMessage `json:"keep_alive"`
	Think     json.RawMessage `json:"think"`
	Input     json.RawMessage `json:"input"`
	// Logprobs and TopLogprobs ask for each token's log probability and
	// the most likely alternatives' (chat and generate); Dimensions is an
	// embed's vector size. OpenAI's fields of the same names carry them.
	Logprobs    bool `json:"logprobs"`
	TopLogprobs int  `json:"top_logprobs"`
	Dimensions  *int `json:"dimensions"`
}

// ollamaMessage is a chat message in Ollama's shape.
type ollamaMessage struct {
	Role      string           `json:"role"`
	Content   string           `json:"content"`
	Thinking  string           `json:"thinking,omitempty"`
	Images    []string         `json:"images,omitempty"`
	ToolCalls []ollamaToolCall `json:"tool_calls,omitempty"`
	ToolName  string           `json:"tool_name,omitempty"`
}

// ollamaToolCall is a tool call in Ollama's shape: arguments an object,
// not OpenAI's JSON string.
type ollamaToolCall struct {
	Function ollamaFunction `json:"function"`
}

type ollamaFunction struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// ollamaOptions maps Ollama's sampling options to the OpenAI-compatible
// body's fields (llama-server, vLLM and SGLang take the non-OpenAI ones).
// The others (num_ctx, num_gpu, num_thread, …) are how Ollama loads a
// model, which a Loadout model's configuration decides: they are
// ignored.
var ollamaOptions = map[string]string{
	"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
	"typical_p": "typical_p", "seed": "seed", "stop": "stop", "presence_penalty": "presence_penalty",
	"frequency_penalty": "frequency_penalty", "repeat_penalty": "repeat_penalty", "repeat_last_n": "repeat_last_n",
}

// parseOllama reads the body of an Ollama request; a body that is not its
// JSON or names no model is a 400.
func (s *Server) parseOllama(w http.ResponseWriter, r *http.Request) (*ollamaRequest, bool) {
	body, e := s.readBody(w, r)
	if e != nil {
		s.writeError(w, r, e)
		return nil, false
	}
	var req ollamaRequest
	if err := json.Unmarshal(body, &req); err != nil {
		s.writeError(w, r, badRequest("invalid_json", "the body is not an Ollama request: "+err.Error()))
		return nil, false
	}
	if req.Model == "" {
		req.Model = req.Name
	}
	if req.Model == "" {
		s.writeError(w, r, badRequest("missing_model", `the body names no model: give "model"`))
		return nil, false
	}
	return &req, true
}

// ollamaInference serves /api/chat, /api/generate, /api/embed and
// /api/embeddings (kind): the request translated and handed to the
// OpenAI endpoint's handler, its answer translated back by an
// ollamaWriter. A chat or generate that carries no messages or prompt,
// or an embed with no input, is Ollama's way to load a model, or (chat
// and generate) with keep_alive 0 to unload it.
//
// A generate's suffix (fill-in-the-middle) is refused, before anything
// loads, never dropped (the answer would ignore the code after the
// cursor): no OpenAI endpoint the model servers take honours it —
// /v1/completions' suffix is refused by llama-server ("Unsupported param")
// and vLLM, and the simulator (backends/sim) reads none. llama-server's own
// /infill takes it, through /upstream.
func (s *Server) ollamaInference(kind int) http.HandlerFunc {
	chat := s.inference(endpoint{path: "/v1/chat/completions", chat: true})
	completions := s.inference(endpoint{path: "/v1/completions"})
	embeddings := s.inference(endpoint{path: "/v1/embeddings"})
	return func(w http.ResponseWriter, r *http.Request) {
		req, ok := s.parseOllama(w, r)
		if !ok {
			return
		}
		asked := req.Model
		stream := req.Stream == nil || *req.Stream
		keep, keepSet, err := keepAlive(req.KeepAlive)
		if err != nil {
			s.writeError(w, r, badRequest("invalid_body", err.Error()))
			return
		}
		if kind == ollamaGenerate && req.Suffix != "" {
			id := req.Model
			if e := s.catalog.Load().lookup(id); e != nil {
				id = e.ID
			}
			s.writeError(w, r, badRequest("unsupported_parameter", fmt.Sprintf(
				"suffix (fill-in-the-middle) is not translated to the model servers' OpenAI API, which would ignore it: "+
					"llama-server's /infill (input_prefix, input_suffix) is reachable at /upstream/%s/infill", id)))
			return
		}
		var (
			body []byte
			next http.HandlerFunc
			path string
		)
		switch {
		case kind == ollamaChat && len(req.Messages) == 0, kind == ollamaGenerate && req.prompt() == "" && len(req.Images) == 0,
			kind == ollamaEmbed && req.noInput(), kind == ollamaEmbeddings && req.prompt() == "":
			s.ollamaLoadOrUnload(w, r, req, asked, kind, keep, keepSet)
			return
		case kind == ollamaEmbed || kind == ollamaEmbeddings:
			stream = false
			body, err = req.embeddingsBody(kind)
			next, path = embeddings, "/v1/embeddings"
		case kind == ollamaGenerate && req.Raw:
			body, err = req.completionsBody(stream)
			next, path = completions, "/v1/completions"
		default:
			body, err = req.chatBody(kind, stream)
			next, path = chat, "/v1/chat/completions"
		}
		if err != nil {
			s.writeError(w, r, badRequest("invalid_body", err.Error()))
			return
		}
		exchangeOf(r).keepAlive = routerTTL(keep, keepSet)
		r2 := r.Clone(r.Context())
		r2.URL.Path, r2.URL.RawPath = path, ""
		r2.Header.Set("Content-Type", "application/json")
		setBody(r2, body)
		ow := &ollamaWriter{w: w, kind: kind, stream: stream, model: asked, start: time.Now(), ex: exchangeOf(r), tools: map[int]*ollamaToolCall{}, limit: maxOllamaHeld,
			topLogprobs: req.topLogprobs()}
		next(ow, r2)
		ow.finish()
	}
}

// maxTopLogprobs is the most alternatives a token's logprobs list (Ollama's
// and OpenAI's cap).
const maxTopLogprobs = 20

// topLogprobs is how many alternatives each token's logprobs list: the
// request's top_logprobs within 0 to maxTopLogprobs.
func (req *ollamaRequest) topLogprobs() int { return min(max(req.TopLogprobs, 0), maxTopLogprobs) }

// chatBody is the /v1/chat/completions body of a chat (or a generate,
// as its system and prompt).
func (req *ollamaRequest) chatBody(kind int, stream bool) ([]byte, error) {
	msgs := req.Messages
	if kind == ollamaGenerate {
		msgs = nil
		if req.System != "" {
			msgs = append(msgs, ollamaMessage{Role: "system", Content: req.System})
		}
		msgs = append(msgs, ollamaMessage{Role: "user", Content: req.prompt(), Images: req.Images})
	}
	out := map[string]any{"model": req.Model, "stream": stream}
	var calls []string // ids of the tool calls so far, for the tool results that answer them
	answered := 0
	messages := make([]any, 0, len(msgs))
	for i, m := range msgs {
		if m.Role == "" {
			return nil, fmt.Errorf("messages[%d] has no role", i)
		}
		msg := map[string]any{"role": m.Role}
		if len(m.Images) > 0 {
			parts := []any{map[string]any{"type": "text", "text": m.Content}}
			for _, img := range m.Images {
				parts = append(parts, map[string]any{"type": "image_url", "image_url": map[string]any{"url": imageURL(img)}})
			}
			msg["content"] = parts
		} else {
			msg["content"] = m.Content
		}
		if m.Thinking != "" {
			msg["reasoning_content"] = m.Thinking
		}
		if len(m.ToolCalls) > 0 {
			var tcs []any
			for _, tc := range m.ToolCalls {
				id := "call_" + strconv.Itoa(len(calls))
				calls = append(calls, id)
				args := "{}"
				if len(tc.Function.Arguments) > 0 {
					args = string(tc.Function.Arguments)
				}
				tcs = append(tcs, map[string]any{"id": id, "type": "function",
					"function": map[string]any{"name": tc.Function.Name, "arguments": args}})
			}
			msg["tool_calls"] = tcs
		}
		if m.Role == "tool" {
			// Ollama's tool results name the tool, not the call: they
			// answer the calls in order.
			if answered < len(calls) {
				msg["tool_call_id"] = calls[answered]
				answered++
			}
			if m.ToolName != "" {
				msg["name"] = m.ToolName
			}
		}
		messages = append(messages, msg)
	}
	out["messages"] = messages
	if len(req.Tools) > 0 && string(req.Tools) != "null" {
		out["tools"] = req.Tools
	}
	if req.Logprobs {
		out["logprobs"] = true
		if n := req.topLogprobs(); n > 0 {
			out["top_logprobs"] = n
		}
	}
	if err := req.sampling(out, stream); err != nil {
		return nil, err
	}
	return json.Marshal(out)
}

// prompt is a generate's prompt, "" when it has none (images alone).
func (req *ollamaRequest) prompt() string {
	if req.Prompt == nil {
		return ""
	}
	return *req.Prompt
}

// completionsBody is the /v1/completions body of a raw generate: the
// prompt as it is, no chat template.
func (req *ollamaRequest) completionsBody(stream bool) ([]byte, error) {
	out := map[string]any{"model": req.Model, "prompt": req.prompt(), "stream": stream}
	if req.Logprobs {
		// Completions' logprobs is how many alternatives; llama-server
		// reads 0 as none at all.
		out["logprobs"] = max(1, req.topLogprobs())
	}
	if err := req.sampling(out, stream); err != nil {
		return nil, err
	}
	return json.Marshal(out)
}

// embeddingsBody is the /v1/embeddings body of an embed (input: a
// string or a list of them) or an embeddings (prompt); one with nothing
// to embed never gets here (ollamaLoadOrUnload).
func (req *ollamaRequest) embeddingsBody(kind int) ([]byte, error) {
	out := map[string]any{"model": req.Model, "input": req.Input}
	if kind == ollamaEmbeddings {
		out["input"] = req.prompt()
	}
	if req.Dimensions != nil {
		out["dimensions"] = *req.Dimensions
	}
	return json.Marshal(out)
}

// noInput reports whether an embed has nothing to embed: no input, null,
// "" or []. Ollama's EmbedHandler loads the model for it and answers no
// embeddings; an OpenAI-compatible server refuses an empty input.
func (req *ollamaRequest) noInput() bool {
	var v any
	if len(req.Input) > 0 && json.Unmarshal(req.Input, &v) != nil {
		return false
	}
	switch v := v.(type) {
	case nil:
		return true
	case string:
		return v == ""
	case []any:
		return len(v) == 0
	}
	return false
}

// sampling adds the request's options and format to out, and asks a
// stream for its usage (the last line's counts).
func (req *ollamaRequest) sampling(out map[string]any, stream bool) error {
	for k, v := range req.Options {
		if field, ok := ollamaOptions[k]; ok {
			out[field] = v
		}
	}
	if n, ok := req.Options["num_predict"].(float64); ok && n >= 0 {
		out["max_tokens"] = int(n)
	}
	if stream {
		out["stream_options"] = map[string]any{"include_usage": true}
	}
	// think: true or false turns a reasoning model's thinking on or off
	// through its chat template (chat_template_kwargs.enable_thinking,
	// which llama-server, vLLM and SGLang pass to it); "low", "medium" or
	// "high" is a reasoning effort (gpt-oss's).
	var think any
	if len(req.Think) > 0 && json.Unmarshal(req.Think, &think) != nil {
		return fmt.Errorf("think: want true, false, or low, medium or high, got %s", bounded(string(req.Think)))
	}
	switch t := think.(type) {
	case nil:
	case bool:
		out["chat_template_kwargs"] = map[string]any{"enable_thinking": t}
	case string:
		if t != "low" && t != "medium" && t != "high" {
			return fmt.Errorf("think: want true, false, or low, medium or high, got %q", t)
		}
		out["reasoning_effort"] = t
	default:
		return fmt.Errorf("think: want true, false, or low, medium or high, got %s", bounded(string(req.Think)))
	}
	switch f := strings.TrimSpace(string(req.Format)); {
	case f == "" || f == "null" || f == `""`:
	case f == `"json"`:
		out["response_format"] = map[string]any{"type": "json_object"}
	case strings.HasPrefix(f, "{"):
		out["response_format"] = map[string]any{"type": "json_schema",
			"json_schema": map[string]any{"name": "response", "schema": req.Format}}
	default:
		return fmt.Errorf(`format: want "json" or a JSON schema, got %s`, bounded(f))
	}
	return nil
}

// imageURL is an Ollama image (base64, no media type) as a data URL.
func imageURL(b64 string) string {
	if strings.HasPrefix(b64, "data:") {
		return b64
	}
	mt := "image/png"
	switch {
	case strings.HasPrefix(b64, "/9j/"):
		mt = "image/jpeg"
	case strings.HasPrefix(b64, "R0lGOD"):
		mt = "image/gif"
	case strings.HasPrefix(b64, "UklGR"):
		mt = "image/webp"
	}
	return "data:" + mt + ";base64," + b64
}

// keepAlive reads an Ollama keep_alive: seconds as a number, or a
// duration as text ("5m", "-1", "0s"); set false when absent. Negative
// keeps the model loaded, 0 unloads it (at once, or once the request
// that gives it ends), more is how long it stays idle.
func keepAlive(raw json.RawMessage) (d time.Duration, set bool, err error) {
	var v any
	if len(raw) == 0 {
		return 0, false, nil
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return 0, false, fmt.Errorf("keep_alive: %v", err)
	}
	switch v := v.(type) {
	case nil:
		return 0, false, nil
	case float64:
		return time.Duration(v * float64(time.Second)), true, nil
	case string:
		if n, err := strconv.ParseFloat(v, 64); err == nil {
			return time.Duration(n * float64(time.Second)), true, nil
		}
		if d, err := time.ParseDuration(v); err == nil {
			return d, true, nil
		}
	}
	return 0, false, fmt.Errorf(`keep_alive: want seconds or a duration such as "5m" (negative: keep loaded), got %s`, bounded(string(raw)))
}

// routerTTL is an Ollama keep_alive as a request's TTL
// (router.Request.TTL): negative is never (0 there), 0 the least TTL
// (gone at the first tick once idle), nil when not set.
func routerTTL(d time.Duration, set bool) *time.Duration {
	switch {
	case !set:
		return nil
	case d < 0:
		d = 0
	case d == 0:
		d = time.Nanosecond
	}
	return &d
}

// ollamaLoadOrUnload answers a chat, generate or embed with nothing to
// say: Ollama loads the model (a request for it, released at once, whose
// keep_alive is then the model's TTL), or for a chat or generate with
// keep_alive 0 unloads it; done_reason says which. An embed answers its
// empty embeddings once the model is loaded, as Ollama's EmbedHandler and
// EmbeddingsHandler do; its keep_alive 0 lets the model go once idle.
func (s *Server) ollamaLoadOrUnload(w http.ResponseWriter, r *http.Request, req *ollamaRequest, asked string, kind int, keep time.Duration, keepSet bool) {
	entry := s.catalog.Load().lookup(req.Model)
	if entry == nil {
		s.writeError(w, r, s.catalog.Load().unknown(req.Model))
		return
	}
	exchangeOf(r).model = entry.ID
	reason := "load"
	if keepSet && keep == 0 && (kind == ollamaChat || kind == ollamaGenerate) {
		reason = "unload"
		if err := s.router.Unload(r.Context(), router.UnloadOptions{Models: []string{entry.ID}}); err != nil {
			s.writeError(w, r, acquireError(r.Context(), err, entry.ID))
			return
		}
	} else {
		grant, err := s.router.Acquire(r.Context(), router.Request{Model: entry.ID, TTL: routerTTL(keep, keepSet)})
		if err != nil {
			s.writeError(w, r, acquireError(r.Context(), err, entry.ID))
			return
		}
		grant.Release()
	}
	var out map[string]any
	switch kind {
	case ollamaEmbed:
		out = map[string]any{"model": asked, "embeddings": []any{}}
	case ollamaEmbeddings:
		out = map[string]any{"embedding": []any{}}
	default:
		out = map[string]any{"model": asked, "created_at": ollamaTime(time.Now()), "done": true, "done_reason": reason}
		if kind == ollamaChat {
			out["message"] = map[string]any{"role": "assistant", "content": ""}
		} else {
			out["response"] = ""
		}
	}
	s.writeJSON(w, r, out)
}

// ollamaTime is a time as Ollama writes it (RFC 3339, nanoseconds, UTC).
func ollamaTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// ollamaWriter translates the OpenAI endpoint's answer to Ollama's as it
// is written: an SSE stream line by line into NDJSON (each line flushed
// with the chunk it came from), anything else (an answer not streamed,
// an error) whole at finish. The exchange under it sees the translated
// bytes, so its liveness guards and counts hold.
type ollamaWriter struct {
	w      http.ResponseWriter
	kind   int
	stream bool      // the client asked for NDJSON lines
	model  string    // the name the client asked for, in every line
	start  time.Time // for total_duration
	// ex is the request's exchange: its load wait and its response's
	// usage meter (sent, first token, last) give the final line's
	// durations (durations); nil where no request is proxied (tests).
	ex *exchange
	// timings is the model server's own account of its work, when its
	// answer carries one (llama-server's "timings").
	timings *serverTimings

	status int
	sse    bool   // the answer is an SSE stream being translated
	buf    []byte // a partial SSE line, or the whole answer
	done   bool   // the final line is written
	failed bool   // an error line is written
	reason string // the finish_reason seen
	usage  struct{ Prompt, Completion int }
	tools  map[int]*ollamaToolCall  // streamed tool calls by index
	order  []int                    // their indexes in order of arrival
	args   map[int]*strings.Builder // their arguments' JSON as it arrives
	// limit is the most the translation holds (maxOllamaHeld); overflow:
	// the answer held passed it and was dropped.
	limit    int
	overflow bool
	// topLogprobs is how many alternatives each token's logprobs list
	// (the request's top_logprobs, ollamaRequest.topLogprobs).
	topLogprobs int
}

func (o *ollamaWriter) Header() http.Header { return o.w.Header() }

// Unwrap lets http.ResponseController reach the exchange (write
// deadlines).
func (o *ollamaWriter) Unwrap() http.ResponseWriter { return o.w }

func (o *ollamaWriter) WriteHeader(status int) {
	if o.status != 0 {
		return
	}
	o.status = status
	if status == http.StatusOK && o.stream && isEventStream(o.w.Header().Get("Content-Type")) {
		o.sse = true
		h := o.w.Header()
		h.Set("Content-Type", "application/x-ndjson")
		h.Del("Content-Length")
		o.w.WriteHeader(http.StatusOK)
	}
}

// maxOllamaHeld bounds what the translation holds: an answer not
// streamed, read whole, and a stream's unfinished line (the OpenAI
// routes stream everything through and hold nothing). Past it the rest
// of the answer is read and dropped, and the client gets an error.
const maxOllamaHeld = 64 << 20

func (o *ollamaWriter) Write(p []byte) (int, error) {
	if o.status == 0 {
		o.WriteHeader(http.StatusOK)
	}
	if o.overflow || len(o.buf)+len(p) > o.limit {
		o.overflow, o.buf = true, nil
		return len(p), nil
	}
	o.buf = append(o.buf, p...)
	if !o.sse {
		return len(p), nil
	}
	for {
		i := bytes.IndexByte(o.buf, '\n')
		if i < 0 {
			break
		}
		line := strings.TrimRight(string(o.buf[:i]), "\r")
		o.buf = o.buf[i+1:]
		if data, ok := strings.CutPrefix(line, "data:"); ok {
			if err := o.event(strings.TrimSpace(data)); err != nil {
				return len(p), err
			}
		}
	}
	return len(p), nil
}

// Flush sends what the translation has written (streams only: the rest
// is written whole at finish).
func (o *ollamaWriter) Flush() {
	if o.sse {
		if f, ok := o.w.(http.Flusher); ok {
			f.Flush()
		}
	}
}

// event translates one SSE data payload: a chunk to its line, [DONE] to
// the final line, an error event to Ollama's error line.
func (o *ollamaWriter) event(data string) error {
	if data == "[DONE]" {
		return o.final()
	}
	var ch openAIAnswer
	if err := json.Unmarshal([]byte(data), &ch); err != nil {
		return nil // not a chunk (a comment's kin): nothing to say
	}
	if msg := ch.errorMessage(); msg != "" {
		o.failed = true
		return o.line(map[string]any{"error": msg})
	}
	if ch.Usage != nil {
		o.usage.Prompt, o.usage.Completion = ch.Usage.PromptTokens, ch.Usage.CompletionTokens
	}
	if ch.Timings != nil {
		o.timings = ch.Timings
	}
	for _, c := range ch.Choices {
		if c.FinishReason != "" {
			o.reason = c.FinishReason
		}
		text, thinking := c.Text, ""
		if c.Delta != nil {
			text, thinking = c.Delta.Content, c.Delta.ReasoningContent
			for _, tc := range c.Delta.ToolCalls {
				o.toolDelta(tc)
			}
		}
		lps := ollamaLogprobs(c.Logprobs, o.topLogprobs)
		if text != "" || thinking != "" || len(lps) > 0 {
			line := o.chunk(text, thinking, nil, false)
			if len(lps) > 0 {
				line["logprobs"] = lps
			}
			if err := o.line(line); err != nil {
				return err
			}
		}
	}
	return nil
}

// toolDelta adds a streamed tool call's piece: its name with its first
// piece, its arguments' JSON in pieces.
func (o *ollamaWriter) toolDelta(tc openAIToolCall) {
	t := o.tools[tc.Index]
	if t == nil {
		t = &ollamaToolCall{}
		o.tools[tc.Index] = t
		o.order = append(o.order, tc.Index)
		if o.args == nil {
			o.args = map[int]*strings.Builder{}
		}
		o.args[tc.Index] = &strings.Builder{}
	}
	if tc.Function.Name != "" {
		t.Function.Name = tc.Function.Name
	}
	o.args[tc.Index].WriteString(tc.Function.Arguments)
}

// final writes the last line: the tool calls gathered, why it ended, the
// counts and the time taken.
func (o *ollamaWriter) final() error {
	if o.done {
		return nil
	}
	var calls []ollamaToolCall
	for _, i := range o.order {
		t := *o.tools[i]
		t.Function.Arguments = toolArguments(o.args[i].String())
		calls = append(calls, t)
	}
	o.done = true
	return o.line(o.chunk("", "", calls, true))
}

// chunk is one line of the answer: a piece of text (or thinking), or the
// last line (done) with the tool calls and the counts.
func (o *ollamaWriter) chunk(text, thinking string, calls []ollamaToolCall, done bool) map[string]any {
	out := map[string]any{"model": o.model, "created_at": ollamaTime(time.Now()), "done": done}
	if o.kind == ollamaChat {
		msg := map[string]any{"role": "assistant", "content": text}
		if thinking != "" {
			msg["thinking"] = thinking
		}
		if len(calls) > 0 {
			msg["tool_calls"] = calls
		}
		out["message"] = msg
	} else {
		out["response"] = text
		if thinking != "" {
			out["thinking"] = thinking
		}
	}
	if done {
		reason := o.reason
		if reason == "" || reason == "tool_calls" {
			reason = "stop"
		}
		out["done_reason"] = reason
		o.durations(out)
		out["prompt_eval_count"] = o.usage.Prompt
		out["eval_count"] = o.usage.Completion
	}
	return out
}

// durations sets the final line's timings, in nanoseconds as Ollama's
// API gives them (its docs/api.md, "Response"): total_duration, from the
// request's arrival; load_duration, the part of its wait its model spent
// loading or waking (0 for a model that was ready); and how long the
// model server took over the prompt (prompt_eval_duration) and over the
// answer (eval_duration), from which clients work out tokens per second.
// Those two are the server's own figures where its answer carries them
// (llama-server's timings.prompt_ms and predicted_ms); else, for a
// stream, the time from sending the request to its first token and from
// that to its last; for an answer sent whole, whose first token is not
// seen, the whole time it took goes to eval_duration. A duration that is
// unknown or 0 is left out, as Ollama's own server leaves out a 0
// (omitempty), so that no client divides by it.
func (o *ollamaWriter) durations(out map[string]any) {
	out["total_duration"] = time.Since(o.start).Nanoseconds()
	var load, prompt, eval time.Duration
	if o.ex != nil {
		load = o.ex.loadWait
		if u := o.ex.usage; u != nil && !u.sent.IsZero() && !u.first.IsZero() {
			if u.stream {
				prompt, eval = u.first.Sub(u.sent), u.last.Sub(u.first)
			} else {
				eval = u.last.Sub(u.sent)
			}
		}
	}
	if t := o.timings; t != nil && t.PromptMS > 0 && t.PredictedMS > 0 {
		prompt, eval = msDuration(t.PromptMS), msDuration(t.PredictedMS)
	}
	out["load_duration"] = load.Nanoseconds()
	if prompt > 0 {
		out["prompt_eval_duration"] = prompt.Nanoseconds()
	}
	if eval > 0 {
		out["eval_duration"] = eval.Nanoseconds()
	}
}

// msDuration is ms milliseconds.
func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// line writes v as one NDJSON line.
func (o *ollamaWriter) line(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = o.w.Write(append(b, '\n'))
	return err
}

// finish writes what was held for the end: a stream's final line if the
// upstream ended without [DONE] but said why, or an error line if it said
// neither (the client must not take a cut answer for a whole one), or the
// whole answer translated (an answer not streamed, an error with its
// status).
func (o *ollamaWriter) finish() {
	switch {
	case o.status == 0: // nothing was written (the client left)
	case o.overflow && o.sse:
		_ = o.line(map[string]any{"error": o.tooLarge()})
	case o.overflow:
		b, _ := json.Marshal(map[string]string{"error": o.tooLarge()})
		o.whole(http.StatusBadGateway, append(b, '\n'))
	case o.sse:
		switch {
		case o.done || o.failed:
		case o.reason != "":
			_ = o.final()
		default:
			msg := "the model server ended the stream without finishing it (no finish_reason, no [DONE]): the answer may be cut short"
			if o.ex != nil {
				o.ex.fail(http.StatusBadGateway, msg)
			}
			_ = o.line(map[string]any{"error": msg})
		}
	case o.status != http.StatusOK:
		b, _ := json.Marshal(map[string]string{"error": upstreamMessage(o.buf)})
		o.whole(o.status, append(b, '\n'))
	default:
		var a openAIAnswer
		if err := json.Unmarshal(o.buf, &a); err != nil {
			b, _ := json.Marshal(map[string]string{"error": "the model server's answer is not JSON: " + bounded(string(o.buf))})
			o.whole(http.StatusBadGateway, append(b, '\n'))
			return
		}
		o.whole(http.StatusOK, o.translate(&a))
	}
}

// tooLarge is the error of an answer past the limit.
func (o *ollamaWriter) tooLarge() string {
	return fmt.Sprintf("the model server's answer held more than %d bytes without a line's end: too large to translate for Ollama's API", o.limit)
}

// whole writes a translated answer with its status and length.
func (o *ollamaWriter) whole(status int, b []byte) {
	h := o.w.Header()
	h.Set("Content-Type", "application/json")
	if o.stream && status == http.StatusOK {
		h.Set("Content-Type", "application/x-ndjson")
	}
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Del("Content-Encoding")
	o.w.WriteHeader(status)
	_, _ = o.w.Write(b)
}

// translate is an answer that was not streamed in Ollama's shape, one
// line.
func (o *ollamaWriter) translate(a *openAIAnswer) []byte {
	var out any
	switch o.kind {
	case ollamaEmbed, ollamaEmbeddings:
		vecs := make([]json.RawMessage, 0, len(a.Data))
		for _, d := range a.Data {
			vecs = append(vecs, d.Embedding)
		}
		if o.kind == ollamaEmbeddings {
			var first json.RawMessage = []byte("[]")
			if len(vecs) > 0 {
				first = vecs[0]
			}
			out = map[string]any{"embedding": first}
			break
		}
		prompt := 0
		if a.Usage != nil {
			prompt = a.Usage.PromptTokens
		}
		var load time.Duration
		if o.ex != nil {
			load = o.ex.loadWait
		}
		out = map[string]any{"model": o.model, "embeddings": vecs, "total_duration": time.Since(o.start).Nanoseconds(),
			"load_duration": load.Nanoseconds(), "prompt_eval_count": prompt}
	default:
		if a.Usage != nil {
			o.usage.Prompt, o.usage.Completion = a.Usage.PromptTokens, a.Usage.CompletionTokens
		}
		o.timings = a.Timings
		var text, thinking string
		var calls []ollamaToolCall
		var lps []ollamaLogprob
		if len(a.Choices) > 0 {
			c := a.Choices[0]
			o.reason = c.FinishReason
			text = c.Text
			if c.Message != nil {
				text, thinking = c.Message.Content, c.Message.ReasoningContent
				for _, tc := range c.Message.ToolCalls {
					calls = append(calls, ollamaToolCall{Function: ollamaFunction{Name: tc.Function.Name, Arguments: toolArguments(tc.Function.Arguments)}})
				}
			}
			lps = ollamaLogprobs(c.Logprobs, o.topLogprobs)
		}
		line := o.chunk(text, thinking, calls, true)
		if len(lps) > 0 {
			line["logprobs"] = lps
		}
		out = line
	}
	b, _ := json.Marshal(out)
	return append(b, '\n')
}

// ollamaLogprob is one token's log probability in Ollama's shape (its
// API's "logprobs": the token, its log probability, its UTF-8 bytes and
// the most likely alternatives').
type ollamaLogprob struct {
	Token       string          `json:"token"`
	Logprob     float64         `json:"logprob"`
	Bytes       []int           `json:"bytes,omitempty"`
	TopLogprobs []ollamaLogprob `json:"top_logprobs,omitempty"`
}

// ollamaLogprobs is an OpenAI choice's logprobs in Ollama's shape: a chat
// choice's content list (the same fields), or a completion's parallel
// lists (tokens, token_logprobs, and top_logprobs as maps of token to
// log probability); nil for none.
func ollamaLogprobs(raw json.RawMessage, top int) []ollamaLogprob {
	lps := decodeLogprobs(raw)
	for i := range lps {
		// As many alternatives as asked for: a server's default (20 from
		// llama-server when none were asked) or a completion's minimum of
		// one is cut.
		if len(lps[i].TopLogprobs) > top {
			lps[i].TopLogprobs = lps[i].TopLogprobs[:top]
		}
		if len(lps[i].TopLogprobs) == 0 {
			lps[i].TopLogprobs = nil
		}
	}
	return lps
}

// decodeLogprobs reads a choice's logprobs in either of OpenAI's shapes
// (ollamaLogprobs).
func decodeLogprobs(raw json.RawMessage) []ollamaLogprob {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var v struct {
		Content       []ollamaLogprob      `json:"content"`
		Tokens        []string             `json:"tokens"`
		TokenLogprobs []float64            `json:"token_logprobs"`
		TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	}
	if json.Unmarshal(raw, &v) != nil {
		return nil
	}
	if len(v.Content) > 0 {
		return v.Content
	}
	out := make([]ollamaLogprob, 0, len(v.Tokens))
	for i, tok := range v.Tokens {
		lp := ollamaLogprob{Token: tok}
		if i < len(v.TokenLogprobs) {
			lp.Logprob = v.TokenLogprobs[i]
		}
		if i < len(v.TopLogprobs) {
			for _, alt := range slices.Sorted(maps.Keys(v.TopLogprobs[i])) {
				lp.TopLogprobs = append(lp.TopLogprobs, ollamaLogprob{Token: alt, Logprob: v.TopLogprobs[i][alt]})
			}
			slices.SortStableFunc(lp.TopLogprobs, func(a, b ollamaLogprob) int { return cmp.Compare(b.Logprob, a.Logprob) })
		}
		out = append(out, lp)
	}
	return out
}

// toolArguments is OpenAI's arguments string as Ollama's object: the
// JSON as it is, {} for none, or the text as a string when it is not
// JSON.
func toolArguments(s string) json.RawMessage {
	switch {
	case strings.TrimSpace(s) == "":
		return json.RawMessage("{}")
	case json.Valid([]byte(s)):
		return json.RawMessage(s)
	}
	b, _ := json.Marshal(s)
	return b
}

// openAIAnswer is what the translation reads of an OpenAI-compatible
// answer: a chat completion, a completion, their stream chunks, an
// embeddings list, or an error (an object, or a string as Ollama's).
type openAIAnswer struct {
	Choices []struct {
		Text         string         `json:"text"`
		FinishReason string         `json:"finish_reason"`
		Delta        *openAIMessage `json:"delta"`
		Message      *openAIMessage `json:"message"`
		// Logprobs is a chat choice's {"content": [...]} or a
		// completion's {"tokens", "token_logprobs", "top_logprobs"}.
		Logprobs json.RawMessage `json:"logprobs"`
	} `json:"choices"`
	Data []struct {
		Embedding json.RawMessage `json:"embedding"`
	} `json:"data"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
	// Timings is llama-server's account of the request (its final
	// chunk's, or its whole answer's, "timings"); nil from other servers.
	Timings *serverTimings `json:"timings"`
}

// serverTimings is what Ollama's translation reads of llama-server's
// "timings" object (tools/server's response): the milliseconds spent on
// the prompt and on the tokens predicted.
type serverTimings struct {
	PromptMS    float64 `json:"prompt_ms"`
	PredictedMS float64 `json:"predicted_ms"`
}

// errorMessage is the answer's error message, "" when it is no error.
func (a *openAIAnswer) errorMessage() string { return errorField(a.Error) }

type openAIMessage struct {
	Content          string           `json:"content"`
	ReasoningContent string           `json:"reasoning_content"`
	ToolCalls        []openAIToolCall `json:"tool_calls"`
}

type openAIToolCall struct {
	Index    int `json:"index"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// ollamaDetails is Ollama's model details, from what Loadout read of the
// model's file (ModelEntry.Details); empty where it read none.
type ollamaDetails struct {
	Format            string   `json:"format"`
	Family            string   `json:"family"`
	Families          []string `json:"families"`
	ParameterSize     string   `json:"parameter_size"`
	QuantizationLevel string   `json:"quantization_level"`
}

// ollamaDetailsOf is e's details in Ollama's shape: families is the
// family alone (Ollama adds a projector's, which Loadout does not read),
// parameter_size as Ollama writes it (ollamaParameters).
func ollamaDetailsOf(e *ModelEntry) ollamaDetails {
	d := e.Details
	out := ollamaDetails{Format: d.Format, Family: d.Family, QuantizationLevel: d.Quantization}
	if d.Family != "" {
		out.Families = []string{d.Family}
	}
	if d.Parameters > 0 {
		out.ParameterSize = ollamaParameters(d.Parameters)
	}
	return out
}

// ollamaParameters is a parameter count as Ollama's parameter_size
// writes it: "7.6B", "494.03M", "184.64K".
func ollamaParameters(n uint64) string {
	x := float64(n)
	switch {
	case x >= 1e9:
		return strconv.FormatFloat(x/1e9, 'f', 1, 64) + "B"
	case x >= 1e6:
		return strconv.FormatFloat(x/1e6, 'f', 2, 64) + "M"
	case x >= 1e3:
		return strconv.FormatFloat(x/1e3, 'f', 2, 64) + "K"
	}
	return strconv.FormatUint(n, 10)
}

// ollamaDigest is a stable stand-in for a model's digest: Ollama's
// clients key models by it.
func ollamaDigest(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:])
}

// ollamaTags is GET /api/tags: every name GET /v1/models lists
// (modelList), with its VRAM figure as its size.
func (s *Server) ollamaTags(w http.ResponseWriter, r *http.Request) {
	vram := map[string]uint64{}
	for _, st := range s.router.Models() {
		vram[st.Model] = st.VRAM
	}
	modified := ollamaTime(s.started)
	cat := s.catalog.Load()
	models := []map[string]any{}
	for _, m := range s.modelList() {
		details := ollamaDetails{}
		if e := cat.lookup(m.ID); e != nil {
			details = ollamaDetailsOf(e)
		}
		models = append(models, map[string]any{"name": m.ID, "model": m.ID, "modified_at": modified,
			"size": vram[m.ID], "digest": ollamaDigest(m.ID), "details": details})
	}
	s.writeJSON(w, r, map[string]any{"models": models})
}

// ollamaPs is GET /api/ps: the models loaded now, their VRAM (measured
// where it was), and when their TTL takes them off the GPU
// (ollamaExpiry), the longest left first, as Ollama lists them.
func (s *Server) ollamaPs(w http.ResponseWriter, r *http.Request) {
	cat := s.catalog.Load()
	models := []map[string]any{}
	now := time.Now()
	statuses := s.router.Models()
	slices.SortStableFunc(statuses, func(a, b router.ModelStatus) int {
		return ollamaExpiry(b, now).Compare(ollamaExpiry(a, now))
	})
	for _, st := range statuses {
		e := cat.lookup(st.Model)
		if e == nil || st.State != sdk.StateReady.String() {
			continue
		}
		size := st.VRAM
		if st.Measured > 0 {
			size = st.Measured
		}
		m := map[string]any{"name": e.ID, "model": e.ID, "size": size, "size_vram": size, "digest": ollamaDigest(e.ID),
			"details": ollamaDetailsOf(e), "expires_at": ollamaTime(ollamaExpiry(st, now))}
		if e.Capabilities.Context > 0 {
			m["context_length"] = e.Capabilities.Context
		}
		models = append(models, m)
	}
	s.writeJSON(w, r, map[string]any{"models": models})
}

// ollamaForever is how long Ollama keeps a model asked to stay for good
// (keep_alive below 0: the largest duration, about 292 years).
const ollamaForever = time.Duration(math.MaxInt64)

// ollamaExpiry is when st's TTL takes it off the GPU as Ollama's
// /api/ps says it: its expiry while it is idle; while it is in use,
// now plus its TTL (the clock starts again when it is idle); with no
// TTL, now plus ollamaForever. Ollama's clients read a time already
// past as a model being stopped (`ollama ps`: "Stopping..."), so the
// zero time is never said.
func ollamaExpiry(st router.ModelStatus, now time.Time) time.Time {
	switch {
	case !st.ExpiresAt.IsZero():
		return st.ExpiresAt
	case st.TTL > 0:
		return now.Add(st.TTL)
	default:
		return now.Add(ollamaForever)
	}
}

// ollamaShow is POST /api/show: what Loadout knows of a model — its
// capabilities (ollamaCapabilities) and its context length.
func (s *Server) ollamaShow(w http.ResponseWriter, r *http.Request) {
	req, ok := s.parseOllama(w, r)
	if !ok {
		return
	}
	name := req.Model
	e := s.catalog.Load().lookup(name)
	if e == nil {
		s.writeError(w, r, s.catalog.Load().unknown(name))
		return
	}
	caps := ollamaCapabilities(e)
	info := map[string]any{"general.architecture": e.Details.Family, "general.basename": e.ID}
	if e.Details.Parameters > 0 {
		info["general.parameter_count"] = e.Details.Parameters
	}
	// The context a client may use: the one configured, else the one the
	// model was trained for, under Ollama's key for its architecture.
	ctxKey, ctx := "general.context_length", uint64(max(e.Capabilities.Context, 0))
	if e.Details.Family != "" {
		ctxKey = e.Details.Family + ".context_length"
	}
	if ctx == 0 {
		ctx = e.Details.ContextLength
	}
	if ctx > 0 {
		info[ctxKey] = ctx
	}
	if e.Details.Family != "" && e.Details.EmbeddingLength > 0 { // an embedding's size, for RAG clients
		info[e.Details.Family+".embedding_length"] = e.Details.EmbeddingLength
	}
	s.writeJSON(w, r, map[string]any{"modelfile": "", "parameters": "", "template": "", "details": ollamaDetailsOf(e),
		"model_info": info, "capabilities": caps, "modified_at": ollamaTime(s.started)})
}

// ollamaCapabilities are e's capabilities in Ollama's names (api/types.go's
// model capabilities; clients such as VS Code's Copilot list a model for
// agent mode only with "tools"): "embedding" for a model whose file is
// an embedding model's (ModelDetails.Embedding), "completion" for any
// other; "tools" where the configuration or the file's chat template says
// so;
// "vision" where the configuration's input modalities have images or the
// model has a vision projector;
// "thinking" and "insert" where the file has a reasoning block or
// fill-in-the-middle tokens.
func ollamaCapabilities(e *ModelEntry) []string {
	d := e.Details
	caps := []string{"completion"}
	if d.Embedding {
		caps[0] = "embedding"
	}
	add := func(ok bool, c string) {
		if ok {
			caps = append(caps, c)
		}
	}
	add(e.Capabilities.Tools || d.Tools, "tools")
	add(slices.Contains(e.Capabilities.In, "image") || d.Vision, "vision")
	add(d.Thinking, "thinking")
	add(d.Insert, "insert")
	return caps
}

// ollamaPull is POST /api/pull: Loadout pulls nothing, but a client
// that pulls before it uses a model (some do, every time) is told a
// configured one is there; any other is a 404 saying where models come
// from.
func (s *Server) ollamaPull(w http.ResponseWriter, r *http.Request) {
	req, ok := s.parseOllama(w, r)
	if !ok {
		return
	}
	name := req.Model
	if s.catalog.Load().lookup(name) == nil {
		set := s.peers.Load()
		if set == nil || len(set.Lookup(name)) == 0 {
			s.writeError(w, r, &apiError{status: http.StatusNotFound, code: "model_not_found",
				msg: fmt.Sprintf("model %s is not in Loadout's configuration: Loadout pulls nothing, it serves the models its configuration names", echoed(name))})
			return
		}
	}
	s.writeJSON(w, r, map[string]string{"status": "success"})
}

// ollamaUnsupported answers Ollama's calls that manage model files.
func (s *Server) ollamaUnsupported(w http.ResponseWriter, r *http.Request) {
	s.writeError(w, r, &apiError{status: http.StatusNotImplemented, code: "not_supported",
		msg: fmt.Sprintf("%s is not supported: Loadout serves the models its configuration names (add, change or remove them there)", r.URL.Path)})
}
