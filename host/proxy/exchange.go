package proxy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/host/peers"
	"github.com/loadout-dev/loadout/host/router"
)

// statusClientGone is the status logged and counted for a request whose
// client left before its response was done (nginx's 499). It is never
// written: nobody is there to read it.
const statusClientGone = 499

// codeClientGone marks the apiError of a client that left: writeError
// records it and writes nothing. (A request cancelled through the API
// also has status 499, and its client is told.)
const codeClientGone = "client_gone"

type exchangeKey struct{}

// exchange is one request's state, from ServeHTTP to its log line. It is
// also the http.ResponseWriter handlers write to, so it sees the status.
// Only the request's own goroutine touches it (the Acquire goroutine of a
// loading-state request reports through a channel).
type exchange struct {
	http.ResponseWriter
	start time.Time
	id    string     // request id (X-Request-Id)
	seq   uint64     // RequestSummary.Seq: unique in this server's run
	path  string     // the path as it came (/upstream rewrites r.URL)
	shape errorShape // the error format of the path's API (shapeOf)

	status    int  // status written, 0 until then
	completed bool // the handler returned without panicking

	inference bool   // a model endpoint: counted in metrics
	model     string // resolved model id (a peer's model: PEER/MODEL), "" until known
	// keepAlive is the TTL the request gives its model (router.Request.TTL:
	// Ollama's keep_alive); nil for none.
	keepAlive *time.Duration
	// timeouts bound the model's upstream connections (its catalog
	// entry's Timeouts); nil: config.DefaultTimeouts.
	timeouts *config.Timeouts
	// peer is where the request was forwarded, when a peer serves it.
	peer *peers.Target

	// logical is the request's real outcome when it differs from what was
	// written: an error sent as an SSE event after a 200, or a client that
	// left (statusClientGone).
	logical int
	errMsg  string // why it failed, for the log line
	// serving is, while the request is proxied to a model, the names its
	// grant answers to (the model asked for, the replica serving it):
	// what a forced unload cuts (inflight.cut, on another goroutine).
	serving atomic.Pointer[[]string]

	sse *loadingStream // the early SSE response, once started

	// streamDone: the upstream's event stream sent its final
	// "data: [DONE]" (the OpenAI terminator), so a client that leaves
	// after it received the whole response and is not counted as gone.
	streamDone bool
	// Set once the router granted the request (serve): what the request
	// asked for, how long it waited, and what its response's usage meter
	// saw, for metrics and its summary event.
	req      router.Request
	replica  string // the replica that serves it, when its model has replicas
	waited   time.Duration
	loadWait time.Duration // the part of waited its model was loading
	woke     bool          // that load was a wake (router.Grant.Woke)
	usage    *usage
	// retryRefused: serve grants the request again if the upstream
	// refuses the connection, or loses it before answering
	// (grantAgain; upstreamFailed then sets refused and writes nothing).
	retryRefused, refused bool
	// grant is the request's grant while it is proxied to a model's
	// server; idle watches its response's body (liveness.go).
	grant *router.Grant
	idle  *idleWatch
	// answered: the upstream of the current attempt sent a response
	// byte; unwritten: writing the current attempt's request failed, so
	// no server read it whole (both set from the transport's goroutine);
	// regranted: a lost connection was already granted again once.
	answered  atomic.Bool
	unwritten atomic.Bool
	regranted bool
	// answerTimer bounds a forwarded request's wait for its peer's answer
	// (guardUpstream); stream is the request's "stream": true, which
	// says what a peer's 200 must be (answer.go).
	answerTimer *time.Timer
	stream      bool

	// writeIdle bounds a write to the client (Config.StreamIdle; 0:
	// none): see Write. writeBy is the write deadline set last (zero:
	// none set), writing is set while a write or flush is under way (the
	// idle watch reads it from its timer), and clientStuck says a write
	// failed at its deadline.
	writeIdle   time.Duration
	writeBy     time.Time
	writing     atomic.Bool
	clientStuck bool

	// What an inference body said about its size, read only when
	// Config.OnRequestStart is set (estimate.go).
	estimate bodyEstimate
	// capture keeps the request and its response while capture is on
	// (captures.go).
	capture *capturing
}

func exchangeOf(r *http.Request) *exchange {
	ex, _ := r.Context().Value(exchangeKey{}).(*exchange)
	if ex == nil {
		// A handler called outside ServeHTTP (never in production).
		ex = &exchange{start: time.Now()}
	}
	return ex
}

// fail records the request's outcome for the log line and metrics.
func (ex *exchange) fail(status int, msg string) {
	ex.logical, ex.errMsg = status, msg
}

// streamFailed records, as the request's failure, the error its model
// server reported inside a stream begun under a 200 (usage.streamErr):
// its code when that is an HTTP error status, else 502, as an upstream
// that failed mid-stream. A failure recorded first stands.
func (ex *exchange) streamFailed() {
	if u := ex.usage; u != nil && u.streamErr != "" && ex.logical == 0 {
		ex.fail(cmp.Or(u.streamStatus, http.StatusBadGateway), fmt.Sprintf("model %s: its server reported an error mid-stream: %s", ex.model, u.streamErr))
	}
}

// outcome is the status to log and count.
func (ex *exchange) outcome() int {
	switch {
	case ex.logical != 0:
		return ex.logical
	case ex.status != 0:
		return ex.status
	case !ex.completed:
		return http.StatusInternalServerError
	default:
		return http.StatusOK
	}
}

func (ex *exchange) WriteHeader(code int) {
	if ex.status == 0 && code >= 200 {
		ex.status = code
	}
	ex.ResponseWriter.WriteHeader(code)
}

// Write writes to the client. A client that stops reading (a stopped
// process, a wedged proxy in between) would block the write, and with it
// the response's model, busy, for as long as its connection lives: each
// write has a deadline (writeIdle from when it was set; refreshed once
// half of it has passed, so a write costs no syscall), and a write that
// fails at it ends the response as a client gone (statusClientGone).
func (ex *exchange) Write(p []byte) (int, error) {
	if ex.status == 0 {
		ex.status = http.StatusOK
	}
	if ex.capture != nil {
		ex.capture.write(p)
	}
	ex.beginWrite()
	n, err := ex.ResponseWriter.Write(p)
	ex.endWrite(err)
	return n, err
}

// FlushError flushes the response to the client (httputil.ReverseProxy
// flushes SSE through http.ResponseController, which finds this), under
// the same deadline as Write.
func (ex *exchange) FlushError() error {
	if ex.status == 0 {
		ex.status = http.StatusOK
	}
	ex.beginWrite()
	err := http.NewResponseController(ex.ResponseWriter).Flush()
	ex.endWrite(err)
	return err
}

// beginWrite marks a write under way and keeps its deadline at least
// writeIdle/2 ahead.
func (ex *exchange) beginWrite() {
	if ex.writeIdle <= 0 {
		return
	}
	ex.writing.Store(true)
	if now := time.Now(); ex.writeBy.Sub(now) < ex.writeIdle/2 {
		ex.writeBy = now.Add(ex.writeIdle)
		// A writer that cannot take a deadline (not a connection's)
		// writes without one.
		_ = http.NewResponseController(ex.ResponseWriter).SetWriteDeadline(ex.writeBy)
	}
}

// endWrite marks the write done, and notes one its deadline ended.
func (ex *exchange) endWrite(err error) {
	if ex.writeIdle <= 0 {
		return
	}
	ex.writing.Store(false)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		ex.clientStuck = true
	}
}

// clearWriteDeadline lifts the write deadline when the request is done, so
// that it cannot end the next response on a kept-alive connection.
func (ex *exchange) clearWriteDeadline() {
	if !ex.writeBy.IsZero() {
		_ = http.NewResponseController(ex.ResponseWriter).SetWriteDeadline(time.Time{})
	}
}

// Flush implements http.Flusher for handlers that type-assert it.
func (ex *exchange) Flush() { _ = ex.FlushError() }

// Unwrap lets http.ResponseController reach the connection (hijacking for
// upgraded /upstream connections, deadlines).
func (ex *exchange) Unwrap() http.ResponseWriter { return ex.ResponseWriter }

// clientGone reports whether the request's client has left: its context
// was cancelled with no cause given. net/http gives none when the
// connection closes; each of the proxy's own ends of a request gives its
// cause (endedError's: an Abort or cancel, a stall, an answer timeout, a
// peer's hang).
func clientGone(ctx context.Context) bool {
	return ctx.Err() == context.Canceled && context.Cause(ctx) == context.Canceled
}
