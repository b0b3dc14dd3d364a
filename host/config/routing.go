package config

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

var (
	schedulerBuiltins = []string{SchedulerFIFO}
	routerBuiltins    = []string{RouterGroup, RouterMatrix, RouterPriorityLRU}
	// llama-swap's matrix var names (its newest rule: letters, digits, - and
	// ., 1 to 32 characters; older versions allowed 1 to 8 alphanumerics).
	matrixVarName = regexp.MustCompile(`^[a-zA-Z0-9.-]{1,32}$`)
)

// policySrc is a decoded policy with the YAML it came from.
type policySrc struct {
	Policy
	set      bool // configured (not defaulted)
	key      *yaml.Node
	settings *yaml.Node
	path     string
}

// matrixConfig is llama-swap's swap matrix, validated.
type matrixConfig struct {
	vars       map[string]string // var -> model id
	evictCosts map[string]int    // model id -> cost (vars resolved)
	sets       []matrixSet       // in definition order: ties go to the earlier set
}

type matrixSet struct {
	Name string `json:"name"`
	Expr string `json:"expr"`
}

// routing decodes routing:, and llama-swap's legacy top-level groups: and
// matrix:, into Config.Routing, Config.Groups and the matrix.
func (d *decoder) routing(cfg *Config, src map[string]*modelSrc, top map[string]pair) {
	empty := json.RawMessage("{}")
	sched := policySrc{Policy: Policy{Use: SchedulerFIFO, Settings: empty}, path: "routing.scheduler"}
	router := policySrc{Policy: Policy{Use: RouterGroup, Settings: empty}, path: "routing.router"}
	if rt, ok := top["routing"]; ok {
		for _, p := range d.pairs(rt.val, "routing") {
			switch p.name {
			case "scheduler":
				sched = d.policy(cfg, p, "routing.scheduler", "scheduler", schedulerBuiltins)
			case "router":
				router = d.policy(cfg, p, "routing.router", "router", routerBuiltins)
			default:
				d.unknownKey(p.key, join("routing", p.name), []string{"scheduler", "router"})
			}
		}
	}

	legacyGroups, hasGroups := top["groups"]
	legacyMatrix, hasMatrix := top["matrix"]
	switch {
	case hasGroups && hasMatrix:
		d.errorf(legacyMatrix.key, "matrix", "a configuration cannot use both groups (line %d) and matrix (llama-swap's rule)", legacyGroups.key.Line)
		hasMatrix = false
	case router.set && hasGroups:
		d.errorf(legacyGroups.key, "groups", "legacy top-level groups cannot be combined with routing.router (line %d); move them to routing.router.settings.groups", router.key.Line)
		hasGroups = false
	case router.set && hasMatrix:
		d.errorf(legacyMatrix.key, "matrix", "legacy top-level matrix cannot be combined with routing.router (line %d); use routing.router with use: matrix and settings.matrix", router.key.Line)
		hasMatrix = false
	}

	var groupsNode, matrixNode *yaml.Node
	groupsPath, matrixPath := "routing.router.settings.groups", "routing.router.settings.matrix"
	switch {
	case hasGroups:
		groupsNode, groupsPath = legacyGroups.val, "groups"
		cfg.notes = append(cfg.notes, "legacy top-level groups → routing.router use: group, settings.groups")
	case hasMatrix:
		matrixNode, matrixPath = legacyMatrix.val, "matrix"
		router.Use = RouterMatrix
		router.Pos = d.pos(legacyMatrix.key)
		cfg.notes = append(cfg.notes, "legacy top-level matrix → routing.router use: matrix, settings.matrix")
	case router.set && router.Wasm == "" && (router.Use == RouterGroup || router.Use == RouterMatrix):
		for _, p := range d.pairs(router.settings, router.path+".settings") {
			kp := join(router.path+".settings", p.name)
			switch {
			case p.name == "groups" && router.Use == RouterGroup:
				groupsNode = p.val
			case p.name == "matrix" && router.Use == RouterMatrix:
				matrixNode = p.val
			case p.name == "groups" || p.name == "matrix":
				uses := map[string]string{"groups": RouterGroup, "matrix": RouterMatrix}[p.name]
				d.warnf(p.key, kp, "ignored: only router %s uses it, and this router is %s", uses, router.Use)
			default:
				d.unknownKey(p.key, kp, []string{"groups", "matrix"})
			}
		}
		if router.Use == RouterMatrix && matrixNode == nil {
			d.errorf(router.key, router.path+".settings", "router matrix needs settings.matrix (vars, evict_costs, sets)")
		}
	}

	if router.Use == RouterGroup && router.Wasm == "" || hasGroups {
		cfg.Groups = d.groups(cfg, groupsNode, groupsPath)
	}
	cfg.Groups = appendDefaultGroup(cfg)
	if matrixNode != nil {
		cfg.matrix = d.matrix(cfg, matrixNode, matrixPath)
	}
	if sched.Use == SchedulerFIFO && sched.Wasm == "" {
		d.fifoSettings(cfg, src, sched.settings, sched.path+".settings")
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
	if out.settings != nil && out.settings.Kind == yaml.MappingNode {
		out.Settings = d.orderedJSON(out.settings, path+".settings")
	}
	return out
}

// groups decodes llama-swap's groups: every member a defined model id, no
// model in two groups, swap and exclusive default true.
func (d *decoder) groups(cfg *Config, n *yaml.Node, path string) []*Group {
	var out []*Group
	owner := map[string]*yaml.Node{} // model id -> the member node that claimed it
	ownerGroup := map[string]string{}
	for _, p := range d.pairs(n, path) {
		gp := join(path, p.name)
		if p.name == DefaultGroup {
			d.errorf(p.key, gp, "%s is the name of the implicit group of ungrouped models; pick another name", DefaultGroup)
			continue
		}
		g := &Group{Name: p.name, Swap: true, Exclusive: true, Pos: d.pos(p.key)}
		hasMembers := false
		for _, q := range d.pairs(p.val, gp) {
			kp := join(gp, q.name)
			switch q.name {
			case "swap":
				g.Swap, _ = d.boolean(q.val, kp)
			case "exclusive":
				g.Exclusive, _ = d.boolean(q.val, kp)
			case "persistent":
				g.Persistent, _ = d.boolean(q.val, kp)
			case "members":
				hasMembers = true
				items, _ := d.items(q.val, kp)
				for i, it := range items {
					ip := index(kp, i)
					id, ok := d.str(it, ip)
					if !ok {
						continue
					}
					if _, ok := cfg.Models[id]; !ok {
						if real, isAlias := cfg.aliases[id]; isAlias {
							d.errorf(it, ip, "%q is an alias of model %s; groups list model ids", id, real)
						} else {
							d.errorf(it, ip, "model %q is not defined%s", id, d.didYouMeanModel(cfg, id))
						}
						continue
					}
					if prev, dup := owner[id]; dup {
						if ownerGroup[id] == g.Name {
							d.errorf(it, ip, "model %s is listed twice in group %s (line %d)", id, g.Name, prev.Line)
						} else {
							d.errorf(it, ip, "model %s is in two groups, %s (line %d) and %s; a model can belong to only one group", id, ownerGroup[id], prev.Line, g.Name)
						}
						continue
					}
					owner[id], ownerGroup[id] = it, g.Name
					g.Members = append(g.Members, id)
				}
			default:
				d.unknownKey(q.key, kp, []string{"swap", "exclusive", "persistent", "members"})
			}
		}
		if p.val.Kind == yaml.MappingNode && !hasMembers {
			d.errorf(p.key, gp, "members is required")
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
		if !grouped[id] {
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

// fifoSettings decodes the built-in fifo scheduler's settings: llama-swap's
// fifo.priority, a mapping of model id or alias to priority, folded into
// Model.Priority.
func (d *decoder) fifoSettings(cfg *Config, src map[string]*modelSrc, n *yaml.Node, path string) {
	for _, p := range d.pairs(n, path) {
		fp := join(path, p.name)
		if p.name != "fifo" {
			d.unknownKey(p.key, fp, []string{"fifo"})
			continue
		}
		for _, q := range d.pairs(p.val, fp) {
			qp := join(fp, q.name)
			if q.name != "priority" {
				d.unknownKey(q.key, qp, []string{"priority"})
				continue
			}
			set := map[string]*yaml.Node{}
			for _, e := range d.pairs(q.val, qp) {
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
					d.errorf(e.key, ep, "model %s already has a priority here (line %d)", id, prev.Line)
					continue
				}
				set[id] = e.key
				s := src[id]
				if s.priority != nil && s.model.Priority != prio {
					d.errorf(e.val, ep, "priority %d for model %s contradicts its priority: %d (line %d)", prio, id, s.model.Priority, s.priority.Line)
					continue
				}
				s.model.Priority = prio
			}
		}
	}
}

// matrix decodes llama-swap's swap matrix: vars naming models, evict_costs
// (positive, per var or model id), and sets whose expressions use vars, model
// ids, &, |, parentheses and +set references.
func (d *decoder) matrix(cfg *Config, n *yaml.Node, path string) *matrixConfig {
	mc := &matrixConfig{vars: map[string]string{}, evictCosts: map[string]int{}}
	var costs, sets []pair
	var setsNode *yaml.Node
	for _, p := range d.pairs(n, path) {
		kp := join(path, p.name)
		switch p.name {
		case "vars":
			for _, v := range d.pairs(p.val, kp) {
				vp := join(kp, v.name)
				id, ok := d.str(v.val, vp)
				switch {
				case !matrixVarName.MatchString(v.name):
					d.errorf(v.key, vp, "var names are 1 to 32 letters, digits, - or . (llama-swap's rule)")
				case !ok:
				case cfg.Models[id] != nil:
					mc.vars[v.name] = id
				case cfg.aliases[id] != "":
					d.errorf(v.val, vp, "%q is an alias of model %s; vars name model ids", id, cfg.aliases[id])
				default:
					d.errorf(v.val, vp, "model %q is not defined%s", id, d.didYouMeanModel(cfg, id))
				}
			}
		case "evict_costs":
			costs = d.pairs(p.val, kp)
		case "sets":
			setsNode = p.val
			sets = d.pairs(p.val, kp)
		default:
			d.unknownKey(p.key, kp, []string{"vars", "evict_costs", "sets"})
		}
	}
	resolve := func(ident string) (string, bool) {
		if id, ok := mc.vars[ident]; ok {
			return id, true
		}
		if _, ok := cfg.Models[ident]; ok {
			return ident, true
		}
		return "", false
	}
	known := func(ident string) bool { // a var that failed validation is still not "unknown"
		_, ok := resolve(ident)
		return ok || slices.ContainsFunc(d.varNames(n), func(s string) bool { return s == ident })
	}
	from := map[string]string{}
	for _, c := range costs {
		cp := join(path+".evict_costs", c.name)
		cost, ok := d.integer(c.val, cp, "a positive whole number")
		if ok && cost < 1 {
			d.errorf(c.val, cp, "evict costs must be positive, got %d", cost)
			ok = false
		}
		id, found := resolve(c.name)
		switch {
		case !found && !known(c.name):
			d.errorf(c.key, cp, "%q is neither a var nor a model id%s", c.name, d.didYouMeanModel(cfg, c.name))
		case !found || !ok:
		case from[id] != "":
			d.errorf(c.key, cp, "%q and %q both name model %s", from[id], c.name, id)
		default:
			from[id] = c.name
			mc.evictCosts[id] = cost
		}
	}
	if setsNode == nil || (setsNode.Kind == yaml.MappingNode && len(sets) == 0) {
		d.errorf(n, path+".sets", "the matrix needs at least one set")
	}
	names := map[string]bool{}
	for _, s := range sets {
		names[s.name] = true
	}
	refs := map[string][]string{}
	for _, s := range sets {
		sp := join(path+".sets", s.name)
		expr, ok := d.str(s.val, sp)
		if !ok {
			continue
		}
		idents, setRefs, err := parseMatrixExpr(expr)
		if err != nil {
			d.errorf(s.val, sp, "%v", err)
			continue
		}
		for _, id := range idents {
			if !known(id) {
				d.errorf(s.val, sp, "%q is neither a var nor a model id%s", id, d.didYouMeanModel(cfg, id))
			}
		}
		for _, r := range setRefs {
			if !names[r] {
				d.errorf(s.val, sp, "+%s names no set", r)
			}
		}
		refs[s.name] = setRefs
		mc.sets = append(mc.sets, matrixSet{Name: s.name, Expr: expr})
	}
	// +references must not loop.
	state := map[string]int{}
	var visit func(string) bool
	visit = func(s string) bool {
		switch state[s] {
		case 1:
			return false
		case 2:
			return true
		}
		state[s] = 1
		for _, r := range refs[s] {
			if !visit(r) {
				return false
			}
		}
		state[s] = 2
		return true
	}
	for _, s := range sets {
		if state[s.name] == 0 && !visit(s.name) {
			d.errorf(s.val, join(path+".sets", s.name), "set %s refers back to itself through +references", s.name)
		}
	}
	return mc
}

// varNames lists the var keys of a matrix node, valid or not.
func (d *decoder) varNames(n *yaml.Node) []string {
	var out []string
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "vars" && n.Content[i+1].Kind == yaml.MappingNode {
			v := n.Content[i+1]
			for j := 0; j+1 < len(v.Content); j += 2 {
				out = append(out, v.Content[j].Value)
			}
		}
	}
	return out
}

// parseMatrixExpr checks a matrix set expression and returns the identifiers
// and +set references it uses. Grammar (llama-swap's): expr = term {"|" term};
// term = factor {"&" factor}; factor = ident | "+" ident | "(" expr ")".
func parseMatrixExpr(s string) (idents, refs []string, err error) {
	type token struct {
		kind byte // 'i' ident, 'r' ref, or the operator itself
		text string
		at   int
	}
	var toks []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case strings.IndexByte("&|()", c) >= 0:
			toks = append(toks, token{kind: c, text: string(c), at: i})
			i++
		default:
			start := i
			if c == '+' {
				i++
			}
			j := i
			for j < len(s) && strings.IndexByte(" \t\n\r&|()+", s[j]) < 0 {
				j++
			}
			if j == i {
				return nil, nil, fmt.Errorf("expression %q: + must be followed by a set name (at offset %d)", s, start)
			}
			kind := byte('i')
			if c == '+' {
				kind = 'r'
			}
			toks = append(toks, token{kind: kind, text: s[i:j], at: start})
			i = j
		}
	}
	pos := 0
	fail := func(what string) error {
		if pos < len(toks) {
			return fmt.Errorf("expression %q: %s, found %q at offset %d", s, what, toks[pos].text, toks[pos].at)
		}
		return fmt.Errorf("expression %q: %s at the end", s, what)
	}
	var expr func() error
	factor := func() error {
		if pos >= len(toks) {
			return fail("want a model, var, +set or (")
		}
		t := toks[pos]
		switch t.kind {
		case 'i':
			idents = append(idents, t.text)
			pos++
		case 'r':
			refs = append(refs, t.text)
			pos++
		case '(':
			pos++
			if err := expr(); err != nil {
				return err
			}
			if pos >= len(toks) || toks[pos].kind != ')' {
				return fail("want )")
			}
			pos++
		default:
			return fail("want a model, var, +set or (")
		}
		return nil
	}
	term := func() error {
		if err := factor(); err != nil {
			return err
		}
		for pos < len(toks) && toks[pos].kind == '&' {
			pos++
			if err := factor(); err != nil {
				return err
			}
		}
		return nil
	}
	expr = func() error {
		if err := term(); err != nil {
			return err
		}
		for pos < len(toks) && toks[pos].kind == '|' {
			pos++
			if err := term(); err != nil {
				return err
			}
		}
		return nil
	}
	if err := expr(); err != nil {
		return nil, nil, err
	}
	if pos < len(toks) {
		return nil, nil, fail("want & or |")
	}
	return idents, refs, nil
}

// SchedulerSettingsJSON returns the JSON object the scheduler policy receives
// at init.
//
// For the built-in fifo it is llama-swap's shape with every alias resolved and
// every model's priority (its own priority: or fifo.priority) included, models
// with priority 0 left out:
//
//	{"fifo": {"priority": {"MODEL_ID": 10, ...}}}
//
// For any other scheduler (a wasm module) it is Routing.Scheduler.Settings, the
// settings as written ("{}" when absent).
func (c *Config) SchedulerSettingsJSON() ([]byte, error) {
	p := c.Routing.Scheduler
	if p.Wasm != "" || p.Use != SchedulerFIFO {
		return rawSettings(p.Settings), nil
	}
	prio := object{}
	for _, id := range c.ModelIDs() {
		if n := c.Models[id].Priority; n != 0 {
			prio = append(prio, member{id, n})
		}
	}
	return json.Marshal(object{{"fifo", object{{"priority", prio}}}})
}

// RouterSettingsJSON returns the JSON object the router (swapper) policy
// receives at init.
//
// For the built-in group router, the effective groups in definition order,
// DefaultGroup last, whether they came from routing.router.settings.groups,
// the legacy top-level groups, or nowhere (then DefaultGroup holds every
// model):
//
//	{"groups": {"NAME": {"swap": true, "exclusive": true, "persistent": false, "members": ["MODEL_ID", ...]}, ...}}
//
// For the built-in matrix router, llama-swap's matrix with evict_costs keyed by
// model id (vars resolved) and the sets as a list, because definition order
// breaks ties:
//
//	{"matrix": {"vars": {"VAR": "MODEL_ID"}, "evict_costs": {"MODEL_ID": 50}, "sets": [{"name": "NAME", "expr": "(a | b) & c"}]}}
//
// For any other router (prioritylru, a wasm module) it is
// Routing.Router.Settings, the settings as written ("{}" when absent).
func (c *Config) RouterSettingsJSON() ([]byte, error) {
	p := c.Routing.Router
	switch {
	case p.Wasm == "" && p.Use == RouterGroup:
		return c.GroupSettingsJSON()
	case p.Wasm == "" && p.Use == RouterMatrix && c.matrix != nil:
		sets := c.matrix.sets
		if sets == nil {
			sets = []matrixSet{}
		}
		return json.Marshal(object{{"matrix", object{
			{"vars", sortedObject(c.matrix.vars)},
			{"evict_costs", sortedObject(c.matrix.evictCosts)},
			{"sets", sets},
		}}})
	}
	return rawSettings(p.Settings), nil
}

// GroupSettingsJSON is the built-in group swapper's settings for this
// config's groups (llama-swap's `groups:`, with the implicit "(default)"
// group of the models in none). It configures the group swapper when it is
// the router, and the fallback that replaces any other router while that
// one is disabled for crash-looping.
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

func sortedObject[V any](m map[string]V) object {
	out := object{}
	for _, k := range keysOf(m) {
		out = append(out, member{k, m[k]})
	}
	return out
}

func rawSettings(s json.RawMessage) []byte {
	if len(s) == 0 {
		return []byte("{}")
	}
	return slices.Clone(s)
}
