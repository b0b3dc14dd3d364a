package gpu

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/sdk/placement"
)

func TestPlaceUnder_Constraint(t *testing.T) {
	devs := free(24*gib, 80*gib, 40*gib, 24*gib)
	never, always := placement.SplitNever, placement.SplitAlways
	for _, tc := range []struct {
		name string
		need uint64
		c    Constraint
		pack bool
		want map[int]uint64
		best uint64 // when it does not fit
	}{
		{"spread: the emptiest", 10 * gib, Constraint{}, false, map[int]uint64{1: 10 * gib}, 0},
		{"pack: the fullest that holds it", 10 * gib, Constraint{}, true, map[int]uint64{0: 10 * gib}, 0},
		{"pack passes over what is too small", 30 * gib, Constraint{}, true, map[int]uint64{2: 30 * gib}, 0},
		{"only the gpus listed", 10 * gib, Constraint{GPUs: []int{2, 3}}, false, map[int]uint64{2: 10 * gib}, 0},
		{"only the gpus listed, packed", 10 * gib, Constraint{GPUs: []int{2, 3}}, true, map[int]uint64{3: 10 * gib}, 0},
		{"auto splits over the gpus listed", 50 * gib, Constraint{GPUs: []int{0, 3}}, false, nil, 48 * gib},
		{"auto never splits what fits", 70 * gib, Constraint{}, false, map[int]uint64{1: 70 * gib}, 0},
		{"never: one device", 70 * gib, Constraint{Split: never}, false, map[int]uint64{1: 70 * gib}, 0},
		{"never: larger than every allowed device", 30 * gib, Constraint{GPUs: []int{0, 3}, Split: never}, false, nil, 24 * gib},
		{"always: every gpu listed, in proportion", 16 * gib, Constraint{GPUs: []int{0, 2}, Split: always}, false,
			map[int]uint64{0: 6 * gib, 2: 10 * gib}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PlaceUnder(tc.need, devs, 0, tc.c, tc.pack)
			if tc.want == nil {
				var dnf *DoesNotFitError
				if !errors.As(err, &dnf) || dnf.Best != tc.best || dnf.Constraint != tc.c.String() {
					t.Fatalf("PlaceUnder = %v, %v; want a DoesNotFitError with best %d under %q", got, err, tc.best, tc.c)
				}
				if !strings.Contains(err.Error(), tc.c.String()) {
					t.Errorf("the error does not name the constraint: %v", err)
				}
				return
			}
			if err != nil || !maps.Equal(got, tc.want) {
				t.Fatalf("PlaceUnder = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// The ledger applies the configuration's placement to every lease it
// places, and refuses a swapper's devices the constraint does not allow.
func TestLedger_ReserveUnderPlacement(t *testing.T) {
	l := NewLedger(sim(), 0) // 2 × 24 GiB
	l.SetPlacement(Placement{Pack: true, Models: map[string]Constraint{
		"one":    {GPUs: []int{1}},
		"whole":  {Split: placement.SplitNever},
		"across": {Split: placement.SplitAlways},
	}})
	must(t, l.Acquire("x", map[int]uint64{0: 4 * gib}))

	// pack: the fuller device 0 takes a model that fits there.
	if got, err := l.Reserve("free", 8*gib, nil, nil); err != nil || !maps.Equal(got, map[int]uint64{0: 8 * gib}) {
		t.Fatalf("pack: Reserve = %v, %v; want device 0", got, err)
	}
	if got, err := l.Reserve("one", 2*gib, nil, nil); err != nil || !maps.Equal(got, map[int]uint64{1: 2 * gib}) {
		t.Fatalf("gpus [1]: Reserve = %v, %v", got, err)
	}
	// 12 GiB free on 0, 22 on 1: split: never refuses 30, always splits 10.
	if _, err := l.Reserve("whole", 30*gib, nil, nil); !errors.Is(err, ErrDoesNotFit) || !strings.Contains(err.Error(), "split: never") {
		t.Fatalf("split never: %v", err)
	}
	if got, err := l.Reserve("across", 17*gib, nil, nil); err != nil || len(got) != 2 || got[0]+got[1] != 17*gib {
		t.Fatalf("split always: Reserve = %v, %v; want both devices", got, err)
	}
	// A swapper's devices are checked against the constraint.
	l.Release("one")
	if _, err := l.Reserve("one", gib, []int{0}, nil); !errors.Is(err, ErrConstraint) || !strings.Contains(err.Error(), "gpus: [1]") {
		t.Fatalf("a device outside gpus: %v", err)
	}
	if _, err := l.Reserve("whole", 2*gib, []int{0, 1}, nil); !errors.Is(err, ErrConstraint) {
		t.Fatalf("a split under split: never: %v", err)
	}
	if got, err := l.Reserve("one", gib, []int{1}, nil); err != nil || !maps.Equal(got, map[int]uint64{1: gib}) {
		t.Fatalf("an allowed device: Reserve = %v, %v", got, err)
	}
}
