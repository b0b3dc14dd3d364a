package sdk

import (
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/loadout-dev/loadout/sdk/wire"
)

// delta encodes the delta from the snapshot a guest holds (old, nil for
// none, as generation base) to cur: what a host sends.
func delta(old *Snapshot, base, gen uint64, cur Snapshot) []byte {
	d := SnapshotDelta{Now: cur.Now, Base: base, Gen: gen, Total: uint32(len(cur.Models))}
	for i, m := range cur.Models {
		if old == nil || i >= len(old.Models) || !reflect.DeepEqual(m, old.Models[i]) {
			d.Changed = append(d.Changed, uint32(i))
			d.Models = append(d.Models, m)
		}
	}
	if old == nil || !reflect.DeepEqual(cur.GPUs, old.GPUs) {
		d.GPUsChanged, d.GPUs = true, cur.GPUs
	}
	if old == nil {
		d.Base = 0
	}
	d.Host = cur.Host
	return appendMessage(nil, &d)
}

func models(names ...string) []ModelInfo {
	var l []ModelInfo
	for i, n := range names {
		m := ModelInfo{Name: n, EstimatedVRAM: uint64(i+1) << 30}
		if i%2 == 0 {
			m.State, m.Devices, m.Leased = StateReady, []int32{int32(i % 2)}, []uint64{m.EstimatedVRAM}
		}
		l = append(l, m)
	}
	return l
}

// Deltas applied one after the other to the storage a guest keeps give the
// snapshot the host has, through field changes, a reload that removes a
// model and one that adds models, and say which positions they wrote.
func TestDeltaReader_Apply(t *testing.T) {
	gpus := []GPUInfo{{Index: 0, Name: "g0", Total: 24 << 30, Free: 4 << 30}, {Index: 1, Name: "g1", Total: 24 << 30}}
	steps := []struct {
		name        string
		snap        Snapshot
		changed     []int
		all, shared bool
	}{
		{"whole", Snapshot{Now: 1, Models: models("a", "b", "c", "d"), GPUs: gpus}, []int{0, 1, 2, 3}, true, false},
		{"unchanged", Snapshot{Now: 2, Models: models("a", "b", "c", "d"), GPUs: gpus}, nil, false, true},
		{"a field", Snapshot{Now: 3, Models: func() []ModelInfo { l := models("a", "b", "c", "d"); l[2].LastUse = 5; return l }(), GPUs: gpus}, []int{2}, false, true},
		{"asleep", Snapshot{Now: 3, Models: func() []ModelInfo {
			l := models("a", "b", "c", "d")
			l[2].LastUse, l[3].SleepLevel, l[3].CanSleep, l[3].HostLeased, l[3].WakeTime1 = 5, 1, 1, 9<<30, 7e8
			return l
		}(), GPUs: gpus, Host: HostMemoryInfo{Total: 64 << 30, Leased: 9 << 30}}, []int{3}, false, true},
		{"b removed", Snapshot{Now: 4, Models: models("a", "c", "d"), GPUs: gpus}, []int{1, 2}, false, true},
		{"e, f added", Snapshot{Now: 5, Models: models("a", "c", "d", "e", "f"), GPUs: gpus[:1]}, []int{3, 4}, false, false},
		{"all gone", Snapshot{Now: 6}, nil, false, false},
	}
	var r deltaReader
	var dst Snapshot
	var held *Snapshot
	for _, st := range steps {
		base := r.base(&dst)
		if (base == 0) != st.all {
			t.Fatalf("%s: base %d", st.name, base)
		}
		msg := delta(held, base, base+1, st.snap)
		before := firstOf(dst.Models)
		changed, all, err := r.apply(msg, &dst, base, nil)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if all != st.all || !slices.Equal(changed, st.changed) {
			t.Errorf("%s: changed %v all %t, want %v %t", st.name, changed, all, st.changed, st.all)
		}
		want := st.snap
		if !reflect.DeepEqual(dst, want) {
			t.Fatalf("%s: holds %+v, want %+v", st.name, dst, want)
		}
		if st.shared && firstOf(dst.Models) != before {
			t.Errorf("%s: the models' storage was replaced", st.name)
		}
		cp := st.snap
		held = &cp
	}
}

// Applying a delta that changes nothing, or one model, into storage that
// has grown allocates nothing (strings interned, as in the guest).
func TestDeltaReader_AllocatesNothing(t *testing.T) {
	internStrings, internTable = true, map[string]string{}
	defer func() { internStrings, internTable = false, nil }()
	cur := Snapshot{Now: 1, Models: models("a", "b", "c", "d"), GPUs: []GPUInfo{{Index: 0, Name: "g0"}}}
	var r deltaReader
	var dst Snapshot
	if _, _, err := r.apply(delta(nil, 0, 1, cur), &dst, 0, nil); err != nil {
		t.Fatal(err)
	}
	next := cur
	next.Models = models("a", "b", "c", "d")
	next.Models[0].InFlight = 2
	msg := delta(&cur, 1, 1, next)
	changed := make([]int, 0, 4)
	if n := testing.AllocsPerRun(100, func() {
		if _, _, err := r.apply(msg, &dst, 1, changed[:0]); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("apply allocated %v times", n)
	}
}

// A reply a guest cannot take is an error, and the guest forgets what it
// holds: its next read is whole.
func TestDeltaReader_Refuses(t *testing.T) {
	cur := Snapshot{Now: 1, Models: models("a", "b"), GPUs: []GPUInfo{{Index: 0}}}
	bad := map[string][]byte{
		"another base": delta(&cur, 6, 8, cur),
		"a new model not carried": appendMessage(nil, &SnapshotDelta{Base: 7, Gen: 8, Total: 3,
			Changed: []uint32{1}, Models: models("b")}),
		"positions out of order": appendMessage(nil, &SnapshotDelta{Base: 7, Gen: 8, Total: 2,
			Changed: []uint32{1, 0}, Models: models("b", "a")}),
		"a position past the end": appendMessage(nil, &SnapshotDelta{Base: 7, Gen: 8, Total: 2,
			Changed: []uint32{2}, Models: models("c")}),
		"whole without every model": appendMessage(nil, &SnapshotDelta{Gen: 8, Total: 2,
			Changed: []uint32{0}, Models: models("a"), GPUsChanged: true}),
		"whole without GPUs": appendMessage(nil, &SnapshotDelta{Gen: 8, Total: 2,
			Changed: []uint32{0, 1}, Models: models("a", "b")}),
		"truncated":  delta(&cur, 7, 8, cur)[:20],
		"a snapshot": appendMessage(nil, &cur),
	}
	for name, msg := range bad {
		var r deltaReader
		var dst Snapshot
		if _, _, err := r.apply(delta(nil, 0, 7, cur), &dst, 0, nil); err != nil {
			t.Fatal(err)
		}
		if _, _, err := r.apply(msg, &dst, 7, nil); !errors.Is(err, wire.ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", name, err)
		}
		if b := r.base(&dst); b != 0 {
			t.Errorf("%s: base after an error = %d, want 0", name, b)
		}
	}
}

// base is 0 (a whole read) for other storage, and once *dst's lists were
// replaced.
func TestDeltaReader_Base(t *testing.T) {
	cur := Snapshot{Now: 1, Models: models("a", "b"), GPUs: []GPUInfo{{Index: 0}}}
	var r deltaReader
	var dst, other Snapshot
	if _, _, err := r.apply(delta(nil, 0, 3, cur), &dst, 0, nil); err != nil {
		t.Fatal(err)
	}
	if r.base(&dst) != 3 || r.base(&other) != 0 {
		t.Fatalf("base = %d, other %d", r.base(&dst), r.base(&other))
	}
	dst.Models = append([]ModelInfo(nil), dst.Models...)
	if r.base(&dst) != 0 {
		t.Fatal("base after the models were replaced is not 0")
	}
}

// FuzzDeltaReader_Apply: whatever a host sends, applying it to a kept
// snapshot never panics, and a reply it takes leaves a snapshot of the
// length it announced.
func FuzzDeltaReader_Apply(f *testing.F) {
	cur := Snapshot{Now: 1, Models: models("a", "b", "c"), GPUs: []GPUInfo{{Index: 0, Name: "g"}}}
	next := Snapshot{Now: 2, Models: models("a", "c", "d", "e"), GPUs: cur.GPUs}
	f.Add(delta(&cur, 5, 6, next))
	f.Add(delta(nil, 0, 6, next))
	f.Add(delta(&cur, 5, 6, cur))
	f.Fuzz(func(t *testing.T, msg []byte) {
		var r deltaReader
		var dst Snapshot
		if _, _, err := r.apply(delta(nil, 0, 5, cur), &dst, 0, nil); err != nil {
			t.Fatal(err)
		}
		changed, _, err := r.apply(msg, &dst, 5, nil)
		if err != nil {
			if r.base(&dst) != 0 {
				t.Fatal("a reply refused left a generation to build on")
			}
			return
		}
		for _, pos := range changed {
			if pos < 0 || pos >= len(dst.Models) {
				t.Fatalf("changed position %d of %d models", pos, len(dst.Models))
			}
		}
	})
}
