package placement

import (
	"errors"
	"slices"
	"strconv"
)

// SplitMode says when a model may be split over several GPUs: a model's
// `split:` in the configuration.
type SplitMode uint8

const (
	// SplitAuto splits only when no single allowed device holds the model
	// (the default): a split costs tokens/s, so one device is preferred.
	SplitAuto SplitMode = iota
	// SplitNever keeps the model on one device; where none holds it, it
	// does not fit.
	SplitNever
	// SplitAlways splits the model over every allowed device, even when
	// one would hold it (tensor parallelism over all of them); each must
	// have some memory to give.
	SplitAlways
)

// String is the configuration's spelling: "auto", "never" or "always".
func (s SplitMode) String() string {
	switch s {
	case SplitAuto:
		return "auto"
	case SplitNever:
		return "never"
	case SplitAlways:
		return "always"
	}
	return "SplitMode(" + strconv.Itoa(int(s)) + ")"
}

// ParseSplitMode reads the configuration's spelling of a SplitMode: "auto",
// "never" or "always" ("" is "auto"). The error names the three.
func ParseSplitMode(s string) (SplitMode, error) {
	switch s {
	case "auto", "":
		return SplitAuto, nil
	case "never":
		return SplitNever, nil
	case "always":
		return SplitAlways, nil
	}
	return SplitAuto, errors.New("want never, auto or always, got " + strconv.Quote(s))
}

// LeastFree orders devices by usable memory beyond margin, least first:
// the box's `placement: pack` as a Rule's Prefer. Among the devices a
// model fits on, the fullest takes it (best fit), so the devices with the
// most room stay free for the models that need it.
func LeastFree(margin uint64) Sorter {
	return func(a, b Device) int {
		ua, ub := Usable(a, margin), Usable(b, margin)
		switch {
		case ua < ub:
			return -1
		case ua > ub:
			return 1
		}
		return 0
	}
}

// Rule is one model's whole placement rule, for Place: which devices it
// may use, which single device it prefers, and when it is split. The zero
// Rule is the package's default: every device, the most usable first
// (`placement: spread`), split only when no single device holds it. A
// policy builds a model's Rule once (its closures allocate) and reuses it.
type Rule struct {
	// Filters keep the devices every one of them accepts (Allowed).
	Filters []Filter
	// Prefer orders the devices a model fits on whole; the first takes
	// it. Nil means the most usable first (MostFree, `placement: spread`);
	// LeastFree is `placement: pack`. It does not order a split, which
	// always takes the fewest devices, most usable first.
	Prefer Sorter
	// Split is when the model may be split (SplitAuto by default).
	Split SplitMode
}

// Conforms reports whether chosen, device indices a swapper picked, keep
// to r over devices: every chosen device is listed and accepted by r's
// filters, SplitNever chose exactly one, and SplitAlways chose every
// device the filters keep (at least two). It says nothing of memory: the
// host's ledger checks that when it leases.
func (r Rule) Conforms(chosen []int32, devices []Device) bool {
	if len(chosen) == 0 {
		return false
	}
	kept, all := 0, true // all: every kept device is chosen
	for _, d := range devices {
		ok := true
		for _, f := range r.Filters {
			if !f(d) {
				ok = false
				break
			}
		}
		in := slices.Contains(chosen, d.Index)
		switch {
		case !ok && in:
			return false
		case ok:
			kept++
			all = all && in
		}
	}
	for _, c := range chosen {
		if !slices.ContainsFunc(devices, func(d Device) bool { return d.Index == c }) {
			return false
		}
	}
	switch r.Split {
	case SplitNever:
		return len(chosen) == 1
	case SplitAlways:
		return kept >= 2 && all
	}
	return true
}
