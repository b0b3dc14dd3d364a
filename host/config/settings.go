package config

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	sdksettings "github.com/loadout-dev/loadout/sdk/settings"
	"gopkg.in/yaml.v3"
)

// settingsSource is where a policy's settings came from in the file, so
// that an error a policy reports at a settings path (sdk/settings) can be
// pointed at the YAML node that path names.
type settingsSource struct {
	// root is the mapping the settings path walks: the policy's
	// `settings:` value, or for llama-swap's legacy top-level groups: and
	// matrix: a mapping that holds just that key and its value. nil when
	// there are no settings.
	root *yaml.Node
	// prefix is the key path of root in the file
	// ("routing.router.settings"), "" for the legacy keys, whose settings
	// path is their key path.
	prefix string
	// policyKey names the policy in messages when the error has no settings
	// path ("routing.router", or "matrix" for the legacy key).
	policyKey string
	// at is where to point when the path names nothing in root.
	at Pos
}

// InitError turns err, the error the policy's init returned as host/policy
// reports it, into configuration errors at their place in the file. Each
// settings error in the text (sdk/settings' form, "settings: <path>:
// <message>", parsed by sdksettings.Parse, the same rule the policy
// formatted it with) becomes an *Error at the YAML node its path names
// (the nearest one the path reaches when the rest is not in the file, say
// a key a translation added), with the key path prefixed by where the
// settings are (routing.router.settings.matrix.vars.x, or matrix.vars.x
// for the legacy top-level matrix:). Any other error becomes one *Error at
// the policy. Built-in and third-party policies are treated alike. The
// result is Errors; nil for a nil err.
func (p Policy) InitError(err error) error {
	if err == nil {
		return nil
	}
	src := p.src
	if src == nil {
		src = &settingsSource{at: p.Pos}
	}
	found := sdksettings.Parse(err.Error())
	if len(found) == 0 {
		key := src.policyKey
		if key == "" {
			key = "routing"
		}
		return Errors{{Pos: src.at, Key: key, Message: err.Error()}}
	}
	var out Errors
	for _, e := range found {
		pos := src.at
		if n := src.find(e.Path); n != nil {
			pos = Pos{File: src.at.File, Line: n.Line, Column: n.Column}
		}
		key := src.prefix
		switch {
		case e.Path == "":
		case key == "" || strings.HasPrefix(e.Path, "["):
			key += e.Path
		default:
			key += "." + e.Path
		}
		if key == "" {
			key = src.policyKey
		}
		out = append(out, &Error{Pos: pos, Key: key, Message: e.Message})
	}
	return out
}

// find returns the node the settings path names in root: for an object
// member its key (the line that names the setting), for a list item the
// item; the deepest node reached when the path leaves the file; nil when
// not even its first step is there.
func (s *settingsSource) find(path string) *yaml.Node {
	segs, err := sdksettings.Split(path)
	if err != nil || s.root == nil {
		return nil
	}
	var found *yaml.Node
	n := s.root
	for _, seg := range segs {
		for n != nil && n.Kind == yaml.AliasNode {
			n = n.Alias
		}
		var next, at *yaml.Node
		switch {
		case n == nil:
		case seg.IsIndex && n.Kind == yaml.SequenceNode && seg.Index < len(n.Content):
			next = n.Content[seg.Index]
			at = next
		case !seg.IsIndex && n.Kind == yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == seg.Key {
					at, next = n.Content[i], n.Content[i+1]
				}
			}
		}
		if next == nil {
			break
		}
		found, n = at, next
	}
	return found
}

// WithSetting returns p with the setting at path (sdk/settings' path
// syntax: keys joined by ".", a key that is not a plain name quoted in
// brackets) set to value, a JSON value: a member that exists is replaced
// in place, one that does not is added last, and objects on the way are
// made as needed. The other settings keep their order. It checks nothing
// the policy checks: whether the policy knows the key, or likes the
// value, is for its init to say. Errors: a path that does not parse, that
// names a list item, or that goes through a value that is not an object.
func (p Policy) WithSetting(path string, value json.RawMessage) (Policy, error) {
	segs, err := sdksettings.Split(path)
	if err != nil {
		return p, err
	}
	if len(segs) == 0 {
		return p, fmt.Errorf("setting %q: name a key", path)
	}
	keys := make([]string, len(segs))
	for i, s := range segs {
		if s.IsIndex {
			return p, fmt.Errorf("setting %q: a list item cannot be set on its own; set the list", path)
		}
		keys[i] = s.Key
	}
	out, err := withMember(rawSettings(p.Settings), keys, value)
	if err != nil {
		return p, fmt.Errorf("setting %q: %w", path, err)
	}
	p.Settings = out
	return p, nil
}

// withMember is the JSON object raw with the member at keys set to value.
func withMember(raw []byte, keys []string, value json.RawMessage) (json.RawMessage, error) {
	top, err := members(raw)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(top, func(m member) bool { return m.Key == keys[0] })
	v := value
	if len(keys) > 1 {
		inner := []byte("{}")
		if i >= 0 {
			inner = top[i].Value.(json.RawMessage)
		}
		if v, err = withMember(inner, keys[1:], value); err != nil {
			return nil, fmt.Errorf("%s: %w", keys[0], err)
		}
	}
	if i >= 0 {
		top[i].Value = v
	} else {
		top = append(top, member{keys[0], v})
	}
	return json.Marshal(top)
}
