package evict

import (
	"math"
	"slices"

	"github.com/loadout-dev/loadout/sdk/placement"
	sdksettings "github.com/loadout-dev/loadout/sdk/settings"
)

// Constraint is one model's placement constraint: the devices it may use
// (none: every device) and when it may be split; a model's gpus: and
// split: in the configuration.
type Constraint struct {
	GPUs  []int32
	Split placement.SplitMode
	// Apart are the model's sibling replicas (issue 15): it goes on a
	// device none of them holds when one has room, else where the rule
	// says. Written by the host for every replica of a model with
	// replicas; not a constraint an operator writes.
	Apart []string
}

// Placement is the box's placement as the host hands it to routers: pack
// (else spread) and the constraints of the models that have one, by name.
type Placement struct {
	Pack   bool
	Models map[string]Constraint
}

// ParsePlacement parses the value of the "placement" key the host adds to
// every router's settings (host/config's RouterSettingsJSON; an operator
// does not write it): {"pack": true, "models": {"MODEL": {"gpus": [1, 2],
// "split": "never", "apart": ["MODEL@2"]}}}, every key optional, null for
// none. Errors are
// *sdksettings.Error naming the setting ("placement.models.m.split").
func ParsePlacement(v sdksettings.Value) (Placement, error) {
	var p Placement
	place, err := v.Object("pack", "models")
	if err != nil {
		return p, err
	}
	if b := place.Get("pack"); !b.IsNull() {
		if p.Pack, err = b.Bool(); err != nil {
			return p, err
		}
	}
	models, err := place.Get("models").Object()
	if err != nil {
		return p, err
	}
	for _, name := range models.Keys() {
		c, err := parseConstraint(models.Get(name))
		if err != nil {
			return p, err
		}
		if p.Models == nil {
			p.Models = map[string]Constraint{}
		}
		p.Models[name] = c
	}
	return p, nil
}

func parseConstraint(v sdksettings.Value) (Constraint, error) {
	var c Constraint
	f, err := v.Object("gpus", "split", "apart")
	if err != nil {
		return c, err
	}
	apart, err := f.Get("apart").List()
	if err != nil {
		return c, err
	}
	for _, a := range apart {
		name, err := a.String()
		if err != nil {
			return c, err
		}
		c.Apart = append(c.Apart, name)
	}
	gpus, err := f.Get("gpus").List()
	if err != nil {
		return c, err
	}
	for _, g := range gpus {
		i, err := g.Int(0, math.MaxInt32)
		if err != nil {
			return c, err
		}
		c.GPUs = append(c.GPUs, int32(i))
	}
	if s := f.Get("split"); !s.IsNull() {
		str, err := s.String()
		if err != nil {
			return c, err
		}
		if c.Split, err = placement.ParseSplitMode(str); err != nil {
			return c, sdksettings.NewError(s.Path(), err.Error())
		}
	}
	return c, nil
}

// Rule is one model's placement rule as a plan applies it: the
// sdk/placement Rule (its gpus:, its split:, the box's pack or spread) and
// the devices it may use (nil: every device).
type Rule struct {
	placement.Rule
	GPUs []int32
	// Apart are the model's sibling replicas, whose devices Plan avoids
	// when the model fits elsewhere without evicting (Constraint.Apart).
	Apart []string
}

// Allows reports whether r lets its model use the GPU with index.
func (r *Rule) Allows(index int32) bool { return len(r.GPUs) == 0 || slices.Contains(r.GPUs, index) }

// Rules are the placement rules of a box: one per constrained model and
// a default for every other, built once (at a policy's New).
type Rules struct {
	def Rule
	by  map[string]*Rule
}

// NewRules builds the rules of p with margin (bytes left free on every
// device a model uses, for the pack sorter).
func NewRules(p Placement, margin uint64) Rules {
	var rs Rules
	if p.Pack {
		rs.def.Prefer = placement.LeastFree(margin)
	}
	for name, c := range p.Models {
		r := &Rule{GPUs: c.GPUs, Apart: c.Apart}
		r.Prefer, r.Split = rs.def.Prefer, c.Split
		if len(c.GPUs) > 0 {
			r.Filters = []placement.Filter{placement.Allowed(c.GPUs)}
		}
		if rs.by == nil {
			rs.by = map[string]*Rule{}
		}
		rs.by[name] = r
	}
	return rs
}

// For is the placement rule of the model named name.
func (rs *Rules) For(name string) *Rule {
	if r, ok := rs.by[name]; ok {
		return r
	}
	return &rs.def
}

// Settings are the settings every router built on this package reads:
// margin (bytes kept free on every GPU a model uses, beyond its VRAM
// figure) and the placement the host adds.
type Settings struct {
	Margin    uint64
	Placement Placement
}

// ParseSettings parses a router's settings JSON, every key optional:
//
//	{"margin": "512MiB",
//	 "placement": {"pack": true, "models": {"MODEL": {"gpus": [1, 2], "split": "never"}}}}
//
// margin is an sdksettings.Size (a size string or a whole number of
// bytes); placement is ParsePlacement's, written by the host. extra names
// further keys the policy reads itself from the returned object. Errors
// are *sdksettings.Error naming the setting.
func ParseSettings(raw []byte, extra ...string) (Settings, sdksettings.Fields, error) {
	var st Settings
	root, err := sdksettings.Decode(raw)
	if err != nil {
		return st, sdksettings.Fields{}, err
	}
	top, err := root.Object(append([]string{"margin", "placement"}, extra...)...)
	if err != nil {
		return st, top, err
	}
	if v := top.Get("margin"); !v.IsNull() {
		m, err := v.Size()
		if err != nil {
			return st, top, err
		}
		st.Margin = uint64(m)
	}
	st.Placement, err = ParsePlacement(top.Get("placement"))
	return st, top, err
}
