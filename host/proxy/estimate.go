package proxy

import "encoding/json"

// bodyEstimate is what an inference request's JSON body says about its
// size before any model server has counted it (RequestStart's token
// fields).
type bodyEstimate struct {
	prompt    int64 // estimated prompt tokens
	maxTokens int64 // the completion limit the request set; 0: none
}

// bytesPerToken is the rule of thumb for English text under the common
// BPE vocabularies (OpenAI's own: "about 4 characters per token").
const bytesPerToken = 4

// estimateBody reads a JSON body's prompt text and completion limit. The
// prompt is every string under messages[].content (plain, or parts with
// "text"), prompt and input, at bytesPerToken, plus one token per number
// in them (token-id arrays of the completions and embeddings APIs). A
// body that is not a JSON object estimates to zero: the proxy has already
// refused what it cannot parse, and the estimate must never fail a
// request.
func estimateBody(body []byte) bodyEstimate {
	var b struct {
		Messages []struct {
			Content any `json:"content"`
		} `json:"messages"`
		Prompt              any    `json:"prompt"`
		Input               any    `json:"input"`
		MaxTokens           *int64 `json:"max_tokens"`
		MaxCompletionTokens *int64 `json:"max_completion_tokens"`
		MaxOutputTokens     *int64 `json:"max_output_tokens"`
	}
	if json.Unmarshal(body, &b) != nil {
		return bodyEstimate{}
	}
	var c textCount
	for _, m := range b.Messages {
		c.add(m.Content)
	}
	c.add(b.Prompt)
	c.add(b.Input)
	e := bodyEstimate{prompt: c.tokens + (c.bytes+bytesPerToken-1)/bytesPerToken}
	for _, n := range []*int64{b.MaxTokens, b.MaxCompletionTokens, b.MaxOutputTokens} {
		if n != nil && *n > 0 {
			e.maxTokens = *n
			break
		}
	}
	return e
}

// textCount adds up the text of decoded JSON values: bytes of strings,
// and numbers as one token each.
type textCount struct{ bytes, tokens int64 }

func (c *textCount) add(v any) {
	switch v := v.(type) {
	case string:
		c.bytes += int64(len(v))
	case float64:
		c.tokens++
	case []any:
		for _, x := range v {
			c.add(x)
		}
	case map[string]any:
		// A content part ({"type":"text","text":…}) or a message of the
		// Responses API's input ({"role":…,"content":…}); image and audio
		// parts carry no text and count nothing.
		c.add(v["text"])
		c.add(v["content"])
	}
}
