package simserver_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	simserver "github.com/loadout-dev/loadout/backends/sim/server"
)

// The seed acceptance of continuous batching against the real server
// (issue 11, item 7), over real HTTP on 127.0.0.1; the same four claims
// hold in virtual time in host/sim's TestRun_ContinuousBatching. The
// machine is small and shared, so the claims are checked as orderings and
// ratios with wide margins, never as exact times; those that rest on wall
// time get three tries.

// token is one streamed content chunk and when the client read it.
type token struct {
	piece string
	at    time.Time
}

// streamTokens sends a streamed chat request of n tokens and calls each
// for every content chunk as it arrives; it returns when the stream ends.
// It may run on any goroutine: it reports with t.Error.
func streamTokens(t *testing.T, url, prompt string, n int, each func(token)) {
	b, _ := json.Marshal(chatBody(prompt, n, true))
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Errorf("stream %q: %v", prompt, err)
		return
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	got := 0
	for sc.Scan() {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || d == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct{ Delta struct{ Content string } }
		}
		if err := json.Unmarshal([]byte(d), &c); err != nil {
			t.Errorf("stream %q: bad chunk %q: %v", prompt, d, err)
			return
		}
		if len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
			got++
			each(token{c.Choices[0].Delta.Content, time.Now()})
		}
	}
	if got != n {
		t.Errorf("stream %q: %d tokens, want %d", prompt, got, n)
	}
}

// chatText is chat for any goroutine: the text of a non-streamed chat
// request, or an error.
func chatText(url, prompt string, n int) (string, error) {
	b, _ := json.Marshal(chatBody(prompt, n, false))
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var out struct {
		Choices []struct{ Message struct{ Content string } }
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK || len(out.Choices) != 1 {
		return "", fmt.Errorf("chat %q: status %d, %v", prompt, resp.StatusCode, err)
	}
	return out.Choices[0].Message.Content, nil
}

// collect is streamTokens returning the tokens.
func collect(t *testing.T, url, prompt string, n int) []token {
	var out []token
	streamTokens(t, url, prompt, n, func(k token) { out = append(out, k) })
	return out
}

// retry runs try up to three times, until it returns "" (success);
// otherwise the last reason fails the test.
func retry(t *testing.T, try func() string) {
	t.Helper()
	var why string
	for range 3 {
		if why = try(); why == "" {
			return
		}
		t.Logf("try failed: %s", why)
	}
	t.Fatal(why)
}

func TestServer_ThreeConcurrentStreamsInterleave(t *testing.T) {
	const (
		tokens = 10
		rate   = 50 // a 20 ms step: 200 ms alone
	)
	url := startLoaded(t, simserver.Options{TokensPerSecond: rate, MaxBatch: 8})
	// A batch of three steps 1 + 0.05·2 times as long as a lone sequence.
	const factor = 1.1
	retry(t, func() string {
		begin := time.Now()
		collect(t, url, "alone", tokens)
		single := time.Since(begin)

		streams := make([][]token, 3)
		begin = time.Now()
		var wg sync.WaitGroup
		for i := range streams {
			wg.Go(func() { streams[i] = collect(t, url, fmt.Sprintf("stream %d", i), tokens) })
		}
		wg.Wait()
		all := time.Since(begin)

		// Merged by arrival, one after another would switch streams
		// twice; decoding together, they take turns all along.
		type labelled struct {
			stream int
			at     time.Time
		}
		var merged []labelled
		var lastFirst, firstLast time.Time
		for i, s := range streams {
			for _, k := range s {
				merged = append(merged, labelled{i, k.at})
			}
			if first := s[0].at; first.After(lastFirst) {
				lastFirst = first
			}
			if last := s[len(s)-1].at; firstLast.IsZero() || last.Before(firstLast) {
				firstLast = last
			}
		}
		slices.SortStableFunc(merged, func(a, b labelled) int { return a.at.Compare(b.at) })
		switches := 0
		for i := 1; i < len(merged); i++ {
			if merged[i].stream != merged[i-1].stream {
				switches++
			}
		}
		ratio := float64(all) / float64(single)
		t.Logf("alone %s; three together %s: ×%.2f (the step factor is ×%.2f, one after another ×3); %d stream switches in %d tokens",
			single.Round(time.Millisecond), all.Round(time.Millisecond), ratio, factor, switches, len(merged))
		switch {
		case !lastFirst.Before(firstLast):
			return "a stream's first token came after another's last: they did not decode together"
		case switches < tokens:
			return fmt.Sprintf("only %d switches between streams in %d tokens: they did not interleave", switches, len(merged))
		case ratio > 2:
			return fmt.Sprintf("three together took ×%.2f a lone request's time, want about ×%.2f (and well under ×3)", ratio, factor)
		}
		return ""
	})
}

func TestServer_RequestTwoSecondsIntoAnotherStartsAtOnce(t *testing.T) {
	const (
		rate  = 50 // a 20 ms step
		long  = 130
		after = 2 * rate // the long request's tokens in its first two seconds
		short = 3
	)
	url := startLoaded(t, simserver.Options{TokensPerSecond: rate})
	longTokens := make(chan token, long)
	go func() {
		defer close(longTokens)
		streamTokens(t, url, "long", long, func(k token) { longTokens <- k })
	}()
	// Wait for the long request's 100th token: two seconds into its
	// generation, with 30 tokens (600 ms) still to go.
	for range after {
		if _, ok := <-longTokens; !ok {
			t.Fatal("the long stream ended early")
		}
	}
	sent := time.Now()
	shortTokens := collect(t, url, "short", short)

	// Tokens of the long request the short one's first token came after:
	// joining at the next step, that is a step or two; waiting for the
	// long one to finish, 30.
	var behind int
	var longLast time.Time
	for k := range longTokens {
		if k.at.After(sent) && k.at.Before(shortTokens[0].at) {
			behind++
		}
		longLast = k.at
	}
	t.Logf("sent 2 s into a %d-token generation: first token after %s, behind %d of the long request's tokens",
		long, shortTokens[0].at.Sub(sent).Round(time.Millisecond), behind)
	if behind > 6 {
		t.Errorf("the short request's first token came after %d more tokens of the long one; it should join the batch at the next step", behind)
	}
	if end := shortTokens[len(shortTokens)-1].at; !end.Before(longLast) {
		t.Errorf("the short request ended after the long one: it waited instead of joining")
	}
}

func TestServer_ConcurrentOutputsEqualAlone(t *testing.T) {
	// max_batch 2: the four requests also wait for a slot and join a
	// running batch midway.
	url := startLoaded(t, simserver.Options{TokensPerSecond: 2000, MaxBatch: 2, Seed: 11})
	prompts := []struct {
		text   string
		tokens int
	}{{"what is a GPU", 5}, {"tell me a story", 17}, {"hello", 9}, {"the same prompt twice?", 13}}
	alone := make([]string, len(prompts))
	for i, p := range prompts {
		alone[i], _ = chat(t, url, p.text, p.tokens)
	}
	together := make([]string, 2*len(prompts))
	var wg sync.WaitGroup
	for i, p := range prompts {
		wg.Go(func() {
			var err error
			if together[2*i], err = chatText(url, p.text, p.tokens); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() {
			var b strings.Builder
			for _, k := range collect(t, url, p.text, p.tokens) {
				b.WriteString(k.piece)
			}
			together[2*i+1] = b.String()
		})
	}
	wg.Wait()
	for i, p := range prompts {
		for j, got := range together[2*i : 2*i+2] {
			if got != alone[i] {
				t.Errorf("%q concurrently (streamed: %v) = %q, alone %q", p.text, j == 1, got, alone[i])
			}
		}
	}
}

func TestServer_ThroughputEightRequestsMaxBatch4(t *testing.T) {
	const (
		n      = 8
		tokens = 20
		rate   = 100 // a 10 ms step: 200 ms a request alone
	)
	url := startLoaded(t, simserver.Options{TokensPerSecond: rate, MaxBatch: 4})
	retry(t, func() string {
		var serial time.Duration
		for i := range n {
			begin := time.Now()
			chat(t, url, fmt.Sprintf("request %d", i), tokens)
			serial += time.Since(begin)
		}
		before := stats(t, url).Steps
		begin := time.Now()
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				if _, err := chatText(url, fmt.Sprintf("request %d", i), tokens); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		batched := time.Since(begin)
		steps := stats(t, url).Steps - before
		total := float64(n * tokens)
		t.Logf("%d × %d tokens at %d tokens/s, max_batch %d: one after another %s (%.0f tokens/s), together %s in %d steps (%.0f tokens/s): %.2f× the serial throughput",
			n, tokens, rate, 4, serial.Round(time.Millisecond), total/serial.Seconds(),
			batched.Round(time.Millisecond), steps, total/batched.Seconds(), serial.Seconds()/batched.Seconds())
		if speedup := serial.Seconds() / batched.Seconds(); speedup <= 2 {
			return fmt.Sprintf("%d concurrent requests made %.2f× the serial throughput, want more than 2×", n, speedup)
		}
		return ""
	})
}
