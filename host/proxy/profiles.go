package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"

	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/host/router"
)

// ProfileRouter is the part of *router.Router that holds the active
// profile (llama-swap's profiles:): a switch is a turn of the run loop
// (SetProfile), and Profile reads the latest one. A Router that does not
// implement it has no profiles: GET /api/profiles lists them with none
// active and PUT /api/profiles/active answers 501.
type ProfileRouter interface {
	SetProfile(name string) (previous string)
	Profile() string
}

var _ ProfileRouter = (*router.Router)(nil)

// activeProfile returns the active profile, nil for none.
func (s *Server) activeProfile() *config.Profile {
	pr, ok := s.router.(ProfileRouter)
	if !ok || len(s.cfg.Profiles) == 0 {
		return nil
	}
	return s.cfg.Profiles[pr.Profile()]
}

// applyProfile serves mr under the active profile's pin for its name
// (llama-swap's profile middleware: before aliases, selectors, filters
// and routing): the pin's target becomes the name, or, for a pin without
// one, the name is disabled: 404.
func (s *Server) applyProfile(mr *modelRequest) *apiError {
	prof := s.activeProfile()
	target, pinned := prof.Pin(mr.model)
	switch {
	case !pinned:
		return nil
	case target == "":
		return &apiError{status: http.StatusNotFound, code: "model_not_found",
			msg: fmt.Sprintf("model %s is disabled by the active profile %s", echoed(mr.model), prof.ID)}
	}
	mr.asked, mr.model = mr.model, target
	return nil
}

// selectorToPeer serves a pin selector whose target is a peer's model as
// a request for that model (the choice needs no state: host/peers
// routes it), and reports whether it did.
func (s *Server) selectorToPeer(mr *modelRequest, sel *config.Selector) bool {
	if sel.Strategy != config.SelectorPin || s.catalog.Load().lookup(sel.Models[0]) != nil {
		return false
	}
	if mr.asked == "" {
		mr.asked = mr.model
	}
	mr.model = sel.Models[0]
	return true
}

// serveSelector serves a request for a selector (llama-swap's
// selectors:): the run loop picks the model among the selector's targets
// (router.Request.Select), and the request is bound to the pick's
// catalog entry — its filters, useModelName, timeouts — once granted.
func (s *Server) serveSelector(w http.ResponseWriter, r *http.Request, mr *modelRequest, body []byte, sel *config.Selector, loadingState bool) {
	ex := exchangeOf(r)
	if mr.asked == "" {
		mr.asked = mr.model
	}
	req := router.Request{Model: sel.ID, Priority: mr.priority, Client: mr.client,
		Select: &router.Selector{ID: sel.ID, Strategy: sel.Strategy, Targets: sel.Models, Spillover: sel.Spillover}}
	bind := func(model string) *apiError {
		entry := s.catalog.Load().lookup(model)
		if entry == nil {
			return s.catalog.Load().unknown(model)
		}
		ex.model, ex.timeouts = entry.ID, entry.Timeouts
		m := *mr
		m.model = entry.ID
		out, err := m.rewriteBody(r, body, entry)
		if err != nil {
			return badRequest("invalid_body", err.Error())
		}
		setBody(r, out)
		return nil
	}
	s.serve(w, r, req, mr.asked, loadingState, bind)
}

// apiProfile is one profile in GET /api/profiles, llama-swap's shape.
type apiProfile struct {
	ID          string            `json:"id"`
	Description string            `json:"description"`
	Pins        map[string]string `json:"pins"`
}

// apiProfiles is GET /api/profiles: {"active": name or null, "profiles":
// [{id, description, pins}]} sorted by id, as llama-swap answers it.
func (s *Server) apiProfiles(w http.ResponseWriter, r *http.Request) {
	out := struct {
		Active   *string      `json:"active"`
		Profiles []apiProfile `json:"profiles"`
	}{Profiles: []apiProfile{}}
	if p := s.activeProfile(); p != nil {
		out.Active = &p.ID
	}
	for _, id := range slices.Sorted(maps.Keys(s.cfg.Profiles)) {
		p := s.cfg.Profiles[id]
		out.Profiles = append(out.Profiles, apiProfile{ID: p.ID, Description: p.Description, Pins: p.Pins})
	}
	s.writeJSON(w, r, out)
}

// setActiveProfile is PUT /api/profiles/active with {"name": "id"} or
// {"name": null} (none), llama-swap's shape; it answers {"active": …}.
// Errors: 400 for a body that is not that, 404 for an unknown profile
// (nothing changes), 501 when the router holds no profiles.
func (s *Server) setActiveProfile(w http.ResponseWriter, r *http.Request) {
	var body map[string]json.RawMessage
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&body); err != nil {
		s.writeError(w, r, badRequest("invalid_body", "want {\"name\": \"profile\"} or {\"name\": null}: "+err.Error()))
		return
	}
	raw, ok := body["name"]
	if !ok {
		s.writeError(w, r, badRequest("missing_name", "the profile's name is required: {\"name\": \"profile\"} or {\"name\": null}"))
		return
	}
	var name string
	if string(raw) != "null" {
		if err := json.Unmarshal(raw, &name); err != nil {
			s.writeError(w, r, badRequest("invalid_name", "name must be a string or null"))
			return
		}
	}
	if name != "" && s.cfg.Profiles[name] == nil {
		s.writeError(w, r, &apiError{status: http.StatusNotFound, code: "profile_not_found",
			msg: fmt.Sprintf("profile %s not found; profiles: %v", echoed(name), slices.Sorted(maps.Keys(s.cfg.Profiles)))})
		return
	}
	pr, ok := s.router.(ProfileRouter)
	if !ok {
		s.writeError(w, r, &apiError{status: http.StatusNotImplemented, code: "not_implemented", msg: "this router holds no profiles"})
		return
	}
	pr.SetProfile(name)
	out := struct {
		Active *string `json:"active"`
	}{}
	if name != "" {
		out.Active = &name
	}
	s.writeJSON(w, r, out)
}
