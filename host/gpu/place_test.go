package gpu

import (
	"errors"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/loadout-dev/loadout/sdk/placement"
)

const (
	mib = uint64(1) << 20
	gib = uint64(1) << 30
)

func free(pairs ...uint64) []DeviceFree {
	out := make([]DeviceFree, len(pairs))
	for i, f := range pairs {
		out[i] = DeviceFree{Index: i, Free: f}
	}
	return out
}

var placeCases = []struct {
	name    string
	need    uint64
	devices []DeviceFree
	margin  uint64
	want    map[int]uint64
	best    uint64 // when it does not fit
}{
	{"nothing needed places nothing", 0, free(10 * gib), 0, map[int]uint64{}, 0},
	{"fits one device", 8 * gib, free(24 * gib), 0, map[int]uint64{0: 8 * gib}, 0},
	{"exactly fills a device", 24 * gib, free(24 * gib), 0, map[int]uint64{0: 24 * gib}, 0},
	{"the device with the most free", 8 * gib, free(10*gib, 20*gib, 15*gib), 0, map[int]uint64{1: 8 * gib}, 0},
	{"ties go to the first listed", 8 * gib, free(20*gib, 20*gib), 0, map[int]uint64{0: 8 * gib}, 0},
	{"the margin stays free", 24 * gib, free(24*gib, 24*gib+512*mib), 512 * mib, map[int]uint64{1: 24 * gib}, 0},
	{"split in proportion to free", 90 * gib, free(60*gib, 30*gib), 0, map[int]uint64{0: 60 * gib, 1: 30 * gib}, 0},
	{"split two ways over 2x80GiB", 120 * gib, free(80*gib, 80*gib), 0, map[int]uint64{0: 60 * gib, 1: 60 * gib}, 0},
	{"split keeps the margin on each device", 120 * gib, free(80*gib, 80*gib), 10 * gib, map[int]uint64{0: 60 * gib, 1: 60 * gib}, 0},
	{"split over the fewest devices", 100 * gib, free(80*gib, 20*gib, 80*gib, 10*gib), 0, map[int]uint64{0: 50 * gib, 2: 50 * gib}, 0},
	{"split takes the largest first", 100 * gib, free(30*gib, 80*gib, 40*gib), 0, map[int]uint64{1: 100*gib*80/120 + 1, 2: 100 * gib * 40 / 120}, 0},
	{"a device at its margin gets nothing", 40 * gib, free(30*gib, gib, 30*gib), gib, map[int]uint64{0: 20 * gib, 2: 20 * gib}, 0},
	{"does not fit: best is the whole split", 100 * gib, free(40*gib, 40*gib), 0, nil, 80 * gib},
	{"does not fit: the margin counts", 80 * gib, free(40*gib, 40*gib), 512 * mib, nil, 79 * gib},
	{"does not fit: no devices", gib, nil, 0, nil, 0},
	{"does not fit: all full", gib, free(0, 100*mib), 512 * mib, nil, 0},
}

func TestPlace_Scenario(t *testing.T) {
	for _, tc := range placeCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Place(tc.need, tc.devices, tc.margin)
			if tc.want == nil {
				var dnf *DoesNotFitError
				if !errors.As(err, &dnf) || !errors.Is(err, ErrDoesNotFit) {
					t.Fatalf("Place = %v, %v; want a DoesNotFitError", got, err)
				}
				if dnf.Need != tc.need || dnf.Best != tc.best {
					t.Errorf("error %+v, want need %d best %d", dnf, tc.need, tc.best)
				}
				return
			}
			if err != nil || !maps.Equal(got, tc.want) {
				t.Errorf("Place(%d, %v, %d) = %v, %v; want %v", tc.need, tc.devices, tc.margin, got, err, tc.want)
			}
		})
	}
}

func TestSplit_Scenario(t *testing.T) {
	cases := []struct {
		name    string
		need    uint64
		devices []DeviceFree
		margin  uint64
		want    map[int]uint64
	}{
		{"every device given takes a share", 30 * gib, free(80*gib, 20*gib), 0, map[int]uint64{0: 24 * gib, 1: 6 * gib}},
		{"remainders go to the first devices", 10, free(4, 4, 4), 0, map[int]uint64{0: 4, 1: 3, 2: 3}},
		{"rounding never exceeds a device", 8, free(3, 3, 3), 0, map[int]uint64{0: 3, 1: 3, 2: 2}},
		{"huge figures do not overflow", 1 << 62, []DeviceFree{{Index: 4, Free: 1 << 62}, {Index: 7, Free: 1 << 62}}, 0, map[int]uint64{4: 1 << 61, 7: 1 << 61}},
		{"a zero share is left out", 1, free(gib, 1), 0, map[int]uint64{0: 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Split(tc.need, tc.devices, tc.margin)
			if err != nil || !maps.Equal(got, tc.want) {
				t.Errorf("Split(%d, %v, %d) = %v, %v; want %v", tc.need, tc.devices, tc.margin, got, err, tc.want)
			}
		})
	}
	if _, err := Split(10, free(3, 3), 0); !errors.Is(err, ErrDoesNotFit) {
		t.Errorf("Split over too little: %v, want ErrDoesNotFit", err)
	}
}

// TestPlace_Invariants: on random inputs a placement uses exactly need
// bytes and leaves every device its margin; a refusal means even a split
// over every device could not hold it.
func TestPlace_Invariants(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		devs := make([]DeviceFree, r.IntN(5))
		var total uint64
		margin := r.Uint64N(2 * gib)
		for i := range devs {
			devs[i] = DeviceFree{Index: i, Free: r.Uint64N(96 * gib)}
			total += placement.Usable(placement.Device{Free: devs[i].Free}, margin)
		}
		need := r.Uint64N(200*gib) + 1
		got, err := Place(need, devs, margin)
		if err != nil {
			if need <= total {
				t.Fatalf("Place(%d, %v, %d): %v, but %d fit in a split", need, devs, margin, err, total)
			}
			continue
		}
		var sum uint64
		for d, b := range got {
			if b == 0 || b+margin > devs[d].Free {
				t.Fatalf("Place(%d, %v, %d) = %v: device %d over its free memory", need, devs, margin, got, d)
			}
			sum += b
		}
		if sum != need {
			t.Fatalf("Place(%d, %v, %d) = %v: %d bytes placed", need, devs, margin, got, sum)
		}
	}
}

func TestSortedDevices(t *testing.T) {
	if got := SortedDevices(map[int]uint64{3: 1, 0: 2, 1: 1}); len(got) != 3 || got[0] != 0 || got[1] != 1 || got[2] != 3 {
		t.Errorf("SortedDevices = %v", got)
	}
}
