package placement

import (
	"slices"
	"testing"
)

const gib = uint64(1) << 30

func TestChoose_Rule(t *testing.T) {
	devs := []Device{{0, 10 * gib}, {1, 30 * gib}, {2, 30 * gib}, {3, 5 * gib}}
	cases := []struct {
		name    string
		need    uint64
		margin  uint64
		filters []Filter
		want    []int32
		fits    bool
	}{
		{"one device, the most free, ties to the first listed", 20 * gib, 0, nil, []int32{1}, true},
		{"a split over the fewest devices, in the order given", 50 * gib, 0, nil, []int32{1, 2}, true},
		{"the margin is left on every device", 30 * gib, gib, nil, []int32{1, 2}, true},
		{"allowed devices only", 8 * gib, 0, []Filter{Allowed([]int32{0, 3})}, []int32{0}, true},
		{"allowed devices split", 12 * gib, 0, []Filter{Allowed([]int32{0, 3})}, []int32{0, 3}, true},
		{"does not fit", 76 * gib, 0, nil, nil, false},
		{"nothing allowed", gib, 0, []Filter{Allowed([]int32{9})}, nil, false},
		{"a need of zero", 0, 0, nil, nil, true},
	}
	var p Placer
	for _, tc := range cases {
		got, fits := p.Choose(nil, tc.need, devs, tc.margin, tc.filters...)
		if fits != tc.fits || !slices.Equal(got, tc.want) {
			t.Errorf("%s: Choose = %v, %t; want %v, %t", tc.name, got, fits, tc.want, tc.fits)
		}
	}
}

func TestSplit_Proportional(t *testing.T) {
	got, ok := Split(30*gib, []Device{{0, 10 * gib}, {1, 30 * gib}, {2, 0}}, 0)
	if !ok || got[0] != 7*gib+gib/2 || got[1] != 22*gib+gib/2 || len(got) != 2 {
		t.Fatalf("Split = %v, %t; want 7.5 GiB and 22.5 GiB in proportion to free memory", got, ok)
	}
	if _, ok := Split(41*gib, []Device{{0, 10 * gib}, {1, 30 * gib}}, 0); ok {
		t.Fatal("Split fit more than the devices hold")
	}
}

// A grown Placer allocates nothing: policies place on every plan.
func TestChoose_NoAllocation(t *testing.T) {
	devs := []Device{{0, 10 * gib}, {1, 30 * gib}, {2, 30 * gib}}
	var p Placer
	dst := make([]int32, 0, 4)
	allocs := testing.AllocsPerRun(100, func() { dst, _ = p.Choose(dst, 50*gib, devs, 0) })
	if allocs != 0 {
		t.Fatalf("Choose allocates %v times a call", allocs)
	}
}

// The Rule's three knobs: gpus (Allowed), split never/auto/always, and
// placement pack/spread (the single device a model fits on whole).
func TestPlace_Rule(t *testing.T) {
	devs := []Device{{0, 10 * gib}, {1, 30 * gib}, {2, 20 * gib}, {3, 5 * gib}}
	pack := LeastFree(0)
	cases := []struct {
		name string
		need uint64
		rule Rule
		want []int32
		fits bool
	}{
		{"spread: the most free", 8 * gib, Rule{}, []int32{1}, true},
		{"pack: the least free that holds it", 8 * gib, Rule{Prefer: pack}, []int32{0}, true},
		{"pack: a device too small is passed over", 12 * gib, Rule{Prefer: pack}, []int32{2}, true},
		{"pack among the allowed devices", 4 * gib, Rule{Prefer: pack, Filters: []Filter{Allowed([]int32{1, 2})}}, []int32{2}, true},
		{"auto: one device when one holds it", 25 * gib, Rule{}, []int32{1}, true},
		{"auto: a split when none does", 45 * gib, Rule{}, []int32{1, 2}, true},
		{"auto split among the allowed devices", 12 * gib, Rule{Filters: []Filter{Allowed([]int32{0, 3})}}, []int32{0, 3}, true},
		{"never: one device", 25 * gib, Rule{Split: SplitNever}, []int32{1}, true},
		{"never: no split, so no fit", 45 * gib, Rule{Split: SplitNever}, nil, false},
		{"never, with pack", 8 * gib, Rule{Split: SplitNever, Prefer: pack}, []int32{0}, true},
		{"always: every allowed device, though one holds it", 4 * gib, Rule{Split: SplitAlways, Filters: []Filter{Allowed([]int32{1, 2})}}, []int32{1, 2}, true},
		{"always: every device", 4 * gib, Rule{Split: SplitAlways}, []int32{0, 1, 2, 3}, true},
		{"always: more than they hold together", 36 * gib, Rule{Split: SplitAlways, Filters: []Filter{Allowed([]int32{0, 3})}}, nil, false},
		{"always: one device allowed is no split", 4 * gib, Rule{Split: SplitAlways, Filters: []Filter{Allowed([]int32{1})}}, nil, false},
		{"nothing allowed", gib, Rule{Filters: []Filter{Allowed([]int32{7})}}, nil, false},
		{"a need of zero fits whatever the rule", 0, Rule{Split: SplitAlways}, nil, true},
	}
	var p Placer
	for _, tc := range cases {
		got, fits := p.Place(nil, tc.need, devs, 0, tc.rule)
		if fits != tc.fits || !slices.Equal(got, tc.want) {
			t.Errorf("%s: Place = %v, %t; want %v, %t", tc.name, got, fits, tc.want, tc.fits)
		}
	}
	// SplitAlways needs memory on every device it splits over.
	full := []Device{{0, 10 * gib}, {1, 0}}
	if got, fits := p.Place(nil, gib, full, 0, Rule{Split: SplitAlways}); fits {
		t.Errorf("always over a full device: Place = %v, true", got)
	}
}

func TestRule_Conforms(t *testing.T) {
	devs := []Device{{0, 10 * gib}, {1, 30 * gib}, {2, 20 * gib}}
	only12 := []Filter{Allowed([]int32{1, 2})}
	for _, tc := range []struct {
		name   string
		rule   Rule
		chosen []int32
		want   bool
	}{
		{"any devices", Rule{}, []int32{0, 2}, true},
		{"nothing chosen", Rule{}, nil, false},
		{"an unknown device", Rule{}, []int32{5}, false},
		{"an allowed device", Rule{Filters: only12}, []int32{2}, true},
		{"a device not allowed", Rule{Filters: only12}, []int32{0, 1}, false},
		{"never: one", Rule{Split: SplitNever}, []int32{1}, true},
		{"never: two", Rule{Split: SplitNever}, []int32{1, 2}, false},
		{"always: every allowed one", Rule{Split: SplitAlways, Filters: only12}, []int32{1, 2}, true},
		{"always: a subset", Rule{Split: SplitAlways}, []int32{1, 2}, false},
		{"always: one allowed is no split", Rule{Split: SplitAlways, Filters: []Filter{Allowed([]int32{1})}}, []int32{1}, false},
	} {
		if got := tc.rule.Conforms(tc.chosen, devs); got != tc.want {
			t.Errorf("%s: Conforms(%v) = %t, want %t", tc.name, tc.chosen, got, tc.want)
		}
	}
}

func TestParseSplitModeMode(t *testing.T) {
	for in, want := range map[string]SplitMode{"": SplitAuto, "auto": SplitAuto, "never": SplitNever, "always": SplitAlways} {
		if got, err := ParseSplitMode(in); err != nil || got != want || (in != "" && got.String() != in) {
			t.Errorf("ParseSplitMode(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseSplitMode("sometimes"); err == nil {
		t.Error("ParseSplit accepted sometimes")
	}
}

// A grown Placer allocates nothing under a Rule either.
func TestPlace_NoAllocation(t *testing.T) {
	devs := []Device{{0, 10 * gib}, {1, 30 * gib}, {2, 30 * gib}}
	rules := []Rule{{Prefer: LeastFree(0)}, {Split: SplitAlways}, {Split: SplitNever, Filters: []Filter{Allowed([]int32{0, 2})}}}
	var p Placer
	dst := make([]int32, 0, 4)
	for _, r := range rules {
		allocs := testing.AllocsPerRun(100, func() { dst, _ = p.Place(dst, 50*gib, devs, 0, r) })
		if allocs != 0 {
			t.Fatalf("Place(%+v) allocates %v times a call", r, allocs)
		}
	}
}
