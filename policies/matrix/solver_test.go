package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/policytest"
)

// reference is the matrix semantics written the slow, obvious way: every
// combination listed as a sorted slice of model ids, and a plan that tries
// each in turn. The solver must agree with it.
type reference struct {
	combos [][]string
	sets   []string // the set of each combination
	costs  map[string]int64
}

func newReference(t *testing.T, cfg settings) *reference {
	t.Helper()
	roots := map[string]*node{}
	for _, s := range cfg.sets {
		n, err := parse(s.expr)
		if err != nil {
			t.Fatal(err)
		}
		roots[s.name] = n
	}
	key := func(c []string) string { return strings.Join(c, ",") }
	dedup := func(in [][]string) [][]string {
		seen := map[string]bool{}
		var out [][]string
		for _, c := range in {
			if !seen[key(c)] {
				seen[key(c)] = true
				out = append(out, c)
			}
		}
		return out
	}
	var expand func(n *node) [][]string
	expand = func(n *node) [][]string {
		switch n.kind {
		case nodeVar:
			return [][]string{{cfg.vars[n.name]}}
		case nodeRef:
			return expand(roots[n.name])
		case nodeOr:
			var out [][]string
			for _, k := range n.kids {
				out = append(out, expand(k)...)
			}
			return dedup(out)
		}
		out := [][]string{nil}
		for _, k := range n.kids {
			var next [][]string
			kid := expand(k)
			for _, a := range out {
				for _, b := range kid {
					c := slices.Concat(a, b)
					slices.Sort(c)
					next = append(next, slices.Compact(c))
				}
			}
			out = dedup(next)
		}
		return out
	}
	r := &reference{costs: costMap(cfg)}
	seen := map[string]bool{}
	for _, s := range cfg.sets {
		for _, c := range expand(roots[s.name]) {
			if !seen[key(c)] {
				seen[key(c)] = true
				r.combos = append(r.combos, c)
				r.sets = append(r.sets, s.name)
			}
		}
	}
	return r
}

func (r *reference) cost(model string) int64 {
	if c, ok := r.costs[model]; ok {
		return c
	}
	return 1
}

// plan returns the evictions, the chosen combination (nil: runs alone)
// and its cost.
func (r *reference) plan(target string, running []string) (evict, combo []string, cost int64) {
	best := -1
	var bestCost int64
	for i, c := range r.combos {
		if !slices.Contains(c, target) {
			continue
		}
		var cost int64
		for _, m := range running {
			if m != target && !slices.Contains(c, m) {
				cost += r.cost(m)
			}
		}
		if best < 0 || cost < bestCost {
			best, bestCost = i, cost
		}
	}
	if best >= 0 {
		combo = r.combos[best]
	}
	for _, m := range running {
		if m != target && !slices.Contains(combo, m) {
			evict = append(evict, m)
			cost += r.cost(m)
		}
	}
	return evict, combo, cost
}

// costMap is the evict costs of cfg by model id (a var key resolved).
func costMap(cfg settings) map[string]int64 {
	out := make(map[string]int64, len(cfg.costs))
	for _, c := range cfg.costs {
		model := c.key
		if m, ok := cfg.vars[model]; ok {
			model = m
		}
		out[model] = c.cost
	}
	return out
}

// randomMatrix makes settings with nModels models and a few sets of random
// expressions, references to earlier sets included, and costs of the
// given kind.
func randomMatrix(rng *rand.Rand, nModels int, costs string) settings {
	cfg := settings{vars: map[string]string{}}
	var vars []string
	for i := range nModels {
		v := fmt.Sprintf("v%d", i)
		cfg.vars[v] = fmt.Sprintf("model-%d", i)
		vars = append(vars, v)
	}
	for i := range nModels {
		model := fmt.Sprintf("model-%d", i)
		switch costs {
		case "random":
			cfg.costs = append(cfg.costs, costSetting{key: model, cost: 1 + rng.Int64N(6)})
		case "few costly":
			if rng.IntN(5) == 0 {
				cfg.costs = append(cfg.costs, costSetting{key: model, cost: 10 + rng.Int64N(90)})
			}
		}
	}
	var expr func(depth int, refs []string) string
	expr = func(depth int, refs []string) string {
		if depth == 0 || rng.IntN(4) == 0 {
			if len(refs) > 0 && rng.IntN(6) == 0 {
				return "+" + refs[rng.IntN(len(refs))]
			}
			return vars[rng.IntN(len(vars))]
		}
		op := " & "
		if rng.IntN(2) == 0 {
			op = " | "
		}
		kids := make([]string, 2+rng.IntN(3))
		for i := range kids {
			kids[i] = expr(depth-1, refs)
		}
		return "(" + strings.Join(kids, op) + ")"
	}
	var names []string
	for i := range 1 + rng.IntN(4) {
		name := fmt.Sprintf("set%d", i)
		cfg.sets = append(cfg.sets, setSettings{name: name, expr: expr(3, names)})
		names = append(names, name)
	}
	// Now and then a product wide enough to need several chunks of four
	// words per column (more than 256 combinations with the target).
	if rng.IntN(3) == 0 {
		groups := make([]string, 3)
		if nModels >= 40 {
			groups = make([]string, 4)
		}
		perm := rng.Perm(nModels)
		for g := range groups {
			alts := make([]string, min(4+rng.IntN(5), len(perm)))
			for i := range alts {
				alts[i] = vars[perm[(g*8+i)%len(perm)]]
			}
			groups[g] = "(" + strings.Join(alts, " | ") + ")"
		}
		cfg.sets = append(cfg.sets, setSettings{name: "wide", expr: strings.Join(groups, " & ")})
	}
	return cfg
}

// TestSolve_MatchesReference: on random matrices, costs and running sets,
// Plan evicts what the reference evicts, and the solution names the
// reference's combination and cost. The three lane searches are checked
// against each other wherever more than one applies.
func TestSolve_MatchesReference(t *testing.T) {
	defer func(old int) { maxTermWords = old }(maxTermWords)
	maxTermWords = 5_000 // the reference is slow
	rng := rand.New(rand.NewPCG(1, 2))
	rounds := 3000
	if testing.Short() {
		rounds = 300
	}
	paths := map[string]int{}
	for round := range rounds {
		nModels := 2 + rng.IntN(10)
		if round%5 == 0 {
			nModels = 40 + rng.IntN(40) // sometimes several words per combination
		}
		costs := []string{"uniform", "random", "few costly"}[round%3]
		cfg := randomMatrix(rng, nModels, costs)
		m, err := compile(cfg, nil)
		if err != nil && strings.Contains(err.Error(), "expand to more than") || strings.Contains(fmt.Sprint(err), "expands to more than") {
			continue
		}
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		ref := newReference(t, cfg)
		if got := listCombos(m); len(got) != len(ref.combos) {
			t.Fatalf("round %d: %d combinations, the reference has %d", round, len(got), len(ref.combos))
		}
		s := &swapper{h: policytest.NewHost(t), m: m}
		for range 20 {
			target := fmt.Sprintf("model-%d", rng.IntN(nModels+1)) // sometimes in no set
			var running []string
			p := rng.Float64()
			for i := range nModels {
				if model := fmt.Sprintf("model-%d", i); rng.Float64() < p/2 && (model != target || rng.IntN(4) == 0) {
					running = append(running, model)
				}
			}
			if rng.IntN(5) == 0 {
				running = append(running, "outside")
			}
			rng.Shuffle(len(running), func(i, j int) { running[i], running[j] = running[j], running[i] })

			wantEvict, wantCombo, wantCost := ref.plan(target, running)
			plan, err := s.Plan(sdk.PlanRequest{Target: target, Running: running})
			if err != nil {
				t.Fatal(err)
			}
			id := m.solve(target, running, &s.sc)
			cost := m.evictCost(id, running, s.sc.run)
			var combo []string
			if id >= 0 {
				combo = strings.Split(m.describe(id), ",")
			}
			if !slices.Equal(plan.Evict, wantEvict) || !slices.Equal(combo, wantCombo) || cost != wantCost {
				t.Fatalf("round %d: sets %v costs %v\nPlan(%q, %q) = evict %q, combination %q, cost %d\nwant evict %q, combination %q, cost %d",
					round, cfg.sets, cfg.costs, target, running, plan.Evict, combo, cost, wantEvict, wantCombo, wantCost)
			}
			// The generic search agrees wherever a faster one ran.
			if ti, ok := m.index[target]; ok && len(s.sc.rel) > 0 {
				c := &m.targets[ti]
				var total int64
				var off [4]int32
				var costs [4]int64
				for i, r := range s.sc.rel {
					total += r.cost
					if i < 4 {
						off[i], costs[i] = r.off, r.cost
					}
				}
				generic := c.bestLane(s.sc.rel, total, &s.sc.planes)
				if n := len(s.sc.rel); n <= 4 {
					if uniformCosts(s.sc.rel) {
						paths["uniform"]++
						if lane := c.bestLaneUniform(off, n); lane != generic {
							t.Fatalf("round %d: uniform lane %d, generic lane %d", round, lane, generic)
						}
					}
					paths["patterns"]++
					if lane := c.bestLaneByPatterns(off, costs, n, &s.sc.order); lane != generic {
						t.Fatalf("round %d: patterns lane %d, generic lane %d", round, lane, generic)
					}
				} else {
					paths["generic"]++
				}
				if c.words > 4 {
					paths["several words"]++
				}
			}
		}
	}
	for _, p := range []string{"uniform", "patterns", "generic", "several words"} {
		if paths[p] < rounds/10 {
			t.Errorf("only %d plans took the %s path: the test does not cover it", paths[p], p)
		}
	}
	t.Logf("paths: %v", paths)
}

func uniformCosts(rel []relevant) bool {
	for _, r := range rel {
		if r.cost != rel[0].cost {
			return false
		}
	}
	return true
}

// FuzzPlan: for any expression New accepts, every plan agrees with the
// reference; nothing panics or hangs.
func FuzzPlan(f *testing.F) {
	for _, seed := range []string{"a", "(a | b) & c", "+s0 & (d | e) | f & g & h", "a & a | (b | c) & (b | d)", "(a|b|c) & (d|e|f) & (g|h|a)"} {
		f.Add(seed, uint16(0b1011))
	}
	defer func(old int) { maxTermWords = old }(maxTermWords)
	maxTermWords = 2_000
	vars := map[string]string{}
	for _, v := range strings.Fields("a b c d e f g h") {
		vars[v] = "model-" + v
	}
	f.Fuzz(func(t *testing.T, expr string, mask uint16) {
		cfg := settings{
			vars:  vars,
			costs: []costSetting{{key: "model-a", cost: 3}, {key: "model-c", cost: 2}},
			sets:  []setSettings{{name: "s0", expr: "a & b | c"}, {name: "s1", expr: expr}},
		}
		m, err := compile(cfg, nil)
		if err != nil {
			return
		}
		ref := newReference(t, cfg)
		s := &swapper{h: policytest.NewHost(t), m: m}
		var running []string
		for i, v := range strings.Fields("a b c d e f g h z") {
			if mask>>i&1 != 0 {
				running = append(running, "model-"+v)
			}
		}
		for _, target := range strings.Fields("a b d h z") {
			want, _, _ := ref.plan("model-"+target, running)
			plan, err := s.Plan(sdk.PlanRequest{Target: "model-" + target, Running: running})
			if err != nil || !slices.Equal(plan.Evict, want) {
				t.Fatalf("sets %v: Plan(%q, %q) = %q, %v; want %q", cfg.sets, target, running, plan.Evict, err, want)
			}
		}
	})
}
