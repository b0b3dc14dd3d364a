package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/loadout-dev/loadout/host/peers"
	"github.com/loadout-dev/loadout/host/router"
)

// headerForwarded marks a request one Loadout forwarded to another (a
// peer). A request that carries it is never forwarded again, only served
// by a local model: two peers that each list the other's models cannot
// bounce a request between them.
const headerForwarded = "X-Loadout-Forwarded"

// routePeer decides whether a model request goes to a peer (Config.Peers):
// it returns the target (nil: serve it locally, or answer that the model
// is unknown when entry is nil) or the error to answer. name is the model
// the client asked for, entry its local catalog entry (nil when it has
// none).
func (s *Server) routePeer(r *http.Request, name string, entry *ModelEntry) (*peers.Target, *apiError) {
	set := s.peers.Load()
	if set == nil {
		return nil, nil
	}
	targets := set.Lookup(name)
	if len(targets) == 0 {
		return nil, nil
	}
	if r.Header.Get(headerForwarded) != "" {
		if entry == nil {
			return nil, &apiError{status: http.StatusNotFound, code: "model_not_found",
				msg: fmt.Sprintf("model %q is not served here: it is a peer's, and a request a peer forwarded is not forwarded again", name)}
		}
		return nil, nil
	}
	var local *peers.Local
	if entry != nil {
		local = &peers.Local{}
		for _, m := range s.router.Models() {
			if m.Model == entry.ID {
				local.Ready, local.Load = m.State == "ready", m.InFlight+m.Queued+m.Loading
				break
			}
		}
	}
	t, err := set.Choose(r.Context(), targets, local)
	var down *peers.DownError
	if errors.As(err, &down) {
		return nil, &apiError{status: http.StatusServiceUnavailable, code: "peer_unavailable", msg: err.Error()}
	}
	return t, nil
}

// forward sends a model request to a peer through the same reverse proxy
// local model servers get (upstreams), with the model renamed to the id
// the peer knows, Loadout's priority and client as headers (a Loadout peer
// applies its own rules with them), the peer's API key, and the mark that
// keeps it from being forwarded again. The request counts as in flight to
// the peer until its response is done.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, mr *modelRequest, body []byte, t *peers.Target) {
	ex := exchangeOf(r)
	ex.model, ex.peer, ex.stream = t.Name(), t, mr.stream
	out, err := mr.rewriteBody(r, body, &ModelEntry{UseModelName: t.Model(), Filters: t.Filters()})
	if err != nil {
		s.writeError(w, r, badRequest("invalid_body", err.Error()))
		return
	}
	setBody(r, out)
	h := r.Header
	h.Del(headerPriority)
	h.Del(headerClient)
	if mr.priority != 0 {
		h.Set(headerPriority, strconv.FormatInt(int64(mr.priority), 10))
	}
	if mr.client != "" {
		h.Set(headerClient, mr.client)
	}
	if key := t.APIKey(); key != "" { // llama-swap's apiKey: both headers
		h.Set("Authorization", "Bearer "+key)
		h.Set("X-Api-Key", key)
	}
	h.Set(headerForwarded, "1")
	answered := false // the peer answered well: passive health's success
	end := t.Begin()
	defer func() { end(answered) }()
	ex.req = router.Request{Model: t.Name(), Priority: mr.priority, Client: mr.client}
	ex.usage = &usage{sent: time.Now()}
	if mm := s.metrics.model(t.Name()); mm != nil {
		mm.inFlight.Inc()
		defer mm.inFlight.Dec()
	}
	to := t.Timeouts()
	r, done := s.guardUpstream(r, answerLimit(&to))
	defer done()
	r, unwatch := watchPeer(r, t)
	defer unwatch()
	s.upstreams.proxy(t.URL(), &to).ServeHTTP(w, r)
	// Not reached when the body broke off (ReverseProxy panics with
	// http.ErrAbortHandler); a failure, an abort or a client that left
	// is a logical outcome of its own.
	answered = ex.logical == 0 && ex.status != 0
}

// watchPeer ends r's upstream request, with the peer's *peers.HungError as
// its cause, when t's peer is found hung while r is in flight
// (Target.Hung): its health checks time out again and again, as a stopped
// peer's do, and the request would otherwise wait out the peer's
// responseHeader limit or the stream idle limit. unwatch stops watching.
func watchPeer(r *http.Request, t *peers.Target) (_ *http.Request, unwatch func()) {
	ctx, cancel := context.WithCancelCause(r.Context())
	hung := t.Hung()
	stop := context.AfterFunc(hung, func() { cancel(context.Cause(hung)) })
	return r.WithContext(ctx), func() {
		stop()
		cancel(nil)
	}
}

// peerFailed is the error for a forwarded request the peer did not answer
// (upstreamFailed) or broke off mid-body (responseGuard): a 502
// peer_error naming the peer, its URL and the model. The failure is
// reported to the peer's health (Target.Failed): the peer is checked at
// once, so the next requests fail fast if it is down, and failures in a
// row put it down (host/peers passive health).
//
// A peer that did not answer within its timeouts.responseHeader is a 504.
func peerFailed(t *peers.Target, what string, err error) *apiError {
	t.Failed(fmt.Errorf("%s: %w", what, err))
	status := http.StatusBadGateway
	var late *answerTimeoutError
	if errors.As(err, &late) {
		status = http.StatusGatewayTimeout
	}
	return &apiError{status: status, code: "peer_error",
		msg: fmt.Sprintf("peer %s (%s): model %s: %s: %v", t.Peer(), t.URL(), t.Model(), what, err)}
}

// apiPeers is GET /api/peers: every peer's health and models.
func (s *Server) apiPeers(w http.ResponseWriter, r *http.Request) {
	st := []peers.Status{}
	if set := s.peers.Load(); set != nil {
		st = set.Statuses()
	}
	s.writeJSON(w, r, map[string]any{"peers": st})
}
