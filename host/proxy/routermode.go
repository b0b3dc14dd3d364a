package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/loadout-dev/loadout/host/events"
	"github.com/loadout-dev/loadout/host/router"
	"github.com/loadout-dev/loadout/sdk"
)

// llama-server's router mode has a model-management API (tools/server/
// README.md, "Using multiple models"): GET /models, POST /models/load,
// POST /models/unload, GET /models/sse. Loadout serves it over its own catalog and router,
// so a client written for router mode works unchanged. Errors have
// llama-server's shape (shapeOf). The answers below were taken from
// llama-server built from llama-cpp-python 0.3.36's llama.cpp, run with
// --models-dir.

// routerModel is one entry of GET /models: llama-server's fields that a
// client reads (id, object, owned_by, created, status).
type routerModel struct {
	ID      string             `json:"id"`
	Aliases []string           `json:"aliases"`
	Object  string             `json:"object"` // "model"
	OwnedBy string             `json:"owned_by"`
	Created int64              `json:"created"`
	Status  routerModelStatus  `json:"status"`
	Loadout router.ModelStatus `json:"loadout"` // the router's own view (GET /api/models)
}

// routerModelStatus is llama-server's status object: value is one of
// "unloaded", "loading", "loaded"; failed marks a model whose last start
// failed or that crashed.
type routerModelStatus struct {
	Value  string `json:"value"`
	Failed bool   `json:"failed,omitempty"`
}

// routerStatus maps a router state (sdk.ModelState's names) to
// llama-server's status value. A model being stopped still has its
// process, as llama-server's instance is "loaded" until it exits.
func routerStatus(state string) routerModelStatus {
	switch state { // residency: asleep reads as unloaded (a request loads it)
	case sdk.StateStarting.String(), "waking":
		return routerModelStatus{Value: "loading"}
	case sdk.StateReady.String(), sdk.StateStopping.String(), "sleeping":
		return routerModelStatus{Value: "loaded"}
	case sdk.StateFailed.String():
		return routerModelStatus{Value: "unloaded", Failed: true}
	default:
		return routerModelStatus{Value: "unloaded"}
	}
}

// routerEvent is one event of GET /models/sse, llama-server's shape:
// {"model": ID, "event": EVENT, "data": {"status": VALUE, ...}}.
type routerEvent struct {
	Model string          `json:"model"`
	Event string          `json:"event"`
	Data  routerEventData `json:"data"`
}

// routerEventData is an event's data: the status value (routerStatus);
// for "loaded", the model as GET /models lists it (info); for
// "unloaded", an exit code: 1 after a failed start or a crash
// (routerModelStatus.Failed), else 0 — llama-server gives the process's
// own, which Loadout's backends do not report.
type routerEventData struct {
	Status   string       `json:"status"`
	Info     *routerModel `json:"info,omitempty"`
	ExitCode *int         `json:"exit_code,omitempty"`
}

// routerModelsSSE is GET /models/sse: server-sent events in llama-server's
// router-mode shape (routerEvent, as "data:" lines with no event name)
// each time a model of the catalog changes its status value (routerStatus:
// a change of in-flight counts, or between states that read alike, sends
// nothing), from now on, with keep-alive comments while quiet. As in
// llama-server, a load starting sends "model_status" before its
// "status_change" to loading; llama-server's load progress and download
// events have no counterpart. A 404 when the box keeps no event bus.
func (s *Server) routerModelsSSE(w http.ResponseWriter, r *http.Request) {
	bus := s.cfg.Events
	if bus == nil {
		s.writeError(w, r, &apiError{status: http.StatusNotFound, code: "no_events", msg: "the event stream is not enabled"})
		return
	}
	sub := bus.Subscribe(bus.LastID())
	defer sub.Close()
	last := map[string]string{}
	for _, st := range s.router.Models() {
		last[st.Model] = routerStatus(st.State).Value
	}
	created := s.started.Unix()
	emit := func(buf []byte, e routerEvent) []byte {
		b, err := json.Marshal(e)
		if err != nil {
			return buf
		}
		buf = append(buf, "data: "...)
		buf = append(buf, b...)
		return append(buf, "\n\n"...)
	}
	streamEvents(w, r, sub, nil, func(buf []byte, ev *events.Event) []byte {
		st, ok := ev.Data().(router.ModelStatus)
		if !ok || ev.Type != events.TypeModel {
			return buf
		}
		entry := s.catalog.Load().lookup(st.Model)
		status := routerStatus(st.State)
		if entry == nil || last[st.Model] == status.Value {
			return buf
		}
		last[st.Model] = status.Value
		data := routerEventData{Status: status.Value}
		switch status.Value {
		case "loading":
			buf = emit(buf, routerEvent{Model: st.Model, Event: "model_status", Data: data})
		case "loaded":
			info := listedModel(entry, st, created)
			data.Info = &info
		case "unloaded":
			code := 0
			if status.Failed {
				code = 1
			}
			data.ExitCode = &code
		}
		return emit(buf, routerEvent{Model: st.Model, Event: "status_change", Data: data})
	})
}

// routerModels is GET /models: every model of the catalog with its
// status, {"data":[…],"object":"list"}.
func (s *Server) routerModels(w http.ResponseWriter, r *http.Request) {
	cat := s.catalog.Load()
	created := s.started.Unix()
	data := []routerModel{}
	for _, st := range s.router.Models() {
		e := cat.lookup(st.Model)
		if e == nil {
			continue
		}
		data = append(data, listedModel(e, st, created))
	}
	s.writeJSON(w, r, map[string]any{"data": data, "object": "list"})
}

// listedModel is model e, whose router status is st, as GET /models
// lists it; created is the Unix time the box started.
func listedModel(e *ModelEntry, st router.ModelStatus, created int64) routerModel {
	aliases := e.Aliases
	if aliases == nil {
		aliases = []string{}
	}
	return routerModel{ID: e.ID, Aliases: aliases, Object: "model", OwnedBy: "loadout",
		Created: created, Status: routerStatus(st.State), Loadout: st}
}

// routerModelRequest reads the {"model": NAME} body of /models/load and
// /models/unload and resolves it; nil (and an answer written) when the
// body is not that or the model is unknown: llama-server answers an
// unknown model on load with 404 not_found_error and on unload with 400
// "model is not found", and so does this.
func (s *Server) routerModelRequest(w http.ResponseWriter, r *http.Request, unknownStatus int) *ModelEntry {
	body, e := s.readBody(w, r)
	if e != nil {
		s.writeError(w, r, e)
		return nil
	}
	var req struct {
		Model string `json:"model"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		s.writeError(w, r, badRequest("invalid_json", fmt.Sprintf(`want a JSON body {"model": NAME}: %v`, err)))
		return nil
	}
	entry := s.catalog.Load().lookup(req.Model)
	if entry == nil {
		s.writeError(w, r, &apiError{status: unknownStatus, code: "model_not_found",
			msg: fmt.Sprintf("model %s is not found", echoed(req.Model))})
		return nil
	}
	exchangeOf(r).model = entry.ID
	return entry
}

// modelState is the router's state of model id ("" if it has none).
func (s *Server) modelState(id string) string {
	for _, st := range s.router.Models() {
		if st.Model == id {
			return st.State
		}
	}
	return ""
}

// routerLoad is POST /models/load {"model": NAME}: the model is acquired
// as a request for it would be (its load, the evictions it needs, the
// queue and the policies apply) and released at once; the answer,
// {"success":true}, comes once it is loaded. A model already loaded is a
// 400 "model is already running", as in llama-server.
func (s *Server) routerLoad(w http.ResponseWriter, r *http.Request) {
	entry := s.routerModelRequest(w, r, http.StatusNotFound)
	if entry == nil {
		return
	}
	if s.modelState(entry.ID) == sdk.StateReady.String() {
		s.writeError(w, r, badRequest("already_running", "model is already running"))
		return
	}
	start := time.Now()
	grant, err := s.router.Acquire(r.Context(), router.Request{Model: entry.ID})
	if err != nil {
		s.writeError(w, r, acquireError(r.Context(), err, entry.ID))
		return
	}
	grant.Release()
	s.log.Info("model loaded through POST /models/load", "model", entry.ID, "took", time.Since(start))
	s.writeJSON(w, r, map[string]bool{"success": true})
}

// routerUnload is POST /models/unload {"model": NAME}: the model is
// stopped (once its requests in flight end), and the answer,
// {"success":true}, comes once it has exited. A model not running is a
// 400 "model is not running", as in llama-server.
func (s *Server) routerUnload(w http.ResponseWriter, r *http.Request) {
	entry := s.routerModelRequest(w, r, http.StatusBadRequest)
	if entry == nil {
		return
	}
	switch s.modelState(entry.ID) {
	case sdk.StateStopped.String(), sdk.StateFailed.String():
		s.writeError(w, r, badRequest("not_running", "model is not running"))
		return
	}
	opt, e := unloadOptions(r, entry.ID)
	if e != nil {
		s.writeError(w, r, e)
		return
	}
	if err := s.unload(r.Context(), opt); err != nil {
		s.writeError(w, r, acquireError(r.Context(), err, entry.ID))
		return
	}
	s.writeJSON(w, r, map[string]bool{"success": true})
}
