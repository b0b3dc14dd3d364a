package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/host/router"
)

// writeJSON sends v as a 200 JSON response.
func (s *Server) writeJSON(w http.ResponseWriter, r *http.Request, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		s.writeError(w, r, &apiError{status: http.StatusInternalServerError, code: "internal_error", msg: "encoding the response: " + err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(b, '\n'))
}

// modelObject is one entry of GET /v1/models, OpenAI's list shape plus
// llama-swap's name and description.
type modelObject struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	Created     int64  `json:"created"`
	OwnedBy     string `json:"owned_by"`
	Name        string `json:"name,omitempty"`
	Description string `json:"description,omitempty"`
	// Architecture, Capabilities, SupportedParameters and ContextLength
	// render the model's capabilities: as llama-swap does (renderCapabilities).
	Architecture        map[string]any `json:"architecture,omitempty"`
	Capabilities        map[string]any `json:"capabilities,omitempty"`
	SupportedParameters []string       `json:"supported_parameters,omitempty"`
	ContextLength       int            `json:"context_length,omitempty"`
	// Meta is llama-swap's meta: meta.llamaswap holds the model's
	// metadata: and the proxy's own keys ({"type": "model", "aliases": […]},
	// {"type": "alias", "modelID": ID}, for a peer's model
	// {"type": "peer", "peerID": PEER}, for a selector {"type":
	// "selector", "strategy": S, "targets": […]} and "spillover" for that
	// strategy, for an active profile's pin {"type": "profile"});
	// meta.n_ctx the context length.
	Meta map[string]any `json:"meta,omitempty"`
	// Status is whether the model is loaded, as llama-server's router
	// mode says it in its /v1/models (and llama-swap in its): "loaded",
	// "loading" or "unloaded" (routerStatus).
	Status routerModelStatus `json:"status"`
}

// newModelObject is a catalog model's /v1/models entry under id (its own,
// or an alias's), with own as the proxy's meta.llamaswap keys, which win
// over the metadata's (host/config warns of a metadata key they hide).
func newModelObject(e *ModelEntry, id string, created int64, own map[string]any, status routerModelStatus) modelObject {
	obj := modelObject{ID: id, Object: "model", Created: created, OwnedBy: "loadout",
		Name: strings.TrimSpace(e.Name), Description: strings.TrimSpace(e.Description), Status: status}
	obj.Architecture, obj.Capabilities, obj.SupportedParameters, obj.ContextLength = renderCapabilities(e.Capabilities)
	meta := make(map[string]any, len(e.Metadata)+len(own))
	maps.Copy(meta, e.Metadata)
	maps.Copy(meta, own)
	obj.Meta = map[string]any{"llamaswap": meta}
	if obj.ContextLength > 0 {
		obj.Meta["n_ctx"] = obj.ContextLength
	}
	return obj
}

// selectorObject is a selector's /v1/models entry, as llama-swap lists
// one: its name, description and metadata, and the status of the target
// a request would go to now — the first local target that is loading or
// loaded (for pin, the first target only), else unloaded.
func selectorObject(sel *config.Selector, created int64, cat *catalog, states map[string]string) modelObject {
	own := map[string]any{"type": "selector", "strategy": sel.Strategy, "targets": sel.Targets}
	if sel.Strategy == config.SelectorSpillover {
		own["spillover"] = sel.Spillover
	}
	meta := make(map[string]any, len(sel.Metadata)+len(own))
	maps.Copy(meta, sel.Metadata)
	maps.Copy(meta, own)
	status := routerStatus("")
	for _, m := range sel.Models {
		if cat.lookup(m) != nil {
			if st := routerStatus(states[m]); st.Value != status.Value {
				status = st
				break
			}
		}
		if sel.Strategy == config.SelectorPin {
			break
		}
	}
	return modelObject{ID: sel.ID, Object: "model", Created: created, OwnedBy: "loadout",
		Name: strings.TrimSpace(sel.Name), Description: strings.TrimSpace(sel.Description),
		Meta: map[string]any{"llamaswap": meta}, Status: status}
}

// renderCapabilities is llama-swap's rendering of capabilities: in
// /v1/models: architecture (input_modalities, output_modalities,
// modality "in+…->out+…"), capabilities (vision, audio_transcriptions,
// audio_speech, image_generation, image_to_image, function_calling,
// reranker), supported_parameters (tools, tool_choice) and
// context_length. Zero values for none.
func renderCapabilities(c config.Capabilities) (arch, caps map[string]any, params []string, ctx int) {
	if c.Empty() {
		return nil, nil, nil, 0
	}
	hasIn, hasOut := len(c.In) > 0, len(c.Out) > 0
	if hasIn || hasOut {
		arch, caps = map[string]any{}, map[string]any{}
	}
	if hasIn {
		arch["input_modalities"] = c.In
	}
	if hasOut {
		arch["output_modalities"] = c.Out
	}
	in := func(m string) bool { return slices.Contains(c.In, m) }
	out := func(m string) bool { return slices.Contains(c.Out, m) }
	if hasIn && hasOut {
		arch["modality"] = strings.Join(c.In, "+") + "->" + strings.Join(c.Out, "+")
	}
	for name, ok := range map[string]bool{
		"vision":               in("image"),
		"audio_transcriptions": in("audio") && out("text"),
		"audio_speech":         in("text") && out("audio"),
		"image_generation":     in("text") && out("image"),
		"image_to_image":       in("image") && out("image"),
	} {
		if ok {
			caps[name] = true
		}
	}
	if c.Tools || c.Reranker {
		if caps == nil {
			caps = map[string]any{}
		}
	}
	if c.Tools {
		caps["function_calling"] = true
		params = []string{"tools", "tool_choice"}
	}
	if c.Reranker {
		caps["reranker"] = true
	}
	return arch, caps, params, c.Context
}

// modelList is every name GET /v1/models lists (and Ollama's GET
// /api/tags): listed models (and their aliases when
// IncludeAliasesInList), the peers' models by their full names
// PEER/MODEL, named "PEER: MODEL" as llama-swap names them, the listed
// selectors, and the active profile's pins that name nothing else, as
// llama-swap lists them; each with its status; sorted by id.
func (s *Server) modelList() []modelObject {
	created := s.started.Unix()
	cat := s.catalog.Load()
	states := s.modelStates()
	data := make([]modelObject, 0, len(cat.entries)+len(s.cfg.Selectors))
	for _, e := range cat.entries {
		if e.Unlisted {
			continue
		}
		status := routerStatus(states[e.ID])
		data = append(data, catalogObject(&e, e.ID, created, status))
		if s.cfg.IncludeAliasesInList {
			for _, a := range e.Aliases {
				data = append(data, catalogObject(&e, a, created, status))
			}
		}
	}
	set := s.peers.Load()
	if set != nil {
		for _, n := range set.Names() {
			data = append(data, modelObject{ID: n.Name, Object: "model", Created: created, OwnedBy: "loadout", Name: n.Peer + ": " + n.Model,
				Meta: map[string]any{"llamaswap": map[string]any{"type": "peer", "peerID": n.Peer}}, Status: routerStatus(n.State)})
		}
	}
	listed := func(name string) bool { // a name a client can already ask for
		_, sel := s.cfg.Selectors[name]
		return cat.lookup(name) != nil || sel || (set != nil && len(set.Lookup(name)) > 0)
	}
	for _, sel := range s.cfg.Selectors {
		if !sel.Unlisted {
			data = append(data, selectorObject(sel, created, cat, states))
		}
	}
	if p := s.activeProfile(); p != nil {
		for pin, target := range p.Pins {
			if target != "" && !listed(pin) {
				data = append(data, modelObject{ID: pin, Object: "model", Created: created, OwnedBy: "loadout",
					Meta: map[string]any{"llamaswap": map[string]any{"type": "profile"}}, Status: routerStatus("")})
			}
		}
	}
	slices.SortFunc(data, func(a, b modelObject) int { return strings.Compare(a.ID, b.ID) })
	return data
}

// modelStates is each model's state in the router, by id.
func (s *Server) modelStates() map[string]string {
	states := map[string]string{}
	for _, st := range s.router.Models() {
		states[st.Model] = st.State
	}
	return states
}

// catalogObject is catalog model e's /v1/models entry under id: its own
// (meta type "model", with its aliases) or an alias's (type "alias", with
// the model's id).
func catalogObject(e *ModelEntry, id string, created int64, status routerModelStatus) modelObject {
	own := map[string]any{"type": "model"}
	switch {
	case id != e.ID:
		own = map[string]any{"type": "alias", "modelID": e.ID}
	case len(e.Aliases) > 0:
		own["aliases"] = e.Aliases
	}
	return newModelObject(e, id, created, own, status)
}

// allowModelsOrigin lets the page at the request's Origin read the model
// listings (GET /v1/models and /v1/models/{model}), as llama-swap does.
func allowModelsOrigin(w http.ResponseWriter, r *http.Request) {
	if origin := r.Header.Get("Origin"); origin != "" {
		w.Header().Set("Access-Control-Allow-Origin", origin)
	}
}

// listModels is GET /v1/models: modelList in OpenAI's list shape.
func (s *Server) listModels(w http.ResponseWriter, r *http.Request) {
	data := s.modelList()
	allowModelsOrigin(w, r)
	s.writeJSON(w, r, struct {
		Object string        `json:"object"`
		Data   []modelObject `json:"data"`
	}{"list", data})
}

// getModel is GET /v1/models/{model}, OpenAI's "retrieve model": the
// entry /v1/models lists under that id (a peer's model by its full name
// PEER/MODEL), or, for a name a request may use that the list leaves out
// (an alias while include_aliases_in_list is off, an unlisted model, a
// peer's model by its plain name: the first peer's, in peer id order),
// the entry of the model it names under the name asked for. Any other
// name is 404 model_not_found, as a request for it would be.
func (s *Server) getModel(w http.ResponseWriter, r *http.Request) {
	name := mux.Vars(r)["model"]
	allowModelsOrigin(w, r)
	list := s.modelList()
	find := func(id string) *modelObject {
		i := slices.IndexFunc(list, func(m modelObject) bool { return m.ID == id })
		if i < 0 {
			return nil
		}
		return &list[i]
	}
	if m := find(name); m != nil {
		s.writeJSON(w, r, m)
		return
	}
	cat := s.catalog.Load()
	e := cat.lookup(name)
	if e == nil {
		// A peer's model by its plain name: its listed entry, under it.
		if set := s.peers.Load(); set != nil {
			if ts := set.Lookup(name); len(ts) > 0 {
				if m := find(ts[0].Name()); m != nil {
					m.ID = name
					s.writeJSON(w, r, m)
					return
				}
			}
		}
		s.writeError(w, r, cat.unknown(name))
		return
	}
	s.writeJSON(w, r, catalogObject(e, name, s.started.Unix(), routerStatus(s.modelStates()[e.ID])))
}

// runningModel is one entry of GET /running, llama-swap's shape (its
// fields always there, "" when unset); a model
// with replicas adds its Seldon-style state and its replicas (as in
// /api/models), State being the most available of theirs.
type runningModel struct {
	Model        string                 `json:"model"`
	State        string                 `json:"state"`
	Proxy        string                 `json:"proxy"`
	Cmd          string                 `json:"cmd"`
	TTL          int64                  `json:"ttl"` // seconds, 0: never (llama-swap's)
	Name         string                 `json:"name"`
	Description  string                 `json:"description"`
	ReplicaState string                 `json:"replica_state,omitempty"`
	Replicas     []router.ReplicaStatus `json:"replicas,omitempty"`
	// SleepLevel is an asleep (or waking) model's sleep level, 1 or 2.
	SleepLevel int `json:"sleep_level,omitempty"`
}

// running is GET /running: the models with a process (starting, ready or
// stopping, llama-swap's; and asleep, sleeping or waking, whose process
// lives without GPU memory), each with llama-swap's fields (model, state,
// cmd, proxy, ttl in seconds, name, description) and Loadout's.
func (s *Server) running(w http.ResponseWriter, r *http.Request) {
	out := []runningModel{}
	for _, m := range s.router.Models() {
		switch m.State {
		case "starting", "ready", "stopping", "asleep", "sleeping", "waking":
		default:
			continue
		}
		rm := runningModel{Model: m.Model, State: m.State, Proxy: m.Upstream, ReplicaState: m.ReplicaState, Replicas: m.Replicas, SleepLevel: m.SleepLevel}
		if e := s.catalog.Load().lookup(m.Model); e != nil {
			rm.Name, rm.Description = e.Name, e.Description
			rm.Cmd, rm.TTL = e.Cmd, int64(e.TTL/time.Second)
		}
		out = append(out, rm)
	}
	s.writeJSON(w, r, map[string]any{"running": out})
}

// unload is an operator's unload (every model when opt names none). A
// forced one first cuts the requests its models are serving, each
// answered 503 model_unloaded (inflight.cut): the server stopped under
// them is the operator's doing, not a failure to grant again.
func (s *Server) unload(ctx context.Context, opt router.UnloadOptions) error {
	if opt.Force {
		if n := s.inflight.cut(opt.Models); n > 0 {
			s.log.Info("forced unload: requests in flight cut", "models", opt.Models, "requests", n)
		}
	}
	return s.router.Unload(ctx, opt)
}

// unloadOptions reads an unload's query: ?force=true (or a bare ?force)
// stops models with requests in flight at once (otherwise they stop when
// those end). Errors: another value of force (force=yes read as false
// waited for requests the operator meant to cut), or force given twice.
func unloadOptions(r *http.Request, models ...string) (router.UnloadOptions, *apiError) {
	opt := router.UnloadOptions{Models: models}
	vs, given := r.URL.Query()["force"]
	if !given {
		return opt, nil
	}
	if len(vs) > 1 {
		return opt, badRequest("invalid_force", "parameter force given twice")
	}
	if vs[0] == "" {
		opt.Force = true
		return opt, nil
	}
	force, err := strconv.ParseBool(vs[0])
	if err != nil {
		return opt, badRequest("invalid_force", "parameter force: "+strconv.Quote(vs[0])+": want true or false")
	}
	opt.Force = force
	return opt, nil
}

// unloadAll is GET|POST /unload and POST /api/models/unload: stop every
// running model and answer once they have exited, as llama-swap answers
// each: "OK", and {"msg": "ok"} from the API's.
func (s *Server) unloadAll(w http.ResponseWriter, r *http.Request) {
	opt, e := unloadOptions(r)
	if e != nil {
		s.writeError(w, r, e)
		return
	}
	if err := s.unload(r.Context(), opt); err != nil {
		s.writeError(w, r, acquireError(r.Context(), err, "(all)"))
		return
	}
	if r.URL.Path == "/api/models/unload" {
		s.writeJSON(w, r, map[string]string{"msg": "ok"})
		return
	}
	writeOK(w)
}

// pathModel resolves the {model} of the route (an id or alias), records it
// on the exchange, and returns its catalog entry; for an unknown model it
// answers 404 and returns nil.
func (s *Server) pathModel(w http.ResponseWriter, r *http.Request) *ModelEntry {
	name := mux.Vars(r)["model"]
	e := s.catalog.Load().lookup(name)
	if e == nil {
		s.writeError(w, r, s.catalog.Load().unknown(name))
		return nil
	}
	exchangeOf(r).model = e.ID
	return e
}

// unloadModel is POST /api/models/unload/{model}: the model by id or alias.
func (s *Server) unloadModel(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["model"]
	if !s.draining(id) { // a model a reload removed is still the router's while it drains
		e := s.pathModel(w, r)
		if e == nil {
			return
		}
		id = e.ID
	}
	opt, e := unloadOptions(r, id)
	if e != nil {
		s.writeError(w, r, e)
		return
	}
	if err := s.unload(r.Context(), opt); err != nil {
		s.writeError(w, r, acquireError(r.Context(), err, id))
		return
	}
	writeOK(w)
}

// draining reports whether id is a model the catalog no longer has (a
// reload removed it) but the router still runs, finishing its requests
// in flight: an operator may still unload it (with ?force=true, cut
// them), as `loadout ps` lists it.
func (s *Server) draining(id string) bool {
	return s.catalog.Load().lookup(id) == nil && s.runs(id)
}

// runs reports whether the router's table has a row id: a model's, or
// one of its replicas' (m@2).
func (s *Server) runs(id string) bool {
	for _, m := range s.router.Models() {
		if m.Model == id {
			return true
		}
		for _, r := range m.Replicas {
			if r.ID == id {
				return true
			}
		}
	}
	return false
}

func writeOK(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("OK"))
}

// apiModel is one entry of GET /api/models: the router's status and the
// catalog's description of the model.
type apiModel struct {
	router.ModelStatus
	Name         string   `json:"name,omitempty"`
	Description  string   `json:"description,omitempty"`
	Aliases      []string `json:"aliases,omitempty"`
	UseModelName string   `json:"use_model_name,omitempty"`
	Unlisted     bool     `json:"unlisted,omitempty"`
	Backend      string   `json:"backend,omitempty"`
}

// apiModels is GET /api/models.
func (s *Server) apiModels(w http.ResponseWriter, r *http.Request) {
	statuses := s.router.Models()
	out := make([]apiModel, 0, len(statuses))
	for _, st := range statuses {
		m := apiModel{ModelStatus: st}
		if e := s.catalog.Load().lookup(st.Model); e != nil {
			m.Name, m.Description, m.Aliases = e.Name, e.Description, e.Aliases
			m.UseModelName, m.Unlisted, m.Backend = e.UseModelName, e.Unlisted, e.Backend
		}
		out = append(out, m)
	}
	s.writeJSON(w, r, map[string]any{"models": out})
}

// apiPolicy is one entry of GET /api/policies.
type apiPolicy struct {
	Role           string                `json:"role"`
	Name           string                `json:"name,omitempty"`
	Active         bool                  `json:"active"`             // the policy called now for its role
	Fallback       bool                  `json:"fallback,omitempty"` // the built-in fallback of a disabled policy
	DisabledReason string                `json:"disabled_reason,omitempty"`
	RetryAt        time.Time             `json:"retry_at,omitzero"` // when a disabled policy is tried again
	Healthy        *bool                 `json:"healthy,omitempty"` // absent when PolicyStatus does not describe the role
	Crashes        int                   `json:"crashes"`
	Instantiations int                   `json:"instantiations,omitempty"`
	LastError      string                `json:"last_error,omitempty"`
	Counters       router.PolicyCounters `json:"counters"`
	ReloadError    string                `json:"reload_error,omitempty"` // why the last hot reload was refused
	Reloaded       time.Time             `json:"reloaded,omitzero"`      // when a hot reload loaded it
}

// apiPolicies is GET /api/policies: the loaded policies and how often each
// failed or had an effect refused.
func (s *Server) apiPolicies(w http.ResponseWriter, r *http.Request) {
	counters := s.router.Counters()
	var infos []PolicyInfo
	if s.cfg.PolicyStatus != nil {
		infos = s.cfg.PolicyStatus()
	}
	out := make([]apiPolicy, 0, len(infos)+len(counters))
	seen := map[string]bool{}
	for _, pi := range infos {
		healthy := pi.Healthy
		ap := apiPolicy{Role: pi.Role, Name: pi.Name, Active: pi.Active, Fallback: pi.Fallback, DisabledReason: pi.DisabledReason,
			RetryAt: pi.RetryAt, Healthy: &healthy, Crashes: pi.Crashes, Instantiations: pi.Instantiations, LastError: pi.LastError,
			ReloadError: pi.ReloadError, Reloaded: pi.Reloaded}
		ap.Counters = counters[pi.Role].Of(pi.Name, pi.Active)
		out = append(out, ap)
		seen[pi.Role] = true
	}
	roles := make([]string, 0, len(counters))
	for role := range counters {
		if !seen[role] {
			roles = append(roles, role)
		}
	}
	slices.Sort(roles)
	for _, role := range roles {
		out = append(out, apiPolicy{Role: role, Counters: counters[role]})
	}
	s.writeJSON(w, r, map[string]any{"policies": out})
}

// apiGPUs is GET /api/gpus: each device's total, free and leased memory and
// which models (and jobs) hold leases on it.
func (s *Server) apiGPUs(w http.ResponseWriter, r *http.Request) {
	if s.cfg.GPUs == nil {
		s.writeJSON(w, r, map[string]any{"source": "none", "devices": []any{}})
		return
	}
	v, err := s.cfg.GPUs()
	if err != nil {
		s.writeError(w, r, &apiError{status: http.StatusServiceUnavailable, code: "gpu_unavailable", msg: "reading the GPUs: " + err.Error()})
		return
	}
	s.writeJSON(w, r, v)
}

// reloadPolicies is POST /api/policies/reload: a hot reload of the
// configuration and policy modules (Config.Reload). 200 with what changed
// and the scheduling pause; 422 with the reason when the new configuration
// or a module is refused (the old ones keep running); 404 when the server
// cannot reload.
func (s *Server) reloadPolicies(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Reload == nil {
		s.writeError(w, r, &apiError{status: http.StatusNotFound, code: "not_found", msg: "this server cannot reload its policies"})
		return
	}
	res, err := s.cfg.Reload(r.Context())
	if err != nil {
		s.writeError(w, r, &apiError{status: http.StatusUnprocessableEntity, code: "reload_refused", msg: "reload refused; the running policies keep serving: " + err.Error()})
		return
	}
	s.writeJSON(w, r, res)
}

// BuildInfo is the binary's build metadata as GET /api/version reports
// it, in llama-swap's shape (internal/server/apigroup.go):
// {"version","commit","build_date"}. Empty fields are reported empty.
type BuildInfo struct {
	Version string `json:"version"`    // e.g. "v0.4.0", or "dev"
	Commit  string `json:"commit"`     // the VCS revision, hex
	Date    string `json:"build_date"` // RFC 3339, as the toolchain records it
}

// apiVersion is GET /api/version.
func (s *Server) apiVersion(w http.ResponseWriter, r *http.Request) {
	s.writeJSON(w, r, s.cfg.Build)
}

// cancelInflight is POST /api/inflight/{id}/cancel, llama-swap's: it ends
// the requests in flight or queued whose request id (X-Request-Id, the
// client's or Loadout's) is id. Each one's client gets a 499 with code
// "request_cancelled" (or an SSE error event, its stream under way), a
// queued one leaves the queue without loading anything, and a proxied
// one's upstream request is cancelled. The answer is
// {"msg":"ok","cancelled":N}, or a 404 when no request has that id.
func (s *Server) cancelInflight(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["id"]
	n := s.inflight.cancel(id, exchangeOf(r))
	if n == 0 {
		s.writeError(w, r, &apiError{status: http.StatusNotFound, code: "request_not_found",
			msg: fmt.Sprintf("no request %s is in flight", echoed(id))})
		return
	}
	s.writeJSON(w, r, struct {
		Msg       string `json:"msg"`
		Cancelled int    `json:"cancelled"`
	}{"ok", n})
}
