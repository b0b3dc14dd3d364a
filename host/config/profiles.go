package config

import (
	"maps"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Profile is one entry of `profiles:` (llama-swap's): a named set of model
// name replacements an operator switches on at run time (PUT
// /api/profiles/active). One profile or none is active; startup and a
// configuration reload select none. While a profile is active, a request
// for a name it pins is served as a request for the pin's target, before
// aliases, selectors, filters and routing are applied; a pin with no
// target disables the name (404).
type Profile struct {
	// ID is the key under profiles:.
	ID string
	// Pos is where the profile's key is in the file.
	Pos Pos
	// Description is shown by GET /api/profiles.
	Description string
	// Pins maps a name clients ask for to its target: a model id, an
	// alias, a peer's model or a selector; "" (YAML null or an empty
	// string) disables the name.
	Pins map[string]string
}

// Pin returns what name becomes under p: the target, and whether p pins
// name at all. A pinned name with target "" is disabled.
func (p *Profile) Pin(name string) (target string, pinned bool) {
	if p == nil {
		return "", false
	}
	target, pinned = p.Pins[name]
	return target, pinned
}

// ProfileIDs returns the profile ids, sorted.
func (c *Config) ProfileIDs() []string { return slices.Sorted(maps.Keys(c.Profiles)) }

// profiles decodes `profiles:` with llama-swap's checks
// (internal/config/load.go validateProfiles): a profile is a mapping of
// description and pins, with at least one pin; a pin's name is not empty
// nor a peer model's full name; its target is empty or names a model, an
// alias, a peer's model or a selector. It runs after selectors.
func (d *decoder) profiles(cfg *Config, n *yaml.Node) {
	cfg.Profiles = map[string]*Profile{}
	for _, p := range d.pairs(n, "profiles") {
		path := join("profiles", p.name)
		if strings.TrimSpace(p.name) == "" {
			d.errorf(p.key, path, "a profile's id cannot be empty")
			continue
		}
		if p.val.Kind == yaml.SequenceNode {
			// llama-swap before its pins (9b3a33d7 and older): a list of
			// models run together, asked for as PROFILE:MODEL. Newer
			// llama-swap refuses it; such a file still loads here.
			d.warnf(p.key, path, "llama-swap's old list form of a profile (models run together, asked for as %s:MODEL) is not acted on, and newer llama-swap refuses it: write description and pins", p.name)
			continue
		}
		if p.val.Kind != yaml.MappingNode {
			d.errorf(p.val, path, "want a mapping of description and pins, got a %s", kindName(p.val))
			continue
		}
		prof := &Profile{ID: p.name, Pos: d.pos(p.key), Pins: map[string]string{}}
		for _, q := range d.pairs(p.val, path) {
			kp := join(path, q.name)
			switch q.name {
			case "description":
				prof.Description, _ = d.str(q.val, kp)
			case "pins":
				for _, pin := range d.pairs(q.val, kp) {
					pp := join(kp, pin.name)
					target, ok := d.str(pin.val, pp)
					switch {
					case !ok:
					case strings.TrimSpace(pin.name) == "":
						d.errorf(pin.key, pp, "a pin's name cannot be empty")
					case cfg.peerFullName(pin.name):
						d.errorf(pin.key, pp, "pin %q is a peer model's full name, which is reserved", pin.name)
					case target != "" && !cfg.selectorOrModel(target):
						d.errorf(pin.val, pp, "target %q is not a model, an alias, a peer's model or a selector%s", target, d.didYouMeanModel(cfg, target))
					default:
						prof.Pins[pin.name] = target
					}
				}
			default:
				d.unknownKey(q.key, kp, []string{"description", "pins"})
			}
		}
		if !d.hasPins(p.val) {
			d.errorf(p.key, join(path, "pins"), "pins must list at least one name")
		}
		cfg.Profiles[prof.ID] = prof
	}
}

// find returns the value of key in mapping n.
func (d *decoder) find(n *yaml.Node, key string) (*yaml.Node, bool) {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil, false
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1], true
		}
	}
	return nil, false
}

// hasPins reports whether profile node n has a non-empty pins mapping
// (whose entries may have failed their own checks).
func (d *decoder) hasPins(n *yaml.Node) bool {
	v, ok := d.find(n, "pins")
	return ok && v.Kind == yaml.MappingNode && len(v.Content) > 0
}
