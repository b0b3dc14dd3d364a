package config

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// ProtectedParams are the request-body fields a filter may neither strip
// nor set: "model" (llama-swap's ProtectedParams; the proxy routes by it
// and useModelName rewrites it) and Loadout's own request fields
// x_priority and x_client_id, which the proxy reads and never sends
// upstream. They are matched without regard to case, as encoding/json
// matches the body's keys. A filter naming one is a configuration error.
var ProtectedParams = []string{"model", "x_priority", "x_client_id"}

// Filters is a model's request filters (llama-swap's filters:), applied
// by the proxy to the JSON body of every request for the model before its
// upstream sees it, in llama-swap's order: useModelName, StripParams,
// SetParams, then SetParamsByID (which overrides SetParams). Each names a
// top-level field of the body; multipart forms and /upstream/ requests are
// passed on unfiltered (llama-swap filters JSON bodies only).
type Filters struct {
	// StripParams are the fields removed from the body (llama-swap's
	// stripParams, a comma-separated string; its legacy spelling
	// strip_params is read too), sorted, without repeats or blanks.
	StripParams []string
	// SetParams are the fields set in the body, replacing the client's
	// value or added when absent (llama-swap's setParams), sorted by key.
	SetParams []Param
	// SetParamsByID holds, per name a client may request the model by, the
	// fields set after SetParams (llama-swap's setParamsByID). Every key
	// other than the model's id is also an alias of the model (added to
	// Model.Aliases), as in llama-swap.
	SetParamsByID map[string][]Param
}

// Param is one field a filter sets: its key and its value as JSON
// (string, number, boolean, null, array or object; macros substituted
// with their types kept).
type Param struct {
	Key   string
	Value json.RawMessage
}

// Empty reports whether the filters change nothing.
func (f Filters) Empty() bool {
	return len(f.StripParams) == 0 && len(f.SetParams) == 0 && len(f.SetParamsByID) == 0
}

// filterKeys are the keys of a filters: block.
var filterKeys = []string{"stripParams", "setParams", "setParamsByID", "strip_params"}

// filters decodes a model's filters: block at path (models.ID.filters).
// byID receives the key node of each setParamsByID entry, for the alias
// checks across models. Errors, each at its line: a protected field, a
// field that is a path (llama-swap hands keys to sjson, where a dot
// descends into an object; Loadout sets top-level fields only), a value
// of the wrong shape, an unknown key.
func (d *decoder) filters(n *yaml.Node, path string) (f Filters, byID []*yaml.Node) {
	var strip, legacy *yaml.Node
	for _, p := range d.pairs(n, path) {
		kp := join(path, p.name)
		switch p.name {
		case "stripParams":
			strip = p.val
		case "strip_params":
			legacy = p.val
		case "setParams":
			f.SetParams = d.params(p.val, kp)
		case "setParamsByID":
			for _, q := range d.pairs(p.val, kp) {
				qp := join(kp, q.name)
				if strings.TrimSpace(q.name) == "" {
					d.errorf(q.key, qp, "a model name cannot be empty")
					continue
				}
				if f.SetParamsByID == nil {
					f.SetParamsByID = map[string][]Param{}
				}
				f.SetParamsByID[q.name] = d.params(q.val, qp)
				byID = append(byID, q.key)
			}
		default:
			d.unknownKey(p.key, kp, filterKeys)
		}
	}
	// llama-swap reads strip_params only when stripParams is empty.
	if strip == nil || isNull(strip) {
		strip, legacy = legacy, nil
	}
	if strip != nil {
		kp := join(path, "stripParams")
		if s, ok := d.str(strip, kp); ok {
			for _, k := range strings.Split(s, ",") {
				k = strings.TrimSpace(k)
				if k == "" || slices.Contains(f.StripParams, k) || !d.paramKey(strip, kp, k, "strip") {
					continue
				}
				f.StripParams = append(f.StripParams, k)
			}
			slices.Sort(f.StripParams)
		}
	}
	return f, byID
}

// params decodes a setParams mapping into Params sorted by key.
func (d *decoder) params(n *yaml.Node, path string) []Param {
	var out []Param
	for _, p := range d.pairs(n, path) {
		kp := join(path, p.name)
		if !d.paramKey(p.key, kp, p.name, "set") {
			continue
		}
		v, err := json.Marshal(d.value(p.val, kp))
		if err != nil {
			d.errorf(p.val, kp, "cannot be passed on as JSON: %v", err)
			continue
		}
		out = append(out, Param{Key: p.name, Value: v})
	}
	slices.SortFunc(out, func(a, b Param) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// paramKey checks one field a filter names; verb is "strip" or "set".
func (d *decoder) paramKey(n *yaml.Node, path, key, verb string) bool {
	for _, p := range ProtectedParams {
		if strings.EqualFold(key, p) {
			why := "the proxy routes by it (useModelName renames it)"
			if p != "model" {
				why = "it is Loadout's request field, read by the proxy and never sent upstream"
			}
			d.errorf(n, path, "a filter cannot %s %q: %s (llama-swap protects model too)", verb, key, why)
			return false
		}
	}
	if strings.ContainsAny(key, `.*?|#@\`) {
		d.errorf(n, path, "%q is a path: Loadout's filters %s top-level fields only (to change a nested field, set the whole object)", key, verb)
		return false
	}
	return true
}

// filterReport describes f for Report, in one line.
func filterReport(f Filters) string {
	var parts []string
	if len(f.StripParams) > 0 {
		parts = append(parts, "strip "+strings.Join(f.StripParams, ", "))
	}
	set := func(ps []Param) string {
		s := make([]string, len(ps))
		for i, p := range ps {
			s[i] = fmt.Sprintf("%s=%s", p.Key, p.Value)
		}
		return strings.Join(s, ", ")
	}
	if len(f.SetParams) > 0 {
		parts = append(parts, "set "+set(f.SetParams))
	}
	for _, id := range sortedKeys(f.SetParamsByID) {
		parts = append(parts, fmt.Sprintf("as %s set %s", id, set(f.SetParamsByID[id])))
	}
	return strings.Join(parts, "; ")
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
