package proxy

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loadout-dev/loadout/host/config"
)

// An upstream that stops producing in the middle of a response — a model
// server wedged in a GPU call, a stopped process, a peer whose inference
// hangs — would hold its client for as long as the client waits. Once a
// response's body has started, every byte restarts its idle clock; a body
// that sends nothing for Config.StreamIdle is ended: an SSE stream with an
// error event, any other body cut, the request counted 502, and the
// server reported to the run loop as hung (router.Grant.Stalled) or the
// peer as failed. The time before the first byte is not held to it: a long
// prompt's prefill sends nothing, and the run loop's health probes cover
// that time (host/router liveness.go). For a peer, which the run loop does
// not probe, that time is bounded by the peer's timeouts.responseHeader
// instead (guardUpstream's answer deadline).
//
// The client's end is held to the same limit: a write to a client that
// reads nothing fails at its deadline (exchange.Write) and the request
// ends as a client gone, so a stopped client cannot keep its model busy,
// and time spent waiting on the client is not counted as the upstream's
// idleness (idleWatch.writing).

// DefaultStreamIdle is Config.StreamIdle's default: far above any gap
// between a working server's tokens, even a batch preempted and resumed.
const DefaultStreamIdle = 2 * time.Minute

// stallError is the cause a stalled response's upstream request is
// cancelled with.
type stallError struct{ idle time.Duration }

func (e *stallError) Error() string {
	return fmt.Sprintf("no bytes from the upstream for %s after its response began", e.idle)
}

// idleWatch cancels a response's upstream request once its body has sent
// nothing for limit. Reads only store the time; one timer per response
// checks it, so the warm path pays no timer reset per read.
type idleWatch struct {
	limit  time.Duration
	cancel context.CancelCauseFunc
	last   atomic.Int64 // UnixNano of the last bytes read; 0 before the first
	// writing is the exchange's: set while the proxy writes to the
	// client. Time spent so is the client's, not the upstream's idleness
	// (a client that stopped reading stops the reads too): the write's
	// own deadline bounds it (exchange.Write).
	writing *atomic.Bool

	mu    sync.Mutex // guards timer: set on the reading goroutine, reset on the timer's
	timer *time.Timer
}

// guardUpstream returns r with a context the stream-idle watch can cancel,
// and the function that releases it. The watch starts with the body's
// first byte (responseGuard). answer, when positive, bounds the wait for
// the response's headers and first body byte (a peer's
// timeouts.responseHeader: a request forwarded to a peer whose inference
// hangs before it answers); upstreamResponded ends that wait
// (exchange.answerBegan).
func (s *Server) guardUpstream(r *http.Request, answer time.Duration) (*http.Request, func()) {
	limit := s.streamIdle
	if limit <= 0 && answer <= 0 {
		return r, func() {}
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	ex := exchangeOf(r)
	if limit > 0 {
		ex.idle = &idleWatch{limit: limit, cancel: cancel, writing: &ex.writing}
	}
	if answer > 0 {
		ex.answerTimer = time.AfterFunc(answer, func() { cancel(&answerTimeoutError{limit: answer}) })
	}
	return r.WithContext(ctx), func() {
		if w := ex.idle; w != nil {
			w.stop()
		}
		ex.answerBegan()
		cancel(nil)
	}
}

// answerTimeoutError is the cause a forwarded request is cancelled with
// when its peer sent no response headers, or no first byte of its body,
// within its timeouts.responseHeader.
type answerTimeoutError struct{ limit time.Duration }

func (e *answerTimeoutError) Error() string {
	return fmt.Sprintf("no answer within %s (timeouts.responseHeader: response headers and the body's first byte)", e.limit)
}

// answerLimit is the per-request bound on an answer's start of a model's
// or a peer's timeouts (0: none).
func answerLimit(t *config.Timeouts) time.Duration {
	if t == nil {
		return 0
	}
	return t.ResponseHeader
}

// answerLate is the error of a request whose answer did not begin within
// its timeouts.responseHeader: a 504, from a model server (llama-swap's
// responseHeader) or a peer (which it counts against).
func (s *Server) answerLate(ex *exchange, at *answerTimeoutError) *apiError {
	if ex.peer != nil {
		return peerFailed(ex.peer, "request failed", at)
	}
	return &apiError{status: http.StatusGatewayTimeout, code: "upstream_timeout",
		msg: fmt.Sprintf("model %s: %v", ex.model, at)}
}

// answerBegan stops the answer timer: the response began (or the
// request is done).
func (ex *exchange) answerBegan() {
	if ex.answerTimer != nil {
		ex.answerTimer.Stop()
	}
}

// read notes that bytes arrived, arming the timer at the first.
func (w *idleWatch) read() {
	now := time.Now().UnixNano()
	if w.last.Swap(now) == 0 {
		w.mu.Lock()
		w.timer = time.AfterFunc(w.limit, w.check)
		w.mu.Unlock()
	}
}

// stop ends the watch.
func (w *idleWatch) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer != nil {
		w.timer.Stop()
	}
}

// check runs when the timer fires: cancel if nothing came for limit,
// else wait out the rest.
func (w *idleWatch) check() {
	now := time.Now().UnixNano()
	if w.writing.Load() {
		w.last.Store(now) // waiting on the client: the upstream's clock starts again
	}
	since := time.Duration(now - w.last.Load())
	if since < w.limit {
		w.mu.Lock()
		w.timer.Reset(w.limit - since)
		w.mu.Unlock()
		return
	}
	w.cancel(&stallError{idle: w.limit})
}

// stalled is the error of a response the watch ended, reported to the run
// loop (a model's server) or the peer set (a peer) as it is made.
func (s *Server) stalled(ex *exchange, se *stallError) *apiError {
	if ex.peer != nil {
		return peerFailed(ex.peer, "stalled mid-response", se)
	}
	if ex.grant != nil {
		ex.grant.Stalled(se.Error())
	}
	return &apiError{status: http.StatusBadGateway, code: "upstream_error",
		msg: fmt.Sprintf("model %s: %v: the server is taken as hung and restarted", ex.model, se)}
}
