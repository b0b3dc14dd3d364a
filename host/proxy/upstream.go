package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"

	"github.com/loadout-dev/loadout/host/config"
)

// newTransport is a transport to model servers and peers bounded by t's
// connection limits (a model's or a peer's timeouts:, llama-swap's; a zero
// bound is none, and a zero KeepAlive turns TCP keep-alive probes off):
// plain HTTP/1.1 to localhost (or a LAN peer), so keep-alive pools are
// generous, compression is left to client and server, and no environment
// proxy applies. The wait for an answer is not the transport's: a model may
// think long before its first byte; timeouts.responseHeader (per request,
// guardUpstream), the run loop's health probes and the client's context
// bound it.
func newTransport(t config.Timeouts) *http.Transport {
	keepAlive := t.KeepAlive
	if keepAlive == 0 {
		keepAlive = -1 // net.Dialer: negative disables, zero means 15 s
	}
	return &http.Transport{
		Proxy: nil,
		DialContext: (&net.Dialer{
			Timeout:   t.Connect,
			KeepAlive: keepAlive,
		}).DialContext,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       t.IdleConn,
		TLSHandshakeTimeout:   t.TLSHandshake,
		ExpectContinueTimeout: t.ExpectContinue,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
	}
}

// upstreams caches one httputil.ReverseProxy per upstream URL and
// timeouts, and one transport (one keep-alive pool per upstream) per
// distinct timeouts: models that keep the defaults share one, and each
// peer's timeouts get their own.
type upstreams struct {
	s    *Server
	bufs *bufferPool

	mu         sync.RWMutex
	proxies    map[upstreamKey]*httputil.ReverseProxy
	transports map[config.Timeouts]*http.Transport
}

type upstreamKey struct {
	scheme, host, path string
	timeouts           config.Timeouts
}

// closeIdle closes the idle connections of every transport.
func (u *upstreams) closeIdle() {
	u.mu.RLock()
	defer u.mu.RUnlock()
	for _, tr := range u.transports {
		tr.CloseIdleConnections()
	}
}

// maxCachedProxies bounds the cache: model servers get a new port when they
// restart, so old entries are dropped wholesale now and then.
const maxCachedProxies = 256

func newUpstreams(s *Server) *upstreams {
	return &upstreams{
		s:          s,
		bufs:       &bufferPool{},
		proxies:    map[upstreamKey]*httputil.ReverseProxy{},
		transports: map[config.Timeouts]*http.Transport{},
	}
}

// proxy returns the reverse proxy to target bounded by t's connection
// limits (nil: config.DefaultTimeouts). t's ResponseHeader is not the
// transport's: it is bounded per request (answerLimit, guardUpstream), so
// that its error names the limit and it covers the body's first byte.
func (u *upstreams) proxy(target *url.URL, t *config.Timeouts) *httputil.ReverseProxy {
	key := upstreamKey{target.Scheme, target.Host, target.Path, config.DefaultTimeouts}
	if t != nil {
		key.timeouts = *t
	}
	key.timeouts.ResponseHeader = 0
	u.mu.RLock()
	rp := u.proxies[key]
	u.mu.RUnlock()
	if rp != nil {
		return rp
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if rp = u.proxies[key]; rp != nil {
		return rp
	}
	if len(u.proxies) >= maxCachedProxies {
		clear(u.proxies)
	}
	tr := u.transports[key.timeouts]
	if tr == nil {
		tr = newTransport(key.timeouts)
		u.transports[key.timeouts] = tr
	}
	dest := *target
	rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&dest)
			pr.SetXForwarded()
		},
		Transport:      tr,
		FlushInterval:  -1, // SSE and chunked bodies reach the client as they arrive
		BufferPool:     u.bufs,
		ErrorHandler:   u.s.upstreamFailed,
		ModifyResponse: u.s.upstreamResponded,
		ErrorLog:       slog.NewLogLogger(u.s.log.Handler(), slog.LevelWarn),
	}
	u.proxies[key] = rp
	return rp
}

// upstreamFailed is the ReverseProxy's ErrorHandler: no response came from
// the upstream (connection refused, reset before the headers), so nothing
// has been written yet — unless a loading-state stream already started, in
// which case the error goes out as an SSE event.
func (s *Server) upstreamFailed(w http.ResponseWriter, r *http.Request, err error) {
	ex := exchangeOf(r)
	if e := s.endedError(ex, r.Context(), "request failed"); e != nil {
		s.writeError(w, r, e)
		return
	}
	if clientGone(r.Context()) {
		ex.fail(statusClientGone, "client went away while the upstream was answering")
		return
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		s.writeError(w, r, s.tooLarge())
		return
	}
	if ex.peer != nil {
		var bad *badAnswerError
		what := "request failed"
		if errors.As(err, &bad) {
			what = "not an answer"
		}
		s.writeError(w, r, peerFailed(ex.peer, what, err))
		return
	}
	if ex.ended() == "" && ex.grantAgain(err) {
		// Not a server the router killed as hung: a request that
		// reached one may be what hung it, and its client is told.
		ex.refused = true // serve grants it again: nothing was answered, nothing is written
		return
	}
	msg := fmt.Sprintf("model %s: upstream request failed: %v", ex.model, err)
	if why := ex.ended(); why != "" {
		msg = fmt.Sprintf("model %s: its server was killed before it answered (%s)", ex.model, why)
	}
	s.writeError(w, r, &apiError{status: http.StatusBadGateway, code: "upstream_error", msg: msg})
}

// ended is why the router killed the server the exchange's grant went to
// (router.Grant.Ended: a hang), "" when it did not, or for a request
// without a grant (a peer's).
func (ex *exchange) ended() string {
	if ex.grant == nil {
		return ""
	}
	return ex.grant.Ended()
}

// upstreamResponded is the ReverseProxy's ModifyResponse. The body is
// guarded (responseGuard) so that an upstream dying mid-body is recorded
// and, for SSE, ends the client's stream with an error event instead of a
// cut connection. Under a loading-state stream (headers already sent), the
// upstream's response is turned into SSE events: its stream as is, a JSON
// answer as one data event, an error status as an error event. An upgrade
// (101, a WebSocket through /upstream) is left alone: its body is the
// connection.
func (s *Server) upstreamResponded(resp *http.Response) error {
	ex := exchangeOf(resp.Request)
	resp.Header.Del(requestIDHeader) // ours was set already
	if resp.StatusCode == http.StatusSwitchingProtocols {
		ex.answerBegan()
		return nil
	}
	if ex.peer != nil && resp.StatusCode == http.StatusOK && ex.sse == nil {
		if err := checkAnswer(resp, ex.path, ex.stream); err != nil {
			return err // upstreamFailed: a 502 peer_error, or the answer's timeout
		}
	}
	ex.answerBegan()
	if resp.StatusCode == http.StatusOK && ex.usage != nil {
		resp.Body = newUsageMeter(resp.Body, ex.usage, resp.Header.Get("Content-Type"))
	}
	isSSE := isEventStream(resp.Header.Get("Content-Type"))
	if isSSE {
		resp.Header.Set("X-Accel-Buffering", "no") // nginx in front: do not buffer (llama-swap's)
	}
	if ex.sse == nil {
		resp.Body = &responseGuard{s: s, body: resp.Body, ex: ex, req: resp.Request, sse: isSSE, atBoundary: true}
		if isSSE {
			// The guard may append an error event.
			resp.Header.Del("Content-Length")
			resp.ContentLength = -1
		}
		return nil
	}
	resp.Header.Del("Content-Length")
	resp.ContentLength = -1
	switch {
	case resp.StatusCode == http.StatusOK && isSSE:
		resp.Body = &responseGuard{s: s, body: resp.Body, ex: ex, req: resp.Request, sse: true, atBoundary: true}
	case resp.StatusCode == http.StatusOK:
		b, err := readUpstreamBody(resp.Body)
		var c bytes.Buffer
		if err == nil {
			err = json.Compact(&c, b)
		}
		if err != nil {
			e := &apiError{status: http.StatusBadGateway, code: "upstream_error",
				msg: fmt.Sprintf("model %s: the upstream answered a streaming request with an unreadable %s body: %v", ex.model, resp.Header.Get("Content-Type"), err)}
			ex.fail(e.status, e.msg)
			resp.Body = io.NopCloser(bytes.NewReader(sseErrorEvent(e, ex.shape)))
			return nil
		}
		// Not streamed after all: one data event with the whole answer.
		out := make([]byte, 0, c.Len()+24)
		out = append(out, "data: "...)
		out = append(out, c.Bytes()...)
		out = append(out, "\n\ndata: [DONE]\n\n"...)
		resp.Body = io.NopCloser(bytes.NewReader(out))
	default:
		b, _ := readUpstreamBody(resp.Body)
		e := &apiError{status: resp.StatusCode, code: "upstream_error",
			msg: fmt.Sprintf("model %s: upstream answered %d: %s", ex.model, resp.StatusCode, upstreamMessage(b))}
		ex.fail(e.status, e.msg)
		resp.Body = io.NopCloser(bytes.NewReader(sseErrorEvent(e, ex.shape)))
	}
	return nil
}

// errorField is the message of a body's "error" value: an object's
// message (OpenAI's, llama-server's) or a string (Ollama's); "" for none.
func errorField(raw json.RawMessage) string {
	var obj struct {
		Message string `json:"message"`
	}
	var str string
	switch {
	case len(raw) == 0:
	case json.Unmarshal(raw, &obj) == nil && obj.Message != "":
		return obj.Message
	case json.Unmarshal(raw, &str) == nil:
		return str
	}
	return ""
}

// maxUpstreamRewrite bounds an upstream body the proxy reads whole to turn
// it into SSE events.
const maxUpstreamRewrite = 8 << 20

func readUpstreamBody(body io.ReadCloser) ([]byte, error) {
	defer body.Close()
	b, err := io.ReadAll(io.LimitReader(body, maxUpstreamRewrite+1))
	if err == nil && len(b) > maxUpstreamRewrite {
		err = fmt.Errorf("larger than %d bytes", maxUpstreamRewrite)
	}
	return b, err
}

// upstreamMessage is the message of an upstream's error body: the OpenAI
// error's message, a string error, or the text itself.
func upstreamMessage(b []byte) string {
	var oa struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(b, &oa) == nil {
		if msg := errorField(oa.Error); msg != "" {
			return msg
		}
	}
	msg := strings.TrimSpace(string(b))
	if len(msg) > 500 {
		msg = msg[:500] + "…"
	}
	if msg == "" {
		msg = "(empty body)"
	}
	return msg
}

func isEventStream(contentType string) bool {
	mt, _, _ := mime.ParseMediaType(contentType)
	return mt == "text/event-stream"
}

// sseErrorEvent is e as the last event of an SSE stream, in shape's
// format: an OpenAI stream's `data: {"error":…}`, or the Messages API's
// `event: error` with its error object (docs.claude.com, streaming).
func sseErrorEvent(e *apiError, shape errorShape) []byte {
	b := e.body(shape)
	out := make([]byte, 0, len(b)+24)
	if shape == shapeAnthropic {
		out = append(out, "event: error\n"...)
	}
	out = append(out, "data: "...)
	out = append(out, b...)
	return append(out, "\n\n"...)
}

// responseGuard wraps an upstream's response body to catch an upstream
// that fails mid-body (the connection dies, the chunked body breaks off)
// while the client is still there, and a request that Abort ended. The
// failure is recorded for the log line and metrics (502, or Abort's 503). An SSE stream then ends with an error event and a
// clean EOF, so the client reads why instead of a cut connection; any other
// body returns the error, and httputil.ReverseProxy aborts the response
// (the client sees it truncated, which is all HTTP allows once the status
// is out).
type responseGuard struct {
	s    *Server
	body io.ReadCloser
	ex   *exchange
	req  *http.Request
	sse  bool
	// atBoundary: the bytes so far end with a complete SSE event ("\n\n"),
	// or nothing was read yet.
	atBoundary bool
	last       byte // the last byte read
	tail       []byte
	done       bool
	// recent holds the last bytes read, so a "data: [DONE]" split across
	// reads is still seen.
	recent []byte
}

// errKilledMidStream ends a stream its server's kill cut short without an
// error of the connection's own (responseGuard.Read).
var errKilledMidStream = errors.New("the stream ended when its server was killed")

// sseDone is the OpenAI streaming terminator.
var sseDone = []byte("data: [DONE]")

func (g *responseGuard) Read(p []byte) (int, error) {
	if g.tail != nil {
		n := copy(p, g.tail)
		g.tail = g.tail[n:]
		if len(g.tail) == 0 {
			g.tail, g.done = nil, true
		}
		return n, nil
	}
	if g.done {
		return 0, io.EOF
	}
	n, err := g.body.Read(p)
	if n > 0 {
		if g.ex.idle != nil {
			g.ex.idle.read()
		}
		if g.sse {
			g.track(p[:n])
		}
	}
	if err == io.EOF && g.sse && !g.ex.streamDone && g.ex.ended() != "" {
		// A stream framed by its connection's close (neither a length
		// nor chunks) ends cleanly when the router kills a hung server:
		// it did not finish, and the client is told why.
		err = errKilledMidStream
	}
	if err == nil || err == io.EOF {
		return n, err
	}
	e := g.s.endedError(g.ex, g.req.Context(), "failed mid-stream")
	switch {
	case e != nil: // the proxy ended the request (an answer timeout: the timer fired as the answer began)
	case clientGone(g.req.Context()):
		return n, err
	case g.ex.peer != nil:
		e = peerFailed(g.ex.peer, "failed mid-stream", err)
	default:
		e = &apiError{status: http.StatusBadGateway, code: "upstream_error",
			msg: fmt.Sprintf("model %s: upstream failed mid-stream: %v", g.ex.model, err)}
		if why := g.ex.ended(); why != "" {
			e.msg = fmt.Sprintf("model %s: its server was killed mid-answer (%s)", g.ex.model, why)
		}
	}
	g.ex.fail(e.status, e.msg)
	if !g.sse {
		return n, err
	}
	ev := sseErrorEvent(e, g.ex.shape)
	if !g.atBoundary {
		// End the partial event first so the error event stands alone.
		ev = append([]byte("\n\n"), ev...)
	}
	g.tail = ev
	return n, nil
}

func (g *responseGuard) track(b []byte) {
	if !g.ex.streamDone {
		g.recent = append(g.recent, b...)
		if bytes.Contains(g.recent, sseDone) {
			g.ex.streamDone = true
		}
		if k := len(sseDone) - 1; len(g.recent) > k {
			g.recent = append(g.recent[:0], g.recent[len(g.recent)-k:]...)
		}
	}
	switch {
	case len(b) >= 2:
		g.atBoundary = b[len(b)-2] == '\n' && b[len(b)-1] == '\n'
	default:
		g.atBoundary = g.last == '\n' && b[0] == '\n'
	}
	g.last = b[len(b)-1]
}

func (g *responseGuard) Close() error { return g.body.Close() }

// bufferPool recycles ReverseProxy's 32 KiB copy buffers.
type bufferPool struct{ p sync.Pool }

func (bp *bufferPool) Get() []byte {
	if b, ok := bp.p.Get().(*[]byte); ok {
		return *b
	}
	return make([]byte, 32<<10)
}

func (bp *bufferPool) Put(b []byte) { bp.p.Put(&b) }

// dialFailed reports whether err is a failure to connect to the upstream:
// the request was not sent, so granting it again is safe.
func dialFailed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
