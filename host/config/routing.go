package config

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/loadout-dev/loadout/policies/builtin"
	"github.com/loadout-dev/loadout/sdk/placement"
)

// policySrc is a decoded policy with the YAML it came from.
type policySrc struct {
	Policy
	set      bool // configured (not defaulted)
	key      *yaml.Node
	settings *yaml.Node
	path     string
}

// routing decodes routing:, and llama-swap's legacy top-level groups: and
// matrix:, into Config.Routing, Config.Groups and the matrix.
func (d *decoder) routing(cfg *Config, src map[string]*modelSrc, top map[string]pair) {
	empty := json.RawMessage("{}")
	sched := policySrc{Policy: Policy{Use: SchedulerFIFO, Settings: empty,
		src: &settingsSource{policyKey: "routing.scheduler", at: d.pos(nil)}}, path: "routing.scheduler"}
	router := policySrc{Policy: Policy{Use: RouterGroup, Settings: empty,
		src: &settingsSource{policyKey: "routing.router", at: d.pos(nil)}}, path: "routing.router"}
	if rt, ok := top["routing"]; ok {
		for _, p := range d.pairs(rt.val, "routing") {
			switch p.name {
			case "scheduler":
				sched = d.policy(cfg, p, "routing.scheduler", "scheduler", builtin.Schedulers())
			case "router":
				router = d.policy(cfg, p, "routing.router", "router", builtin.Routers())
			default:
				d.unknownKey(p.key, join("routing", p.name), []string{"scheduler", "router"})
			}
		}
	}

	legacyGroups, hasGroups := top["groups"]
	legacyMatrix, hasMatrix := top["matrix"]
	switch {
	case hasGroups && hasMatrix:
		d.errorf(legacyMatrix.key, "matrix", "a configuration cannot use both groups (%s) and matrix (llama-swap's rule)", d.posOf(legacyGroups.key))
		hasMatrix = false
	case router.set && hasGroups:
		d.errorf(legacyGroups.key, "groups", "legacy top-level groups cannot be combined with routing.router (%s); move them to routing.router.settings.groups", d.posOf(router.key))
		hasGroups = false
	case router.set && hasMatrix:
		d.errorf(legacyMatrix.key, "matrix", "legacy top-level matrix cannot be combined with routing.router (%s); use routing.router with use: matrix and settings.matrix", d.posOf(router.key))
		hasMatrix = false
	}

	router.inactiveEngine(d, cfg)

	// The legacy keys become the router's settings unchanged, {"groups": …}
	// or {"matrix": …}; an error at settings path matrix.vars.x points into
	// the legacy block, whose key path is the settings path itself.
	var groupsNode *yaml.Node
	groupsPath := "routing.router.settings.groups"
	switch {
	case hasGroups:
		groupsNode, groupsPath = legacyGroups.val, "groups"
		router.Use, router.Wasm = RouterGroup, ""
		router.legacy(d, legacyGroups, "groups")
		cfg.notes = append(cfg.notes, "legacy top-level groups → routing.router use: group, settings.groups")
	case hasMatrix:
		router.Use, router.Wasm = RouterMatrix, ""
		router.Pos = d.pos(legacyMatrix.key)
		router.legacy(d, legacyMatrix, "matrix")
		cfg.notes = append(cfg.notes, "legacy top-level matrix → routing.router use: matrix, settings.matrix")
	case router.Wasm == "" && router.Use == RouterGroup && router.settings != nil && router.settings.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(router.settings.Content); i += 2 {
			if router.settings.Content[i].Value == "groups" {
				groupsNode = router.settings.Content[i+1]
			}
		}
	}
	if groupsNode != nil && groupsNode.Kind == yaml.MappingNode {
		cfg.Groups = d.groups(cfg, groupsNode, groupsPath)
	}
	cfg.Groups = appendDefaultGroup(cfg)
	groupReplicas(cfg)
	if router.Wasm == "" && (router.Use == RouterGroup || router.Use == RouterMatrix) {
		for _, id := range cfg.ServedIDs() {
			if m := cfg.Models[id]; m.MaxReplicas > 1 {
				node, key := m.replicaKeys.node()
				d.errorf(node, join(join("models", id), key), "replicas need a router that places models by VRAM (routing.router use: prioritylru or ollama, or a Wasm router): the %s router runs one model of a group at a time, so a model's replicas would evict each other", router.Use)
			}
		}
	}
	if slices.Contains(placingRouters, router.Use) && router.Wasm == "" {
		if n := keyNode(router.settings, "placement"); n != nil {
			d.errorf(n, router.path+".settings.placement", "set by Loadout from the models' gpus: and split: and the top-level placement:; remove it here")
		}
	}
	if sched.Use == SchedulerFIFO && sched.Wasm == "" {
		d.fifoPriority(cfg, src, sched.settings, sched.path+".settings")
	}
	cfg.Routing = Routing{Scheduler: sched.Policy, Router: router.Policy}
}

// policy decodes routing.scheduler or routing.router: exactly one of use (a
// built-in) and wasm (a module path, resolved against the configuration's
// directory, which must exist), and settings (a mapping, passed on as JSON).
func (d *decoder) policy(cfg *Config, p pair, path, kind string, builtins []string) policySrc {
	out := policySrc{set: true, key: p.key, path: path, Policy: Policy{Pos: d.pos(p.key)}}
	var use, wasm *yaml.Node
	for _, q := range d.pairs(p.val, path) {
		kp := join(path, q.name)
		switch q.name {
		case "use":
			use = q.val
			out.Use, _ = d.str(q.val, kp)
		case "wasm":
			wasm = q.val
			out.Wasm, _ = d.str(q.val, kp)
		case "settings":
			if !isNull(q.val) && q.val.Kind != yaml.MappingNode {
				d.errorf(q.val, kp, "settings must be a mapping, got a %s", kindName(q.val))
				continue
			}
			out.settings = q.val
		default:
			d.unknownKey(q.key, kp, []string{"use", "wasm", "settings"})
		}
	}
	switch {
	case use != nil && wasm != nil:
		d.errorf(wasm, join(path, "wasm"), "set either use (a built-in %s) or wasm (a module), not both", kind)
		out.Wasm = ""
	case use == nil && wasm == nil:
		d.errorf(p.key, path, "want use: NAME (built-in: %s) or wasm: PATH", strings.Join(builtins, ", "))
	case use != nil && !slices.Contains(builtins, out.Use):
		msg := fmt.Sprintf("unknown built-in %s %q: want %s, or wasm: PATH for a policy module", kind, out.Use, strings.Join(builtins, ", "))
		if s := suggest(out.Use, builtins); s != "" {
			msg += fmt.Sprintf("; did you mean %q?", s)
		}
		d.errorf(use, join(path, "use"), "%s", msg)
	case wasm != nil:
		out.Use = ""
		if out.Wasm == "" {
			d.errorf(wasm, join(path, "wasm"), "want the path of a .wasm policy module")
			break
		}
		abs := d.resolvePath(cfg, out.Wasm)
		if fi, err := os.Stat(abs); err != nil {
			d.errorf(wasm, join(path, "wasm"), "policy module %s (resolved against %s): %s", out.Wasm, cfg.Dir, pathErr(err))
		} else if fi.IsDir() {
			d.errorf(wasm, join(path, "wasm"), "policy module %s is a directory", out.Wasm)
		}
		out.Wasm = abs
	}
	out.Settings = json.RawMessage("{}")
	out.src = &settingsSource{root: out.settings, prefix: path + ".settings", policyKey: path, at: out.Pos}
	if out.settings != nil && out.settings.Kind == yaml.MappingNode {
		out.Settings = d.orderedJSON(out.settings, path+".settings")
	}
	return out
}

// inactiveEngine drops, from the settings the built-in group or matrix
// router receives, the other engine's block: llama-swap keeps both
// routing.router.settings.groups and .matrix in one file and runs the one
// use: names, so the other is kept in the file, unused, and said so in the
// report (not handed to a policy that would refuse it as an unknown
// setting).
func (p *policySrc) inactiveEngine(d *decoder, cfg *Config) {
	if p.Wasm != "" || p.settings == nil || p.settings.Kind != yaml.MappingNode {
		return
	}
	other := map[string]string{RouterGroup: "matrix", RouterMatrix: "groups"}[p.Use]
	if other == "" || keyNode(p.settings, other) == nil {
		return
	}
	kept := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for i := 0; i+1 < len(p.settings.Content); i += 2 {
		if p.settings.Content[i].Value != other {
			kept.Content = append(kept.Content, p.settings.Content[i], p.settings.Content[i+1])
		}
	}
	p.Settings = d.orderedJSON(kept, p.path+".settings")
	cfg.notes = append(cfg.notes, fmt.Sprintf("%s.settings.%s (%s) is kept but unused: use: %s runs the %s router (llama-swap's rule: the engine use: names applies)",
		p.path, other, d.posOf(keyNode(p.settings, other)), p.Use, p.Use))
}

// legacy makes p's settings {name: <the legacy top-level key's value>},
// and their source the legacy key itself.
func (p *policySrc) legacy(d *decoder, legacy pair, name string) {
	root := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{legacy.key, legacy.val}}
	p.Settings = d.orderedJSON(root, "")
	p.src = &settingsSource{root: root, policyKey: name, at: d.pos(legacy.key)}
}

// groups reads the group router's groups for Config.Groups: names, swap,
// exclusive, persistent and members. What the group policy checks (the
// shape, unknown keys, (default), a model in two groups) is left to it:
// `loadout config check` and serve report it at init, at its place in the
// file. The config checks only what it alone knows: that each member names
// a defined model id, not an alias.
func (d *decoder) groups(cfg *Config, n *yaml.Node, path string) []*Group {
	var out []*Group
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		g := &Group{Name: k.Value, Swap: true, Exclusive: true, Pos: d.pos(k)}
		gp := join(path, g.Name)
		for j := 0; v.Kind == yaml.MappingNode && j+1 < len(v.Content); j += 2 {
			fk, fv := v.Content[j], v.Content[j+1]
			switch fk.Value {
			case "swap":
				_ = fv.Decode(&g.Swap)
			case "exclusive":
				_ = fv.Decode(&g.Exclusive)
			case "persistent":
				_ = fv.Decode(&g.Persistent)
			case "members":
				for m, it := range fv.Content {
					if fv.Kind != yaml.SequenceNode || it.Kind != yaml.ScalarNode {
						continue
					}
					id := it.Value
					if _, ok := cfg.Models[id]; ok {
						if !slices.Contains(g.Members, id) {
							g.Members = append(g.Members, id)
						}
						continue
					}
					ip := index(join(gp, "members"), m)
					if real, isAlias := cfg.aliases[id]; isAlias {
						d.errorf(it, ip, "%q is an alias of model %s; groups list model ids", id, real)
					} else {
						d.errorf(it, ip, "model %q is not defined%s", id, d.didYouMeanModel(cfg, id))
					}
				}
			}
		}
		out = append(out, g)
	}
	return out
}

// appendDefaultGroup adds llama-swap's implicit group of every model no group
// lists: swap and exclusive, members sorted.
func appendDefaultGroup(cfg *Config) []*Group {
	grouped := map[string]bool{}
	for _, g := range cfg.Groups {
		for _, m := range g.Members {
			grouped[m] = true
		}
	}
	def := &Group{Name: DefaultGroup, Swap: true, Exclusive: true, Implicit: true}
	for _, id := range cfg.ModelIDs() {
		if !grouped[id] && cfg.Models[id].ReplicaOf == "" { // replicas follow their model (groupReplicas)
			def.Members = append(def.Members, id)
			if def.Pos.Line == 0 {
				def.Pos = cfg.Models[id].Pos
			}
		}
	}
	if len(def.Members) == 0 {
		return cfg.Groups
	}
	return append(cfg.Groups, def)
}

// fifoPriority folds llama-swap's fifo.priority of the built-in fifo
// scheduler's settings (a mapping of model id or alias to priority) into
// Model.Priority: the translation the config alone can make, because only
// it knows aliases and each model's own priority:. Every other setting,
// and the shape of the rest, is the fifo policy's to check at init.
func (d *decoder) fifoPriority(cfg *Config, src map[string]*modelSrc, n *yaml.Node, path string) {
	prioNode := child(child(n, "fifo"), "priority")
	if prioNode == nil || prioNode.Kind != yaml.MappingNode {
		return
	}
	qp := join(join(path, "fifo"), "priority")
	set := map[string]*yaml.Node{}
	for _, e := range d.pairs(prioNode, qp) {
		ep := join(qp, e.name)
		id, ok := cfg.ResolveModel(e.name)
		if !ok {
			d.errorf(e.key, ep, "model %q is not defined%s", e.name, d.didYouMeanModel(cfg, e.name))
			continue
		}
		prio, ok := d.integer(e.val, ep, "a whole number (higher runs first)")
		if !ok {
			continue
		}
		if prev, dup := set[id]; dup {
			d.errorf(e.key, ep, "model %s already has a priority here (%s)", id, d.posOf(prev))
			continue
		}
		set[id] = e.key
		s := src[id]
		if s.priority != nil && s.model.Priority != prio {
			d.errorf(e.val, ep, "priority %d for model %s contradicts its priority: %d (%s)", prio, id, s.model.Priority, d.posOf(s.priority))
			continue
		}
		s.model.Priority = prio
	}
}

// keyNode returns the key node of key in mapping n, or nil.
func keyNode(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i]
		}
	}
	return nil
}

// child returns the value of key in mapping n, or nil.
func child(n *yaml.Node, key string) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// SchedulerSettingsJSON returns the JSON object the scheduler policy receives
// at init: Routing.Scheduler.Settings, the settings as written ("{}" when
// absent), for the policy to check. For the built-in fifo, one translation:
// fifo.priority holds every model's priority (its own priority: or
// llama-swap's fifo.priority, aliases resolved), models with priority 0 left
// out:
//
//	{"fifo": {"priority": {"MODEL_ID": 10, ...}}, "max_queue": 100}
//
// Every other key, and fifo's other keys, are passed as written.
func (c *Config) SchedulerSettingsJSON() ([]byte, error) {
	p := c.Routing.Scheduler
	raw := rawSettings(p.Settings)
	if p.Wasm != "" || p.Use != SchedulerFIFO {
		return raw, nil
	}
	prio := object{}
	for _, id := range c.ModelIDs() {
		if n := c.Models[id].Priority; n != 0 {
			prio = append(prio, member{id, n})
		}
	}
	top, err := members(raw)
	if err != nil {
		return raw, nil // not an object: the policy says so, at its path
	}
	i := slices.IndexFunc(top, func(m member) bool { return m.Key == "fifo" })
	if i < 0 {
		if len(prio) == 0 {
			return raw, nil
		}
		top = append(object{{"fifo", object{{"priority", prio}}}}, top...)
		return json.Marshal(top)
	}
	fifo, err := members(top[i].Value.(json.RawMessage))
	if err != nil {
		return raw, nil
	}
	if j := slices.IndexFunc(fifo, func(m member) bool { return m.Key == "priority" }); j >= 0 {
		fifo[j].Value = prio
	} else if len(prio) > 0 {
		fifo = append(fifo, member{"priority", prio})
	}
	top[i].Value = fifo
	return json.Marshal(top)
}

// members splits a JSON object into its members, in order, each value a
// json.RawMessage.
func members(raw []byte) (object, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("not a JSON object")
	}
	out := object{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out = append(out, member{t.(string), v})
	}
	return out, nil
}

// RouterSettingsJSON returns the JSON object the router (swapper) policy
// receives at init: Routing.Router.Settings, the settings as written ("{}"
// when absent), for the policy to check. llama-swap's legacy top-level
// `groups:` and `matrix:` arrive here unchanged as {"groups": …} and
// {"matrix": …}. A Config built by hand with the built-in group router and
// no settings gets GroupSettingsJSON. For the built-in routers that place
// models themselves (prioritylru, ollama: placingRouters), one translation, as fifo's priorities are
// translated: when the box packs or some model has a placement constraint,
// a last member placement carries them (pack only when true; each
// constrained model's gpus when listed and split when not auto; for each
// replica of a model with replicas, apart: its sibling replicas, whose
// devices it avoids when it fits elsewhere):
//
//	{"margin": "1GiB", "placement": {"pack": true, "models": {"MODEL_ID": {"gpus": [1, 2], "split": "never"}}}}
//
// so that the plans it makes keep to the constraints the host's ledger
// enforces (a plan that does not is refused).
func (c *Config) RouterSettingsJSON() ([]byte, error) {
	p := c.Routing.Router
	if p.Wasm == "" && p.Use == RouterGroup && (len(p.Settings) == 0 || string(p.Settings) == "{}") {
		return c.GroupSettingsJSON()
	}
	raw := rawSettings(p.Settings)
	if p.Wasm != "" || !slices.Contains(placingRouters, p.Use) {
		return raw, nil
	}
	place := object{}
	if c.Placement == PlacementPack {
		place = append(place, member{"pack", true})
	}
	models := object{}
	for _, id := range c.ModelIDs() {
		m := c.Models[id]
		if !m.Constrained() && m.MaxReplicas <= 1 {
			continue
		}
		o := object{}
		if len(m.GPUs) > 0 {
			o = append(o, member{"gpus", m.GPUs})
		}
		if m.Split != placement.SplitAuto {
			o = append(o, member{"split", m.Split.String()})
		}
		if m.MaxReplicas > 1 { // a replica prefers a device none of its siblings holds
			model := cmp.Or(m.ReplicaOf, id)
			o = append(o, member{"apart", slices.DeleteFunc(c.Replicas(model), func(r string) bool { return r == id })})
		}
		models = append(models, member{id, o})
	}
	if len(models) > 0 {
		place = append(place, member{"models", models})
	}
	if len(place) == 0 {
		return raw, nil
	}
	top, err := members(raw)
	if err != nil {
		return raw, nil // not an object: the policy says so, at its path
	}
	return json.Marshal(append(top, member{"placement", place}))
}

// GroupSettingsJSON is the built-in group swapper's settings for this
// config's groups (llama-swap's `groups:`; the implicit "(default)" group
// of the models in none is the policy's own default):
//
//	{"groups": {"NAME": {"swap": true, "exclusive": true, "persistent": false, "members": ["MODEL_ID", ...]}, ...}}
//
// It configures the fallback that replaces any other router while that one
// is disabled for crash-looping.
func (c *Config) GroupSettingsJSON() ([]byte, error) {
	groups := object{}
	for _, g := range c.Groups {
		if g.Implicit { // the group policy's own default
			continue
		}
		members := g.Members
		if members == nil {
			members = []string{}
		}
		groups = append(groups, member{g.Name, object{
			{"swap", g.Swap}, {"exclusive", g.Exclusive}, {"persistent", g.Persistent}, {"members", members},
		}})
	}
	return json.Marshal(object{{"groups", groups}})
}

func rawSettings(s json.RawMessage) []byte {
	if len(s) == 0 {
		return []byte("{}")
	}
	return slices.Clone(s)
}
