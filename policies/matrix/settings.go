package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// maxCost is the largest evict cost, so that sums never overflow.
const maxCost = 1_000_000_000

// settings is the validated shape of the policy's settings JSON:
//
//	{"matrix": {"vars": {"g": "gemma-27b", …},
//	            "evict_costs": {"gemma-27b": 50, …},
//	            "sets": [{"name": "standard", "expr": "(g | q) & v"}, …]}}
type settings struct {
	vars  map[string]string // var id → model id
	costs map[string]int64  // model id → evict cost
	sets  []setSettings     // in the order given: earlier sets win ties
}

type setSettings struct {
	name string
	expr string
}

// parseSettings decodes and checks the shape of raw; what the expressions
// mean is checked when the matrix is compiled. Errors name the setting.
func parseSettings(raw []byte) (settings, error) {
	var s settings
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return s, nil
	}
	top, err := object(raw, "settings", "matrix")
	if err != nil {
		return s, err
	}
	val, ok := top["matrix"]
	if !ok || string(val) == "null" {
		return s, nil
	}
	m, err := object(val, "matrix", "vars", "evict_costs", "sets")
	if err != nil {
		return s, err
	}
	if v, ok := m["vars"]; ok {
		if err := json.Unmarshal(v, &s.vars); err != nil {
			return s, fmt.Errorf("matrix.vars: want an object of var ids to model ids, got %s", excerpt(v))
		}
	}
	for _, id := range sortedKeys(s.vars) {
		if !validVarID(id) {
			return s, fmt.Errorf("matrix.vars: var id %q must be 1 to 8 ASCII letters or digits", id)
		}
		if s.vars[id] == "" {
			return s, fmt.Errorf("matrix.vars: var %q: empty model id", id)
		}
	}
	if v, ok := m["evict_costs"]; ok {
		var costs map[string]json.RawMessage
		if err := json.Unmarshal(v, &costs); err != nil {
			return s, fmt.Errorf("matrix.evict_costs: want an object of model ids to costs, got %s", excerpt(v))
		}
		s.costs = make(map[string]int64, len(costs))
		for _, model := range sortedKeys(costs) {
			c, err := strconv.ParseInt(string(costs[model]), 10, 64)
			if err != nil || c < 1 || c > maxCost {
				return s, fmt.Errorf("matrix.evict_costs: %q: want an integer from 1 to %d, got %s", model, maxCost, excerpt(costs[model]))
			}
			s.costs[model] = c
		}
	}
	if v, ok := m["sets"]; ok {
		var sets []json.RawMessage
		if err := json.Unmarshal(v, &sets); err != nil {
			return s, fmt.Errorf(`matrix.sets: want a list of {"name", "expr"} objects, got %s`, excerpt(v))
		}
		for i, raw := range sets {
			where := fmt.Sprintf("matrix.sets[%d]", i)
			obj, err := object(raw, where, "name", "expr")
			if err != nil {
				return s, err
			}
			var set setSettings
			if err := json.Unmarshal(obj["name"], &set.name); err != nil {
				return s, fmt.Errorf("%s: name: want a string, got %s", where, orMissing(obj["name"]))
			}
			if err := json.Unmarshal(obj["expr"], &set.expr); err != nil {
				return s, fmt.Errorf("%s (%q): expr: want a string, got %s", where, set.name, orMissing(obj["expr"]))
			}
			s.sets = append(s.sets, set)
		}
	}
	return s, nil
}

// object decodes raw as a JSON object whose keys are all in known.
func object(raw []byte, where string, known ...string) (map[string]json.RawMessage, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) {
			return nil, fmt.Errorf("%s: invalid JSON: %w", where, err)
		}
		return nil, fmt.Errorf("%s: want an object, got %s", where, excerpt(raw))
	}
	for _, key := range sortedKeys(obj) {
		if !slices.Contains(known, key) {
			return nil, fmt.Errorf("%s: unknown key %q (known: %s)", where, key, strings.Join(known, ", "))
		}
	}
	return obj, nil
}

func orMissing(raw json.RawMessage) string {
	if raw == nil {
		return "nothing"
	}
	return excerpt(raw)
}

// excerpt shortens a JSON value quoted in an error.
func excerpt(raw []byte) string {
	const most = 80
	if len(raw) > most {
		return string(raw[:most]) + "…"
	}
	return string(raw)
}

// validVarID reports whether id matches ^[a-zA-Z0-9]{1,8}$.
func validVarID(id string) bool {
	if len(id) < 1 || len(id) > 8 {
		return false
	}
	for i := range len(id) {
		if c := id[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
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

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
