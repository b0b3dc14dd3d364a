package proxy

import (
	"context"
	"errors"
	"net/http"
	"sync"

	"github.com/loadout-dev/loadout/sdk"
)

// Abort ends every request the server is handling, for a shutdown whose
// deadline has passed: http.Server.Shutdown waits for requests in flight
// but never ends them. reason says why (e.g. "the shutdown timeout of 2s
// ran out"); clients read "loadout is shutting down: " and the reason.
//
// Each request's context is cancelled with that cause, and the handler
// that notices it answers as HTTP still allows:
//
//   - waiting for a model, or for its upstream's response headers: 503 with
//     an OpenAI-shaped error body (code "unavailable", Retry-After: 1);
//   - an SSE stream under way (the upstream's, or a loading-state stream):
//     a last event `data: {"error":{...}}`, then the end of the stream. No
//     `data: [DONE]` follows: [DONE] says the completion finished, and
//     this one did not;
//   - any other response whose headers are out: cut short, which is all
//     HTTP allows once the status is sent.
//
// The upstream request is cancelled with it, so the model server stops
// generating. Every such request is logged and counted with status 503.
// Requests that arrive after Abort are ended at once the same way. Abort
// does not wait for the handlers to return (a second http.Server.Shutdown
// does); it returns how many requests it ended. Only the first reason is
// kept.
func (s *Server) Abort(reason string) int {
	return s.inflight.abort(&abortError{reason: reason})
}

// abortError is the cause with which Abort cancels a request's context.
type abortError struct{ reason string }

func (e *abortError) Error() string { return "loadout is shutting down: " + e.reason }

// abortedBy returns the Abort that ended ctx, or nil when ctx is live or
// ended otherwise (the client left).
func abortedBy(ctx context.Context) *abortError {
	var ae *abortError
	if ctx.Err() == nil || !errors.As(context.Cause(ctx), &ae) {
		return nil
	}
	return ae
}

// abortedError is the answer of a request whose context Abort ended: 503,
// the code of a policy's CodeUnavailable. Nil when Abort did not end ctx.
func abortedError(ctx context.Context) *apiError {
	ae := abortedBy(ctx)
	if ae == nil {
		return nil
	}
	return &apiError{status: http.StatusServiceUnavailable, code: errorCodes[sdk.CodeUnavailable].code, msg: ae.Error()}
}

// inflight is the set of requests being handled, each with the function
// that cancels its context.
type inflight struct {
	mu      sync.Mutex
	cancels map[*exchange]context.CancelCauseFunc
	aborted *abortError // set by abort: later requests are ended at once
}

// add registers a request's cancel function, and cancels it at once when
// Abort has run.
func (f *inflight) add(ex *exchange, cancel context.CancelCauseFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.aborted != nil {
		cancel(f.aborted)
		return
	}
	if f.cancels == nil {
		f.cancels = map[*exchange]context.CancelCauseFunc{}
	}
	f.cancels[ex] = cancel
}

// remove forgets a request whose handler has returned.
func (f *inflight) remove(ex *exchange) {
	f.mu.Lock()
	delete(f.cancels, ex)
	f.mu.Unlock()
}

func (f *inflight) abort(cause *abortError) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.aborted == nil {
		f.aborted = cause
	}
	for _, cancel := range f.cancels {
		cancel(f.aborted)
	}
	n := len(f.cancels)
	clear(f.cancels)
	return n
}
