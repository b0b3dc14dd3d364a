package proxy

import "testing"

func TestEstimateBody_Cases(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       bodyEstimate
	}{
		{"not JSON", `{"model":`, bodyEstimate{}},
		{"no text", `{"model":"m"}`, bodyEstimate{}},
		{"rounded up", `{"prompt":"abcde"}`, bodyEstimate{prompt: 2}},
		{"bytes, not runes", `{"input":"ééé"}`, bodyEstimate{prompt: 2}}, // 6 bytes
		{"token ids", `{"prompt":[5,6,7]}`, bodyEstimate{prompt: 3}},
		{"null content", `{"messages":[{"role":"assistant","content":null}],"max_tokens":null}`, bodyEstimate{}},
		{"responses input messages", `{"input":[{"role":"user","content":[{"type":"input_text","text":"abcdefgh"}]}],"max_output_tokens":7}`,
			bodyEstimate{prompt: 2, maxTokens: 7}},
		{"max_tokens first", `{"max_tokens":4,"max_completion_tokens":8}`, bodyEstimate{maxTokens: 4}},
		{"a limit ≤ 0 is none", `{"max_tokens":0,"max_completion_tokens":8}`, bodyEstimate{maxTokens: 8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := estimateBody([]byte(tc.body)); got != tc.want {
				t.Errorf("estimateBody(%s) = %+v, want %+v", tc.body, got, tc.want)
			}
		})
	}
}
