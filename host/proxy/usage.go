package proxy

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"strconv"
	"time"
)

// usage is what one response's meter saw: tokens and when they came. Only
// the request's goroutine touches it (httputil.ReverseProxy reads the body
// there).
type usage struct {
	sent       time.Time // the request went upstream (its model server, once granted, or a peer)
	first      time.Time // the first token (a stream's first content chunk, else the first byte)
	last       time.Time // the last content chunk, or the end of the body
	prompt     int64
	completion int64
	reported   bool  // the response carried a usage object
	chunks     int64 // a stream's content chunks
	stream     bool
	// streamErr is the error a model server reported in its stream,
	// under the 200 already sent: a data event whose object has an
	// "error" (llama-server's and vLLM's failures mid-generation) or is
	// of type "error" (the Responses API's); "" when none. streamStatus
	// is its code when that is an HTTP error status (400 to 599), else 0.
	streamErr    string
	streamStatus int
}

// ttft is the time to first token as a client sees it: from the request's
// arrival (arrived), queue and load wait included. It is
// loadout_time_to_first_token_seconds, the activity log's ttft_s, and
// what loadout simulate reports as TTFT.
func (u *usage) ttft(arrived time.Time) (time.Duration, bool) {
	if u.first.IsZero() {
		return 0, false
	}
	return u.first.Sub(arrived), true
}

// upstreamTTFT is the time from sending the request upstream to the first
// token: loadout_upstream_time_to_first_token_seconds. The TTFT a client
// sees (loadout_time_to_first_token_seconds) counts from its arrival.
func (u *usage) upstreamTTFT() (time.Duration, bool) {
	if u.first.IsZero() {
		return 0, false
	}
	return u.first.Sub(u.sent), true
}

// tokensPerSecond is the generation speed: for a stream, the tokens after
// the first over the time after it; otherwise all over the whole answer.
func (u *usage) tokensPerSecond() (float64, bool) {
	if u.completion < 2 || u.first.IsZero() {
		return 0, false
	}
	if u.stream {
		d := u.last.Sub(u.first).Seconds()
		if d <= 0 {
			return 0, false
		}
		return float64(u.completion-1) / d, true
	}
	d := u.last.Sub(u.sent).Seconds()
	if d <= 0 {
		return 0, false
	}
	return float64(u.completion) / d, true
}

// maxUsageLine bounds an SSE line (and a JSON body) the meter keeps to
// look for usage; longer ones are passed through unexamined.
const maxUsageLine = maxUpstreamRewrite

// usageMeter passes a model server's successful response through and
// reads its token usage on the way: a JSON body's "usage" at its end; a
// stream's content chunks (the first is the first token) and its final
// usage chunk, if any. Without usage, a stream's completion tokens are its
// content chunks (one token each, as llama.cpp and vLLM send them).
type usageMeter struct {
	body     io.ReadCloser
	u        *usage
	sse      bool
	json     bool   // a JSON body: kept (bounded) and decoded at its end
	buf      []byte // the current SSE line, or the JSON body
	overflow bool   // buf outgrew maxUsageLine: the rest of this line/body is skipped
	finished bool
}

func newUsageMeter(body io.ReadCloser, u *usage, contentType string) io.ReadCloser {
	mt, _, _ := mime.ParseMediaType(contentType)
	m := &usageMeter{body: body, u: u, sse: mt == "text/event-stream", json: mt == "application/json"}
	if !m.sse && !m.json {
		return body // audio, images, HTML through /upstream: nothing to read
	}
	u.stream = m.sse
	return m
}

func (m *usageMeter) Read(p []byte) (int, error) {
	n, err := m.body.Read(p)
	if n > 0 {
		now := time.Now()
		if m.sse {
			m.scan(p[:n], now)
		} else {
			if m.u.first.IsZero() {
				m.u.first = now
			}
			m.keep(p[:n])
		}
	}
	if err == io.EOF {
		m.finish()
	}
	return n, err
}

func (m *usageMeter) Close() error {
	m.finish()
	return m.body.Close()
}

// keep appends b to buf unless that would pass the bound.
func (m *usageMeter) keep(b []byte) {
	if m.overflow {
		return
	}
	if len(m.buf)+len(b) > maxUsageLine {
		m.overflow, m.buf = true, m.buf[:0]
		return
	}
	m.buf = append(m.buf, b...)
}

// scan splits a stream's bytes into lines and examines each data line.
func (m *usageMeter) scan(b []byte, now time.Time) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			m.keep(b)
			return
		}
		line := b[:i]
		if len(m.buf) > 0 || m.overflow {
			m.keep(line)
			line = m.buf
		}
		if !m.overflow {
			m.line(bytes.TrimRight(line, "\r"), now)
		}
		m.buf, m.overflow = m.buf[:0], false
		b = b[i+1:]
	}
}

// line examines one SSE line.
func (m *usageMeter) line(l []byte, now time.Time) {
	data, ok := bytes.CutPrefix(l, []byte("data:"))
	if !ok {
		return
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return // [DONE], or not JSON
	}
	if hasText(data, `"content"`) || hasText(data, `"reasoning_content"`) || hasText(data, `"text"`) || hasText(data, `"delta"`) {
		m.u.chunks++
		if m.u.first.IsZero() {
			m.u.first = now
		}
		m.u.last = now
	}
	if bytes.Contains(data, []byte(`"usage"`)) {
		m.decodeUsage(data)
	}
	if m.u.streamErr == "" && bytes.Contains(data, []byte(`"error"`)) {
		m.decodeStreamError(data)
	}
}

// decodeStreamError records the error a stream's data event reports, if
// it is one (usage.streamErr): {"error": {"message", "code"}} (OpenAI's
// error object, as llama-server and vLLM send it mid-stream), {"error":
// "text"}, or the Responses API's {"type": "error", "message", "code"}.
func (m *usageMeter) decodeStreamError(data []byte) {
	type errorObject struct {
		Message string          `json:"message"`
		Code    json.RawMessage `json:"code"`
	}
	var v struct {
		Error json.RawMessage `json:"error"`
		Type  string          `json:"type"`
		errorObject
	}
	if json.Unmarshal(data, &v) != nil {
		return
	}
	e := v.errorObject
	switch {
	case len(v.Error) > 0 && string(v.Error) != "null":
		if json.Unmarshal(v.Error, &e) != nil || e.Message == "" {
			var text string
			if json.Unmarshal(v.Error, &text) != nil || text == "" {
				text = string(v.Error)
			}
			e = errorObject{Message: text}
		}
	case v.Type == "error" && e.Message != "":
	default:
		return
	}
	m.u.streamErr = bounded(e.Message)
	if code, err := strconv.Atoi(string(e.Code)); err == nil && code >= 400 && code <= 599 {
		m.u.streamStatus = code
	}
}

// hasText reports whether key is followed, in a JSON object, by a
// non-empty string value: the cheap test for a content chunk, with no
// decoding on the hot path.
func hasText(data []byte, key string) bool {
	for {
		i := bytes.Index(data, []byte(key))
		if i < 0 {
			return false
		}
		rest := bytes.TrimLeft(data[i+len(key):], " \t")
		if len(rest) > 0 && rest[0] == ':' {
			rest = bytes.TrimLeft(rest[1:], " \t")
			if len(rest) >= 2 && rest[0] == '"' && rest[1] != '"' {
				return true
			}
		}
		data = data[i+len(key):]
	}
}

// openAIUsage is a usage object: the Chat Completions and Completions
// names, and the Responses API's.
type openAIUsage struct {
	PromptTokens     *int64 `json:"prompt_tokens"`
	CompletionTokens *int64 `json:"completion_tokens"`
	InputTokens      *int64 `json:"input_tokens"`
	OutputTokens     *int64 `json:"output_tokens"`
}

// decodeUsage records the usage in a JSON object, at its top level or in
// its "response" (the Responses API's response.completed event).
func (m *usageMeter) decodeUsage(data []byte) {
	var v struct {
		Usage    *openAIUsage `json:"usage"`
		Response *struct {
			Usage *openAIUsage `json:"usage"`
		} `json:"response"`
	}
	if json.Unmarshal(data, &v) != nil {
		return
	}
	u := v.Usage
	if u == nil && v.Response != nil {
		u = v.Response.Usage
	}
	if u == nil {
		return
	}
	first := func(a, b *int64) (int64, bool) {
		switch {
		case a != nil:
			return *a, true
		case b != nil:
			return *b, true
		}
		return 0, false
	}
	p, okP := first(u.PromptTokens, u.InputTokens)
	c, okC := first(u.CompletionTokens, u.OutputTokens)
	if !okP && !okC {
		return
	}
	m.u.prompt, m.u.completion, m.u.reported = p, c, true
}

// finish settles the counts once the body ended (or was closed early).
func (m *usageMeter) finish() {
	if m.finished {
		return
	}
	m.finished = true
	now := time.Now()
	if m.sse {
		if len(m.buf) > 0 && !m.overflow {
			m.line(bytes.TrimRight(m.buf, "\r"), now) // a last line without its newline
		}
		if !m.u.reported {
			m.u.completion = m.u.chunks
		}
		return
	}
	m.u.last = now
	if !m.overflow && bytes.Contains(m.buf, []byte(`"usage"`)) {
		m.decodeUsage(m.buf)
	}
	m.buf = nil
}
