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
