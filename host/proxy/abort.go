package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"

	"github.com/loadout-dev/loadout/host/peers"
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
	return s.inflight.abort(shutdownError(reason))
}

// abortError is the cause with which Abort, or a cancel through
// POST /api/inflight/{id}/cancel, cancels a request's context: what its
// client is told (status, OpenAI code, message).
type abortError struct {
	status int
	code   string
	msg    string
}

func (e *abortError) Error() string { return e.msg }

// shutdownError is Abort's cause: 503, the code of a policy's
// CodeUnavailable.
func shutdownError(reason string) *abortError {
	return &abortError{status: http.StatusServiceUnavailable, code: errorCodes[sdk.CodeUnavailable].code,
		msg: "loadout is shutting down: " + reason}
}

// statusCancelled is the status of a request cancelled through
// POST /api/inflight/{id}/cancel: 499, gRPC's CANCELLED over HTTP. A 4xx
// that clients do not retry (the OpenAI and Anthropic SDKs retry 408,
// 409, 429 and 5xx), so a cancelled request stays cancelled.
const statusCancelled = 499

// cancelError is the cause of a request cancelled through
// POST /api/inflight/{id}/cancel.
func cancelError(id string) *abortError {
	return &abortError{status: statusCancelled, code: "request_cancelled",
		msg: fmt.Sprintf("request %s was cancelled (POST /api/inflight/{id}/cancel)", echoed(id))}
}

// abortedBy returns the Abort or cancel that ended ctx, or nil when ctx
// is live or ended otherwise (the client left).
func abortedBy(ctx context.Context) *abortError { return endedBy[*abortError](ctx) }

// endedBy returns the cause of type E that ended ctx (an Abort, a stall,
// an answer timeout, a peer's hang), or E's zero value when ctx is live
// or ended otherwise: the one rule the proxy reads a request's end by.
func endedBy[E error](ctx context.Context) E {
	var e E
	if ctx.Err() != nil {
		errors.As(context.Cause(ctx), &e) // sets e only when it matches
	}
	return e
}

// endedError is the answer to a request that one of the proxy's own
// causes ended, or nil when ctx is live or its client ended it
// (clientGone): an Abort or cancel (its own status), a stream that
// stalled (502, the server taken as hung), an answer that came too late
// (504), a peer found hung (502 peer_error). what says how far the
// request had got, for a peer's message: "request failed" before the
// answer, "failed mid-stream" during it. The one list of those causes:
// clientGone is a cancelled ctx that none of them ended.
func (s *Server) endedError(ex *exchange, ctx context.Context, what string) *apiError {
	if e := abortedError(ctx); e != nil {
		return e
	}
	if se := endedBy[*stallError](ctx); se != nil {
		return s.stalled(ex, se)
	}
	if at := endedBy[*answerTimeoutError](ctx); at != nil {
		return s.answerLate(ex, at)
	}
	if he := endedBy[*peers.HungError](ctx); he != nil && ex.peer != nil {
		return peerFailed(ex.peer, what, he)
	}
	return nil
}

// abortedError is the answer of a request whose context Abort or a
// cancel ended. Nil when neither ended ctx.
func abortedError(ctx context.Context) *apiError {
	ae := abortedBy(ctx)
	if ae == nil {
		return nil
	}
	return &apiError{status: ae.status, code: ae.code, msg: ae.msg}
}

// inflight is the set of requests being handled, each with the function
// that cancels its context.
type inflight struct {
	mu      sync.Mutex
	cancels map[*exchange]context.CancelCauseFunc
	aborted *abortError // set by abort: later requests are ended at once
}

// codeModelUnloaded is the code of a request a forced unload cut.
const codeModelUnloaded = "model_unloaded"

// unloadedError is the cause of a request cut by a forced unload of its
// model: 503 without Retry-After and with X-Should-Retry: false (a
// client's own retry would load the model back at once), and not taken
// for the server's failure — which would be granted again, loading the
// model the operator just stopped.
func unloadedError(model string) *abortError {
	return &abortError{status: http.StatusServiceUnavailable, code: codeModelUnloaded,
		msg: fmt.Sprintf("model %s was unloaded by an operator (a forced unload) while this request was in flight", model)}
}

// cut ends the requests being proxied to any of models (every model when
// none is named) with unloadedError's cause, before a forced unload stops
// their servers, and returns how many it ended.
func (f *inflight) cut(models []string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for ex, cancel := range f.cancels {
		names := ex.serving.Load()
		if names == nil {
			continue // not proxied to a model now
		}
		for _, m := range *names {
			if len(models) == 0 || slices.Contains(models, m) {
				cancel(unloadedError((*names)[0]))
				delete(f.cancels, ex)
				n++
				break
			}
		}
	}
	return n
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

// aborting reports whether Abort has run (or is running): set before any
// request's context is cancelled.
func (f *inflight) aborting() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.aborted != nil
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

// cancel ends the requests in flight whose id is id, except self (the
// cancelling request), with cancelError's cause, and returns how many it
// ended. A request waiting for its model leaves the queue (and never
// triggers a load); one being proxied is cut off from its upstream, which
// stops generating.
func (f *inflight) cancel(id string, self *exchange) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for ex, cancel := range f.cancels {
		if ex.id == id && ex != self {
			cancel(cancelError(id))
			delete(f.cancels, ex)
			n++
		}
	}
	return n
}
