package gpu

import (
	"fmt"
	"slices"
	"strings"

	"github.com/loadout-dev/loadout/sdk/placement"
)

// Constraint is where one model may be placed: its `gpus:` (the device
// indices it may use; none listed: every device) and its `split:` (never,
// auto — the default — or always). The zero Constraint is no constraint.
// host/config checks a configuration's constraints against the devices
// (an index that does not exist, a model larger than every device it may
// use); the ledger applies them to every lease it places (SetPlacement).
type Constraint struct {
	GPUs  []int               // device indices; empty: every device
	Split placement.SplitMode // when the model may be split
}

// IsZero reports whether c constrains nothing.
func (c Constraint) IsZero() bool { return len(c.GPUs) == 0 && c.Split == placement.SplitAuto }

// Rule is c as sdk/placement's Rule, with the box's placement: pack prefers
// the fullest device the model fits on whole (LeastFree), spread (pack
// false) the emptiest.
func (c Constraint) Rule(margin uint64, pack bool) placement.Rule {
	r := placement.Rule{Split: c.Split}
	if len(c.GPUs) > 0 {
		allowed := make([]int32, len(c.GPUs))
		for i, g := range c.GPUs {
			allowed[i] = int32(g)
		}
		r.Filters = []placement.Filter{placement.Allowed(allowed)}
	}
	if pack {
		r.Prefer = placement.LeastFree(margin)
	}
	return r
}

// String is c as the configuration writes it ("gpus: [1, 2], split:
// never"), empty for the zero Constraint.
func (c Constraint) String() string {
	var parts []string
	if len(c.GPUs) > 0 {
		ids := make([]string, len(c.GPUs))
		for i, g := range c.GPUs {
			ids[i] = fmt.Sprint(g)
		}
		parts = append(parts, "gpus: ["+strings.Join(ids, ", ")+"]")
	}
	if c.Split != placement.SplitAuto {
		parts = append(parts, "split: "+c.Split.String())
	}
	return strings.Join(parts, ", ")
}

// allows reports whether device index d may be used.
func (c Constraint) allows(d int) bool { return len(c.GPUs) == 0 || slices.Contains(c.GPUs, d) }

// doesNotFit is the error for need bytes that c's rule cannot place on
// devs: Best is the most the constraint lets a placement hold (one device
// under split: never, all the allowed ones otherwise).
func (c Constraint) doesNotFit(need uint64, devs []placement.Device, margin uint64) *DoesNotFitError {
	var best, one uint64
	for _, d := range devs {
		if !c.allows(int(d.Index)) {
			continue
		}
		u := placement.Usable(d, margin)
		best += u
		one = max(one, u)
	}
	if c.Split == placement.SplitNever {
		best = one
	}
	return &DoesNotFitError{Need: need, Best: best, Constraint: c.String()}
}

// Placement is the configuration's placement rules, which a Ledger applies
// to every lease it places (SetPlacement): the box's `placement:` and each
// model's Constraint.
type Placement struct {
	// Pack is the box's `placement: pack`: a model goes on the fullest
	// device that holds it whole (best fit), keeping the emptiest free for
	// large models. False is `placement: spread` (the default): the
	// emptiest device, spreading models over the GPUs.
	Pack bool
	// Models are the constraints by owner (model id); a model not listed
	// has none.
	Models map[string]Constraint
}
