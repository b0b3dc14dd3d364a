package proxy

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// trickle writes the body's head, then one byte every gap until the
// request ends (the pipe is closed); gap 0 writes nothing more (a stall).
func trickle(pw *io.PipeWriter, head string, gap time.Duration, stop <-chan struct{}) {
	if _, err := pw.Write([]byte(head)); err != nil {
		return
	}
	if gap == 0 {
		<-stop
		return
	}
	t := time.NewTicker(gap)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if _, err := pw.Write([]byte(" ")); err != nil {
				return
			}
		}
	}
}

// TestBody_SlowBodyCutWith408: a request body that stalls, or trickles
// slower than BodyMinRate, ends with a 408 in OpenAI's shape instead of
// holding its connection and handler for ever (issue 27, a body at one
// byte a second).
func TestBody_SlowBodyCutWith408(t *testing.T) {
	tests := []struct {
		name   string
		gap    time.Duration // between bytes; 0: none after the head
		length int64         // the Content-Length sent; 0: chunked
	}{
		{"stalled", 0, 0},
		{"a byte every 20ms, under 100 B/s", 20 * time.Millisecond, 0},
		// With a Content-Length the server would read the rest of the
		// body before answering: the 408 never came.
		{"stalled, with a Content-Length", 0, 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, envOpts{bodyIdle: 100 * time.Millisecond, bodyRate: 100})
			pr, pw := io.Pipe()
			stop := make(chan struct{})
			go trickle(pw, `{"model":"a","messages":[`, tt.gap, stop)
			defer func() { close(stop); pw.Close() }()
			// A 408 that never comes fails the test, not hangs it.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.ts.URL+"/v1/chat/completions", pr)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.ContentLength = tt.length
			resp, err := e.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusRequestTimeout {
				t.Fatalf("status %d, want 408: %s", resp.StatusCode, b)
			}
			if oe := openAIError(t, b); oe.Code != "request_timeout" || oe.Type != "invalid_request_error" {
				t.Errorf("error %+v", oe)
			}
		})
	}
}

// TestBody_ProgressingUploadNotCut: a large body that keeps arriving is
// read whole, however long it takes past the idle timeout, and the
// deadline is gone once it is read: a request that then waits for its
// model longer than the idle timeout is served.
func TestBody_ProgressingUploadNotCut(t *testing.T) {
	const idle = 100 * time.Millisecond
	e := newEnv(t, envOpts{bodyIdle: idle, bodyRate: 100})
	open := e.world.gate("a")
	pr, pw := io.Pipe()
	pad := strings.Repeat("x", 64<<10)
	go func() {
		// 1 MiB in 64 KiB writes: far above 100 B/s.
		pw.Write([]byte(`{"model":"a","messages":[],"pad":"`))
		for range 16 {
			if _, err := pw.Write([]byte(pad)); err != nil {
				return
			}
		}
		pw.Write([]byte(`"}`))
		pw.Close()
	}()
	req, err := http.NewRequest(http.MethodPost, e.ts.URL+"/v1/chat/completions", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	type result struct {
		resp *http.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := e.client.Do(req)
		done <- result{resp, err}
	}()
	e.world.expect(t, "start a") // the body was read; the request waits for a
	// Nothing can be awaited here: the test shows that a deadline does
	// not fire, so it lets several idle timeouts pass.
	time.Sleep(3 * idle)
	open()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.resp.Body.Close()
	b, _ := io.ReadAll(r.resp.Body)
	if r.resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, want 200: %.300s", r.resp.StatusCode, b)
	}
	if !strings.Contains(string(b), `"server":"a"`) {
		t.Errorf("not a's echo: %.300s", b)
	}
}
