package proxy

import (
	"encoding/json"
	"fmt"
)

// checkMessages validates a request to Anthropic's Messages API
// (/v1/messages, /v1/messages/count_tokens) before its model is loaded: a
// JSON object (parseModelRequest already read its model) whose
// "messages" is an array, as the API requires
// (docs.claude.com/en/api/messages). A body that fails is a 400, which
// writeError shapes as the Messages API's error
// ({"type":"error","error":{"type":"invalid_request_error",…}}, shapeOf),
// and nothing is loaded for it. Other fields are the model server's to
// judge.
func checkMessages(mr *modelRequest, body []byte) *apiError {
	if mr.kind != kindJSON {
		return badRequest("invalid_json", "the Messages API takes a JSON object as the request body")
	}
	var f struct {
		Messages json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(body, &f); err != nil { // parseJSON accepted it: never
		return badRequest("invalid_json", fmt.Sprintf("the request body is not valid JSON: %v", err))
	}
	if len(f.Messages) == 0 || string(f.Messages) == "null" {
		return badRequest("invalid_messages", `"messages": field required`)
	}
	if f.Messages[0] != '[' {
		return badRequest("invalid_messages", fmt.Sprintf(`"messages" must be an array, got %s`, truncate(f.Messages, 40)))
	}
	return nil
}
