package proxy

import (
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

func TestUsageMeter_ReadsUsage(t *testing.T) {
	for _, tc := range []struct {
		name, contentType, body string
		prompt, completion      int64
		firstToken              bool
	}{
		{"json chat", "application/json", `{"choices":[{"message":{"content":"a b c"}}],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}`, 7, 3, true},
		{"json embeddings", "application/json; charset=utf-8", `{"data":[],"usage":{"prompt_tokens":4,"total_tokens":4}}`, 4, 0, true},
		{"json without usage", "application/json", `{"choices":[]}`, 0, 0, true},
		{"stream with final usage chunk", "text/event-stream",
			"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n" +
				"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n" +
				"data: {\"choices\":[{\"delta\":{\"content\": \" there\"}}]}\n\n" +
				"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}\n\n" +
				"data: [DONE]\n\n", 5, 2, true},
		{"stream without usage counts chunks", "text/event-stream",
			"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\r\n\r\n" +
				"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\r\n\r\n" +
				"data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"b\"}}]}\r\n\r\n" +
				"data: {\"choices\":[{\"text\":\"c\"}]}\r\n\r\n" +
				"data: [DONE]", 0, 3, true},
		{"responses api stream", "text/event-stream",
			"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"x\"}\n\n" +
				"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\n", 9, 1, true},
		{"audio passes unexamined", "audio/mpeg", "\xff\xfb binary", 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := &usage{sent: time.Now()}
			// One byte a read: lines and bodies arrive split anywhere.
			m := newUsageMeter(io.NopCloser(iotest.OneByteReader(strings.NewReader(tc.body))), u, tc.contentType)
			if b, err := io.ReadAll(m); err != nil || string(b) != tc.body {
				t.Fatalf("body changed: %q, %v", b, err)
			}
			_ = m.Close()
			if u.prompt != tc.prompt || u.completion != tc.completion {
				t.Errorf("prompt, completion = %d, %d; want %d, %d", u.prompt, u.completion, tc.prompt, tc.completion)
			}
			if _, ok := u.upstreamTTFT(); ok != tc.firstToken {
				t.Errorf("first token seen = %t, want %t", ok, tc.firstToken)
			}
		})
	}
}

// A body cut short still settles what it saw: its chunks so far.
func TestUsageMeter_ClosedEarlyCountsChunksSoFar(t *testing.T) {
	u := &usage{sent: time.Now()}
	body := "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\ndata: {\"cho"
	m := newUsageMeter(io.NopCloser(strings.NewReader(body)), u, "text/event-stream")
	buf := make([]byte, len(body)-3)
	if _, err := io.ReadFull(m, buf); err != nil {
		t.Fatal(err)
	}
	_ = m.Close()
	if u.completion != 2 {
		t.Fatalf("completion = %d, want 2", u.completion)
	}
}

func TestHasText(t *testing.T) {
	for in, want := range map[string]bool{
		`{"content":"x"}`:               true,
		`{"content": "x"}`:              true,
		`{"content":""}`:                false,
		`{"content":null}`:              false,
		`{"role":"a","content":"",}`:    false,
		`{"x":"content","content":"y"}`: true,
	} {
		if got := hasText([]byte(in), `"content"`); got != want {
			t.Errorf("hasText(%s) = %t, want %t", in, got, want)
		}
	}
}

func FuzzUsageMeter(f *testing.F) {
	f.Add("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":{\"prompt_tokens\":1}}\n\n", true)
	f.Add(`{"usage":{"completion_tokens":3}}`, false)
	f.Fuzz(func(t *testing.T, body string, sse bool) {
		ct := "application/json"
		if sse {
			ct = "text/event-stream"
		}
		u := &usage{sent: time.Now()}
		m := newUsageMeter(io.NopCloser(strings.NewReader(body)), u, ct)
		b, err := io.ReadAll(m)
		if err != nil || string(b) != body {
			t.Fatalf("body changed")
		}
		_ = m.Close()
		if u.completion < 0 && !u.reported {
			t.Fatalf("negative count %d", u.completion)
		}
	})
}
