package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/sdk/settings"
)

// Loadout's extension fields: read by the proxy, passed to the router, and
// never seen by an upstream.
const (
	fieldPriority  = "x_priority"
	fieldClientID  = "x_client_id"
	headerPriority = "X-Loadout-Priority"
	headerClient   = "X-Loadout-Client"
)

// modelRequest is what the proxy needs from an inference request's body.
type modelRequest struct {
	model string // the name the request is served under: the client's, or what a profile pin or selector made it ("" if none)
	// asked is the name as the body (or query) has it, when a pin or a
	// selector changed model; "" when model is the client's own. The
	// upstream then gets model (or the model's useModelName).
	asked     string
	stream    bool // "stream": true
	priority  int32
	hasPrio   bool
	client    string
	hasClient bool
	from      modelSource
	kind      bodyKind
	// strip: the body carries extension fields the upstream must not see.
	strip bool
}

type modelSource uint8

type bodyKind uint8

const (
	kindNone bodyKind = iota
	kindJSON
	kindForm
)

const (
	fromNone modelSource = iota
	fromJSON
	fromForm
	fromQuery
)

// readBody reads the whole request body, at most s.maxBody bytes.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	if r.ContentLength > s.maxBody {
		w.Header().Set("Connection", "close") // the body is not read (below)
		return nil, s.tooLarge()
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		buf.Grow(int(r.ContentLength) + bytes.MinRead)
	}
	var body io.Reader = http.MaxBytesReader(w, r.Body, s.maxBody)
	if bd := newBodyDeadline(w, body, s.cfg.BodyIdleTimeout, s.cfg.BodyMinRate); bd != nil {
		defer bd.done()
		body = bd
	}
	_, err := buf.ReadFrom(body)
	if err != nil {
		// The rest of the body is not read: the connection ends with the
		// answer. Otherwise net/http reads what remains of a body with a
		// Content-Length before it answers, and a body that stalled holds
		// the answer (a 408) for as long as its client waits.
		w.Header().Set("Connection", "close")
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, s.tooLarge()
		}
		if e := s.bodyTimedOut(err); e != nil {
			return nil, e
		}
		if clientGone(r.Context()) {
			return nil, &apiError{status: statusClientGone, code: codeClientGone, msg: "client went away while sending the body"}
		}
		return nil, &apiError{status: http.StatusBadRequest, code: "invalid_body", msg: fmt.Sprintf("reading the request body: %v", err)}
	}
	return buf.Bytes(), nil
}

func (s *Server) tooLarge() *apiError {
	return &apiError{status: http.StatusRequestEntityTooLarge, code: "request_too_large",
		msg: fmt.Sprintf("request body is larger than the limit of %s (%d bytes; serve's --max-request-body raises it)",
			settings.FormatSize(uint64(s.maxBody), " "), s.maxBody)}
}

// requestFields are the top-level fields of a JSON body the proxy reads,
// in one pass (encoding/json's Unmarshal): the model and the extension
// fields raw, so that one of an unexpected type is reported by name; the
// members the endpoints' schemas check (schema.go) as their JSON type
// alone; messages as their roles. The rest of the body is validated but
// not decoded.
type requestFields struct {
	Model    json.RawMessage `json:"model"`
	Priority json.RawMessage `json:"x_priority"`
	ClientID json.RawMessage `json:"x_client_id"`
	Messages []chatMessage   `json:"messages"`

	Stream              member `json:"stream"`
	Prompt              member `json:"prompt"`
	Input               member `json:"input"`
	Query               member `json:"query"`
	Documents           member `json:"documents"`
	Texts               member `json:"texts"`   // text-embeddings-inference's documents
	Content             member `json:"content"` // llama-server's embeddings input
	MaxTokens           member `json:"max_tokens"`
	MaxCompletionTokens member `json:"max_completion_tokens"`
	MaxOutputTokens     member `json:"max_output_tokens"`
	N                   member `json:"n"`
	BestOf              member `json:"best_of"`
	TopN                member `json:"top_n"`
	Temperature         member `json:"temperature"`
	TopP                member `json:"top_p"`
	Stop                member `json:"stop"`
	Seed                member `json:"seed"`
	PresencePenalty     member `json:"presence_penalty"`
	FrequencyPenalty    member `json:"frequency_penalty"`
	Logprobs            member `json:"logprobs"`
	TopLogprobs         member `json:"top_logprobs"`
	Echo                member `json:"echo"`
	StreamOptions       member `json:"stream_options"`
	Tools               member `json:"tools"`
	ResponseFormat      member `json:"response_format"`
	User                member `json:"user"`
	Dimensions          member `json:"dimensions"`
	EncodingFormat      member `json:"encoding_format"`
	Instructions        member `json:"instructions"`
}

// parseModelRequest finds the model and the extension fields in a JSON
// body, a multipart form, or the query string, in that order, and checks a
// JSON body against sc, the endpoint's schema (nil: none). The headers
// supply priority and client id where the body has none; after
// X-Loadout-Client, the first non-empty of sessionHeaders
// (Config.SessionHeaders) is the client id.
func parseModelRequest(r *http.Request, body []byte, sc *schema, sessionHeaders []string) (modelRequest, *apiError) {
	var mr modelRequest
	ct, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch {
	case ct == "multipart/form-data":
		mr.kind = kindForm
		if e := mr.parseForm(body, params["boundary"]); e != nil {
			return mr, e
		}
	case len(bytes.TrimSpace(body)) > 0:
		mr.kind = kindJSON
		if e := mr.parseJSON(body, sc); e != nil {
			return mr, e
		}
	}
	if mr.model == "" {
		if q := r.URL.Query().Get("model"); q != "" {
			mr.model, mr.from = q, fromQuery
		}
	}
	if mr.model == "" {
		return mr, badRequest("missing_model", `no model given: set "model" in the JSON body, in the multipart form, or as the ?model= query parameter`)
	}
	if !mr.hasPrio {
		if h := r.Header.Get(headerPriority); h != "" {
			p, err := strconv.ParseInt(strings.TrimSpace(h), 10, 32)
			if err != nil {
				return mr, badRequest("invalid_priority", fmt.Sprintf("header %s: want a 32-bit integer, got %q", headerPriority, h))
			}
			mr.priority, mr.hasPrio = int32(p), true
		}
	}
	if !mr.hasClient {
		if h := r.Header.Get(headerClient); h != "" {
			mr.client, mr.hasClient = h, true
		}
	}
	if !mr.hasClient {
		for _, name := range sessionHeaders {
			if h := strings.TrimSpace(r.Header.Get(name)); h != "" {
				mr.client, mr.hasClient = h, true
				break
			}
		}
	}
	return mr, nil
}

func badRequest(code, msg string) *apiError {
	return &apiError{status: http.StatusBadRequest, code: code, msg: msg}
}

// parseJSON reads a JSON body in one pass: the model, the extension
// fields and, when sc is not nil, what sc checks.
func (mr *modelRequest) parseJSON(body []byte, sc *schema) *apiError {
	var f requestFields
	var messagesErr *apiError // reported after the model and extension fields
	if err := json.Unmarshal(body, &f); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return badRequest("invalid_json", fmt.Sprintf("malformed JSON in the request body at byte offset %d: %v", se.Offset, se))
		case errors.As(err, &te) && te.Field == "":
			return badRequest("invalid_json", fmt.Sprintf("the request body must be a JSON object, got a JSON %s", te.Value))
		case errors.As(err, &te) && te.Field == "messages":
			// The only member decoded into a Go type; encoding/json
			// decoded the others regardless.
			if sc != nil && sc.messages {
				what := `"messages" in the request body must be an array of message objects, got ` + jsonValueName(te.Value)
				if te.Type.Kind() != reflect.Slice {
					what = fmt.Sprintf(`"messages" in the request body must be an array of message objects, got %s in it at byte offset %d`, jsonValueName(te.Value), te.Offset)
				}
				messagesErr = invalidParam("messages", "invalid_type", what)
			}
			f.Messages = nil
		default:
			return badRequest("invalid_json", fmt.Sprintf("the request body is not valid JSON: %v", err))
		}
	}
	if len(f.Model) > 0 && string(f.Model) != "null" {
		if err := json.Unmarshal(f.Model, &mr.model); err != nil {
			return badRequest("invalid_model", fmt.Sprintf(`"model" in the JSON body must be a string, got %s`, truncate(f.Model, 40)))
		}
		if mr.model != "" {
			mr.from = fromJSON
		}
	}
	mr.stream = f.Stream.isTrue
	if len(f.Priority) > 0 {
		mr.strip = true
		if string(f.Priority) != "null" {
			if err := json.Unmarshal(f.Priority, &mr.priority); err != nil {
				return badRequest("invalid_priority", fmt.Sprintf(`%q in the JSON body must be a 32-bit integer, got %s`, fieldPriority, truncate(f.Priority, 40)))
			}
			mr.hasPrio = true
		}
	}
	if len(f.ClientID) > 0 {
		mr.strip = true
		if string(f.ClientID) != "null" {
			if err := json.Unmarshal(f.ClientID, &mr.client); err != nil {
				return badRequest("invalid_client_id", fmt.Sprintf(`%q in the JSON body must be a string, got %s`, fieldClientID, truncate(f.ClientID, 40)))
			}
			mr.hasClient = true
		}
	}
	if messagesErr != nil {
		return messagesErr
	}
	if sc != nil {
		return sc.check(&f)
	}
	return nil
}

// jsonValueName is a JSON type as encoding/json's UnmarshalTypeError
// names it ("string", "number 7"), with its article: "a string".
func jsonValueName(v string) string {
	if v == "" {
		return "a value"
	}
	if strings.ContainsAny(v[:1], "aeiou") {
		return "an " + v
	}
	return "a " + v
}

func truncate(b []byte, n int) string {
	if s, cut := clip(string(b), n); cut {
		return s + "…"
	}
	return string(b)
}

// maxFormField bounds the form fields the proxy reads (model, x_priority,
// x_client_id).
const maxFormField = 4096

func (mr *modelRequest) parseForm(body []byte, boundary string) *apiError {
	if boundary == "" {
		return badRequest("invalid_form", "multipart/form-data request without a boundary parameter")
	}
	mpr := multipart.NewReader(bytes.NewReader(body), boundary)
	for {
		part, err := mpr.NextRawPart()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return badRequest("invalid_form", fmt.Sprintf("malformed multipart form: %v", err))
		}
		name := part.FormName()
		if part.FileName() != "" || (name != "model" && name != fieldPriority && name != fieldClientID) {
			continue
		}
		v, err := io.ReadAll(io.LimitReader(part, maxFormField))
		if err != nil {
			return badRequest("invalid_form", fmt.Sprintf("malformed multipart form: field %q: %v", name, err))
		}
		val := strings.TrimSpace(string(v))
		switch name {
		case "model":
			if mr.model == "" && val != "" {
				mr.model, mr.from = val, fromForm
			}
		case fieldPriority:
			mr.strip = true
			p, err := strconv.ParseInt(val, 10, 32)
			if err != nil {
				return badRequest("invalid_priority", fmt.Sprintf("form field %q must be a 32-bit integer, got %q", fieldPriority, val))
			}
			mr.priority, mr.hasPrio = int32(p), true
		case fieldClientID:
			mr.strip = true
			mr.client, mr.hasClient = val, true
		}
	}
}

// rewriteBody returns the body the upstream gets: without the extension
// fields, with the model renamed to e.UseModelName when that is set (a
// model from the query string is renamed there), and, for a JSON body,
// with e.Filters applied for the name the client used (mr.model). It
// returns body itself when nothing needs to change.
func (mr *modelRequest) rewriteBody(r *http.Request, body []byte, e *ModelEntry) ([]byte, error) {
	useModel, asked := e.UseModelName, mr.model
	if mr.asked != "" {
		asked = mr.asked
		if useModel == "" {
			useModel = mr.model // llama-swap's ReplaceRequestModel
		}
	}
	rename := useModel != "" && useModel != asked
	var err error
	switch {
	case mr.kind == kindJSON && (mr.strip || rename && mr.from == fromJSON || !e.Filters.Empty()):
		body, err = rewriteJSON(body, rename && mr.from == fromJSON, useModel, &e.Filters, mr.model)
	case mr.kind == kindForm && (mr.strip || rename && mr.from == fromForm):
		_, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
		body, err = rewriteForm(body, params["boundary"], rename && mr.from == fromForm, useModel)
	}
	if err != nil {
		return nil, err
	}
	if rename && mr.from == fromQuery {
		q := r.URL.Query()
		q.Set("model", useModel)
		u := *r.URL
		u.RawQuery = q.Encode()
		r.URL = &u
	}
	return body, nil
}

func isExtensionField(key string) bool {
	return strings.EqualFold(key, fieldPriority) || strings.EqualFold(key, fieldClientID)
}

// setParams is what a request's filters set: f.SetParams, overridden by
// f.SetParamsByID[requested] (llama-swap's order), sorted by key.
func setParams(f *config.Filters, requested string) []config.Param {
	byID := f.SetParamsByID[requested]
	if len(byID) == 0 {
		return f.SetParams
	}
	if len(f.SetParams) == 0 {
		return byID
	}
	out := make([]config.Param, 0, len(f.SetParams)+len(byID))
	out = append(out, byID...)
	for _, p := range f.SetParams {
		if !slices.ContainsFunc(byID, func(q config.Param) bool { return q.Key == p.Key }) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b config.Param) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// rewriteJSON edits the top level of a JSON object in one pass: it drops
// the extension fields and the fields f strips, replaces the values of
// the fields f sets (for the name the client requested) and appends those
// the body lacks, in key order, and, when rename is set, replaces the
// model's value. Everything else (member order, spacing, number spelling)
// keeps its bytes. The extension fields and the model match
// case-insensitively, as encoding/json matched them when the body was
// parsed; filter fields match exactly, as llama-swap's do.
func rewriteJSON(body []byte, rename bool, model string, f *config.Filters, requested string) ([]byte, error) {
	set := setParams(f, requested)
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("rewriting the body: not a JSON object")
	}
	prevEnd := int(dec.InputOffset()) // just after '{', then after each member
	out := bytes.NewBuffer(make([]byte, 0, len(body)+len(model)+2))
	out.Write(body[:prevEnd])
	first := true
	var seen []bool // seen[i]: set[i] replaced a member
	if len(set) > 0 {
		seen = make([]bool, len(set))
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("rewriting the body: %w", err)
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("rewriting the body: member %q: %w", key, err)
		}
		end := int(dec.InputOffset())
		member := body[prevEnd:end] // [ws][,]ws"key"ws:ws value
		prevEnd = end
		si := slices.IndexFunc(set, func(p config.Param) bool { return p.Key == key })
		if isExtensionField(key) || si < 0 && slices.Contains(f.StripParams, key) {
			continue
		}
		member = trimSeparator(member)
		if !first {
			out.WriteByte(',')
		}
		first = false
		switch {
		case si >= 0:
			out.Write(member[:len(member)-len(raw)])
			out.Write(set[si].Value)
			seen[si] = true
		case rename && strings.EqualFold(key, "model"):
			out.Write(member[:len(member)-len(raw)])
			b, err := json.Marshal(model)
			if err != nil {
				return nil, fmt.Errorf("rewriting the body: %w", err)
			}
			out.Write(b)
		default:
			out.Write(member)
		}
	}
	for i, p := range set {
		if seen[i] {
			continue
		}
		if !first {
			out.WriteByte(',')
		}
		first = false
		k, _ := json.Marshal(p.Key)
		out.Write(k)
		out.WriteByte(':')
		out.Write(p.Value)
	}
	out.Write(body[prevEnd:]) // ws '}' and whatever trails it
	return out.Bytes(), nil
}

// trimSeparator drops the whitespace and the comma that precede a member
// other than the first; the spacing after the comma stays.
func trimSeparator(member []byte) []byte {
	i := 0
	for i < len(member) && isSpace(member[i]) {
		i++
	}
	if i < len(member) && member[i] == ',' {
		return member[i+1:]
	}
	return member
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// rewriteForm rebuilds a multipart body with the same boundary: the
// extension fields dropped and, when rename is set, the model field's value
// replaced. Every other part keeps its headers and bytes.
func rewriteForm(body []byte, boundary string, rename bool, model string) ([]byte, error) {
	var out bytes.Buffer
	out.Grow(len(body))
	mw := multipart.NewWriter(&out)
	if err := mw.SetBoundary(boundary); err != nil {
		return nil, fmt.Errorf("rewriting the form: %w", err)
	}
	mpr := multipart.NewReader(bytes.NewReader(body), boundary)
	for {
		part, err := mpr.NextRawPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("rewriting the form: %w", err)
		}
		name := part.FormName()
		if part.FileName() == "" && isExtensionField(name) {
			continue
		}
		pw, err := mw.CreatePart(part.Header)
		if err != nil {
			return nil, fmt.Errorf("rewriting the form: %w", err)
		}
		if rename && name == "model" && part.FileName() == "" {
			_, err = io.WriteString(pw, model)
		} else {
			_, err = io.Copy(pw, part)
		}
		if err != nil {
			return nil, fmt.Errorf("rewriting the form: %w", err)
		}
	}
	if err := mw.Close(); err != nil {
		return nil, fmt.Errorf("rewriting the form: %w", err)
	}
	return out.Bytes(), nil
}
