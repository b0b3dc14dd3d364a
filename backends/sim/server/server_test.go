package simserver_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	simserver "github.com/loadout-dev/loadout/backends/sim/server"
)

// start runs a server with opts on a loopback port until the test ends and
// returns its base URL.
func start(t *testing.T, opts simserver.Options) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts.Listener = ln
	opts.Logger = slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- simserver.Run(ctx, opts) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

// startLoaded is start with the model already loaded.
func startLoaded(t *testing.T, opts simserver.Options) string {
	t.Helper()
	url := start(t, opts)
	waitStatus(t, url+"/health", http.StatusOK)
	return url
}

func waitStatus(t *testing.T, url string, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s never answered %d", url, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func post(t *testing.T, ctx context.Context, url string, body any) *http.Response {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	return resp
}

func chatBody(prompt string, maxTokens int, stream bool) map[string]any {
	return map[string]any{
		"model":      "m",
		"messages":   []map[string]any{{"role": "user", "content": prompt}},
		"max_tokens": maxTokens,
		"stream":     stream,
	}
}

// chat sends a non-streaming chat request and returns its text and usage.
func chat(t *testing.T, url, prompt string, maxTokens int) (string, map[string]int) {
	t.Helper()
	resp := post(t, context.Background(), url+"/v1/chat/completions", chatBody(prompt, maxTokens, false))
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("chat = %d %s", resp.StatusCode, b)
	}
	var out struct {
		Choices []struct {
			Message struct{ Content string }
		}
		Usage map[string]int
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out.Choices[0].Message.Content, out.Usage
}

// event is one SSE data line and when it arrived.
type event struct {
	data string
	at   time.Time
}

// contents extracts choices[0].delta.content of chat chunks.
func contents(t *testing.T, evs []event) []string {
	t.Helper()
	var out []string
	for _, e := range evs {
		if e.data == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct {
					Content *string
				}
			}
		}
		if err := json.Unmarshal([]byte(e.data), &c); err != nil {
			t.Fatalf("bad chunk %q: %v", e.data, err)
		}
		if len(c.Choices) > 0 && c.Choices[0].Delta.Content != nil && *c.Choices[0].Delta.Content != "" {
			out = append(out, *c.Choices[0].Delta.Content)
		}
	}
	return out
}

func TestServer_LoadingAnswers503(t *testing.T) {
	url := start(t, simserver.Options{LoadTime: time.Hour})
	for _, path := range []string{"/health", "/v1/models"} {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Error struct{ Message, Type string }
		}
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || body.Error.Message == "" {
			t.Errorf("GET %s while loading = %d %+v, want 503 with an OpenAI error", path, resp.StatusCode, body)
		}
	}
	resp := post(t, context.Background(), url+"/v1/chat/completions", chatBody("hi", 1, false))
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("chat while loading = %d, want 503", resp.StatusCode)
	}
}

func TestServer_LoadTime(t *testing.T) {
	const load = 200 * time.Millisecond
	begin := time.Now()
	url := start(t, simserver.Options{LoadTime: load})
	waitStatus(t, url+"/health", http.StatusOK)
	if d := time.Since(begin); d < load {
		t.Errorf("/health answered 200 after %s, before the %s load time", d, load)
	}
}

func TestServer_StreamingArrivesChunkByChunk(t *testing.T) {
	const tokens = 50
	url := startLoaded(t, simserver.Options{TokensPerSecond: 50}) // a 20 ms step: 1 s in all
	body := chatBody("tell me", tokens, true)
	body["stream_options"] = map[string]any{"include_usage": true}
	resp := post(t, context.Background(), url+"/v1/chat/completions", body)
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type = %q", ct)
	}
	var evs []event
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		evs = append(evs, event{d, time.Now()})
		if len(contents(t, evs)) == 1 && len(contents(t, evs[len(evs)-1:])) == 1 {
			// The first token is here: a buffered response would only
			// arrive once all of them had been generated.
			if st := stats(t, url); st.TokensGenerated >= tokens {
				t.Errorf("first chunk arrived after all %d tokens were generated: the stream is buffered", tokens)
			}
		}
	}
	if len(evs) == 0 || evs[len(evs)-1].data != "[DONE]" {
		t.Fatalf("stream did not end with [DONE]: %v", evs)
	}
	words := contents(t, evs)
	if len(words) != tokens {
		t.Fatalf("got %d content chunks, want %d (max_tokens)", len(words), tokens)
	}
	var usage struct{ Usage map[string]int }
	_ = json.Unmarshal([]byte(evs[len(evs)-2].data), &usage)
	if usage.Usage["completion_tokens"] != tokens {
		t.Errorf("usage chunk = %s", evs[len(evs)-2].data)
	}
	text, _ := chat(t, url, "tell me", tokens)
	if strings.Join(words, "") != text {
		t.Errorf("streamed text %q != non-streamed text %q", strings.Join(words, ""), text)
	}
}

func TestServer_DeterministicText(t *testing.T) {
	fast := simserver.Options{TokensPerSecond: 2000}
	a := startLoaded(t, fast)
	b := startLoaded(t, fast)
	seeded := fast
	seeded.Seed = 7
	c := startLoaded(t, seeded)
	for _, tc := range []struct {
		name      string
		url1, p1  string
		url2, p2  string
		wantEqual bool
	}{
		{"same prompt and seed, two servers", a, "hello", b, "hello", true},
		{"same prompt, other seed", a, "hello", c, "hello", false},
		{"other prompt, same seed", a, "hello", a, "goodbye", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t1, u1 := chat(t, tc.url1, tc.p1, 12)
			t2, _ := chat(t, tc.url2, tc.p2, 12)
			if (t1 == t2) != tc.wantEqual {
				t.Errorf("texts %q and %q: equal=%v, want %v", t1, t2, t1 == t2, tc.wantEqual)
			}
			if n := len(strings.Fields(t1)); n != 12 || u1["completion_tokens"] != 12 {
				t.Errorf("text has %d words, usage %v; want 12 (max_tokens)", n, u1)
			}
		})
	}
}

func TestServer_ContinuousBatching(t *testing.T) {
	const (
		tokens = 30
		rate   = 100 // tokens per second: a 10 ms step
	)
	for _, tc := range []struct {
		name     string
		maxBatch int
		n        int
		// the decode steps the n concurrent requests may take
		minSteps, maxSteps int64
	}{
		// Batched, they overlap: far fewer steps than one after another.
		{"4 requests share a batch", 8, 4, tokens, 2 * tokens},
		// One at a time: exactly n × tokens steps.
		{"max_batch 1 serialises", 1, 3, 3 * tokens, 3 * tokens},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := startLoaded(t, simserver.Options{TokensPerSecond: rate, MaxBatch: tc.maxBatch})
			// Wall time on a shared 2-core machine is noisy: the step
			// count is the proof, the timing gets three tries.
			for try := 1; ; try++ {
				begin := time.Now()
				chat(t, url, "alone", tokens)
				single := time.Since(begin)

				before := stats(t, url).Steps
				begin = time.Now()
				var wg sync.WaitGroup
				for range tc.n {
					wg.Go(func() { chat(t, url, "together", tokens) })
				}
				wg.Wait()
				all := time.Since(begin)
				n := stats(t, url).Steps - before
				t.Logf("single %s; %d concurrent %s (×%.2f) in %d steps", single, tc.n, all, float64(all)/float64(single), n)
				if n < tc.minSteps || n > tc.maxSteps {
					t.Fatalf("%d concurrent requests of %d tokens took %d decode steps, want %d..%d", tc.n, tokens, n, tc.minSteps, tc.maxSteps)
				}
				// Steps are scheduled back to back and never end early, so
				// the batch takes at least its steps' time.
				if minimum := time.Duration(tc.minSteps) * time.Second / rate; all < minimum*9/10 {
					t.Fatalf("%d steps took %s, less than %s", n, all, minimum)
				}
				if tc.maxBatch == 1 || all < time.Duration(tc.n)*single {
					return
				}
				if try == 3 {
					t.Fatalf("%d concurrent requests took %s, not less than %d× a single one (%s)", tc.n, all, tc.n, single)
				}
			}
		})
	}
}

// simStats is the part of /sim/stats the tests read.
type simStats struct {
	ActiveSequences int64 `json:"active_sequences"`
	TokensGenerated int64 `json:"tokens_generated"`
	Steps           int64 `json:"steps"`
}

func stats(t *testing.T, url string) simStats {
	t.Helper()
	resp, err := http.Get(url + "/sim/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st simStats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

func TestServer_JoinsMidGeneration(t *testing.T) {
	const long, short = 200, 3
	url := startLoaded(t, simserver.Options{TokensPerSecond: 100})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := post(t, ctx, url+"/v1/chat/completions", chatBody("long", long, true))
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for seen := 0; seen < 5 && sc.Scan(); {
		if strings.HasPrefix(sc.Text(), "data: ") {
			seen++
		}
	}
	// The long request is mid-generation: a short one joins its batch at
	// the next step instead of waiting for it to finish.
	before := stats(t, url)
	chat(t, url, "short", short)
	after := stats(t, url)
	if n := after.Steps - before.Steps; n > 2*short+2 {
		t.Errorf("a %d-token request took %d steps behind a running %d-token one; it should join the batch", short, n, long)
	}
	if after.TokensGenerated >= long || after.ActiveSequences != 1 {
		t.Errorf("stats after the short request = %+v; want the long one still decoding", after)
	}
}

func TestServer_ClientDisconnectStopsSequence(t *testing.T) {
	url := startLoaded(t, simserver.Options{TokensPerSecond: 200})
	ctx, cancel := context.WithCancel(context.Background())
	resp := post(t, ctx, url+"/v1/chat/completions", chatBody("endless", 1<<20, true))
	sc := bufio.NewScanner(resp.Body)
	for seen := 0; seen < 3 && sc.Scan(); {
		if strings.HasPrefix(sc.Text(), "data: ") {
			seen++
		}
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		st := stats(t, url)
		if st.ActiveSequences == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sequence still decoding after its client left: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestServer_Endpoints(t *testing.T) {
	url := startLoaded(t, simserver.Options{Model: "tiny", VRAM: 3 << 30, TokensPerSecond: 2000})
	get := func(path string) map[string]any {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return m
	}
	if m := get("/v1/models"); m["data"].([]any)[0].(map[string]any)["id"] != "tiny" {
		t.Errorf("/v1/models = %v", m)
	}
	if m := get("/sim/stats"); m["vram_bytes"] != float64(3<<30) || m["loaded"] != true {
		t.Errorf("/sim/stats = %v", m)
	}

	resp := post(t, context.Background(), url+"/v1/completions", map[string]any{"prompt": "once upon", "max_tokens": 5})
	var cmpl struct {
		Object  string
		Choices []struct{ Text string }
		Usage   map[string]int
	}
	_ = json.NewDecoder(resp.Body).Decode(&cmpl)
	resp.Body.Close()
	if cmpl.Object != "text_completion" || len(strings.Fields(cmpl.Choices[0].Text)) != 5 || cmpl.Usage["prompt_tokens"] != 2 {
		t.Errorf("/v1/completions = %+v", cmpl)
	}

	embed := func(input any) [][]float64 {
		resp := post(t, context.Background(), url+"/v1/embeddings", map[string]any{"input": input})
		defer resp.Body.Close()
		var out struct {
			Data []struct{ Embedding []float64 }
		}
		_ = json.NewDecoder(resp.Body).Decode(&out)
		vs := make([][]float64, len(out.Data))
		for i, d := range out.Data {
			vs[i] = d.Embedding
		}
		return vs
	}
	vs := embed([]string{"a", "b"})
	again := embed("a")
	if len(vs) != 2 || len(again) != 1 || !equal(vs[0], again[0]) || equal(vs[0], vs[1]) {
		t.Fatalf("embeddings not deterministic per input: %v / %v", vs, again)
	}
	var norm float64
	for _, x := range vs[0] {
		norm += x * x
	}
	if math.Abs(norm-1) > 1e-9 {
		t.Errorf("embedding norm² = %v, want 1", norm)
	}
	// encoding_format base64 (what the openai client asks for): the same
	// vector as little-endian float32s.
	resp = post(t, context.Background(), url+"/v1/embeddings", map[string]any{"input": "a", "encoding_format": "base64"})
	var b64 struct {
		Data []struct{ Embedding string }
	}
	_ = json.NewDecoder(resp.Body).Decode(&b64)
	resp.Body.Close()
	if len(b64.Data) != 1 {
		t.Fatalf("base64 embeddings: %+v", b64)
	}
	raw, err := base64.StdEncoding.DecodeString(b64.Data[0].Embedding)
	if err != nil || len(raw) != 4*len(again[0]) {
		t.Fatalf("base64 embedding %q: %d bytes, %v; want %d float32s", b64.Data[0].Embedding, len(raw), err, len(again[0]))
	}
	for i, x := range again[0] {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])); got != float32(x) {
			t.Fatalf("base64 embedding[%d] = %v, want %v", i, got, float32(x))
		}
	}

	for _, bad := range []struct {
		path string
		body any
	}{
		{"/v1/chat/completions", map[string]any{"messages": []any{}}},
		{"/v1/chat/completions", chatBody("x", 0, false)},
		{"/v1/completions", map[string]any{"prompt": 42}},
		{"/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi"}}, "n": 2}},
		{"/v1/embeddings", map[string]any{}},
		{"/v1/embeddings", map[string]any{"input": "a", "encoding_format": "int8"}},
	} {
		resp := post(t, context.Background(), url+bad.path, bad.body)
		var e struct{ Error struct{ Type string } }
		_ = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || e.Error.Type != "invalid_request_error" {
			t.Errorf("POST %s %v = %d %+v, want 400 invalid_request_error", bad.path, bad.body, resp.StatusCode, e)
		}
	}
}

// An endpoint the simulator does not serve is an OpenAI-shaped 404 that
// names it, not net/http's bare text.
// A completions request's list of prompts is a choice per prompt, each
// the answer that prompt alone gets, streamed or not (OpenAI's
// completions API).
func TestServer_CompletionsPromptList(t *testing.T) {
	url := startLoaded(t, simserver.Options{Model: "tiny", TokensPerSecond: 2000})
	type choice struct {
		Index        int
		Text         string
		FinishReason *string `json:"finish_reason"`
	}
	complete := func(prompt any, stream bool) ([]choice, map[string]int) {
		t.Helper()
		body := map[string]any{"prompt": prompt, "max_tokens": 4, "stream": stream}
		if stream {
			body["stream_options"] = map[string]any{"include_usage": true}
		}
		resp := post(t, context.Background(), url+"/v1/completions", body)
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("completions %v = %d %s", prompt, resp.StatusCode, b)
		}
		var out struct {
			Choices []choice
			Usage   map[string]int
		}
		if !stream {
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
				t.Fatal(err)
			}
			return out.Choices, out.Usage
		}
		var joined []choice
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			d, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok || d == "[DONE]" {
				continue
			}
			out.Choices = nil
			if err := json.Unmarshal([]byte(d), &out); err != nil {
				t.Fatalf("bad chunk %q: %v", d, err)
			}
			for _, c := range out.Choices {
				for len(joined) <= c.Index {
					joined = append(joined, choice{Index: len(joined)})
				}
				joined[c.Index].Text += c.Text
				if c.FinishReason != nil {
					joined[c.Index].FinishReason = c.FinishReason
				}
			}
		}
		return joined, out.Usage
	}
	// Token ids, as OpenAI's API takes a prompt too: one word a token.
	if got, usage := complete([]int{11, 22, 33}, false); len(got) != 1 || usage["prompt_tokens"] != 3 {
		t.Errorf("a prompt of 3 token ids: %+v, usage %v; want one choice and 3 prompt tokens", got, usage)
	}
	if got, _ := complete([][]int{{1, 2}, {3}}, false); len(got) != 2 {
		t.Errorf("two prompts of token ids: %d choices, want 2", len(got))
	}
	prompts := []string{"once upon", "a time there was"}
	for _, stream := range []bool{false, true} {
		got, usage := complete(prompts, stream)
		if len(got) != len(prompts) {
			t.Fatalf("stream %v: %d choices for %d prompts: %+v", stream, len(got), len(prompts), got)
		}
		for i, p := range prompts {
			alone, _ := complete(p, false)
			if got[i].Index != i || got[i].Text != alone[0].Text || got[i].FinishReason == nil || *got[i].FinishReason != "length" {
				t.Errorf("stream %v: choice %d = %+v, want index %d, finish length and %q (the prompt's answer alone)", stream, i, got[i], i, alone[0].Text)
			}
		}
		if got[0].Text == got[1].Text {
			t.Errorf("stream %v: both prompts answered %q", stream, got[0].Text)
		}
		if usage["prompt_tokens"] != 6 || usage["completion_tokens"] != 8 || usage["total_tokens"] != 14 {
			t.Errorf("stream %v: usage = %v, want 6 prompt and 8 completion tokens", stream, usage)
		}
	}
}

func TestServer_UnservedEndpointSaysSo(t *testing.T) {
	url := start(t, simserver.Options{Model: "m"})
	resp := post(t, context.Background(), url+"/v1/responses", map[string]any{"model": "m", "input": "hi"})
	defer resp.Body.Close()
	var e struct {
		Error struct{ Message, Type string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || resp.StatusCode != http.StatusNotFound ||
		e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, "POST /v1/responses") {
		t.Errorf("POST /v1/responses: %d %+v %v; want a 404 naming the endpoint", resp.StatusCode, e, err)
	}
}

// Anthropic's Messages API, as llama-server serves it: the text the chat
// endpoint writes for the same prompt, as one text block, whole or as
// Anthropic's stream of events; count_tokens counts the system prompt and
// the messages; a bad body is an Anthropic-shaped 400.
func TestServer_AnthropicMessages(t *testing.T) {
	url := startLoaded(t, simserver.Options{Model: "m"})
	body := func(stream bool) map[string]any {
		return map[string]any{"model": "m", "max_tokens": 5, "stream": stream, "system": "be brief",
			"messages": []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "hello there"}}}}}
	}
	resp := post(t, context.Background(), url+"/v1/messages", body(false))
	var msg struct {
		Content []struct{ Type, Text string }
		Usage   struct {
			InputTokens  int `json:"input_tokens"`
			OutputTokens int `json:"output_tokens"`
		}
	}
	var raw map[string]any // type, role, stop_reason
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err := json.Unmarshal(b, &msg); err != nil || json.Unmarshal(b, &raw) != nil || resp.StatusCode != 200 {
		t.Fatalf("POST /v1/messages: %d %s", resp.StatusCode, b)
	}
	if raw["type"] != "message" || raw["role"] != "assistant" || raw["stop_reason"] != "max_tokens" ||
		len(msg.Content) != 1 || msg.Content[0].Type != "text" || len(strings.Fields(msg.Content[0].Text)) != 5 ||
		msg.Usage.OutputTokens != 5 || msg.Usage.InputTokens == 0 {
		t.Errorf("POST /v1/messages: %s", b)
	}

	resp = post(t, context.Background(), url+"/v1/messages", body(true))
	var events []string
	var text strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if ev, ok := strings.CutPrefix(line, "event: "); ok {
			events = append(events, ev)
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			var d struct {
				Type  string
				Delta struct{ Text string }
			}
			if err := json.Unmarshal([]byte(data), &d); err != nil || d.Type != events[len(events)-1] {
				t.Fatalf("event %q: data %s", events[len(events)-1], data)
			}
			text.WriteString(d.Delta.Text)
		}
	}
	resp.Body.Close()
	want := []string{"message_start", "content_block_start", "content_block_delta", "content_block_delta", "content_block_delta",
		"content_block_delta", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}
	if strings.Join(events, ",") != strings.Join(want, ",") || text.String() != msg.Content[0].Text {
		t.Errorf("streamed events %v, text %q; want %v and the whole answer's %q", events, text.String(), want, msg.Content[0].Text)
	}

	resp = post(t, context.Background(), url+"/v1/messages/count_tokens", body(false))
	var count struct {
		InputTokens int `json:"input_tokens"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&count)
	resp.Body.Close()
	if count.InputTokens != msg.Usage.InputTokens {
		t.Errorf("count_tokens %d, want the message's input_tokens %d", count.InputTokens, msg.Usage.InputTokens)
	}

	resp = post(t, context.Background(), url+"/v1/messages", map[string]any{"model": "m", "messages": []any{}})
	var e struct {
		Type  string
		Error struct{ Type, Message string }
	}
	_ = json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || e.Type != "error" || e.Error.Type != "invalid_request_error" || e.Error.Message == "" {
		t.Errorf("POST /v1/messages with no messages: %d %+v, want an Anthropic-shaped 400", resp.StatusCode, e)
	}
}

func equal(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestParseFlags_Values(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    func(simserver.Options) bool
		wantErr string
	}{
		{args: nil, want: func(o simserver.Options) bool {
			return o.Host == "127.0.0.1" && o.Model == "sim" && o.TokensPerSecond == 50 && o.MaxBatch == 8 && o.VRAM == 0
		}},
		{args: []string{"--vram", "8GiB", "--port", "5801"}, want: func(o simserver.Options) bool { return o.VRAM == 8<<30 && o.Port == 5801 }},
		{args: []string{"--vram=1.5GB"}, want: func(o simserver.Options) bool { return o.VRAM == 1_500_000_000 }},
		{args: []string{"--vram=12345"}, want: func(o simserver.Options) bool { return o.VRAM == 12345 }},
		{args: []string{"--load-time=2s", "--ttft=50ms", "--seed=3", "--crash-after-tokens=9"}, want: func(o simserver.Options) bool {
			return o.LoadTime == 2*time.Second && o.TTFT == 50*time.Millisecond && o.Seed == 3 && o.CrashAfterTokens == 9
		}},
		{args: []string{"--vram=8XB"}, wantErr: "unknown unit"},
		{args: []string{"--vram=-1"}, wantErr: "vram"},
		{args: []string{"--max-batch=0"}, wantErr: "max batch"},
		{args: []string{"--tokens-per-second=-3"}, wantErr: "tokens per second"},
		{args: []string{"--port=70000"}, wantErr: "port"},
		{args: []string{"--nope"}, wantErr: "not defined"},
		{args: []string{"extra"}, wantErr: "unexpected argument"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			o, err := simserver.ParseFlags(tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseFlags error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !tc.want(o) {
				t.Fatalf("ParseFlags = %+v, %v", o, err)
			}
		})
	}
}
