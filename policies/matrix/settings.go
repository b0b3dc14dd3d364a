package main

import (
	"strconv"

	sdksettings "github.com/loadout-dev/loadout/sdk/settings"
)

// maxCost is the largest evict cost, so that sums never overflow.
const maxCost = 1_000_000_000

// settings is the validated shape of the policy's settings JSON, llama-swap's
// `matrix:` as written:
//
//	{"matrix": {"vars": {"g": "gemma-27b", …},
//	            "evict_costs": {"g": 50, "llama-70b": 30, …},
//	            "sets": {"standard": "(g | q) & v", …}}}
//
// sets may also be a list of {"name", "expr"} objects; either way their
// order is kept, because it breaks ties.
type settings struct {
	vars  map[string]string // var id → model id
	costs []costSetting     // in the order given
	sets  []setSettings     // in the order given: earlier sets win ties
}

// costSetting is one evict_costs entry: key is a var id or a model id.
type costSetting struct {
	key  string
	cost int64
	path string
}

type setSettings struct {
	name     string
	expr     string
	path     string // the expression's setting, for errors
	namePath string // the name's setting (the same as path when sets is an object)
}

// parseSettings decodes and checks the shape of raw; what the expressions
// mean is checked when the matrix is compiled. Errors are
// *sdksettings.Error naming the setting.
func parseSettings(raw []byte) (settings, error) {
	var s settings
	root, err := sdksettings.Decode(raw)
	if err != nil {
		return s, err
	}
	top, err := root.Object("matrix")
	if err != nil {
		return s, err
	}
	m, err := top.Get("matrix").Object("vars", "evict_costs", "sets")
	if err != nil {
		return s, err
	}
	vars, err := m.Get("vars").Object()
	if err != nil {
		return s, err
	}
	for _, id := range vars.Keys() {
		v := vars.Get(id)
		if !validVarID(id) {
			return s, sdksettings.NewError(v.Path(), "var ids are 1 to 32 ASCII letters, digits, '-' or '.' (llama-swap's rule), got "+strconv.Quote(id))
		}
		model, err := v.String()
		if err != nil {
			return s, err
		}
		if model == "" {
			return s, sdksettings.NewError(v.Path(), "empty model id")
		}
		if s.vars == nil {
			s.vars = make(map[string]string)
		}
		s.vars[id] = model
	}
	costs, err := m.Get("evict_costs").Object()
	if err != nil {
		return s, err
	}
	for _, key := range costs.Keys() {
		v := costs.Get(key)
		c, err := v.Int(1, maxCost)
		if err != nil {
			return s, err
		}
		s.costs = append(s.costs, costSetting{key: key, cost: c, path: v.Path()})
	}
	sets := m.Get("sets")
	if sets.Kind() == sdksettings.Object {
		obj, _ := sets.Object()
		for _, name := range obj.Keys() {
			v := obj.Get(name)
			expr, err := v.String()
			if err != nil {
				return s, err
			}
			s.sets = append(s.sets, setSettings{name: name, expr: expr, path: v.Path(), namePath: v.Path()})
		}
		return s, nil
	}
	if !sets.IsNull() && sets.Kind() != sdksettings.List {
		return s, sdksettings.NewError(sets.Path(), `want an object of set names to expressions, or a list of {"name", "expr"} objects`)
	}
	items, _ := sets.List()
	for _, item := range items {
		obj, err := item.Object("name", "expr")
		if err != nil {
			return s, err
		}
		nv := obj.Get("name")
		set := setSettings{namePath: nv.Path()}
		if set.name, err = nv.String(); err != nil {
			return s, err
		}
		ev := obj.Get("expr")
		if set.expr, err = ev.String(); err != nil {
			return s, err
		}
		set.path = ev.Path()
		s.sets = append(s.sets, set)
	}
	return s, nil
}

// validVarID reports whether id matches ^[a-zA-Z0-9.-]{1,32}$, llama-swap's
// rule for var names (older versions allowed 1 to 8 alphanumerics, a
// subset).
func validVarID(id string) bool {
	if len(id) < 1 || len(id) > 32 {
		return false
	}
	for i := range len(id) {
		if c := id[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// validSetName reports whether name can be referenced as +name.
func validSetName(name string) bool {
	if name == "" {
		return false
	}
	for i := range len(name) {
		if !isNameByte(name[i]) {
			return false
		}
	}
	return true
}
