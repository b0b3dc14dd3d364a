package proxy

import (
	"net/http"
	"sync"
	"testing"
)

// hooks records what OnRequestStart and OnRequest receive, and in which
// order.
type hooks struct {
	mu      sync.Mutex
	starts  map[uint64]RequestStart
	ends    map[uint64]RequestSummary
	ordered bool // every summary came after its start
}

func newHooks() *hooks {
	return &hooks{starts: map[uint64]RequestStart{}, ends: map[uint64]RequestSummary{}, ordered: true}
}

func (h *hooks) start(s RequestStart) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.starts[s.Seq] = s
}

func (h *hooks) end(s RequestSummary) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.starts[s.Seq]; !ok {
		h.ordered = false
	}
	h.ends[s.Seq] = s
}

// byID returns the start and the summary of the request with id.
func (h *hooks) byID(t *testing.T, id string) (RequestStart, RequestSummary) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	var st RequestStart
	var n int
	for _, s := range h.starts {
		if s.ID == id {
			st, n = s, n+1
		}
	}
	if n != 1 {
		t.Fatalf("request %s: %d starts, want 1", id, n)
	}
	sum, ok := h.ends[st.Seq]
	if !ok {
		t.Fatalf("request %s: no summary with Seq %d", id, st.Seq)
	}
	return st, sum
}

func TestOnRequestStart_PairsWithSummary(t *testing.T) {
	h := newHooks()
	e := newEnv(t, envOpts{onStart: h.start, onRequest: h.end})
	for _, tc := range []struct {
		name, path, body string
		want             RequestStart // Seq, ID and Time are checked against the summary
	}{
		{
			name: "chat, by alias, with extension fields",
			path: "/v1/chat/completions",
			// 12 + 4 bytes of text: 4 tokens; the image part has none.
			body: `{"model":"alpha","max_tokens":9,"x_priority":3,"x_client_id":"ci","messages":[
				{"role":"system","content":"hello world!"},
				{"role":"user","content":[{"type":"text","text":"abcd"},{"type":"image_url","image_url":{"url":"http://x/y.png"}}]}]}`,
			want: RequestStart{Model: "a", Path: "/v1/chat/completions", Priority: 3, Client: "ci", PromptEstimate: 4, MaxTokens: 9},
		},
		{
			name: "completions, a list of prompts",
			path: "/v1/completions",
			body: `{"model":"a","prompt":["abc","defgh"],"max_completion_tokens":5}`,
			want: RequestStart{Model: "a", Path: "/v1/completions", PromptEstimate: 2, MaxTokens: 5},
		},
		{
			name: "embeddings of token ids",
			path: "/v1/embeddings",
			body: `{"model":"a","input":[[1,2,3],[4]]}`,
			want: RequestStart{Model: "a", Path: "/v1/embeddings", PromptEstimate: 4},
		},
		{
			name: "upstream: the path as it came, no estimates",
			path: "/upstream/a/v1/chat/completions",
			body: `{"model":"a","max_tokens":3,"messages":[{"role":"user","content":"hi there"}]}`,
			want: RequestStart{Model: "a", Path: "/upstream/a/v1/chat/completions"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := e.do(request{path: tc.path, body: tc.body})
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			id := resp.Header.Get(requestIDHeader)
			st, sum := h.byID(t, id)
			if st.Seq == 0 || st.Time != sum.Time || sum.Path != st.Path {
				t.Errorf("start %+v does not match its summary %+v", st, sum)
			}
			tc.want.Seq, tc.want.ID, tc.want.Time = st.Seq, id, st.Time
			if st != tc.want {
				t.Errorf("start\n got %+v\nwant %+v", st, tc.want)
			}
		})
	}

	// A client may send the same request id twice: Seq tells them apart.
	for range 2 {
		e.do(request{path: "/v1/chat/completions", body: `{"model":"a","messages":[]}`, headers: map[string]string{requestIDHeader: "dup"}})
	}
	// A request for no catalog model reaches neither hook.
	if resp, _ := e.do(request{path: "/v1/chat/completions", body: `{"model":"nope","messages":[]}`}); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown model: %d", resp.StatusCode)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.starts) != 6 || len(h.ends) != 6 || !h.ordered {
		t.Errorf("%d starts, %d summaries (every summary after its start: %v); want 6 of each", len(h.starts), len(h.ends), h.ordered)
	}
}
