package proxy

import (
	"net/http"
	"time"

	"github.com/gorilla/mux"
)

// logsHistory serves GET /logs: every model server's kept output, oldest
// first, each line prefixed with its model (llama-swap's route); and GET
// /logs/{model}: that model's (id or alias), unprefixed, as
// /logs/stream/{model} begins (`loadout logs MODEL`).
func (s *Server) logsHistory(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Logs == nil {
		s.writeError(w, r, &apiError{status: http.StatusNotFound, code: "no_logs", msg: "model server logs are not kept"})
		return
	}
	model := ""
	if _, ok := mux.Vars(r)["model"]; ok {
		e := s.pathModel(w, r)
		if e == nil {
			return
		}
		model = e.ID
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write(s.cfg.Logs.History(model))
}

// logsStream serves GET /logs/stream and /logs/stream/{model}: the kept
// output (unless ?no-history) and then new lines as they come, as chunked
// plain text. A reader that falls behind is dropped.
func (s *Server) logsStream(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Logs == nil {
		s.writeError(w, r, &apiError{status: http.StatusNotFound, code: "no_logs", msg: "model server logs are not kept"})
		return
	}
	model := ""
	if name, ok := mux.Vars(r)["model"]; ok {
		entry := s.catalog.Load().lookup(name)
		if entry == nil {
			s.writeError(w, r, s.catalog.Load().unknown(name))
			return
		}
		model = entry.ID
	}
	_, noHistory := r.URL.Query()["no-history"]
	sub, past := s.cfg.Logs.Subscribe(model, !noHistory)
	defer sub.Close()
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Content-Type-Options", "nosniff")
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
