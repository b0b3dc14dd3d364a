package proxy

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// DefaultBodyIdleTimeout is Config.BodyIdleTimeout when zero: a request
// body may go 10 s without a byte, and has 10 s before BodyMinRate
// applies.
const DefaultBodyIdleTimeout = 10 * time.Second

// DefaultBodyMinRate is Config.BodyMinRate when zero: 1 KiB/s, averaged
// from the request's start, past the first BodyIdleTimeout. A 32 MiB body
// may take 9 hours at it; a body trickled at a byte a second is cut after
// about 10 s.
const DefaultBodyMinRate = 1 << 10

// bodyDeadline wraps a request body so that each Read has a deadline on
// the client's connection (http.ResponseController): the earlier of idle
// after now and the time the bytes so far buy at minRate (start + idle +
// n/minRate). A client that stalls, or trickles slower than minRate, gets
// os.ErrDeadlineExceeded (bodyTimedOut); one that uploads a large body
// at any reasonable rate is never cut. Done clears the deadline, so it
// cannot end the connection while the request waits for its model.
type bodyDeadline struct {
	body    io.Reader
	rc      *http.ResponseController
	start   time.Time
	idle    time.Duration
	minRate int64 // bytes per second; 0: no rate, only idle
	n       int64 // bytes read so far
}

// newBodyDeadline wraps body, or returns nil when idle is negative (no
// deadline).
func newBodyDeadline(w http.ResponseWriter, body io.Reader, idle time.Duration, minRate int64) *bodyDeadline {
	if idle < 0 {
		return nil
	}
	return &bodyDeadline{body: body, rc: http.NewResponseController(w), start: time.Now(), idle: idle, minRate: minRate}
}

func (b *bodyDeadline) Read(p []byte) (int, error) {
	d := time.Now().Add(b.idle)
	if b.minRate > 0 {
		if r := b.start.Add(b.idle + time.Duration(float64(b.n)/float64(b.minRate)*float64(time.Second))); r.Before(d) {
			d = r
		}
	}
	// A writer that cannot take a deadline (not a connection's) reads
	// without one.
	_ = b.rc.SetReadDeadline(d)
	n, err := b.body.Read(p)
	b.n += int64(n)
	return n, err
}

// done clears the deadline.
func (b *bodyDeadline) done() { _ = b.rc.SetReadDeadline(time.Time{}) }

// bodyTimedOut is the 408 of a body cut by its deadline, when err is
// one; nil otherwise.
func (s *Server) bodyTimedOut(err error) *apiError {
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return nil
	}
	return &apiError{status: http.StatusRequestTimeout, code: "request_timeout",
		msg: fmt.Sprintf("the request body stalled or arrived slower than %d bytes/s (past the first %s): cut", s.cfg.BodyMinRate, s.cfg.BodyIdleTimeout)}
}
