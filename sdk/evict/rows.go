package evict

import (
	"iter"

	"github.com/loadout-dev/loadout/sdk"
)

// Rows is what a router keeps of each model between swaps (a T per
// model: its counts, its history), by name and in the order of the host's
// demand list (sdk.DemandAt.List, sorted by name). A router that folds
// every model's counts at every swap walks the list and its rows side by
// side (Align), without a lookup by name per model: on long replays with
// a cold load at nearly every request those lookups were the learning
// routers' largest cost (docs/BENCHMARKS.md, "Replay speed of every
// router"). The zero value is empty; like a Planner it is not safe for
// concurrent use.
type Rows[T any] struct {
	byName map[string]*T
	// names and row are the demand list's names at the last Align and
	// each one's T, position for position.
	names []string
	row   []*T
}

// Align returns each model's T in the order of list (a demand list,
// sorted by name), a zero T made for a model never listed before. The
// slice is valid until the next Align. While the list names the same
// models as at the last Align, which it does until a reload changes the
// model table, Align only compares the names; otherwise it rebuilds the
// order. A model a reload removed keeps its T (Get finds it, and Align
// hands it back if the model is added again): a router that must tell a
// model added again from one never gone compares its own record with the
// host's counts, which start again from 0.
func (r *Rows[T]) Align(list []sdk.ModelDemand) []*T {
	if len(r.names) == len(list) {
		i := 0
		for i < len(list) && r.names[i] == list[i].Name {
			i++
		}
		if i == len(list) {
			return r.row
		}
	}
	if r.byName == nil {
		r.byName = make(map[string]*T, len(list))
	}
	r.names, r.row = r.names[:0], r.row[:0]
	for i := range list {
		name := list[i].Name
		t := r.byName[name]
		if t == nil {
			t = new(T)
			r.byName[name] = t
		}
		r.names = append(r.names, name)
		r.row = append(r.row, t)
	}
	return r.row
}

// Get returns model name's T, nil for a model no Align has listed.
func (r *Rows[T]) Get(name string) *T { return r.byName[name] }

// All yields every model's name and T that an Align has listed, those a
// reload removed too, in no particular order.
func (r *Rows[T]) All() iter.Seq2[string, *T] {
	return func(yield func(string, *T) bool) {
		for name, t := range r.byName {
			if !yield(name, t) {
				return
			}
		}
	}
}
