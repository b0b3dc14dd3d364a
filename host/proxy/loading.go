package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/loadout-dev/loadout/host/router"
)

// keepAliveInterval is how often a waiting loading-state stream sends an
// SSE comment, so idle-timeouts between client and proxy do not cut a long
// model load.
const keepAliveInterval = 5 * time.Second

// acquireShowingProgress is Acquire for a streaming chat completion with
// the loading state on. If the request has to wait (the router reports a
// queue position or a load), the SSE response starts at once and each
// change of position becomes a progress chunk; the caller then proxies the
// upstream's stream into the same response (ex.sse is set) or sends the
// error as an SSE event.
func (s *Server) acquireShowingProgress(w http.ResponseWriter, r *http.Request, req router.Request, requested string) (*router.Grant, error) {
	ex := exchangeOf(r)
	progress := make(chan router.Progress, 1)
	req.Progress = progress
	type result struct {
		grant *router.Grant
		err   error
	}
	done := make(chan result, 1)
	go func() {
		g, err := s.router.Acquire(r.Context(), req)
		done <- result{g, err}
	}()
	var keepAlive <-chan time.Time
	for {
		select {
		case res := <-done:
			return res.grant, res.err
		case p := <-progress:
			if r.Context().Err() != nil || s.inflight.aborting() {
				// Aborted or the client left: the answer is the error
				// that Acquire returns next, not more progress (a load
				// that the end of another aborted request let start —
				// Abort marks itself before it cancels the first
				// request, so such a load is seen here even while this
				// request's own cancel is still to come).
				continue
			}
			if ex.sse == nil {
				ex.sse = startLoadingStream(w, ex.id, requested)
				t := time.NewTicker(keepAliveInterval)
				defer t.Stop()
				keepAlive = t.C
			}
			ex.sse.sendProgress(p)
		case <-keepAlive:
			ex.sse.comment("waiting")
		}
	}
}

// loadingStream is a streaming chat completion's response started early by
// the loading state: SSE headers sent, progress chunks written, and later
// the upstream's stream or an error event.
type loadingStream struct {
	w       http.ResponseWriter
	id      string // the chunks' completion id
	model   string // the model name the client asked for
	created int64
	last    router.Progress
	sent    int // progress chunks sent
}

func startLoadingStream(w http.ResponseWriter, requestID, model string) *loadingStream {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx in front: do not buffer
	w.WriteHeader(http.StatusOK)
	ls := &loadingStream{w: w, id: "chatcmpl-loadout-" + requestID, model: model, created: time.Now().Unix()}
	ls.flush()
	return ls
}

// progressText is the line a client shows for a waiting request.
func progressText(p router.Progress) string {
	if p.Position > 0 {
		return fmt.Sprintf("queued: position %d\n", p.Position)
	}
	return fmt.Sprintf("loading model %s…\n", p.Model)
}

type chunk struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []chunkChoice `json:"choices"`
}

type chunkChoice struct {
	Index        int        `json:"index"`
	Delta        chunkDelta `json:"delta"`
	FinishReason *string    `json:"finish_reason"`
}

type chunkDelta struct {
	Role             string `json:"role,omitempty"`
	ReasoningContent string `json:"reasoning_content"`
}

// sendProgress writes p as a chat.completion.chunk whose delta carries the
// progress line as reasoning_content (llama-swap's format), unless it
// repeats the last one.
func (ls *loadingStream) sendProgress(p router.Progress) {
	if ls.sent > 0 && p == ls.last {
		return
	}
	c := chunk{ID: ls.id, Object: "chat.completion.chunk", Created: ls.created, Model: ls.model,
		Choices: []chunkChoice{{Delta: chunkDelta{ReasoningContent: progressText(p)}}}}
	if ls.sent == 0 {
		c.Choices[0].Delta.Role = "assistant"
	}
	ls.last = p
	ls.sent++
	b, err := json.Marshal(c)
	if err != nil { // only strings and numbers
		panic(err)
	}
	ls.write("data: ", string(b), "\n\n")
}

// sendError ends the stream with an OpenAI error event.
func (ls *loadingStream) sendError(e *apiError) {
	_, _ = ls.w.Write(sseErrorEvent(e, shapeOpenAI))
	ls.flush()
}

func (ls *loadingStream) comment(text string) { ls.write(": ", text, "\n\n") }

func (ls *loadingStream) write(parts ...string) {
	for _, p := range parts {
		if _, err := ls.w.Write([]byte(p)); err != nil {
			return // the client left; the request's context ends the wait
		}
	}
	ls.flush()
}

func (ls *loadingStream) flush() { _ = http.NewResponseController(ls.w).Flush() }
