package sdk

import (
	"reflect"
	"testing"
)

// A snapshot decoded into the storage of an earlier one reuses its lists:
// decoding the same snapshot again allocates nothing (with strings
// interned, as in the guest) and yields the same value.
func TestSnapshotDecode_ReusesStorage(t *testing.T) {
	internStrings, internTable = true, map[string]string{}
	defer func() { internStrings, internTable = false, nil }()
	in := Snapshot{Now: 7, GPUs: []GPUInfo{{Index: 0, Name: "g0", Total: 24 << 30, Free: 4 << 30}}}
	for i := range 16 {
		m := ModelInfo{Name: string(rune('a' + i)), State: StateStopped, EstimatedVRAM: 5 << 30}
		if i%2 == 0 {
			m.State, m.Devices, m.Leased = StateReady, []int32{0}, []uint64{5 << 30}
		}
		in.Models = append(in.Models, m)
	}
	msg := appendMessage(nil, &in)
	var dst Snapshot
	if err := decodeMessage(msg, &dst); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(dst, in) {
		t.Fatalf("decoded %+v, want %+v", dst, in)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if err := decodeMessage(msg, &dst); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("decoding into reused storage allocated %.0f times, want 0", allocs)
	}
	if !reflect.DeepEqual(dst, in) {
		t.Fatalf("decoded again %+v, want %+v", dst, in)
	}
	// A smaller snapshot into the same storage drops what it no longer has.
	small := Snapshot{Now: 8, Models: []ModelInfo{{Name: "z", State: StateStopped}}}
	if err := decodeMessage(appendMessage(nil, &small), &dst); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(dst, small) {
		t.Fatalf("decoded %+v over a larger one, want %+v", dst, small)
	}
}

// snapHost is a Host that is not a SnapshotReader.
type snapHost struct {
	Host
	s Snapshot
}

func (h snapHost) Snapshot() Snapshot { return h.s }

// ReadSnapshot from a Host without SnapshotInto is its Snapshot.
func TestReadSnapshot_Fallback(t *testing.T) {
	want := Snapshot{Now: 3, Models: []ModelInfo{{Name: "a"}}}
	var got Snapshot
	ReadSnapshot(snapHost{s: want}, &got)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ReadSnapshot = %+v, want %+v", got, want)
	}
}

// BenchmarkSnapshotDecode_Version: what version 3's residency (50 bytes a
// model, one more block read) and host memory add to decoding a snapshot
// of 100 models into reused storage, as the guest does on every plan
// (strings interned). Natively; docs/BENCHMARKS.md has it through Wasm.
func BenchmarkSnapshotDecode_Version(b *testing.B) {
	internStrings, internTable = true, map[string]string{}
	defer func() { internStrings, internTable = false, nil }()
	in := Snapshot{Now: 7, GPUs: []GPUInfo{{Index: 0, Name: "g0", Total: 80 << 30, Free: 4 << 30}}, Host: HostMemoryInfo{Total: 256 << 30}}
	for i := range 100 {
		m := ModelInfo{Name: "model-" + string(rune('a'+i%26)) + string(rune('a'+i/26)), State: StateStopped, EstimatedVRAM: 5 << 30,
			CanSleep: 3, LoadTime: 40e9, WakeTime1: 6e8, HostBytes1: 5 << 30, HostBytes2: 1 << 30}
		if i%4 == 0 {
			m.State, m.Devices, m.Leased = StateReady, []int32{0}, []uint64{5 << 30}
		}
		in.Models = append(in.Models, m)
	}
	for _, v := range []uint8{2, 3} {
		msg := appendVersion(nil, v, &in)
		b.Run("v"+string(rune('0'+v)), func(b *testing.B) {
			var dst Snapshot
			b.SetBytes(int64(len(msg)))
			for b.Loop() {
				if err := decodeVersion(msg, v, &dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
