package gpu

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"sync"
	"testing"
)

// sim is two declared 24 GiB devices, as in a config's `gpus:`.
func sim() *Declared {
	return NewDeclared([]DeclaredDevice{{Name: "sim0", Memory: 24 * gib}, {Name: "sim1", Memory: 24 * gib}})
}

func TestLedger_Acquire(t *testing.T) {
	cases := []struct {
		name   string
		margin uint64
		held   map[string]map[int]uint64 // acquired first, in name order
		owner  string
		lease  map[int]uint64
		want   error
		device int // of the InsufficientError
		free   uint64
	}{
		{name: "fits", owner: "a", lease: map[int]uint64{0: 10 * gib}},
		{name: "fills a device exactly", owner: "a", lease: map[int]uint64{0: 24 * gib, 1: 24 * gib}},
		{name: "the margin is reserved", margin: gib, owner: "a", lease: map[int]uint64{0: 24 * gib},
			want: ErrInsufficient, device: 0, free: 23 * gib},
		{name: "never over-commits", held: map[string]map[int]uint64{"a": {1: 20 * gib}}, owner: "b", lease: map[int]uint64{0: 4 * gib, 1: 5 * gib},
			want: ErrInsufficient, device: 1, free: 4 * gib},
		{name: "the first short device is named", held: map[string]map[int]uint64{"a": {0: 20 * gib, 1: 20 * gib}}, owner: "b", lease: map[int]uint64{0: 5 * gib, 1: 5 * gib},
			want: ErrInsufficient, device: 0, free: 4 * gib},
		{name: "an owner holds one lease", held: map[string]map[int]uint64{"a": {0: gib}}, owner: "a", lease: map[int]uint64{1: gib}, want: ErrHeld},
		{name: "unknown device", owner: "a", lease: map[int]uint64{2: gib}, want: ErrUnknownDevice},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLedger(sim(), tc.margin)
			for _, o := range sortedKeys(tc.held) {
				if err := l.Acquire(o, tc.held[o]); err != nil {
					t.Fatal(err)
				}
			}
			before := snapshot(t, l)
			err := l.Acquire(tc.owner, tc.lease)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Acquire: %v", err)
				}
				if got, _ := l.Lease(tc.owner); !maps.Equal(got, tc.lease) {
					t.Errorf("lease %v, want %v", got, tc.lease)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Acquire: %v, want %v", err, tc.want)
			}
			var ie *InsufficientError
			if errors.As(err, &ie) && (ie.Device != tc.device || ie.Need != tc.lease[tc.device] || ie.Free != tc.free) {
				t.Errorf("error %+v, want device %d need %d free %d", ie, tc.device, tc.lease[tc.device], tc.free)
			}
			if after := snapshot(t, l); after != before {
				t.Errorf("a failed Acquire changed the ledger:\n%s\nto\n%s", before, after)
			}
		})
	}
}

func sortedKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func snapshot(t *testing.T, l *Ledger) string {
	t.Helper()
	ls, err := l.Leases()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%+v", ls)
}

func TestLedger_Leases(t *testing.T) {
	l := NewLedger(sim(), 512*mib)
	must(t, l.Acquire("b", map[int]uint64{0: 4 * gib, 1: 2 * gib}))
	must(t, l.Acquire("a", map[int]uint64{0: 8 * gib}))
	must(t, l.Acquire("job-1", map[int]uint64{1: 0})) // an empty lease holds nothing
	got, err := l.Leases()
	must(t, err)
	want := []DeviceLeases{
		{Index: 0, Name: "sim0", Total: 24 * gib, Free: 24*gib - 12*gib - 512*mib, Leased: 12 * gib, DriverFree: 24 * gib, Margin: 512 * mib,
			Holders: []Holder{{"a", 8 * gib, "model"}, {"b", 4 * gib, "model"}}},
		{Index: 1, Name: "sim1", Total: 24 * gib, Free: 24*gib - 2*gib - 512*mib, Leased: 2 * gib, DriverFree: 24 * gib, Margin: 512 * mib,
			Holders: []Holder{{"b", 2 * gib, "model"}}},
	}
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Errorf("Leases:\n%+v\nwant\n%+v", got, want)
	}
	if !l.Release("a") || l.Release("a") {
		t.Error("Release: want true, then false")
	}
	got, _ = l.Leases()
	if got[0].Leased != 4*gib || len(got[0].Holders) != 1 {
		t.Errorf("after Release: %+v", got[0])
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestLedger_Reserve(t *testing.T) {
	cases := []struct {
		name    string
		held    map[string]map[int]uint64
		need    uint64
		devices []int
		evict   []string
		want    map[int]uint64
		err     error
	}{
		{name: "the device with the most free", held: map[string]map[int]uint64{"x": {0: 4 * gib}}, need: 10 * gib, want: map[int]uint64{1: 10 * gib}},
		{name: "evicted leases make room", held: map[string]map[int]uint64{"x": {0: 20 * gib}, "y": {1: 20 * gib}}, need: 20 * gib, evict: []string{"y"},
			want: map[int]uint64{1: 20 * gib}},
		{name: "split over 2x24GiB", need: 40 * gib, want: map[int]uint64{0: 20 * gib, 1: 20 * gib}},
		{name: "on the swapper's devices", need: 10 * gib, devices: []int{1, 0}, want: map[int]uint64{0: 5 * gib, 1: 5 * gib}},
		{name: "on the swapper's device, after evictions", held: map[string]map[int]uint64{"x": {0: 20 * gib}}, need: 20 * gib, devices: []int{0}, evict: []string{"x", "x", "nobody"},
			want: map[int]uint64{0: 20 * gib}},
		{name: "does not fit", held: map[string]map[int]uint64{"x": {0: 20 * gib}}, need: 30 * gib, err: ErrDoesNotFit},
		{name: "does not fit on the swapper's device", need: 30 * gib, devices: []int{0}, err: ErrDoesNotFit},
		{name: "unknown device", need: gib, devices: []int{5}, err: ErrUnknownDevice},
		{name: "already held", held: map[string]map[int]uint64{"t": {0: gib}}, need: gib, err: ErrHeld},
		{name: "no need records an empty lease", need: 0, want: map[int]uint64{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLedger(sim(), 0)
			for _, o := range sortedKeys(tc.held) {
				must(t, l.Acquire(o, tc.held[o]))
			}
			before := snapshot(t, l)
			got, err := l.Reserve("t", tc.need, tc.devices, tc.evict)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("Reserve: %v, want %v", err, tc.err)
				}
				if after := snapshot(t, l); after != before {
					t.Errorf("a failed Reserve changed the ledger:\n%s\nto\n%s", before, after)
				}
				return
			}
			if err != nil || !maps.Equal(got, tc.want) {
				t.Fatalf("Reserve = %v, %v; want %v", got, err, tc.want)
			}
			if lease, ok := l.Lease("t"); !ok || !maps.Equal(lease, tc.want) {
				t.Errorf("lease %v, %t; want %v", lease, ok, tc.want)
			}
			for _, e := range tc.evict {
				if _, ok := l.Lease(e); ok {
					t.Errorf("evicted %s still holds a lease", e)
				}
			}
		})
	}
}

func TestLedger_Resize(t *testing.T) {
	l := NewLedger(sim(), gib)
	must(t, l.Acquire("a", map[int]uint64{0: 10 * gib}))
	must(t, l.Acquire("b", map[int]uint64{0: 12 * gib}))
	// Measured usage may take the margin: the memory is already in use.
	must(t, l.Resize("a", map[int]uint64{0: 12 * gib}))
	err := l.Resize("a", map[int]uint64{0: 13 * gib})
	var ie *InsufficientError
	if !errors.As(err, &ie) || ie.Device != 0 || ie.Need != 13*gib || ie.Free != 12*gib {
		t.Errorf("Resize past the total: %v", err)
	}
	must(t, l.Resize("a", map[int]uint64{0: 2 * gib, 1: 3 * gib}))
	if lease, _ := l.Lease("a"); !maps.Equal(lease, map[int]uint64{0: 2 * gib, 1: 3 * gib}) {
		t.Errorf("lease after Resize: %v", lease)
	}
	if err := l.Resize("nobody", map[int]uint64{0: 1}); !errors.Is(err, ErrNoLease) {
		t.Errorf("Resize of no lease: %v", err)
	}
	if err := l.Resize("a", map[int]uint64{4: 1}); !errors.Is(err, ErrUnknownDevice) {
		t.Errorf("Resize onto an unknown device: %v", err)
	}
}

// TestLedger_Concurrent: leases taken and dropped from many goroutines never
// add up to more than a device holds (run with -race).
func TestLedger_Concurrent(t *testing.T) {
	l := NewLedger(sim(), 0)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				owner := fmt.Sprintf("g%d-%d", g, i)
				if err := l.Acquire(owner, map[int]uint64{i % 2: 5 * gib}); err != nil && !errors.Is(err, ErrInsufficient) {
					t.Error(err)
				}
				ls, err := l.Leases()
				if err != nil {
					t.Error(err)
					return
				}
				for _, d := range ls {
					if d.Leased > d.Total {
						t.Errorf("device %d over-committed: %+v", d.Index, d)
					}
				}
				l.Release(owner)
			}
		})
	}
	wg.Wait()
}

func TestRescale(t *testing.T) {
	cases := []struct {
		lease map[int]uint64
		total uint64
		want  map[int]uint64
	}{
		{map[int]uint64{0: 10 * gib}, 12 * gib, map[int]uint64{0: 12 * gib}},
		{map[int]uint64{0: 6 * gib, 1: 3 * gib}, 12 * gib, map[int]uint64{0: 8 * gib, 1: 4 * gib}},
		{map[int]uint64{2: 1, 0: 1, 1: 1}, 10, map[int]uint64{0: 4, 1: 3, 2: 3}},
		{map[int]uint64{}, gib, nil},
	}
	for _, tc := range cases {
		if got := Rescale(tc.lease, tc.total); !maps.Equal(got, tc.want) {
			t.Errorf("Rescale(%v, %d) = %v, want %v", tc.lease, tc.total, got, tc.want)
		}
	}
}

// OnRelease hears every lease that ends in Release, a model's or a job's,
// once each, after the ledger shows it gone; not a lease that Reserve or
// AcquireDevices ends by handing its memory to another owner.
func TestLedger_OnReleaseHearsEveryReleasedLease(t *testing.T) {
	l := NewLedger(NewDeclared([]DeclaredDevice{{Name: "a", Memory: 8 * gib}, {Name: "b", Memory: 8 * gib}}), 0)
	var heard [][]int
	l.OnRelease(func() {
		free, err := l.UnheldDevices() // the hook may read the ledger
		if err != nil {
			t.Error(err)
		}
		heard = append(heard, free)
	})
	if err := l.Acquire("m", map[int]uint64{0: gib}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AcquireDevices("job", []int{1}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Reserve("n", gib, []int{0}, []string{"m"}); err != nil {
		t.Fatal(err)
	}
	if len(heard) != 0 {
		t.Fatalf("heard %v for an eviction by Reserve, want nothing", heard)
	}
	l.Release("n")
	l.Release("n")
	l.Release("job")
	if want := [][]int{{0}, {0, 1}}; !reflect.DeepEqual(heard, want) {
		t.Fatalf("heard with unheld devices %v, want %v (once per lease, after it ended)", heard, want)
	}
}

// AppendLease and AppendFigures say what Lease (its devices sorted) and
// Leases (or LeasesWithoutJobs) say, appended to the storage given, for a
// snapshot that reads them on every plan.
func TestLedger_AppendLeaseAndFiguresAgreeWithLeases(t *testing.T) {
	l := NewLedger(NewDeclared([]DeclaredDevice{{Name: "a", Memory: 24 * gib}, {Name: "b", Memory: 24 * gib},
		{Name: "c", Memory: 24 * gib}, {Name: "d", Memory: 24 * gib}}), 512*mib)
	must(t, l.Acquire("m", map[int]uint64{2: 4 * gib, 0: 2 * gib, 1: 1 * gib}))
	must(t, l.Acquire("n", map[int]uint64{1: 3 * gib}))
	if _, err := l.AcquireDevices("job", []int{3}); err != nil {
		t.Fatal(err)
	}
	for _, owner := range []string{"m", "n", "job", "none"} {
		lease, ok := l.Lease(owner)
		var wantDevices []int32
		var wantBytes []uint64
		for _, d := range SortedDevices(lease) {
			wantDevices, wantBytes = append(wantDevices, int32(d)), append(wantBytes, lease[d])
		}
		devices, bytes, got := l.AppendLease(owner, []int32{9}, []uint64{9})
		if got != ok || !reflect.DeepEqual(devices, append([]int32{9}, wantDevices...)) || !reflect.DeepEqual(bytes, append([]uint64{9}, wantBytes...)) {
			t.Errorf("AppendLease(%s) = %v %v %v; want %v %v %v after what was there", owner, devices, bytes, got, wantDevices, wantBytes, ok)
		}
	}
	for _, withoutJobs := range []bool{false, true} {
		view, err := l.leasesView(withoutJobs)
		must(t, err)
		var want []DeviceFigures
		for _, d := range view {
			want = append(want, DeviceFigures{Index: d.Index, Name: d.Name, Total: d.Total, Free: d.Free, Leased: d.Leased})
		}
		got, err := l.AppendFigures(nil, withoutJobs)
		must(t, err)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("AppendFigures(without jobs %v) = %+v; want %+v", withoutJobs, got, want)
		}
	}
}
