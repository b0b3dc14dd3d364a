package wire_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/wire"
)

var update = flag.Bool("update", false, "rewrite sdk/wire/testdata/golden/v3/*.hex from the current encoder (version 2's are frozen)")

// message is one kind of the wire encoding: a fresh value to decode into
// and a sample with every field set.
type message struct {
	name   string
	kind   wire.Kind
	fresh  func() any
	sample any
}

var model = sdk.ModelInfo{
	Name: "llama-8b", State: sdk.StateReady, InFlight: 3, ConcurrencyLimit: 10,
	Priority: -2, Pinned: true, Group: "chat", LastUse: 1_700_000_000_123_456_789,
	TTL: 300e9, EstimatedVRAM: 6 << 30, MeasuredVRAM: 5<<30 + 12345, Devices: []int32{0, 1}, Leased: []uint64{3 << 30, 2<<30 + 12345},
}

// withResidency is m with version 3's residency fields set: asleep at
// level 1 (host memory leased) when asleep, else only its costs.
func withResidency(m sdk.ModelInfo, asleep bool) sdk.ModelInfo {
	m.CanSleep = 3
	m.LoadTime, m.WakeTime1, m.WakeTime2 = 41_500_000_000, 650_000_000, 3_200_000_000
	m.HostBytes1, m.HostBytes2 = 64<<30+789, 2<<30
	if asleep {
		m.SleepLevel, m.HostLeased = 1, 64<<30+789
	}
	return m
}

// resident is model with its residency set (running: costs only), asleep
// a stopped model asleep at level 1.
var (
	resident = withResidency(model, false)
	asleep   = withResidency(sdk.ModelInfo{Name: "stopped"}, true)
)

// samplesV3 are the samples of the kinds version 3 changed: the version 2
// sample (messages) with version 3's fields set, so that version 2's
// encoding of them is version 2's golden. The other kinds' version 3
// sample is their version 2 one.
var samplesV3 = map[string]any{
	"plan": &sdk.Plan{Evict: []string{"a"}, Devices: []int32{1, -1}, Modes: []sdk.EvictMode{sdk.EvictSleep2}},
	"swap_start": &sdk.SwapStartEvent{Now: 11, Target: "b", Running: []string{"a", "c"}, Evict: []string{"a"}, Devices: []int32{2},
		Modes: []sdk.EvictMode{sdk.EvictSleep1}},
	"swap_request": &sdk.SwapRequest{Model: "b", Evict: []string{"a", "c"}, Devices: []int32{0},
		Modes: []sdk.EvictMode{sdk.EvictDefault, sdk.EvictStop}},
	"model_info": &resident,
	"model_list": &sdk.ModelList{Models: []sdk.ModelInfo{resident, asleep}},
	"snapshot": &sdk.Snapshot{Now: 15, Models: []sdk.ModelInfo{resident},
		GPUs: []sdk.GPUInfo{{Index: 0, Name: "NVIDIA H100 80GB HBM3", Total: 80 << 30, Free: 70 << 30, Leased: 6 << 30}},
		Host: sdk.HostMemoryInfo{Total: 448 << 30, Leased: 64<<30 + 789}},
	"snapshot_delta": &sdk.SnapshotDelta{Now: 18, Base: 41, Gen: 42, Total: 3, Changed: []uint32{0, 2},
		Models:      []sdk.ModelInfo{resident, withResidency(sdk.ModelInfo{Name: "added"}, true)},
		GPUsChanged: true, GPUs: []sdk.GPUInfo{{Index: 1, Name: "NVIDIA H100 80GB HBM3", Total: 80 << 30, Free: 74 << 30, Leased: 6 << 30}},
		Host: sdk.HostMemoryInfo{Total: 448 << 30, Leased: 64<<30 + 789}},
}

// versions are the ABI versions the codec speaks.
var versions = []uint8{2, 3}

// sampleAt is m's sample for version v: with version 3's fields set from
// version 3 on.
func sampleAt(m message, v uint8) any {
	if s, ok := samplesV3[m.name]; ok && v >= 3 {
		return s
	}
	return m.sample
}

// messages lists every kind, in Kind order, with samples that set every
// field version 2 has (samplesV3 adds version 3's).
var messages = []message{
	{"init", wire.MsgInit, func() any { return new(sdk.InitEvent) },
		&sdk.InitEvent{Now: 1_700_000_000_000_000_001, Settings: []byte(`{"max_queue":8}`)}},
	{"request", wire.MsgRequest, func() any { return new(sdk.RequestEvent) },
		&sdk.RequestEvent{Now: 1_700_000_000_000_000_002, ID: 0x0102030405060708, Model: "llama-8b", Priority: -7, Client: "ci"}},
	{"swap_done", wire.MsgSwapDone, func() any { return new(sdk.SwapDoneEvent) },
		&sdk.SwapDoneEvent{Now: 3, Model: "qwen", Err: "exit status 1: CUDA out of memory"}},
	{"serve_done", wire.MsgServeDone, func() any { return new(sdk.ServeDoneEvent) },
		&sdk.ServeDoneEvent{Now: 4, ID: 42, Model: "qwen"}},
	{"cancel", wire.MsgCancel, func() any { return new(sdk.CancelEvent) },
		&sdk.CancelEvent{Now: 5, ID: 43, Model: "qwen"}},
	{"unload", wire.MsgUnload, func() any { return new(sdk.UnloadEvent) },
		&sdk.UnloadEvent{Now: 6, Models: []string{"a", "bb"}, Reason: sdk.UnloadTTL}},
	{"tick", wire.MsgTick, func() any { return new(sdk.TickEvent) },
		&sdk.TickEvent{Now: 7, Changed: []string{"crashed"}}},
	{"shutdown", wire.MsgShutdown, func() any { return new(sdk.ShutdownEvent) },
		&sdk.ShutdownEvent{Now: 8, Reason: "SIGTERM"}},
	{"plan_request", wire.MsgPlanRequest, func() any { return new(sdk.PlanRequest) },
		&sdk.PlanRequest{Now: 9, Target: "b", Running: []string{"a", "c"}}},
	{"plan", wire.MsgPlan, func() any { return new(sdk.Plan) },
		&sdk.Plan{Evict: []string{"a"}, Devices: []int32{1, -1}}},
	{"swap_start", wire.MsgSwapStart, func() any { return new(sdk.SwapStartEvent) },
		&sdk.SwapStartEvent{Now: 11, Target: "b", Running: []string{"a", "c"}, Evict: []string{"a"}, Devices: []int32{2}}},
	{"swap_request", wire.MsgSwapRequest, func() any { return new(sdk.SwapRequest) },
		&sdk.SwapRequest{Model: "b", Evict: []string{"a", "c"}, Devices: []int32{0}}},
	{"model_info", wire.MsgModelInfo, func() any { return new(sdk.ModelInfo) }, &model},
	{"model_list", wire.MsgModelList, func() any { return new(sdk.ModelList) },
		&sdk.ModelList{Models: []sdk.ModelInfo{model, {Name: "stopped"}}}},
	{"snapshot", wire.MsgSnapshot, func() any { return new(sdk.Snapshot) },
		&sdk.Snapshot{Now: 15, Models: []sdk.ModelInfo{model},
			GPUs: []sdk.GPUInfo{{Index: 0, Name: "NVIDIA H100 80GB HBM3", Total: 80 << 30, Free: 70 << 30, Leased: 6 << 30}}}},
	{"stop_request", wire.MsgStopRequest, func() any { return new(sdk.StopRequest) },
		&sdk.StopRequest{Models: []string{"a"}}},
	{"job_plan_request", wire.MsgJobPlanRequest, func() any { return new(sdk.JobPlanRequest) },
		&sdk.JobPlanRequest{Now: 17, Job: "sft-20260301-142501-9f2c", GPUs: 2, Priority: -1, Candidates: []int32{0, 2, 3}, Running: []string{"a", "c"}}},
	{"replica_set", wire.MsgReplicaSet, func() any { return new(sdk.ReplicaSet) },
		&sdk.ReplicaSet{Model: "llama-8b", Min: 1, Max: 3, Replicas: []string{"llama-8b", "llama-8b@2", "llama-8b@3"}}},
	{"snapshot_delta", wire.MsgSnapshotDelta, func() any { return new(sdk.SnapshotDelta) },
		&sdk.SnapshotDelta{Now: 18, Base: 41, Gen: 42, Total: 3, Changed: []uint32{0, 2}, Models: []sdk.ModelInfo{model, {Name: "added"}},
			GPUsChanged: true, GPUs: []sdk.GPUInfo{{Index: 1, Name: "NVIDIA H100 80GB HBM3", Total: 80 << 30, Free: 74 << 30, Leased: 6 << 30}}}},
	{"demand_list", wire.MsgDemand, func() any { return new(sdk.DemandList) },
		&sdk.DemandList{Models: []sdk.ModelDemand{{Name: "a", Requests: 1234, Loads: 3, LoadTime: 6_500_000_000}, {Name: "b"}}}},
	{"wait_stats", wire.MsgWaits, func() any { return new(sdk.WaitStats) },
		&sdk.WaitStats{Granted: 4096, P95: 10_000_000_000, Above: 37, Held: 5}},
}

func TestCodec_CoversEveryKind(t *testing.T) {
	for i, m := range messages {
		if want := wire.Kind(i + 1); m.kind != want {
			t.Fatalf("messages[%d] is kind %d, want %d (every kind, in order)", i, m.kind, want)
		}
		for _, v := range versions {
			if b := wire.AppendVersion(nil, v, m.fresh()); b[0] != v || wire.Kind(b[1]) != m.kind {
				t.Errorf("%s: header % x, want version %d kind %d", m.name, b[:2], v, m.kind)
			}
		}
		if b := wire.Append(nil, m.fresh()); b[0] != sdk.ABIVersion {
			t.Errorf("%s: Append wrote version %d, want sdk.ABIVersion %d", m.name, b[0], sdk.ABIVersion)
		}
	}
	if len(messages) != int(wire.MsgWaits) {
		t.Errorf("%d kinds tested, want %d", len(messages), wire.MsgWaits)
	}
	if !wire.Supported(2) || !wire.Supported(sdk.ABIVersion) || wire.Supported(1) || wire.Supported(sdk.ABIVersion+1) {
		t.Errorf("Supported: want exactly %d to %d", wire.MinVersion, sdk.ABIVersion)
	}
}

// goldenPath is the golden file of kind name at version v: version 2's at
// the top of testdata/golden (frozen since version 3: never rewritten),
// later versions' under testdata/golden/v<N>.
func goldenPath(name string, v uint8) string {
	if v == 2 {
		return filepath.Join("testdata", "golden", name+".hex")
	}
	return filepath.Join("testdata", "golden", fmt.Sprintf("v%d", v), name+".hex")
}

// TestCodec_Golden pins the encoding of every version byte for byte: a
// change to the wire format shows up here, and must come with a new
// ABIVersion. Version 2's files predate version 3 and are never rewritten,
// so a host talks to a version 2 module exactly as before.
func TestCodec_Golden(t *testing.T) {
	for _, v := range versions {
		for _, m := range messages {
			if v == 2 && m.kind >= wire.MsgWaits {
				continue // a kind of version 3's: no version 2 module receives it
			}
			t.Run(fmt.Sprintf("v%d/%s", v, m.name), func(t *testing.T) {
				path := goldenPath(m.name, v)
				sample := sampleAt(m, v)
				got := wire.AppendVersion(nil, v, sample)
				if *update && v > 2 {
					if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(path, formatHex(m, v, sample, got), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				text, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (run go test ./sdk/wire -update to write it)", err)
				}
				want, err := parseHex(text)
				if err != nil {
					t.Fatalf("%s: %v", path, err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("encoding of %s changed:\n got: % x\nwant: % x\n(a wire change needs a new ABIVersion; then go test ./sdk/wire -update)", m.name, got, want)
				}
				decoded := m.fresh()
				if err := wire.DecodeVersion(want, v, decoded); err != nil {
					t.Fatalf("decoding %s: %v", path, err)
				}
				if !reflect.DeepEqual(decoded, sample) {
					t.Errorf("decoding %s:\n got %+v\nwant %+v", path, decoded, sample)
				}
			})
		}
	}
}

// TestCodec_V2LeavesOutV3Fields: a version 2 encoding of a message with
// version 3's fields set is the version 2 golden, byte for byte — what a
// host sends a version 2 module whatever the models' residency.
func TestCodec_V2LeavesOutV3Fields(t *testing.T) {
	for _, m := range messages {
		if _, ok := samplesV3[m.name]; !ok {
			continue
		}
		text, err := os.ReadFile(goldenPath(m.name, 2))
		if err != nil {
			t.Fatal(err)
		}
		want, err := parseHex(text)
		if err != nil {
			t.Fatal(err)
		}
		if got := wire.AppendVersion(nil, 2, samplesV3[m.name]); !bytes.Equal(got, want) {
			t.Errorf("%s: version 2 encoding of the version 3 sample\n got: % x\nwant: % x", m.name, got, want)
		}
	}
	// A model's residency is invisible to version 2: the encoding is that of
	// the same model with the fields zero.
	snap := *samplesV3["snapshot"].(*sdk.Snapshot)
	noHost := snap
	noHost.Host = sdk.HostMemoryInfo{}
	if a, b := wire.AppendVersion(nil, 2, &snap), wire.AppendVersion(nil, 2, &noHost); !bytes.Equal(a, b) {
		t.Errorf("version 2 encodes Snapshot.Host")
	}
	var back sdk.Snapshot
	back.Host = sdk.HostMemoryInfo{Total: 1}
	if err := wire.DecodeVersion(wire.AppendVersion(nil, 2, &snap), 2, &back); err != nil || back.Host != (sdk.HostMemoryInfo{}) || back.Models[0].CanSleep != 0 {
		t.Errorf("version 2 round trip of a version 3 snapshot: %v, host %+v, can_sleep %d", err, back.Host, back.Models[0].CanSleep)
	}
	// An asleep model's Devices (where its server is bound) are version
	// 3's: to version 2 it is a stopped model holding nothing.
	sleeper := sdk.ModelInfo{Name: "m", SleepLevel: 1, Devices: []int32{1}, Leased: []uint64{0}}
	stopped := sdk.ModelInfo{Name: "m"}
	list := func(m sdk.ModelInfo) *sdk.ModelList { return &sdk.ModelList{Models: []sdk.ModelInfo{m}} }
	if a, b := wire.AppendVersion(nil, 2, list(sleeper)), wire.AppendVersion(nil, 2, list(stopped)); !bytes.Equal(a, b) {
		t.Errorf("version 2 encodes an asleep model's devices\n got: % x\nwant: % x", a, b)
	}
	var v3 sdk.ModelList
	if err := wire.DecodeVersion(wire.AppendVersion(nil, 3, list(sleeper)), 3, &v3); err != nil || !slices.Equal(v3.Models[0].Devices, []int32{1}) {
		t.Errorf("version 3 round trip of an asleep model: %v, devices %v; want [1]", err, v3.Models[0].Devices)
	}
}

// TestCodec_OtherVersionRefused: a decoder refuses a message of another
// version by its header, naming both versions, and leaves nothing
// misread — a version 3 plan is never taken for a version 2 one with a
// trailing list, nor the reverse.
func TestCodec_OtherVersionRefused(t *testing.T) {
	for _, m := range messages {
		for _, from := range versions {
			for _, to := range versions {
				if from == to {
					continue
				}
				b := wire.AppendVersion(nil, from, sampleAt(m, from))
				err := wire.DecodeVersion(b, to, m.fresh())
				if !errors.Is(err, wire.ErrMalformed) {
					t.Fatalf("%s: version %d decoded as %d: error %v, want ErrMalformed", m.name, from, to, err)
				}
				want := fmt.Sprintf("ABI version %d, want %d", from, to)
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%s: error %q does not say %q", m.name, err, want)
				}
			}
		}
	}
}

// TestCodec_UndefinedValuesRefused: an eviction mode, a sleep level or a
// can_sleep that no version defines is an error, not a value passed on.
func TestCodec_UndefinedValuesRefused(t *testing.T) {
	plan := wire.Append(nil, &sdk.Plan{Evict: []string{"a"}, Modes: []sdk.EvictMode{sdk.EvictSleep2}})
	plan[len(plan)-1] = byte(sdk.EvictSleep2) + 1
	if err := wire.Decode(plan, new(sdk.Plan)); !errors.Is(err, wire.ErrMalformed) || !strings.Contains(err.Error(), "eviction mode 4") {
		t.Errorf("plan with mode 4: error %v", err)
	}
	info := wire.Append(nil, &asleep)
	off := len(info) - 50 // the residency tail
	for _, bad := range []struct {
		at  int
		val byte
	}{{off, 3}, {off + 1, 4}} {
		b := bytes.Clone(info)
		b[bad.at] = bad.val
		if err := wire.Decode(b, new(sdk.ModelInfo)); !errors.Is(err, wire.ErrMalformed) || !strings.Contains(err.Error(), "sleep level") {
			t.Errorf("byte %d = %d: error %v", bad.at, bad.val, err)
		}
	}
}

// formatHex writes a golden file: a comment line, then 16 bytes a line.
func formatHex(m message, v uint8, sample any, b []byte) []byte {
	var out bytes.Buffer
	fmt.Fprintf(&out, "# ABI version %d %s (kind %d), %d bytes: %T\n", v, m.name, m.kind, len(b), sample)
	fmt.Fprintf(&out, "# generated by go test ./sdk/wire -update from the sample in wire_test.go\n")
	for len(b) > 0 {
		n := min(16, len(b))
		out.WriteString(strings.TrimSpace(fmt.Sprintf("% x", b[:n])))
		out.WriteByte('\n')
		b = b[n:]
	}
	return out.Bytes()
}

// parseHex reads a golden file: hex digits, whitespace ignored, lines
// starting with # are comments.
func parseHex(text []byte) ([]byte, error) {
	var digits strings.Builder
	for line := range strings.SplitSeq(string(text), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		digits.WriteString(strings.Join(strings.Fields(line), ""))
	}
	return hex.DecodeString(digits.String())
}

func TestCodec_RoundTrip(t *testing.T) {
	for _, ver := range versions {
		for _, m := range messages {
			roundTrip(t, m, ver)
		}
	}
}

func roundTrip(t *testing.T, m message, ver uint8) {
	t.Helper()
	for _, v := range []any{sampleAt(m, ver), m.fresh()} {
		b := wire.AppendVersion([]byte("prefix"), ver, v)
		if !bytes.HasPrefix(b, []byte("prefix")) {
			t.Fatalf("%s: AppendMessage lost dst", m.name)
		}
		b = b[len("prefix"):]
		got := m.fresh()
		if err := wire.DecodeVersion(b, ver, got); err != nil {
			t.Fatalf("v%d %s: %v", ver, m.name, err)
		}
		if !reflect.DeepEqual(got, v) {
			t.Errorf("v%d %s: round trip\n got %+v\nwant %+v", ver, m.name, got, v)
		}
		if again := wire.AppendVersion(nil, ver, got); !bytes.Equal(again, b) {
			t.Errorf("v%d %s: re-encoding differs", ver, m.name)
		}
	}
}

// TestCodec_Malformed: every way a message can be wrong is an error that
// wraps wire.ErrMalformed.
func TestCodec_Malformed(t *testing.T) {
	for _, m := range messages {
		good := wire.Append(nil, sampleAt(m, sdk.ABIVersion))
		cases := map[string][]byte{
			"empty":         nil,
			"header only":   good[:1],
			"wrong version": append([]byte{sdk.ABIVersion + 1}, good[1:]...),
			"wrong kind":    append([]byte{sdk.ABIVersion, byte(m.kind%16 + 1)}, good[2:]...),
			"trailing byte": append(bytes.Clone(good), 0),
		}
		for n := 2; n < len(good); n++ {
			cases[fmt.Sprintf("truncated to %d", n)] = good[:n]
		}
		for name, b := range cases {
			if err := wire.Decode(b, m.fresh()); !errors.Is(err, wire.ErrMalformed) {
				t.Errorf("%s, %s: error %v, want ErrMalformed", m.name, name, err)
			}
		}
	}
}

// TestCodec_HugeCountsDoNotAllocate: a list count larger than the message
// could hold is refused before anything is allocated for it.
func TestCodec_HugeCountsDoNotAllocate(t *testing.T) {
	hostile := []struct {
		name  string
		fresh func() any
		b     []byte
	}{
		{"strings", func() any { return new(sdk.StopRequest) }, withCount(wire.MsgStopRequest, 1<<20)},
		{"strings, max u32", func() any { return new(sdk.StopRequest) }, withCount(wire.MsgStopRequest, 1<<32-1)},
		{"models", func() any { return new(sdk.ModelList) }, withCount(wire.MsgModelList, 1<<20)},
		{"devices", func() any { return new(sdk.Plan) }, append(withCount(wire.MsgPlan, 0), 0xff, 0xff, 0x0f, 0)},
		{"string length", func() any { return new(sdk.SwapDoneEvent) }, append(withCount(wire.MsgSwapDone, 0), 0, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f)},
	}
	for _, h := range hostile {
		if err := wire.Decode(h.b, h.fresh()); !errors.Is(err, wire.ErrMalformed) {
			t.Errorf("%s: error %v, want ErrMalformed", h.name, err)
		}
		if n := bytesAllocated(func() { _ = wire.Decode(h.b, h.fresh()) }); n > allocBound(len(h.b)) {
			t.Errorf("%s: decoding %d bytes allocated %d bytes", h.name, len(h.b), n)
		}
	}
}

// withCount is a header then a u32 count, and nothing the count promises.
func withCount(k wire.Kind, n uint32) []byte {
	return binary.LittleEndian.AppendUint32([]byte{sdk.ABIVersion, byte(k)}, n)
}

// bytesAllocated is the average heap bytes one call of f allocates.
func bytesAllocated(f func()) uint64 {
	const runs = 100
	f() // warm up
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / runs
}

// allocBound is the most a decode of n bytes may allocate: a small
// multiple of n (a Go string header is 16 bytes for a 4-byte encoded
// empty string; a ModelInfo ~130 bytes for its 58), plus the message.
func allocBound(n int) uint64 { return uint64(8*n + 512) }

// retained is the memory a decoded value holds: strings' and slices'
// backing arrays, recursively (the top-level value itself excluded).
func retained(v reflect.Value) uint64 {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return 0
		}
		return retained(v.Elem())
	case reflect.String:
		return uint64(v.Len())
	case reflect.Slice:
		n := uint64(v.Cap()) * uint64(v.Type().Elem().Size())
		for i := range v.Len() {
			n += retained(v.Index(i))
		}
		return n
	case reflect.Struct:
		var n uint64
		for i := range v.NumField() {
			n += retained(v.Field(i))
		}
		return n
	}
	return 0
}

// fuzzDecode is the body of every FuzzDecode target: decoding arbitrary
// bytes never panics, what it keeps is bounded by the input's size, and a
// message that decodes re-encodes to the same bytes (the encoding is
// canonical).
func fuzzDecode(f *testing.F, m message) {
	f.Add(wire.Append(nil, sampleAt(m, sdk.ABIVersion)))
	f.Add(wire.Append(nil, m.fresh()))
	f.Add([]byte{sdk.ABIVersion, byte(m.kind)})
	f.Add(withCount(m.kind, 1<<31))
	f.Fuzz(func(t *testing.T, b []byte) {
		v := m.fresh()
		if err := wire.Decode(b, v); err != nil {
			if !errors.Is(err, wire.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if n := retained(reflect.ValueOf(v)); n > allocBound(len(b)) {
			t.Fatalf("decoding %d bytes keeps %d bytes", len(b), n)
		}
		if again := wire.Append(nil, v); !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n  in % x\n out % x", b, again)
		}
	})
}

func FuzzDecodeInit(f *testing.F)        { fuzzDecode(f, messages[wire.MsgInit-1]) }
func FuzzDecodeRequest(f *testing.F)     { fuzzDecode(f, messages[wire.MsgRequest-1]) }
func FuzzDecodeSwapDone(f *testing.F)    { fuzzDecode(f, messages[wire.MsgSwapDone-1]) }
func FuzzDecodeServeDone(f *testing.F)   { fuzzDecode(f, messages[wire.MsgServeDone-1]) }
func FuzzDecodeCancel(f *testing.F)      { fuzzDecode(f, messages[wire.MsgCancel-1]) }
func FuzzDecodeUnload(f *testing.F)      { fuzzDecode(f, messages[wire.MsgUnload-1]) }
func FuzzDecodeTick(f *testing.F)        { fuzzDecode(f, messages[wire.MsgTick-1]) }
func FuzzDecodeShutdown(f *testing.F)    { fuzzDecode(f, messages[wire.MsgShutdown-1]) }
func FuzzDecodePlanRequest(f *testing.F) { fuzzDecode(f, messages[wire.MsgPlanRequest-1]) }
func FuzzDecodePlan(f *testing.F)        { fuzzDecode(f, messages[wire.MsgPlan-1]) }
func FuzzDecodeSwapStart(f *testing.F)   { fuzzDecode(f, messages[wire.MsgSwapStart-1]) }
func FuzzDecodeSwapRequest(f *testing.F) { fuzzDecode(f, messages[wire.MsgSwapRequest-1]) }
func FuzzDecodeModelInfo(f *testing.F)   { fuzzDecode(f, messages[wire.MsgModelInfo-1]) }
func FuzzDecodeModelList(f *testing.F)   { fuzzDecode(f, messages[wire.MsgModelList-1]) }
func FuzzDecodeSnapshot(f *testing.F)    { fuzzDecode(f, messages[wire.MsgSnapshot-1]) }
func FuzzDecodeStopRequest(f *testing.F) { fuzzDecode(f, messages[wire.MsgStopRequest-1]) }
func FuzzDecodeJobPlanRequest(f *testing.F) {
	fuzzDecode(f, messages[wire.MsgJobPlanRequest-1])
}
func FuzzDecodeSnapshotDelta(f *testing.F) {
	fuzzDecode(f, messages[wire.MsgSnapshotDelta-1])
}

// TestMalformed: wire.Malformed reads and unwraps as
// fmt.Errorf("%w: …", wire.ErrMalformed) does, without fmt in the guest.
func TestMalformed(t *testing.T) {
	err := wire.Malformed("kind 3, want 4")
	if got, want := err.Error(), fmt.Errorf("%w: kind 3, want 4", wire.ErrMalformed).Error(); got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, wire.ErrMalformed) || errors.Unwrap(err) != wire.ErrMalformed {
		t.Errorf("%v does not wrap ErrMalformed", err)
	}
}
