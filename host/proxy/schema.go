package proxy

import (
	"bytes"
	"fmt"
	"math"
	"net/http"
	"strconv"

	"github.com/loadout-dev/loadout/sdk/settings"
)

// A request body that fails its endpoint's schema is refused before the
// router hears of it: no swap, no load, no eviction for a body the model
// server would refuse anyway (issue 25: any client could force swaps with
// garbage). The check is part of the one pass that finds the model
// (parseJSON): the members it constrains are decoded as member values,
// which keep only their JSON type, and messages as a slice of roles. It
// checks what OpenAI's API reference requires (the members that must be
// there, and the JSON types of the common ones) and no more, leniently,
// as real clients and servers are: unknown members pass, null passes
// where OpenAI's schema says nullable, and an integer may be spelt 1.0 or
// 1e3 (vLLM and llama.cpp read those as integers).

// jsonType is the JSON type of a value, or, in a rule, the set of types a
// value may have.
type jsonType uint8

const (
	typeNull     jsonType = 1 << iota
	typeBool              // true or false
	typeInteger           // a number with no fractional part: 3, 3.0, 3e2
	typeFraction          // any other number: 0.7
	typeString
	typeArray
	typeObject

	typeNumber = typeInteger | typeFraction
)

// typeNames are the types' names in error messages, in the order of the
// bits above.
var typeNames = [...]string{"null", "a boolean", "an integer", "a number", "a string", "an array", "an object"}

// String names the types of t: "an integer or null".
func (t jsonType) String() string {
	if t&typeNumber == typeNumber {
		t &^= typeInteger // "a number" covers both
	}
	var names []string
	for i, n := range typeNames[1:] {
		if t&(typeBool<<i) != 0 {
			names = append(names, n)
		}
	}
	if t&typeNull != 0 {
		names = append(names, typeNames[0]) // "… or null", as OpenAI's reference says it
	}
	return settings.Or(names)
}

// member is what the pass over a body keeps of a top-level member it
// checks: its JSON type (0: absent) and, for a boolean, its value. It
// never copies the member's bytes.
type member struct {
	typ    jsonType
	isTrue bool
	empty  bool // an array with no element
}

// UnmarshalJSON records b's type; encoding/json has already checked that b
// is one valid JSON value, so its first byte says which.
func (m *member) UnmarshalJSON(b []byte) error {
	switch b[0] {
	case 'n':
		m.typ = typeNull
	case 't':
		m.typ, m.isTrue = typeBool, true
	case 'f':
		m.typ = typeBool
	case '"':
		m.typ = typeString
	case '[':
		m.typ, m.empty = typeArray, len(bytes.TrimSpace(b[1:len(b)-1])) == 0
	case '{':
		m.typ = typeObject
	default:
		m.typ = numberType(b)
	}
	return nil
}

// numberType is typeInteger for a JSON number with no fractional part,
// else typeFraction.
func numberType(b []byte) jsonType {
	if !bytes.ContainsAny(b, ".eE") {
		return typeInteger
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil || f != math.Trunc(f) || math.IsInf(f, 0) {
		return typeFraction
	}
	return typeInteger
}

// chatMessage is what the pass keeps of one element of messages.
type chatMessage struct {
	Role member `json:"role"`
}

// rule is one member an endpoint's schema constrains.
type rule struct {
	name     string
	types    jsonType // the types it may have
	required bool     // it must be there (null counts as there where types allows null)
	of       func(*requestFields) member
}

// schema is what one endpoint's JSON body must hold. messages marks the
// chat completions endpoint, whose messages must be an array of objects
// each with a string role.
type schema struct {
	rules    []rule
	messages bool
	// standIns are, by a required member's name, another server's name
	// for it that a body may give instead: what that server takes, the
	// check passes on to it.
	standIns map[string]standIn
}

// standIn is another server's name for a required member.
type standIn struct {
	name   string // the member, e.g. "content"
	server string // whose name it is, for the error
	of     func(*requestFields) member
}

// Nullable and plain sets of the rules below.
const (
	intOrNull    = typeInteger | typeNull
	numberOrNull = typeNumber | typeNull
	boolOrNull   = typeBool | typeNull
	stringOrNull = typeString | typeNull
	objectOrNull = typeObject | typeNull
	textOrList   = typeString | typeArray // prompt, input
)

// The rules, one per member, shared by the endpoints that have it, with
// the types OpenAI's API reference gives them.
var (
	ruleStream           = rule{"stream", boolOrNull, false, func(f *requestFields) member { return f.Stream }}
	ruleMaxTokens        = rule{"max_tokens", intOrNull, false, func(f *requestFields) member { return f.MaxTokens }}
	ruleMaxCompletion    = rule{"max_completion_tokens", intOrNull, false, func(f *requestFields) member { return f.MaxCompletionTokens }}
	ruleMaxOutput        = rule{"max_output_tokens", intOrNull, false, func(f *requestFields) member { return f.MaxOutputTokens }}
	ruleN                = rule{"n", intOrNull, false, func(f *requestFields) member { return f.N }}
	ruleTemperature      = rule{"temperature", numberOrNull, false, func(f *requestFields) member { return f.Temperature }}
	ruleTopP             = rule{"top_p", numberOrNull, false, func(f *requestFields) member { return f.TopP }}
	ruleStop             = rule{"stop", stringOrNull | typeArray, false, func(f *requestFields) member { return f.Stop }}
	ruleSeed             = rule{"seed", intOrNull, false, func(f *requestFields) member { return f.Seed }}
	rulePresencePenalty  = rule{"presence_penalty", numberOrNull, false, func(f *requestFields) member { return f.PresencePenalty }}
	ruleFrequencyPenalty = rule{"frequency_penalty", numberOrNull, false, func(f *requestFields) member { return f.FrequencyPenalty }}
	ruleStreamOptions    = rule{"stream_options", objectOrNull, false, func(f *requestFields) member { return f.StreamOptions }}
	ruleTools            = rule{"tools", typeArray | typeNull, false, func(f *requestFields) member { return f.Tools }}
	ruleUser             = rule{"user", stringOrNull, false, func(f *requestFields) member { return f.User }}
)

// nonEmpty are the members that, as an array, must hold something: a
// completion's prompts and an embedding's inputs (OpenAI refuses []; a
// model loaded for one would answer nothing).
var nonEmpty = map[string]bool{"prompt": true, "input": true}

// schemas are the endpoints' schemas by path, from OpenAI's API reference
// (chat completions, completions, embeddings, responses, audio speech,
// image generation) and, for rerank, the request llama.cpp's and vLLM's
// servers take (Jina's and Cohere's shape). An endpoint not here
// (transcriptions: multipart only) has its body checked only for the
// model.
var schemas = map[string]*schema{
	"/v1/chat/completions": {messages: true, rules: []rule{
		ruleStream, ruleMaxTokens, ruleMaxCompletion, ruleN, ruleTemperature, ruleTopP, ruleStop, ruleSeed,
		rulePresencePenalty, ruleFrequencyPenalty, ruleStreamOptions, ruleTools, ruleUser,
		{"logprobs", boolOrNull, false, func(f *requestFields) member { return f.Logprobs }},
		{"top_logprobs", intOrNull, false, func(f *requestFields) member { return f.TopLogprobs }},
		{"response_format", objectOrNull, false, func(f *requestFields) member { return f.ResponseFormat }},
	}},
	"/v1/completions": {rules: []rule{
		{"prompt", textOrList | typeNull, true, func(f *requestFields) member { return f.Prompt }},
		ruleStream, ruleMaxTokens, ruleN, ruleTemperature, ruleTopP, ruleStop, ruleSeed,
		rulePresencePenalty, ruleFrequencyPenalty, ruleStreamOptions, ruleUser,
		{"logprobs", intOrNull, false, func(f *requestFields) member { return f.Logprobs }},
		{"best_of", intOrNull, false, func(f *requestFields) member { return f.BestOf }},
		{"echo", boolOrNull, false, func(f *requestFields) member { return f.Echo }},
	}},
	"/v1/embeddings": {rules: []rule{
		{"input", textOrList, true, func(f *requestFields) member { return f.Input }},
		{"dimensions", typeInteger, false, func(f *requestFields) member { return f.Dimensions }},
		{"encoding_format", typeString, false, func(f *requestFields) member { return f.EncodingFormat }},
		ruleUser,
	}, standIns: map[string]standIn{
		// llama-server's embeddings take "content" where "input" is absent.
		"input": {"content", "llama-server's", func(f *requestFields) member { return f.Content }},
	}},
	"/v1/responses": {rules: []rule{
		{"input", textOrList, false, func(f *requestFields) member { return f.Input }},
		{"instructions", stringOrNull, false, func(f *requestFields) member { return f.Instructions }},
		ruleStream, ruleMaxOutput, ruleTemperature, ruleTopP, ruleTools, ruleUser,
	}},
	"/v1/audio/speech": {rules: []rule{
		{"input", typeString, true, func(f *requestFields) member { return f.Input }},
		ruleStream,
	}},
	"/v1/images/generations": {rules: []rule{
		{"prompt", typeString, true, func(f *requestFields) member { return f.Prompt }},
		ruleN,
	}},
	// Anthropic's Messages API (docs.claude.com/en/api/messages):
	// messages is required, an array of objects with a string role, as
	// chat completions' are; a refusal is shaped as its errors (shapeOf).
	"/v1/messages":              {messages: true, rules: []rule{ruleStream}},
	"/v1/messages/count_tokens": {messages: true},
}

// rerank is the rerank family's schema (four paths, one request).
var rerank = &schema{rules: []rule{
	{"query", typeString | typeObject, true, func(f *requestFields) member { return f.Query }},
	{"documents", typeArray | typeObject, true, func(f *requestFields) member { return f.Documents }},
	{"top_n", intOrNull, false, func(f *requestFields) member { return f.TopN }},
}, standIns: map[string]standIn{
	// Hugging Face's text-embeddings-inference reranks "texts".
	"documents": {"texts", "text-embeddings-inference's", func(f *requestFields) member { return f.Texts }},
}}

func init() {
	for _, p := range []string{"/v1/rerank", "/rerank", "/v1/reranking", "/reranking"} {
		schemas[p] = rerank
	}
}

// check reports the first member of f that sc refuses, as a 400 naming it
// (OpenAI's invalid_request_error, with param set).
func (sc *schema) check(f *requestFields) *apiError {
	if sc.messages {
		if e := checkMessages(f); e != nil {
			return e
		}
	}
	for i := range sc.rules {
		ru := &sc.rules[i]
		switch m := ru.of(f); {
		case m.typ == 0 && ru.required:
			alt, ok := sc.standIns[ru.name]
			if !ok {
				return invalidParam(ru.name, "missing_required_parameter", fmt.Sprintf("%q is required in the request body: %s", ru.name, ru.types))
			}
			if alt.of(f).typ == 0 {
				return invalidParam(ru.name, "missing_required_parameter", fmt.Sprintf("%q is required in the request body: %s (or %s %q)", ru.name, ru.types, alt.server, alt.name))
			}
		case m.typ != 0 && m.typ&ru.types == 0:
			return invalidParam(ru.name, "invalid_type", fmt.Sprintf("%q in the request body must be %s, got %s", ru.name, ru.types, m.typ))
		case m.empty && nonEmpty[ru.name]:
			return invalidParam(ru.name, "invalid_value", fmt.Sprintf("%q in the request body must not be an empty array: there is nothing to answer", ru.name))
		}
	}
	return nil
}

// checkMessages: chat completions' messages is required, an array of
// objects, each with a string role (a type error in an element was
// already reported by parseJSON).
func checkMessages(f *requestFields) *apiError {
	if f.Messages == nil {
		return invalidParam("messages", "missing_required_parameter", `"messages" is required in the request body: an array of message objects, each with a string "role"`)
	}
	for i := range f.Messages {
		switch t := f.Messages[i].Role.typ; t {
		case typeString:
		case 0:
			param := fmt.Sprintf("messages[%d].role", i)
			return invalidParam(param, "missing_required_parameter", fmt.Sprintf(`%q is required in the request body: a string (each message is an object with a "role")`, param))
		default:
			param := fmt.Sprintf("messages[%d].role", i)
			return invalidParam(param, "invalid_type", fmt.Sprintf(`%q in the request body must be a string, got %s`, param, t))
		}
	}
	return nil
}

// invalidParam is a 400 for request-body member param.
func invalidParam(param, code, msg string) *apiError {
	return &apiError{status: http.StatusBadRequest, code: code, param: param, msg: msg}
}
