package proxy

import (
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/host/logs"
)

// logsHistory serves GET /logs: the kept lines of Loadout's own log and
// of every model server, those prefixed with their model, oldest first
// (llama-swap's route; a browser, asking for text/html, is sent to the
// UI as there); and GET /logs/{model}: that model's (id or alias),
// unprefixed, as /logs/stream/{model} begins (`loadout logs MODEL`), or
// proxy's or upstream's, as /logs/stream/proxy and /logs/stream/upstream
// begin.
func (s *Server) logsHistory(w http.ResponseWriter, r *http.Request) {
	if _, named := mux.Vars(r)["model"]; !named && strings.Contains(r.Header.Get("Accept"), "text/html") {
		http.Redirect(w, r, "/ui/", http.StatusFound)
		return
	}
	ring, ok := s.logRing(w, r)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write(s.cfg.Logs.History(ring))
}

// logRing resolves the ring a log route reads: logs.All without a
// {model}; llama-swap's names proxy (Loadout's own lines) and upstream
// (every model server's), which win over a model of that id as in
// llama-swap; a replica's (m@2) while the router has it; else the
// model's, by id or alias. False when it answered the request with an
// error.
func (s *Server) logRing(w http.ResponseWriter, r *http.Request) (string, bool) {
	if s.cfg.Logs == nil {
		s.writeError(w, r, &apiError{status: http.StatusNotFound, code: "no_logs", msg: "logs are not kept"})
		return "", false
	}
	name, ok := mux.Vars(r)["model"]
	switch {
	case !ok:
		return logs.All, true
	case name == "proxy":
		return logs.Proxy, true
	case name == "upstream":
		return logs.Upstream, true
	case config.ModelOf(name) != name && s.catalog.Load().lookup(config.ModelOf(name)) != nil && s.runs(name):
		// A replica of a model (m@2), whose server is its own: its
		// lines, as /logs/upstream prefixes them. (Replica 1 is the
		// model's own id.)
		return name, true
	}
	e := s.pathModel(w, r)
	if e == nil {
		return "", false
	}
	return e.ID, true
}

// logsStream serves GET /logs/stream, /logs/stream/proxy,
// /logs/stream/upstream and /logs/stream/{model}: the ring logsHistory
// gives (unless ?no-history) and then new lines as they come, as chunked
// plain text. A reader that falls behind is dropped.
func (s *Server) logsStream(w http.ResponseWriter, r *http.Request) {
	model, ok := s.logRing(w, r)
	if !ok {
		return
	}
	_, noHistory := r.URL.Query()["no-history"]
	sub, past := s.cfg.Logs.Subscribe(model, !noHistory)
	defer sub.Close()
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Accel-Buffering", "no") // nginx in front: do not buffer
	w.WriteHeader(http.StatusOK)
	write := func(b []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(eventsWriteTimeout))
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write(past) {
		return
	}
	var buf []byte
	for {
		select {
		case <-r.Context().Done():
			return
		case line, open := <-sub.Lines():
			if !open {
				return
			}
			buf = append(buf[:0], line...)
			// Take what else is ready, one write for all of it.
			for more := true; more && len(buf) < 64<<10; {
				select {
				case l, ok := <-sub.Lines():
					if !ok {
						_ = write(buf)
						return
					}
					buf = append(buf, l...)
				default:
					more = false
				}
			}
			if !write(buf) {
				return
			}
		}
	}
}
