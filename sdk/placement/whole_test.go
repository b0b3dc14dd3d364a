package placement

import (
	"slices"
	"testing"

	"github.com/loadout-dev/loadout/sdk"
)

func TestWhole(t *testing.T) {
	idle := func(m string) bool { return m != "busy" && m != "pinned" }
	dev := func(i int32, holders ...string) WholeDevice { return WholeDevice{Index: i, Holders: holders} }
	for _, tc := range []struct {
		name    string
		n       int
		devices []WholeDevice
		chosen  []int32
		evict   []string
		ok      bool
	}{
		{"free devices first, in the order given", 2, []WholeDevice{dev(0, "a"), dev(3), dev(1, "b"), dev(2)},
			[]int32{2, 3}, nil, true},
		{"then evictable ones, in the order given", 2, []WholeDevice{dev(2, "b"), dev(0), dev(1, "a")},
			[]int32{0, 2}, []string{"b"}, true},
		{"never a device with a model that may not go", 2, []WholeDevice{dev(0, "a", "busy"), dev(1, "pinned"), dev(2, "c")},
			nil, nil, false},
		{"a split model frees its other device too", 2, []WholeDevice{dev(0, "x"), dev(1, "y"), dev(2, "x")},
			[]int32{0, 2}, []string{"x"}, true},
		{"a split model before two that each hold one GPU", 2, []WholeDevice{dev(2, "y"), dev(0, "x"), dev(3, "z"), dev(1, "x")},
			[]int32{0, 1}, []string{"x"}, true},
		{"for one GPU, the order given", 1, []WholeDevice{dev(2, "y"), dev(0, "x"), dev(1, "x")},
			[]int32{2}, []string{"y"}, true},
		{"a device shared by two evictable models", 1, []WholeDevice{dev(0, "b", "a")},
			[]int32{0}, []string{"a", "b"}, true},
		{"none needed", 0, []WholeDevice{dev(0, "busy")}, nil, nil, true},
		{"more than there are", 3, []WholeDevice{dev(0), dev(1)}, nil, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			chosen, evict, ok := Whole(tc.n, tc.devices, idle)
			if ok != tc.ok || !slices.Equal(chosen, tc.chosen) || !slices.Equal(evict, tc.evict) {
				t.Fatalf("Whole = %v, %v, %v; want %v, %v, %v", chosen, evict, ok, tc.chosen, tc.evict, tc.ok)
			}
		})
	}
}

// JobCandidates lists each candidate's holders, the models whose Devices
// include it; an asleep model's Devices say where its server is (ABI
// version 3) and hold nothing, so it is no holder.
func TestJobCandidates_AsleepModelsHoldNothing(t *testing.T) {
	models := []sdk.ModelInfo{
		{Name: "a", State: sdk.StateReady, Devices: []int32{0, 1}},
		{Name: "s", SleepLevel: 1, Devices: []int32{1}, Leased: []uint64{0}},
		{Name: "w", State: sdk.StateStarting, SleepLevel: 1, Devices: []int32{1}}, // being woken: leased again
	}
	got := JobCandidates([]int32{0, 1}, models)
	want := []WholeDevice{{Index: 0, Holders: []string{"a"}}, {Index: 1, Holders: []string{"a", "w"}}}
	if !slices.EqualFunc(got, want, func(a, b WholeDevice) bool { return a.Index == b.Index && slices.Equal(a.Holders, b.Holders) }) {
		t.Fatalf("JobCandidates = %+v, want %+v", got, want)
	}
}
