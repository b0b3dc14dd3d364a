package proxy

import (
	"net/http"
	"strings"

	"github.com/gorilla/mux"

	"github.com/loadout-dev/loadout/host/router"
	"github.com/loadout-dev/loadout/host/ui"
)

// uiRoutes mounts the web UI at /ui/, redirects / to it, and serves its
// icon at /favicon.ico, where browsers ask for it on any page. The UI's files
// are public (they hold no data; every API call the page makes carries the
// key its user enters), so they are served without an API key.
func (s *Server) uiRoutes(m *mux.Router) {
	files := http.StripPrefix("/ui/", ui.Handler())
	m.PathPrefix("/ui/").Handler(files).Methods(http.MethodGet, http.MethodHead)
	m.Handle("/ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently)).Methods(http.MethodGet, http.MethodHead)
	m.Handle("/", http.RedirectHandler("/ui/", http.StatusFound)).Methods(http.MethodGet, http.MethodHead)
	m.Handle("/favicon.ico", ui.Handler()).Methods(http.MethodGet, http.MethodHead)
	m.HandleFunc("/api/models/load/{model:.+}", s.loadModel).Methods(http.MethodPost)
}

// public reports whether r may be served without an API key: the health
// checks (llama-swap's /health and /wol-health, llama-server's
// /v1/health), the UI's files (its icon
// at /favicon.ico too) and the redirects to them (/, /ui, /upstream).
func public(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	p := r.URL.Path
	switch p {
	case "/health", "/v1/health", "/wol-health", "/", "/ui", "/upstream", "/favicon.ico":
		return true
	}
	return strings.HasPrefix(p, "/ui/")
}

// loadModel serves POST /api/models/load/{model}: the model is acquired as
// a request would (the scheduler and swapper decide, evicting or queueing
// as for any request) and released at once; the answer comes when it is
// loaded. The UI's load button.
func (s *Server) loadModel(w http.ResponseWriter, r *http.Request) {
	e := s.pathModel(w, r)
	if e == nil {
		return
	}
	g, err := s.router.Acquire(r.Context(), router.Request{Model: e.ID, Client: "ui"})
	if err != nil {
		s.writeError(w, r, acquireError(r.Context(), err, e.ID))
		return
	}
	g.Release()
	writeOK(w)
}
