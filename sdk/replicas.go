package sdk

import "github.com/loadout-dev/loadout/sdk/wire"

// ReplicaSet is one model's replicas as the host runs them (issue 15): a
// model with max_replicas > 1 is several rows of the host's model table,
// each a model to policies (its own state, in-flight count, devices and
// lease), named Replicas in order — the model's own id first, then
// "model@2", "model@3"… A request for the model arrives for the replica
// the host routed it to (the ready one with the fewest in flight); a
// scheduler may grant it on any ready replica of the set, scale out by
// starting a stopped replica (StartSwap) and in by stopping one
// (StopProcesses), keeping between Min and Max running while the model is
// in use. A model without replicas is a set of one (Min = Max = 1).
type ReplicaSet struct {
	Model    string   // the model's id, which clients ask for
	Min, Max uint32   // min_replicas and max_replicas (both replicas: N)
	Replicas []string // the rows' ids, replica 1 (Model itself) first
}

// ReplicaReader is implemented by a Host that knows replicas: the Go SDK's
// Wasm glue (through the optional `replicas` import, ABI version 2, which
// a module imports only if it calls it) and the router. Use it through
// ReadReplicas.
type ReplicaReader interface {
	// Replicas returns the set name belongs to (name may be the model or
	// any of its replicas), or false for an unknown model.
	Replicas(name string) (ReplicaSet, bool)
}

// ReadReplicas returns the replica set of name from h. A host that does
// not implement ReplicaReader (one built before replicas) knows none: the
// set is name alone, found.
func ReadReplicas(h Host, name string) (ReplicaSet, bool) {
	if r, ok := h.(ReplicaReader); ok {
		return r.Replicas(name)
	}
	return ReplicaSet{Model: name, Min: 1, Max: 1, Replicas: []string{name}}, true
}

func (m *ReplicaSet) kind() wire.Kind { return wire.MsgReplicaSet }
func (m *ReplicaSet) encode(e *encoder) {
	e.str(m.Model)
	e.u32(m.Min)
	e.u32(m.Max)
	e.strs(m.Replicas)
}
func (m *ReplicaSet) decode(d *decoder) {
	m.Model = d.str()
	m.Min = d.u32()
	m.Max = d.u32()
	m.Replicas = d.strs()
}
