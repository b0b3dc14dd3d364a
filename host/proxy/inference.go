package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/host/router"
)

const requestIDHeader = "X-Request-Id"

// endpoint is how inference treats one model endpoint.
type endpoint struct {
	// path is the route, whose OpenAI schema (schemas) the body is
	// checked against before anything is loaded; "" or a path schemas
	// lacks: none.
	path string
	// chat marks chat completions (/v1/chat/completions and its
	// versionless forms), the one API whose streaming requests may get the
	// loading state.
	chat bool
	// forward, when set, is the path the upstream (or peer) is sent in
	// place of the route's: llama-swap's versionless /v/… routes drop the
	// /v, its /audioapi/… routes the /audioapi (its issue #728).
	forward string
}

// inference handles a model endpoint: find the model, check the body
// against the endpoint's schema, get the model from the router, proxy to
// it.
func (s *Server) inference(ep endpoint) http.HandlerFunc {
	chat, sc := ep.chat, schemas[ep.path]
	return func(w http.ResponseWriter, r *http.Request) {
		ex := exchangeOf(r)
		ex.inference = true
		// The usage meter (and Ollama's translation, which calls this
		// handler) reads the answer as it comes: it must come plain. A
		// client's Accept-Encoding: gzip
		// (httpx and the OpenAI SDK send it) had a server that honours
		// it answer compressed, and the request counted no tokens.
		r.Header.Del("Accept-Encoding")
		body, e := s.readBody(w, r)
		if e != nil {
			s.writeError(w, r, e)
			return
		}
		s.startCapture(ex, r, body)
		mr, e := parseModelRequest(r, body, sc, s.cfg.SessionHeaders)
		if e != nil {
			s.writeError(w, r, e)
			return
		}
		if e := s.applyProfile(&mr); e != nil {
			s.writeError(w, r, e)
			return
		}
		if ep.forward != "" {
			r.URL.Path, r.URL.RawPath = ep.forward, ""
		}
		if sel := s.cfg.Selectors[mr.model]; sel != nil && !s.selectorToPeer(&mr, sel) {
			s.serveSelector(w, r, &mr, body, sel, chat && mr.stream && s.cfg.SendLoadingState)
			return
		}
		entry := s.catalog.Load().lookup(mr.model)
		if t, e := s.routePeer(r, mr.model, entry); e != nil || t != nil {
			if e != nil {
				s.writeError(w, r, e)
				return
			}
			s.forward(w, r, &mr, body, t)
			return
		}
		if entry == nil {
			s.writeError(w, r, s.catalog.Load().unknown(mr.model))
			return
		}
		ex.model, ex.timeouts = entry.ID, entry.Timeouts
		out, err := mr.rewriteBody(r, body, entry)
		if err != nil {
			s.writeError(w, r, badRequest("invalid_body", err.Error()))
			return
		}
		setBody(r, out)
		if s.cfg.OnRequestStart != nil && mr.kind == kindJSON {
			ex.estimate = estimateBody(body)
		}
		req := router.Request{Model: entry.ID, Priority: mr.priority, Client: mr.client, TTL: ex.keepAlive}
		s.serve(w, r, req, mr.model, chat && mr.stream && entry.SendLoadingState, nil)
	}
}

// setBody makes body the request's body, with its length fixed.
func setBody(r *http.Request, body []byte) {
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.TransferEncoding = nil
	r.Header.Del("Transfer-Encoding")
	r.Header.Set("Content-Length", strconv.Itoa(len(body)))
	if len(body) == 0 {
		r.Body = http.NoBody
	}
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
}

// serve acquires the model, proxies the request to its upstream and
// releases the grant when the response is done, even if the proxy panics
// (an aborted stream). requested is the name the client used, for the
// loading-state chunks. bind, when set, is called with each grant's model
// before the request is proxied (a selector's request learns its model
// there); an error it returns releases the grant and is the answer.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, req router.Request, requested string, loadingState bool, bind func(model string) *apiError) {
	ex := exchangeOf(r)
	// The extension headers are Loadout's; the upstream never sees them.
	r.Header.Del(headerPriority)
	r.Header.Del(headerClient)
	r.Header.Del(headerForwarded)
	s.announce(ex, req)
	waitStart := time.Now()
	var grant *router.Grant
	var err error
	if loadingState {
		grant, err = s.acquireShowingProgress(w, r, req, requested)
	} else {
		grant, err = s.router.Acquire(r.Context(), req)
	}
	if err != nil {
		s.writeError(w, r, acquireError(r.Context(), err, req.Model))
		return
	}
	if bind != nil {
		if e := bind(grant.Model); e != nil {
			grant.Release()
			s.writeError(w, r, e)
			return
		}
	}
	mm := s.metrics.model(grant.Model)
	mm.queueWait.Observe(time.Since(waitStart).Seconds())
	// A model server that refuses the connection was sent nothing: its
	// process has just died, and the run loop hears of the exit a moment
	// later. Until then the scheduler may grant the model's queued requests
	// to it; each is granted again after a short backoff — on a sibling
	// replica, or on the model once restarted — instead of failing with a
	// 502 (issue 15: in-flight requests get an error, queued ones wait).
	// A connection reset or closed before the server answered a byte is
	// the same death seen a moment later (the request was accepted, then
	// the process ended), and is granted again once (lostBeforeAnswer).
	try := 0
	_, _ = backoff.Retry(r.Context(), func() (struct{}, error) {
		try++
		if grant == nil { // a retry
			if grant, err = s.router.Acquire(r.Context(), req); err != nil {
				s.writeError(w, r, acquireError(r.Context(), err, req.Model))
				return struct{}{}, backoff.Permanent(err)
			}
			if bind != nil {
				if e := bind(grant.Model); e != nil {
					grant.Release()
					s.writeError(w, r, e)
					return struct{}{}, backoff.Permanent(errors.New(e.msg))
				}
				mm = s.metrics.model(grant.Model)
			}
			if r.GetBody != nil {
				r.Body, _ = r.GetBody() // the refused attempt's transport closed it
			}
		}
		ex.req, ex.waited, ex.loadWait, ex.usage = req, time.Since(waitStart), grant.LoadWait, &usage{sent: time.Now()}
		ex.woke = grant.Woke
		ex.replica = grant.Replica
		// A retry sends the body again from GetBody, so one without it is
		// sent once.
		ex.retryRefused = try < refusedTries && (r.GetBody != nil || r.Body == nil || r.Body == http.NoBody)
		ex.refused = false
		ex.answered.Store(false)
		ex.unwritten.Store(false)
		s.proxyGranted(w, r, grant, mm)
		grant = nil
		if ex.refused {
			return struct{}{}, errRefused
		}
		return struct{}{}, nil
	}, backoff.WithBackOff(refusedBackoff()), backoff.WithMaxTries(refusedTries))
	if ex.refused && clientGone(r.Context()) {
		ex.fail(statusClientGone, "client went away while its request was granted again")
	}
}

// refusedTries is how many times a request is granted when its model's
// server refuses the connection each time (serve); the last refusal is
// the client's 502.
const refusedTries = 7

// errRefused is a grant whose model server refused the connection.
var errRefused = errors.New("the model server refused the connection")

// refusedBackoff is the wait before granting a refused request again:
// about 10, 30, 90 and 270 ms, then 500 ms, about 1.4 s in all: time for
// the run loop to hear of the server's exit (a few ms after it dies on
// an idle machine, longer on a loaded one) so the next grant goes
// elsewhere.
func refusedBackoff() backoff.BackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.Multiplier, b.MaxInterval = 10*time.Millisecond, 3, 500*time.Millisecond
	return b
}

// grantAgain reports whether a request whose upstream failed with err
// before its response headers is granted again (serve) instead of
// failing: its retry budget allows it (retryRefused), and the model
// server either refused the connection (dialFailed: nothing was sent) or
// lost it before answering a byte (lostBeforeAnswer), which is granted
// again once per request — a request that reached a server that then
// died may be what killed it, so it kills at most one more — or without
// count when the connection was lost while the request was written (no
// server read it whole), or was a pooled one the server had closed
// before the request reached it (serverClosedIdle).
func (ex *exchange) grantAgain(err error) bool {
	switch {
	case !ex.retryRefused:
		return false
	case dialFailed(err), serverClosedIdle(err):
		return true
	case ex.answered.Load() || !lostBeforeAnswer(err):
		return false
	case ex.unwritten.Load():
		// Lost while the request was written (a pooled keep-alive
		// connection the server had closed: EPIPE, a reset): no server
		// read it whole, so it killed none, and it is not counted.
		return true
	case ex.regranted:
		return false
	}
	ex.regranted = true
	return true
}

// serverClosedIdle reports whether err is net/http's "server closed idle
// connection": the model server closed a pooled keep-alive connection
// while no request was pending on it (the transport's read loop sets it
// only then), and the request sent on it as the close arrived was never
// read. llama-server closes its connection after each stream while
// offering keep-alive: under concurrency 3–5% of streams failed so, with
// a 502. (A server that read a request and then closed is an EOF, not
// this: lostBeforeAnswer, granted again once.) The error is unexported;
// its text is net/http's since Go 1.6.
func serverClosedIdle(err error) bool {
	return err != nil && strings.Contains(err.Error(), "http: server closed idle connection")
}

// lostBeforeAnswer reports whether err is a connection to the model
// server that ended before its response: reset (ECONNRESET, or EPIPE
// while the request was written) or closed (EOF), as when the server's
// process dies with the connection accepted; or a pooled keep-alive
// connection closed under the request as it was written (net.ErrClosed:
// "use of closed network connection"), as when a server restarted on the
// same port left its predecessor's idle connection in the pool and the
// transport saw the old process's close a moment after handing it out —
// seen in CI, a count_tokens request just after a model's restart
// failing with a 502. A timeout, a malformed response or a cancellation
// is not: the server is alive, or the client is gone (the caller,
// upstreamFailed, has answered those before asking). The caller checks
// that no response byte came (the exchange's answered, set by the
// ClientTrace in proxyGranted).
func lostBeforeAnswer(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed)
}

// proxyGranted proxies r to grant's upstream and releases the grant.
func (s *Server) proxyGranted(w http.ResponseWriter, r *http.Request, grant *router.Grant, mm *modelMetrics) {
	mm.inFlight.Inc()
	defer func() {
		grant.Release()
		mm.inFlight.Dec()
	}()
	ex := exchangeOf(r)
	rp := s.upstreams.proxy(grant.Upstream, ex.timeouts)
	names := []string{grant.Model}
	if grant.Replica != "" {
		names = append(names, grant.Replica)
	}
	ex.serving.Store(&names) // what a forced unload of one of them cuts (inflight.cut)
	defer ex.serving.Store(nil)
	ex.grant = grant
	defer func() { ex.grant = nil }()
	r, done := s.guardUpstream(r, answerLimit(ex.timeouts))
	defer done()
	if ex.retryRefused {
		// Whether the upstream answered a byte, and whether the request
		// was written whole, decide whether a lost connection may be
		// granted again (grantAgain) — after a counted re-grant too, for
		// a loss that is not counted.
		r = r.WithContext(httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{
			GotFirstResponseByte: func() { ex.answered.Store(true) },
			WroteRequest: func(i httptrace.WroteRequestInfo) {
				if i.Err != nil {
					ex.unwritten.Store(true)
				}
			},
		}))
	}
	if ex.sse != nil {
		// The SSE headers are out; the upstream's stream continues the body.
		rp.ServeHTTP(&continuation{w: ex.sse.w, header: http.Header{}}, r)
		return
	}
	rp.ServeHTTP(w, r)
}

// continuation is the ResponseWriter the upstream's response goes to when
// a loading-state stream already sent its headers: the upstream's status
// and headers are dropped, its body is appended.
type continuation struct {
	w      http.ResponseWriter
	header http.Header
}

func (c *continuation) Header() http.Header         { return c.header }
func (c *continuation) WriteHeader(int)             {}
func (c *continuation) Write(p []byte) (int, error) { return c.w.Write(p) }
func (c *continuation) FlushError() error           { return http.NewResponseController(c.w).Flush() }

// upstream handles /upstream/{model}/{path...}: any method, proxied to the
// model's own path after the model is acquired (and loaded if need be).
// The model id may contain slashes; the shortest leading run of segments
// that names a model wins, as in llama-swap.
func (s *Server) upstream(w http.ResponseWriter, r *http.Request) {
	ex := exchangeOf(r)
	ex.inference = true
	rest := strings.TrimPrefix(r.URL.EscapedPath(), "/upstream/")
	segs := strings.Split(rest, "/")
	var entry *ModelEntry
	name, n := "", 0
	for i, seg := range segs {
		part, err := url.PathUnescape(seg)
		if err != nil {
			break
		}
		if i > 0 {
			name += "/"
		}
		name += part
		if entry = s.catalog.Load().lookup(name); entry != nil {
			n = i + 1
			break
		}
	}
	switch {
	case rest == "":
		s.writeError(w, r, badRequest("missing_model", "no model given: use /upstream/{model}/{path}"))
		return
	case entry == nil:
		s.writeError(w, r, s.catalog.Load().unknown(strings.SplitN(rest, "/", 2)[0]))
		return
	}
	if n == len(segs) {
		// /upstream/m → /upstream/m/, so relative links in the upstream's
		// pages resolve.
		redirectToDir(w, r, "/upstream/"+rest)
		return
	}
	s.passthrough(w, r, entry, "/"+strings.Join(segs[n:], "/"), "")
}

// redirectToDir redirects r to dir + "/", its query kept: 301 for GET and
// HEAD, else 308, which keeps the method and body.
func redirectToDir(w http.ResponseWriter, r *http.Request, dir string) {
	loc := dir + "/"
	if r.URL.RawQuery != "" {
		loc += "?" + r.URL.RawQuery
	}
	code := http.StatusPermanentRedirect
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		code = http.StatusMovedPermanently
	}
	http.Redirect(w, r, loc, code)
}

// comfyUI handles /comfyui and /comfyui/{path...}, llama-swap's ComfyUI
// passthrough: /upstream/comfyui_auto/{path...} under a fixed address, for
// the local model whose id (not an alias) is config.ComfyUIModel. Only the
// root page may load it: a browser tab left open on an unloaded ComfyUI
// keeps asking for its assets, APIs and WebSocket, and those get 409 until
// the model is ready, as in llama-swap.
func (s *Server) comfyUI(w http.ResponseWriter, r *http.Request) {
	ex := exchangeOf(r)
	ex.inference = true
	entry := s.catalog.Load().lookup(config.ComfyUIModel)
	if entry == nil || entry.ID != config.ComfyUIModel {
		s.writeError(w, r, &apiError{status: http.StatusNotFound, code: "model_not_found",
			msg: fmt.Sprintf("no model %s: /comfyui/ serves the local model of that id (llama-swap's ComfyUI passthrough)", config.ComfyUIModel)})
		return
	}
	rest := strings.TrimPrefix(r.URL.EscapedPath(), "/comfyui")
	if rest == "" {
		redirectToDir(w, r, "/comfyui")
		return
	}
	why := ""
	if rest != "/" {
		why = "only /comfyui/ can start it"
	}
	s.passthrough(w, r, entry, rest, why)
}

// passthrough proxies r to entry's server at path (escaped) with r's
// method, query and body, once the model is acquired (and loaded if need
// be). An upgrade to a WebSocket where entry.IgnoreWebsockets, a path
// that matches upstream.ignorePaths, or any request when noLoad gives the
// reason, never loads the model: it is served while the model is ready,
// else answered 409.
func (s *Server) passthrough(w http.ResponseWriter, r *http.Request, entry *ModelEntry, path, noLoad string) {
	ex := exchangeOf(r)
	ex.model, ex.timeouts = entry.ID, entry.Timeouts
	if r.ContentLength > s.maxBody {
		s.writeError(w, r, s.tooLarge())
		return
	}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = http.MaxBytesReader(w, r.Body, s.maxBody)
	}
	u := *r.URL
	u.RawPath = path
	var err error
	if u.Path, err = url.PathUnescape(path); err != nil {
		s.writeError(w, r, badRequest("invalid_path", fmt.Sprintf("path %s: %v", echoed(path), err)))
		return
	}
	if u.EscapedPath() == u.Path {
		u.RawPath = ""
	}
	r.URL = &u
	upgrade := entry.IgnoreWebsockets && isWebSocket(r)
	switch {
	case upgrade:
		noLoad = "a WebSocket does not load it (compat.ignoreWebsockets)"
	case noLoad == "" && s.ignoredPath(u.Path):
		noLoad = "the path matches upstream.ignorePaths"
	}
	if noLoad != "" {
		// Never a reason to load the model: served only while it is ready.
		target, ready := s.readyUpstream(entry.ID)
		if !ready {
			s.writeError(w, r, &apiError{status: http.StatusConflict, code: "model_not_loaded",
				msg: fmt.Sprintf("model %s is not loaded; %s", entry.ID, noLoad)})
			return
		}
		if upgrade { // outside the scheduler: not in flight, no grant
			s.upstreams.proxy(target, ex.timeouts).ServeHTTP(w, r)
			return
		}
	}
	req := router.Request{Model: entry.ID}
	if h := r.Header.Get(headerPriority); h != "" {
		p, err := strconv.ParseInt(strings.TrimSpace(h), 10, 32)
		if err != nil {
			s.writeError(w, r, badRequest("invalid_priority", fmt.Sprintf("header %s: want a 32-bit integer, got %q", headerPriority, h)))
			return
		}
		req.Priority = int32(p)
	}
	req.Client = r.Header.Get(headerClient)
	s.serve(w, r, req, entry.ID, false, nil)
}

// ignoredPath reports whether path (under /upstream/{model}) matches
// Config.IgnorePaths.
func (s *Server) ignoredPath(path string) bool {
	for _, re := range s.cfg.IgnorePaths {
		if re.MatchString(path) {
			return true
		}
	}
	return false
}

// readyUpstream returns the upstream of model while it is ready (its
// first ready replica's, for a model with replicas), as the router
// reports it.
func (s *Server) readyUpstream(model string) (*url.URL, bool) {
	for _, m := range s.router.Models() {
		if m.Model != model || m.State != "ready" || m.Upstream == "" {
			continue
		}
		u, err := url.Parse(m.Upstream)
		return u, err == nil
	}
	return nil, false
}

// isWebSocket reports whether r asks to upgrade to a WebSocket.
func isWebSocket(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket") &&
		strings.Contains(strings.ToLower(r.Header.Get("Connection")), "upgrade")
}
