package router

import (
	"slices"
	"time"

	"github.com/loadout-dev/loadout/sdk"
)

// Replicas (issue 15): a model with max_replicas > 1 is several rows of
// the process table, one per replica (host/config's ReplicaID: "m",
// "m@2", …), each with its own server process, port and GPU lease, and
// its own state. What ties them together is here:
//
//   - routing: a request for the model goes to the ready replica with the
//     fewest requests in flight, among those under their limit first, so a
//     replica being loaded delays nothing a ready one can take; with none
//     ready, to one being loaded; with none running, to the first not in
//     its start backoff (route);
//   - the scheduler may serve a request on any ready replica of the model
//     it asked for (effects.GrantServe), so a request queued while one
//     replica was busy can go to a sibling that became ready;
//   - policies see each replica as a model and read the set through
//     sdk.ReplicaReader (effects.Replicas): a scheduler scales out by
//     starting a stopped replica and in by stopping one;
//   - the API shows one entry per model, its state derived from its
//     replicas' as Seldon Core v2 derives a model's (replicaStatus).

// replicaSet is one model's replicas, rows of the table in replica order.
type replicaSet struct {
	model    string
	rows     []string
	min, max int
}

// indexReplicas rebuilds l.replicas from the table: run at start and after
// every change of the table. A model is a set when its max_replicas is
// above 1 or when a row still names it as its model: after a reload that
// lowers the count to 1, the rows removed drain as members of their
// model's set, the model's own row with them.
func (l *loopState) indexReplicas() {
	clear(l.replicas)
	bases := map[string]bool{}
	for _, name := range l.names {
		m := l.models[name]
		switch {
		case m.cfg.ReplicaOf != "":
			bases[m.cfg.ReplicaOf] = true
		case m.cfg.MaxReplicas > 1:
			bases[name] = true
		}
	}
	for _, name := range l.names {
		m := l.models[name]
		base := m.cfg.ReplicaOf
		if base == "" {
			if !bases[name] {
				continue
			}
			base = name
		}
		set := l.replicas[base]
		if set == nil {
			if l.replicas == nil {
				l.replicas = map[string]*replicaSet{}
			}
			set = &replicaSet{model: base}
			l.replicas[base] = set
		}
		set.rows = append(set.rows, name)
		if base == name {
			set.min, set.max = max(m.cfg.MinReplicas, 1), max(m.cfg.MaxReplicas, 1)
		}
	}
	for _, set := range l.replicas {
		slices.SortFunc(set.rows, func(a, b string) int {
			return l.models[a].cfg.Replica - l.models[b].cfg.Replica
		})
	}
}

// withReplicas is names with, after each model that has replicas, its
// other replicas (an unload of a model unloads them all), each once.
func (l *loopState) withReplicas(names []string) []string {
	if len(l.replicas) == 0 {
		return names
	}
	out := make([]string, 0, len(names))
	for _, name := range names {
		rows := []string{name}
		if set := l.replicas[name]; set != nil {
			rows = set.rows
		}
		for _, row := range rows {
			if !slices.Contains(out, row) {
				out = append(out, row)
			}
		}
	}
	return out
}

// replicaSetOf returns the set the row name belongs to, or nil.
func (l *loopState) replicaSetOf(name string) *replicaSet {
	m, ok := l.models[name]
	if !ok {
		return nil
	}
	base := m.cfg.ReplicaOf
	if base == "" {
		base = name
	}
	return l.replicas[base]
}

// siblings reports whether rows a and b are replicas of one model.
func (l *loopState) siblings(a, b string) bool {
	set := l.replicaSetOf(a)
	return set != nil && set == l.replicaSetOf(b)
}

// route picks the replica a request for a model with replicas goes to and
// makes it the request's model (w.asked keeps the name asked for). A
// model without replicas, or a replica named directly, is left alone.
func (r *Router) route(w *waiter) {
	l := &r.loop
	set := l.replicas[w.req.Model]
	if set == nil {
		return
	}
	w.asked = w.req.Model
	w.req.Model = l.pick(set, r.cfg.Clock())
}

// pick is route's choice among set's rows.
func (l *loopState) pick(set *replicaSet, now time.Time) string {
	best, bestRoom := "", false
	for _, name := range set.rows {
		m := l.models[name]
		if m.removed || m.visible() != sdk.StateReady || l.evicting(name) {
			continue
		}
		limit := int(m.admitLimit)
		if limit == 0 {
			limit = int(m.cfg.ConcurrencyLimit)
		}
		room := limit == 0 || m.inFlight < limit
		switch {
		case best == "",
			room && !bestRoom,
			room == bestRoom && m.inFlight < l.models[best].inFlight:
			best, bestRoom = name, room
		}
	}
	if best != "" {
		return best
	}
	for _, name := range set.rows {
		if l.swaps[name] != nil {
			return name
		}
	}
	for _, name := range set.rows {
		m := l.models[name]
		if !m.removed && !m.state.Running() && !now.Before(m.retryAt) {
			return name
		}
	}
	return set.rows[0]
}

// Replicas implements sdk.ReplicaReader for both policies: name may be a
// model or any of its replicas. A model without replicas is a set of one.
func (fx *effects) Replicas(name string) (sdk.ReplicaSet, bool) {
	l := &fx.r.loop
	if _, ok := l.models[name]; !ok {
		return sdk.ReplicaSet{}, false
	}
	set := l.replicaSetOf(name)
	if set == nil {
		return sdk.ReplicaSet{Model: name, Min: 1, Max: 1, Replicas: []string{name}}, true
	}
	return sdk.ReplicaSet{Model: set.model, Min: uint32(set.min), Max: uint32(set.max), Replicas: slices.Clone(set.rows)}, true
}

func (h readOnlyHost) Replicas(name string) (sdk.ReplicaSet, bool) { return h.fx.Replicas(name) }

// ReplicaStatus is one replica as GET /api/models shows it: its row's
// figures and its state in Seldon Core v2's replica vocabulary
// (replicaState).
type ReplicaStatus struct {
	Replica   int       `json:"replica"` // 1-based
	ID        string    `json:"id"`      // the row's id: the model's for replica 1, "model@k" after
	State     string    `json:"state"`
	InFlight  int       `json:"in_flight"`
	Queued    int       `json:"queued"`
	Loading   int       `json:"loading"`
	Served    uint64    `json:"served"` // requests granted to it since it joined the table
	Upstream  string    `json:"upstream,omitempty"`
	Devices   []int     `json:"devices,omitempty"`
	LastError string    `json:"last_error,omitempty"`
	RetryAt   time.Time `json:"retry_at,omitzero"`
}

// Replica states, Seldon Core v2's names for a model replica's states.
const (
	ReplicaUnloaded      = "Unloaded"      // no process
	ReplicaLoadRequested = "LoadRequested" // its swap waits for evictions to stop
	ReplicaLoading       = "Loading"       // its server is starting
	ReplicaLoaded        = "Loaded"        // serving
	ReplicaUnloading     = "Unloading"     // stopping, or draining for an unload
	ReplicaLoadFailed    = "LoadFailed"    // its last start failed, or it crashed
)

// Model states derived from the replicas' (Seldon Core v2's model states).
const (
	ModelAvailable   = "ModelAvailable"   // at least min_replicas loaded, none loading
	ModelProgressing = "ModelProgressing" // replicas are loading, or fewer than min_replicas are loaded while it runs
	ModelFailed      = "ModelFailed"      // nothing loaded and a replica's last start failed
	ModelTerminating = "ModelTerminating" // every running replica is stopping
	ModelTerminated  = "ModelTerminated"  // no replica running
)

// replicaState is m's state in Seldon's replica vocabulary.
func (l *loopState) replicaState(m *model) string {
	switch m.visible() {
	case sdk.StateStarting:
		if sw := l.swaps[m.name]; sw != nil && sw.pendingStops > 0 {
			return ReplicaLoadRequested
		}
		return ReplicaLoading
	case sdk.StateReady:
		return ReplicaLoaded
	case sdk.StateStopping:
		return ReplicaUnloading
	case sdk.StateFailed:
		return ReplicaLoadFailed
	}
	return ReplicaUnloaded
}

// foldReplicas turns the rows of each model with replicas into one
// status: the model's own row carries the replicas, its counts summed and
// its State derived (the most available of its replicas': ready, else
// starting, else stopping, else failed, else stopped), so clients that
// know nothing of replicas read it as one model.
func (l *loopState) foldReplicas(rows []ModelStatus) []ModelStatus {
	if len(l.replicas) == 0 {
		return rows
	}
	byName := make(map[string]int, len(rows))
	for i, st := range rows {
		byName[st.Model] = i
	}
	out := make([]ModelStatus, 0, len(rows))
	for _, st := range rows {
		set := l.replicaSetOf(st.Model)
		if set == nil {
			out = append(out, st)
			continue
		}
		if st.Model != set.model {
			continue
		}
		var counts [5]int // by sdk.ModelState
		agg := st
		agg.InFlight, agg.Queued, agg.Loading, agg.Devices, agg.Upstream = 0, 0, 0, nil, ""
		agg.Replicas = make([]ReplicaStatus, 0, len(set.rows))
		for k, name := range set.rows {
			rs := rows[byName[name]]
			m := l.models[name]
			counts[m.visible()]++
			agg.InFlight += rs.InFlight
			agg.Queued += rs.Queued
			agg.Loading += rs.Loading
			agg.LastUse = later(agg.LastUse, rs.LastUse)
			for _, d := range rs.Devices {
				if !slices.Contains(agg.Devices, d) {
					agg.Devices = append(agg.Devices, d)
				}
			}
			if agg.Upstream == "" {
				agg.Upstream = rs.Upstream
			}
			agg.Replicas = append(agg.Replicas, ReplicaStatus{
				Replica: k + 1, ID: name, State: l.replicaState(m), InFlight: rs.InFlight, Queued: rs.Queued,
				Loading: rs.Loading, Served: m.served, Upstream: rs.Upstream, Devices: rs.Devices,
				LastError: rs.LastError, RetryAt: rs.RetryAt,
			})
		}
		slices.Sort(agg.Devices)
		agg.MinReplicas, agg.MaxReplicas = set.min, set.max
		agg.ReadyReplicas = counts[sdk.StateReady]
		agg.State = derivedState(counts)
		agg.ReplicaState = seldonState(counts, set.min)
		out = append(out, agg)
	}
	return out
}

// setStatus is the one status of the model of set, folded from its
// replicas' (foldReplicas), with the counts of held callers per row; ok
// is false when the model's own row has left the table (its other rows
// still draining), which has no entry to fold into.
func (l *loopState) setStatus(set *replicaSet, queued, loading map[string]int) (st ModelStatus, ok bool) {
	rows := make([]ModelStatus, 0, len(set.rows))
	for _, name := range set.rows {
		rows = append(rows, l.status(name, queued[name], loading[name]))
	}
	folded := l.foldReplicas(rows)
	if len(folded) == 0 {
		return ModelStatus{}, false
	}
	return folded[0], true
}

// derivedState is a model's state from its replicas' counts by state:
// the most available one present.
func derivedState(counts [5]int) string {
	for _, s := range []sdk.ModelState{sdk.StateReady, sdk.StateStarting, sdk.StateStopping, sdk.StateFailed} {
		if counts[s] > 0 {
			return s.String()
		}
	}
	return sdk.StateStopped.String()
}

// seldonState is a model's state from its replicas' counts by state, as
// Seldon Core v2 derives it, with min the replicas it should have while
// it runs.
func seldonState(counts [5]int, min int) string {
	ready, starting, stopping := counts[sdk.StateReady], counts[sdk.StateStarting], counts[sdk.StateStopping]
	switch {
	case starting > 0, ready > 0 && ready < min:
		return ModelProgressing
	case ready > 0:
		return ModelAvailable
	case stopping > 0:
		return ModelTerminating
	case counts[sdk.StateFailed] > 0:
		return ModelFailed
	}
	return ModelTerminated
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
