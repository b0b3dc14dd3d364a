package main

import (
	"cmp"
	"errors"
	"maps"
	"math/bits"
	"slices"
	"strconv"
	"strings"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/placement"
	sdksettings "github.com/loadout-dev/loadout/sdk/settings"
)

// maxTermWords bounds the expansion of the sets, so that a matrix like
// "(a|b|c|d) & (e|f|g|h) & …" cannot hang init or exhaust the guest's
// memory: no expression, and not all the sets together, may expand to
// more than maxTermWords words of combinations (100,000 combinations with
// up to 64 models, half as many with up to 128, and so on), counted before
// duplicates are dropped. The check comes before the work. In Wasm, init
// runs some 40 times slower than natively, and a 100,000-combination
// matrix takes about half a second of the host's 2 s start deadline. A
// variable so that tests can lower it.
var maxTermWords = 100_000

// matrix is a compiled matrix: the models, their costs, and every allowed
// combination, computed once at init.
type matrix struct {
	models []string         // model index → model id, sorted
	index  map[string]int32 // model id → model index
	cost   []int64          // model index → evict cost
	other  map[string]int64 // evict costs of models no var names
	sets   []setSettings    // in settings order
	words  int              // words per combination: (len(models)+63)/64, at least 1
	combos []uint64         // combination c is combos[c*words : (c+1)*words]
	setOf  []int32          // combination → the set it came from
	// targets[m] indexes the combinations that contain model m (solver.go).
	targets []candidates
}

// combo returns combination c's bitset.
func (m *matrix) combo(c int32) []uint64 {
	return m.combos[int(c)*m.words : int(c+1)*m.words]
}

// has reports whether combination c contains model i.
func (m *matrix) has(c, i int32) bool {
	return m.combos[int(c)*m.words+int(i>>6)]&(1<<(i&63)) != 0
}

// describe lists combination c's models, sorted.
func (m *matrix) describe(c int32) string {
	var names []string
	for w, word := range m.combo(c) {
		for ; word != 0; word &= word - 1 {
			names = append(names, m.models[w*64+bits.TrailingZeros64(word)])
		}
	}
	return strings.Join(names, ",")
}

// Paths of the settings, for errors.
var (
	pathMatrix = sdksettings.Join("", "matrix")
	pathVars   = sdksettings.Join(pathMatrix, "vars")
	pathSets   = sdksettings.Join(pathMatrix, "sets")
)

// compile checks the settings' meaning and compiles them: the sets'
// expressions are parsed, their identifiers resolved (a var, else a model
// id: llama-swap lets sets and evict_costs mix them, and a var wins when
// its name is also a model id), references resolved in dependency order,
// and every set expanded to its combinations, then all of them indexed for
// the solver. known is the set of model ids the host has, or nil when it
// lists none (then any identifier that is not a var is taken as a model
// id); with it, a var's model and an identifier that is no var must name
// one of them. Errors are *sdksettings.Error.
func compile(cfg settings, known map[string]bool) (*matrix, error) {
	m := &matrix{index: make(map[string]int32), other: make(map[string]int64), sets: cfg.sets}
	defined := func(model string) bool { return known == nil || known[model] }
	// resolve maps an identifier of a set or an evict_costs key to its
	// model id.
	resolve := func(ident string) (string, bool) {
		if model, ok := cfg.vars[ident]; ok {
			return model, true
		}
		return ident, defined(ident)
	}
	modelSet := make(map[string]bool)
	for _, id := range slices.Sorted(maps.Keys(cfg.vars)) {
		model := cfg.vars[id]
		if !defined(model) {
			return nil, sdksettings.NewError(sdksettings.Join(pathVars, id), "model "+strconv.Quote(model)+" is not defined")
		}
		modelSet[model] = true
	}

	// Parse every set and find what it references and which models it
	// names.
	roots := make(map[string]*node, len(cfg.sets))
	deps := make(map[string][]string, len(cfg.sets))
	idents := make(map[string]int, len(cfg.vars)) // identifier → model index, filled below
	for _, set := range cfg.sets {
		if !validSetName(set.name) {
			return nil, sdksettings.NewError(set.namePath, "set name "+strconv.Quote(set.name)+": want ASCII letters, digits, '_', '-' or '.'")
		}
		if _, dup := roots[set.name]; dup {
			return nil, sdksettings.NewError(set.namePath, "set "+strconv.Quote(set.name)+" is defined twice")
		}
		root, err := parse(set.expr)
		if err != nil {
			return nil, sdksettings.NewError(set.path, err.Error())
		}
		roots[set.name] = root
	}
	for _, set := range cfg.sets {
		var err error
		walk(roots[set.name], func(n *node) {
			if err != nil {
				return
			}
			switch n.kind {
			case nodeVar:
				model, ok := resolve(n.name)
				if !ok {
					err = sdksettings.NewError(set.path, (&exprError{col: column(set.expr, n.off), msg: unknownIdent(n.name, cfg.vars)}).Error())
					return
				}
				modelSet[model] = true
				idents[n.name] = -1
			case nodeRef:
				if _, ok := roots[n.name]; !ok {
					err = sdksettings.NewError(set.path, (&exprError{col: column(set.expr, n.off), msg: "unknown set " + strconv.Quote("+"+n.name)}).Error())
					return
				}
				if !slices.Contains(deps[set.name], n.name) {
					deps[set.name] = append(deps[set.name], n.name)
				}
			}
		})
		if err != nil {
			return nil, err
		}
	}
	order, err := dependencyOrder(cfg.sets, deps)
	if err != nil {
		return nil, sdksettings.NewError(pathSets, err.Error())
	}

	// Index the models: those of the vars and those the sets name.
	m.models = slices.Sorted(maps.Keys(modelSet))
	for i, model := range m.models {
		m.index[model] = int32(i)
	}
	m.words = max(1, (len(m.models)+63)/64)
	m.cost = make([]int64, len(m.models))
	for i := range m.cost {
		m.cost[i] = 1
	}
	costFrom := make(map[string]string, len(cfg.costs)) // model id → the key that set its cost
	for _, c := range cfg.costs {
		model, ok := resolve(c.key)
		switch {
		case !ok:
			return nil, sdksettings.NewError(c.path, unknownIdent(c.key, cfg.vars))
		case costFrom[model] != "":
			return nil, sdksettings.NewError(c.path, strconv.Quote(costFrom[model])+" and "+strconv.Quote(c.key)+" both name model "+model)
		}
		costFrom[model] = c.key
		if i, ok := m.index[model]; ok {
			m.cost[i] = c.cost
		} else {
			m.other[model] = c.cost
		}
	}
	for ident := range idents {
		model, _ := resolve(ident)
		idents[ident] = int(m.index[model])
	}

	// Expand the sets, references first.
	x := &expander{
		words: m.words,
		limit: max(1, maxTermWords/m.words),
		vars:  idents,
		sets:  make(map[string]*dnf, len(cfg.sets)),
		hint:  func(v string) string { return unknownIdent(v, cfg.vars) },
	}
	exprs := make(map[string]setSettings, len(cfg.sets))
	for _, set := range cfg.sets {
		exprs[set.name] = set
	}
	total := 0
	for _, name := range order {
		x.src = exprs[name].expr
		d, err := x.expand(roots[name])
		if err == nil && total+d.len() > x.limit {
			err = errors.New("the sets together expand to more than " + strconv.Itoa(x.limit) + " combinations")
		}
		if err != nil {
			return nil, sdksettings.NewError(exprs[name].path, err.Error())
		}
		total += d.len()
		x.sets[name] = d
	}

	// Every combination once, in set order, then in each set's order.
	all := &dnf{words: m.words, terms: make([]uint64, 0, total*m.words)}
	x.seen.reset(total)
	for i, set := range cfg.sets {
		d := x.sets[set.name]
		for j := range d.len() {
			before := all.len()
			x.seen.add(all, d.term(j))
			if all.len() > before {
				m.setOf = append(m.setOf, int32(i))
			}
		}
	}
	m.combos = all.terms
	if err := m.buildCandidates(); err != nil {
		return nil, sdksettings.NewError(pathMatrix, err.Error())
	}
	return m, nil
}

// walk calls f for n and every node below it.
func walk(n *node, f func(*node)) {
	f(n)
	for _, k := range n.kids {
		walk(k, f)
	}
}

// dependencyOrder orders the sets so that every set comes after the sets
// it references, and names the first reference cycle it finds.
func dependencyOrder(sets []setSettings, deps map[string][]string) ([]string, error) {
	const (
		unseen = iota
		visiting
		done
	)
	state := make(map[string]int, len(sets))
	var order, path []string
	var visit func(name string) error
	visit = func(name string) error {
		switch state[name] {
		case visiting:
			cycle := path[slices.Index(path, name):]
			quoted := make([]string, 0, len(cycle)+1)
			for _, s := range append(cycle, name) {
				quoted = append(quoted, strconv.Quote(s))
			}
			return errors.New("sets reference each other in a cycle: " + strings.Join(quoted, " -> "))
		case done:
			return nil
		}
		state[name] = visiting
		path = append(path, name)
		for _, dep := range deps[name] {
			if err := visit(dep); err != nil {
				return err
			}
		}
		path = path[:len(path)-1]
		state[name] = done
		order = append(order, name)
		return nil
	}
	for _, set := range sets {
		if err := visit(set.name); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// unknownIdent explains an identifier that is neither a var nor a model
// id.
func unknownIdent(v string, vars map[string]string) string {
	ids := slices.Sorted(maps.Keys(vars))
	if len(ids) == 0 {
		return strconv.Quote(v) + " is neither a var nor a model id (matrix.vars is empty)"
	}
	if len(ids) > 10 {
		ids = append(ids[:10], "…")
	}
	return strconv.Quote(v) + " is neither a var nor a model id (vars: " + strings.Join(ids, ", ") + ")"
}

// swapper is the matrix swapper.
type swapper struct {
	h     sdk.Host
	m     *matrix
	sc    scratch  // the solver's buffers, reused so that Plan does not allocate
	evict []string // Plan's answer, reused likewise
}

// New makes the matrix swapper from its settings JSON; it is the factory
// registered with sdk.RegisterSwapper. Errors name the offending setting,
// and for an expression the set and the column.
func New(h sdk.Host, rawSettings []byte) (sdk.Swapper, error) {
	cfg, err := parseSettings(rawSettings)
	if err != nil {
		return nil, err
	}
	m, err := compile(cfg, knownModels(h))
	if err != nil {
		return nil, err
	}
	return &swapper{h: h, m: m}, nil
}

// knownModels is the set of model ids the host lists at init, or nil when
// it lists none (a host that has no models to show, such as a bare test
// host).
func knownModels(h sdk.Host) map[string]bool {
	if h == nil {
		return nil
	}
	snap := h.Snapshot()
	if len(snap.Models) == 0 {
		return nil
	}
	known := make(map[string]bool, len(snap.Models))
	for _, mi := range snap.Models {
		known[mi.Name] = true
	}
	return known
}

// Plan evicts, in the order of q.Running, the running models outside the
// cheapest combination that contains q.Target; every running model when
// q.Target is in no set. It places nothing. The returned Evict is reused
// by the next call (the SDK encodes it at once).
func (s *swapper) Plan(q sdk.PlanRequest) (sdk.Plan, error) {
	combo := s.m.solve(q.Target, q.Running, &s.sc)
	s.evict = s.evict[:0]
	for i, name := range q.Running {
		if mi := s.sc.run[i]; mi == unknownModel || mi >= 0 && (combo < 0 || !s.m.has(combo, mi)) {
			s.evict = append(s.evict, name)
		}
	}
	if len(s.evict) == 0 {
		return sdk.Plan{}, nil
	}
	return sdk.Plan{Evict: s.evict}, nil
}

// PurePlan claims sdk.PurePlanner: a matrix plan depends only on the
// settings, the target and the running set, so the host may reuse it.
func (s *swapper) PurePlan() bool { return true }

// PlanJob chooses the GPUs a GPU job takes whole (sdk.JobPlanner), by the
// evict costs: free GPUs first, then GPUs whose every model is ready, idle
// (no request in flight) and unpinned, the cheapest to evict first (the
// sum of their models' evict costs), ties to the lowest index. A job has
// no place in the matrix's combinations, so they play no part.
func (s *swapper) PlanJob(q sdk.JobPlanRequest) (sdk.Plan, error) {
	snap := s.h.Snapshot()
	model := func(name string) *sdk.ModelInfo {
		i := slices.IndexFunc(snap.Models, func(m sdk.ModelInfo) bool { return m.Name == name })
		if i < 0 {
			return nil
		}
		return &snap.Models[i]
	}
	devices := placement.JobCandidates(q.Candidates, snap.Models)
	cost := func(d placement.WholeDevice) int64 {
		var c int64
		for _, h := range d.Holders {
			c += s.m.modelCost(h)
		}
		return c
	}
	slices.SortStableFunc(devices, func(a, b placement.WholeDevice) int { return cmp.Compare(cost(a), cost(b)) })
	evictable := func(name string) bool {
		m := model(name)
		return m != nil && m.State == sdk.StateReady && m.InFlight == 0 && !m.Pinned
	}
	chosen, evict, ok := placement.Whole(int(q.GPUs), devices, evictable)
	if !ok {
		return sdk.Plan{}, errors.New("the job needs " + strconv.FormatUint(uint64(q.GPUs), 10) + " whole GPU(s); too few of the " +
			strconv.Itoa(len(q.Candidates)) + " it may take are free or hold only idle, unpinned models")
	}
	return sdk.Plan{Evict: evict, Devices: chosen}, nil
}

// OnSwapStart logs the swap once, when it really starts: the set and
// combination chosen for the target, and what evicting the rest costs.
func (s *swapper) OnSwapStart(ev sdk.SwapStartEvent) {
	combo := s.m.solve(ev.Target, ev.Running, &s.sc)
	cost := s.m.evictCost(combo, ev.Running, s.sc.run)
	set, expr, models := "(none)", "", ev.Target
	if combo >= 0 {
		cfg := s.m.sets[s.m.setOf[combo]]
		set, expr, models = cfg.name, cfg.expr, s.m.describe(combo)
	}
	s.h.Log(sdk.LevelInfo, "matrix swap: model="+ev.Target+" set="+set+" dsl="+strconv.Quote(expr)+" combination=["+models+
		"] cost="+strconv.FormatInt(cost, 10)+" evict=["+strings.Join(ev.Evict, ",")+"]")
}
