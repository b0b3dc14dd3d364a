package config

import (
	"maps"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Selector strategies (llama-swap's selectors: strategy).
const (
	// SelectorWarm picks the first target that is ready, else the first
	// that is starting, else starts the first.
	SelectorWarm = "warm"
	// SelectorPin always picks the first target; the rest are reference
	// data.
	SelectorPin = "pin"
	// SelectorSpillover fills the targets in order: the active targets
	// take requests up to Spillover each before the next target is started.
	SelectorSpillover = "spillover"
)

// Selector is one entry of `selectors:` (llama-swap's): a virtual model id
// that the run loop resolves to one of its targets per request, by its
// strategy, from the state of the targets at the moment the request
// arrives (host/router's Request.Select).
type Selector struct {
	// ID is the key under selectors:, the name clients ask for.
	ID string
	// Pos is where the selector's key is in the file.
	Pos Pos
	// Strategy is SelectorWarm, SelectorPin or SelectorSpillover.
	Strategy string
	// Targets are the names as written (model ids, aliases or peer
	// models), in order.
	Targets []string
	// Models are Targets resolved: a local target's model id (aliases
	// resolved), a peer target's name as written (host/peers resolves it).
	Models []string
	// Spillover is how many requests each active target takes before the
	// next is started (settings.spillover, default 1; spillover only).
	Spillover int
	// Name, Description and Metadata are shown in /v1/models; Unlisted
	// hides the selector from it.
	Name, Description string
	Unlisted          bool
	Metadata          map[string]any
}

// Local reports whether target i of s is a local model (not a peer's).
func (s *Selector) Local(c *Config, i int) bool {
	_, ok := c.Models[s.Models[i]]
	return ok
}

var selectorKeys = []string{"strategy", "targets", "settings", "name", "description", "unlisted", "metadata"}

// selectors decodes `selectors:` with llama-swap's checks
// (internal/config/selectors.go): an id that is no model id, alias or
// peer model's full name; a known strategy; targets that name models,
// aliases or peer models but no selector (no chaining); warm targets
// local; spillover ≥ 1, no target twice, and local spillover targets in
// one group that does not swap (llama-swap's coexistence rule, checked
// for the group router). Loadout adds one rule: spillover targets are
// local models, since the run loop counts what each one holds.
func (d *decoder) selectors(cfg *Config, n *yaml.Node) {
	cfg.Selectors = map[string]*Selector{}
	nodes := map[string]*yaml.Node{}
	for _, p := range d.pairs(n, "selectors") {
		nodes[p.name] = p.key
	}
	for _, p := range d.pairs(n, "selectors") {
		path := join("selectors", p.name)
		s := &Selector{ID: p.name, Pos: d.pos(p.key), Spillover: 1}
		switch {
		case strings.TrimSpace(p.name) == "":
			d.errorf(p.key, path, "a selector's id cannot be empty")
			continue
		case cfg.Models[p.name] != nil:
			d.errorf(p.key, path, "selector %q is also the id of model %s (%s)", p.name, p.name, d.place(cfg.Models[p.name].Pos))
			continue
		case cfg.aliases[p.name] != "":
			d.errorf(p.key, path, "selector %q is also an alias of model %s", p.name, cfg.aliases[p.name])
			continue
		case cfg.peerFullName(p.name):
			d.errorf(p.key, path, "selector %q is also a peer model's full name, which is reserved", p.name)
			continue
		}
		var targets []*yaml.Node
		var settings *yaml.Node
		for _, q := range d.pairs(p.val, path) {
			kp := join(path, q.name)
			switch q.name {
			case "strategy":
				s.Strategy, _ = d.str(q.val, kp)
				switch s.Strategy {
				case SelectorWarm, SelectorPin, SelectorSpillover:
				default:
					d.errorf(q.val, kp, "unknown strategy %q (valid: warm, pin, spillover)", s.Strategy)
				}
			case "targets":
				targets, _ = d.items(q.val, kp)
			case "settings":
				settings = q.val
			case "name":
				s.Name, _ = d.str(q.val, kp)
			case "description":
				s.Description, _ = d.str(q.val, kp)
			case "unlisted":
				s.Unlisted, _ = d.boolean(q.val, kp)
			case "metadata":
				if v, ok := d.value(q.val, kp).(map[string]any); ok {
					s.Metadata = v
				} else if !isNull(q.val) {
					d.errorf(q.val, kp, "want a mapping, got a %s", kindName(q.val))
				}
			default:
				d.unknownKey(q.key, kp, selectorKeys)
			}
		}
		if p.val.Kind != yaml.MappingNode {
			continue
		}
		if s.Strategy == "" {
			d.errorf(p.key, join(path, "strategy"), "strategy is required (warm, pin or spillover)")
		}
		for _, q := range d.pairs(settings, join(path, "settings")) {
			kp := join(join(path, "settings"), q.name)
			if q.name != "spillover" {
				d.unknownKey(q.key, kp, []string{"spillover"})
				continue
			}
			if v, ok := d.integer(q.val, kp, "a whole number of requests"); ok {
				if v < 1 {
					d.errorf(q.val, kp, "want 1 or more requests, got %d", v)
				}
				s.Spillover = v
			}
		}
		if len(targets) == 0 {
			d.errorf(p.key, join(path, "targets"), "targets must list at least one model")
		}
		seen := map[string]int{}
		for i, it := range targets {
			ip := index(join(path, "targets"), i)
			name, ok := d.str(it, ip)
			if !ok {
				continue
			}
			if k, chained := nodes[name]; chained {
				d.errorf(it, ip, "target %q is a selector (%s); a selector's targets are models, not selectors", name, d.posOf(k))
				continue
			}
			id, local := cfg.ResolveModel(name)
			switch {
			case local:
			case cfg.peerModel(name):
				id = name
				if s.Strategy == SelectorWarm || s.Strategy == SelectorSpillover {
					d.errorf(it, ip, "target %q is a peer's model; a %s selector's targets must be local models", name, s.Strategy)
					continue
				}
			default:
				d.errorf(it, ip, "target %q is not a model, an alias or a peer's model%s", name, d.didYouMeanModel(cfg, name))
				continue
			}
			if j, dup := seen[id]; dup && s.Strategy == SelectorSpillover {
				d.errorf(it, ip, "target %q is model %s again (targets[%d])", name, id, j)
				continue
			}
			seen[id] = i
			s.Targets = append(s.Targets, name)
			s.Models = append(s.Models, id)
		}
		if s.Strategy == SelectorSpillover && len(s.Models) == len(targets) {
			d.spilloverGroup(cfg, s, p.key, path)
		}
		cfg.Selectors[s.ID] = s
	}
}

// spilloverGroup is llama-swap's coexistence rule for a spillover
// selector: its targets must be able to run at once, so with the group
// router they share one group that does not swap. With any other router
// the policy decides what runs together.
func (d *decoder) spilloverGroup(cfg *Config, s *Selector, key *yaml.Node, path string) {
	if len(s.Models) < 2 || cfg.Routing.Router.Wasm != "" || cfg.Routing.Router.Use != RouterGroup {
		return
	}
	g := cfg.GroupOf(s.Models[0])
	for _, id := range s.Models[1:] {
		if cfg.GroupOf(id) != g {
			d.errorf(key, join(path, "targets"), "spillover targets must share one routing group: %s is in group %s, %s in group %s",
				s.Models[0], groupName(g), id, groupName(cfg.GroupOf(id)))
			return
		}
	}
	if g != nil && g.Swap {
		d.errorf(key, join(path, "targets"), "spillover targets must run together: their group %s swaps (set swap: false)", g.Name)
	}
}

func groupName(g *Group) string {
	if g == nil {
		return "(none)"
	}
	return g.Name
}

// SelectorIDs returns the selector ids, sorted.
func (c *Config) SelectorIDs() []string { return slices.Sorted(maps.Keys(c.Selectors)) }

// peerFullName reports whether name is a peer model's full name
// (PEER/MODEL), which is reserved (llama-swap's ValidatePeerNamespace).
func (c *Config) peerFullName(name string) bool {
	for _, p := range c.Peers {
		if slices.ContainsFunc(p.Models, func(m string) bool { return p.FullName(m) == name }) {
			return true
		}
	}
	return false
}

// peerModel reports whether name reaches a peer's model: its full name,
// or a model id a peer serves.
func (c *Config) peerModel(name string) bool {
	if c.peerFullName(name) {
		return true
	}
	for _, p := range c.Peers {
		if slices.Contains(p.Models, name) {
			return true
		}
	}
	return false
}

// selectorOrModel reports whether name is something a profile pin may
// point at: a model, an alias, a peer's model or a selector (llama-swap's
// validateProfiles).
func (c *Config) selectorOrModel(name string) bool {
	if _, ok := c.ResolveModel(name); ok {
		return true
	}
	return c.peerModel(name) || c.Selectors[name] != nil
}
