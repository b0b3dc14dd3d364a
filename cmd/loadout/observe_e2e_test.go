package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sseEvent is one server-sent event as a test reads it.
type sseEvent struct {
	id, event, data string
	at              time.Time // when it was read off the stream
}

// readSSE reads server-sent events from GET base+path (with header
// Last-Event-ID when lastID is not empty) onto a channel until ctx ends.
func readSSE(t *testing.T, ctx context.Context, url, lastID string) <-chan sseEvent {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	out := make(chan sseEvent, 1<<14) // a reader that lags is dropped by the server
	go func() {
		defer resp.Body.Close()
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.event != "" {
					ev.at = time.Now()
					out <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				ev.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				ev.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				ev.data = line[6:]
			}
		}
	}()
	return out
}

// awaitEvent reads events until one of type typ whose data matches match.
func awaitEvent(t *testing.T, evs <-chan sseEvent, typ string, match func(data string) bool) sseEvent {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case ev, ok := <-evs:
			if !ok {
				t.Fatalf("event stream ended before a %s event", typ)
			}
			if ev.event == typ && match(ev.data) {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %s event in a minute", typ)
		}
	}
}

// clientCount is what the client counted from the responses it read.
type clientCount struct {
	requests, prompt, completion int
}

// chatCounting sends one chat completion and counts its tokens as a
// client would: the usage object, a stream's final usage chunk, or a
// stream's non-empty content chunks when it has none.
func chatCounting(t *testing.T, base, model string, stream, includeUsage bool, c *clientCount) {
	t.Helper()
	body := map[string]any{"model": model, "stream": stream, "max_tokens": 6,
		"messages": []map[string]string{{"role": "user", "content": "count my tokens please"}}}
	if includeUsage {
		body["stream_options"] = map[string]bool{"include_usage": true}
	}
	b, _ := json.Marshal(body)
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("chat %s: %d", model, resp.StatusCode)
	}
	var u struct {
		Usage   *struct{ Prompt_tokens, Completion_tokens int }
		Choices []struct{ Delta struct{ Content string } }
	}
	c.requests++
	if !stream {
		if err := json.NewDecoder(resp.Body).Decode(&u); err != nil || u.Usage == nil {
			t.Fatalf("chat %s: no usage (%v)", model, err)
		}
		c.prompt += u.Usage.Prompt_tokens
		c.completion += u.Usage.Completion_tokens
		return
	}
	sc := bufio.NewScanner(resp.Body)
	chunks, sawUsage := 0, false
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		u.Usage, u.Choices = nil, nil
		if err := json.Unmarshal([]byte(data), &u); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		if u.Usage != nil {
			c.prompt += u.Usage.Prompt_tokens
			c.completion += u.Usage.Completion_tokens
			sawUsage = true
		}
		if len(u.Choices) > 0 && u.Choices[0].Delta.Content != "" {
			chunks++
		}
	}
	if includeUsage && !sawUsage {
		t.Fatalf("chat %s: stream without its usage chunk", model)
	}
	if !includeUsage {
		c.completion += chunks
	}
}

// metricValue returns the value of the series named exactly series
// (name{labels}) in a /metrics text, 0 when absent.
func metricValue(t *testing.T, text, series string) float64 {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(text)
	if m == nil {
		return 0
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// The per-model series on /metrics agree with what the client counted,
// and the event stream, its resume and the model logs show the same run:
// the loads, the swap that evicted a, and every request.
func TestServe_MetricsAndEventsAgreeWithClient(t *testing.T) {
	s := startServer(t, writeConfig(t, t.TempDir(), simModels))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	evs := readSSE(t, ctx, s.base+"/api/events", "")

	counts := map[string]*clientCount{"a": {}, "b": {}}
	for range 3 {
		chatCounting(t, s.base, "a", false, false, counts["a"])
	}
	for range 2 {
		chatCounting(t, s.base, "a", true, true, counts["a"])
	}
	for range 2 { // evicts a; streams without usage: counted by chunks
		chatCounting(t, s.base, "b", true, false, counts["b"])
	}

	first := awaitEvent(t, evs, "swap_start", func(d string) bool { return strings.Contains(d, `"target":"a"`) })
	awaitEvent(t, evs, "model", func(d string) bool {
		return strings.Contains(d, `"model":"a"`) && strings.Contains(d, `"state":"ready"`)
	})
	awaitEvent(t, evs, "swap_start", func(d string) bool {
		return strings.Contains(d, `"target":"b"`) && strings.Contains(d, `"evict":["a"]`)
	})
	awaitEvent(t, evs, "eviction", func(d string) bool { return d == `{"model":"a","reason":"swap","by":"b"}` })
	var summed clientCount
	for range 2 { // the last two request summaries are b's streams
		ev := awaitEvent(t, evs, "request", func(d string) bool { return strings.Contains(d, `"model":"b"`) })
		var sum struct {
			Status           int     `json:"status"`
			CompletionTokens int     `json:"completion_tokens"`
			TTFT             float64 `json:"ttft_s"`
		}
		if err := json.Unmarshal([]byte(ev.data), &sum); err != nil || sum.Status != 200 || sum.TTFT <= 0 {
			t.Fatalf("request summary %s (%v)", ev.data, err)
		}
		summed.completion += sum.CompletionTokens
	}
	if summed.completion != counts["b"].completion {
		t.Errorf("request summaries of b: %d completion tokens, client counted %d", summed.completion, counts["b"].completion)
	}

	_, text := s.get("/metrics")
	for model, c := range counts {
		for series, want := range map[string]int{
			fmt.Sprintf(`loadout_requests_total{code="200",model="%s"}`, model):         c.requests,
			fmt.Sprintf(`loadout_prompt_tokens_total{model="%s"}`, model):               c.prompt,
			fmt.Sprintf(`loadout_completion_tokens_total{model="%s"}`, model):           c.completion,
			fmt.Sprintf(`loadout_time_to_first_token_seconds_count{model="%s"}`, model): c.requests,
			fmt.Sprintf(`loadout_model_loads_total{model="%s",result="ok"}`, model):     1,
		} {
			if got := metricValue(t, text, series); got != float64(want) {
				t.Errorf("%s = %v, client counted %d", series, got, want)
			}
		}
	}
	if counts["a"].completion == 0 || counts["b"].completion == 0 || counts["a"].prompt == 0 {
		t.Fatalf("the client counted no tokens: %+v %+v", *counts["a"], *counts["b"])
	}
	if got := metricValue(t, text, `loadout_model_evictions_total{model="a",reason="swap"}`); got != 1 {
		t.Errorf("evictions of a by swap = %v, want 1", got)
	}
	if got := metricValue(t, text, `loadout_model_state{model="b",state="ready"}`); got != 1 {
		t.Errorf("b's state gauge = %v, want ready", got)
	}
	if strings.Contains(text, `model="unknown"`) {
		t.Error(`/metrics has a model="unknown" series`)
	}
	// Every request the scheduler decided on is one on_request call, each
	// timed in the call-latency histogram; a request for a model the
	// scheduler admitted (the warm path) makes none, but the first request
	// for each model, which loads it, always does.
	m := regexp.MustCompile(`(?m)^loadout_policy_calls_total\{event="on_request",policy="([^"]+)",role="scheduler"\} (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no scheduler on_request calls on /metrics:\n%s", grepLines(text, "loadout_policy_call"))
	}
	calls, _ := strconv.ParseFloat(m[2], 64)
	if total := counts["a"].requests + counts["b"].requests; calls < 2 || calls > float64(total) {
		t.Errorf("scheduler on_request calls = %v, want one for each model's load at least and at most the %d requests", calls, total)
	}
	if got := metricValue(t, text, fmt.Sprintf(`loadout_policy_call_seconds_count{event="on_request",policy="%s",role="scheduler"}`, m[1])); got != calls {
		t.Errorf("on_request latency samples = %v, want one per call (%v)", got, calls)
	}

	// Resuming from the first swap's id replays what followed it.
	rctx, rcancel := context.WithCancel(ctx)
	resumed := readSSE(t, rctx, s.base+"/api/events", first.id)
	next := <-resumed
	rcancel()
	if id, _ := strconv.Atoi(first.id); next.id != strconv.Itoa(id+1) {
		t.Errorf("resume after %s began at %q", first.id, next.id)
	}

	// The model servers' output is kept per model, Loadout's own lines
	// beside it; llama-swap's proxy and upstream name each alone.
	if code, logs := s.get("/logs"); code != 200 || !strings.Contains(logs, "[a] ") || !strings.Contains(logs, "sim server listening") || !strings.Contains(logs, `msg="model ready"`) {
		t.Errorf("/logs = %d %q", code, logs)
	}
	if code, logs := s.get("/logs/proxy"); code != 200 || !strings.Contains(logs, `msg="model ready"`) || strings.Contains(logs, "sim server listening") {
		t.Errorf("/logs/proxy = %d %q", code, logs)
	}
	html, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.base+"/logs", nil)
	html.Header.Set("Accept", "text/html,application/xhtml+xml")
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if resp, err := noFollow.Do(html); err != nil || resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/ui/" {
		t.Errorf("/logs from a browser: %v %v, want a redirect to /ui/ (llama-swap's)", resp, err)
	} else {
		resp.Body.Close()
	}
	if code, logs := s.get("/logs/upstream"); code != 200 || !strings.Contains(logs, "[a] ") || !strings.Contains(logs, "sim server listening") || strings.Contains(logs, `msg="model ready"`) {
		t.Errorf("/logs/upstream = %d %q", code, logs)
	}
	lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
	defer lcancel()
	req, _ := http.NewRequestWithContext(lctx, http.MethodGet, s.base+"/logs/stream/b", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.Contains(line, "sim") || strings.HasPrefix(line, "[") {
		t.Errorf("/logs/stream/b first line = %q, %v", line, err)
	}
}
