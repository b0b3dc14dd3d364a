package policy

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/wire"
)

// The host speaks every ABI version from wire.MinVersion to sdk.ABIVersion,
// each module in its own: these tests use hand-made modules that report a
// version and hold messages encoded in it, and read what the host wrote into
// their memory.

// TestCompile_Versions: versions 2 and 3 load and are reported as the
// module's; 1 and 4 are refused, naming the module's version and the
// host's.
func TestCompile_Versions(t *testing.T) {
	r, _ := newTestRuntime(t, Options{})
	for _, v := range []int32{2, 3} {
		s := miniPolicy()
		s.version = v
		m := compile(t, r, fmt.Sprintf("v%d.wasm", v), s.bytes())
		if m.ABIVersion != uint32(v) {
			t.Errorf("v%d: Module.ABIVersion = %d", v, m.ABIVersion)
		}
		rep, err := Inspect(context.Background(), r, m.Name, s.bytes(), nil)
		if err != nil || rep.ABIVersion != uint32(v) {
			t.Errorf("v%d: Inspect ABIVersion %d, %v", v, rep.ABIVersion, err)
		}
	}
	for _, v := range []int32{1, 4} {
		s := miniPolicy()
		s.version = v
		_, err := r.Compile(context.Background(), "old.wasm", s.bytes())
		want := fmt.Sprintf("policy old.wasm: built for ABI v%d, this host speaks versions 2 to 3", v)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("v%d: error %v, want %q", v, err, want)
		}
	}
}

// Where the version-test modules keep what they send.
const (
	vtSend    = 9000 // a message the module passes to an import
	vtSendCap = 1024
)

// sleeper is a model asleep at level 1, with every residency field set.
var sleeper = sdk.ModelInfo{Name: "s", State: sdk.StateStopped, EstimatedVRAM: 4 << 30,
	SleepLevel: 1, CanSleep: 3, LoadTime: 40e9, WakeTime1: 6e8, WakeTime2: 3e9,
	HostBytes1: 8 << 30, HostBytes2: 1 << 30, HostLeased: 8 << 30}

// versionScheduler is a mini scheduler of version v whose on_request reads
// the snapshot into its out-buffer and passes send (a SwapRequest message)
// to start_swap.
func versionScheduler(v int32, send []byte) []byte {
	s := miniPolicy()
	s.version = v
	s.extraImports = []wasmImport{
		{"loadout_v2", "snapshot", []byte{wI32, wI32}, []byte{wI32}},   // 1
		{"loadout_v2", "start_swap", []byte{wI32, wI32}, []byte{wI32}}, // 2
	}
	s.extraData = []wasmData{{vtSend, send}}
	s.bodies["on_request"] = ops(
		i32c(miniOut), i32c(miniOutCap), call(1), opDrop,
		i32c(vtSend), i32c(int32(len(send))), call(2), opDrop,
		i64c(0))
	return s.bytes()
}

// TestVersion_SchedulerGetsItsVersion: a scheduler gets its events and
// import replies in its own version — residency and host memory only from
// version 3 — and its SwapRequest is read in it: a version 2 module's has
// no modes (every victim the default), a version 3 module's has them, and a
// message in the other version is refused as a malformed argument.
func TestVersion_SchedulerGetsItsVersion(t *testing.T) {
	r, _ := newTestRuntime(t, Options{})
	req2 := wire.AppendVersion(nil, 2, &sdk.SwapRequest{Model: "b", Evict: []string{"a"}})
	req3 := wire.AppendVersion(nil, 3, &sdk.SwapRequest{Model: "b", Evict: []string{"a"}, Modes: []sdk.EvictMode{sdk.EvictSleep1}})
	host := sdk.HostMemoryInfo{Total: 64 << 30, Leased: 8 << 30}
	for _, tc := range []struct {
		name  string
		v     uint8
		send  []byte
		calls []string
	}{
		{"v2", 2, req2, []string{"start_swap b evict=[a] devices=[]"}},
		{"v3", 3, req3, []string{"start_swap b evict=[a] devices=[] modes=[sleep]"}},
		{"v2 sending v3", 2, req3, nil},
		{"v3 sending v2", 3, req2, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newFakeEffects(model("a", sdk.StateReady), model("b", sdk.StateStopped), sleeper)
			fx.host = host
			m := compile(t, r, tc.name+".wasm", versionScheduler(int32(tc.v), tc.send))
			s, err := r.NewScheduler(context.Background(), m, nil, fx)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(context.Background())
			if err := s.OnRequest(sdk.RequestEvent{Now: 1, ID: 7, Model: "b"}); err != nil {
				t.Fatal(err)
			}
			wantCalls(t, fx, tc.calls...)
			in := s.sv.in
			ev, _ := in.mem.Read(miniIn, 2)
			if ev[0] != tc.v || wire.Kind(ev[1]) != wire.MsgRequest {
				t.Errorf("the event's header is % x, want version %d", ev, tc.v)
			}
			b, _ := in.mem.Read(miniOut, miniOutCap)
			var snap sdk.Snapshot
			if err := wire.DecodeVersion(b[:snapshotLen(t, b, tc.v)], tc.v, &snap); err != nil {
				t.Fatalf("the snapshot reply: %v", err)
			}
			got := snap.Models[2]
			wantHost, want := host, sleeper
			if tc.v == 2 {
				wantHost = sdk.HostMemoryInfo{}
				want = sdk.ModelInfo{Name: "s", State: sdk.StateStopped, EstimatedVRAM: 4 << 30} // asleep is just stopped
			}
			if !reflect.DeepEqual(got, want) || snap.Host != wantHost {
				t.Errorf("version %d snapshot has %+v, host %+v; want %+v, %+v", tc.v, got, snap.Host, want, wantHost)
			}
		})
	}
}

// snapshotLen finds the length of the Snapshot message of version v at the
// start of b (the rest of the out-buffer is zero): the shortest prefix that
// decodes.
func snapshotLen(t *testing.T, b []byte, v uint8) int {
	t.Helper()
	for n := wire.HeaderSize; n <= len(b); n++ {
		if wire.DecodeVersion(b[:n], v, new(sdk.Snapshot)) == nil {
			return n
		}
	}
	t.Fatalf("no snapshot of version %d in the out-buffer: % x", v, b[:32])
	return 0
}

// versionSwapper is a mini swapper of version v whose plan export answers
// plan (a Plan message, left in its out-buffer).
func versionSwapper(v int32, plan []byte) []byte {
	s := miniPolicy()
	s.version, s.kind = v, 2
	s.extraData = []wasmData{{miniOut, plan}}
	s.bodies["plan"] = i64c(int64(len(plan)))
	return s.bytes()
}

// TestVersion_SwapperPlansInItsVersion: a version 2 swapper's Plan is read
// as version 2 (no modes: every victim the default), a version 3 swapper's
// with its modes; a plan in the other version is an error naming both
// versions, never misread. OnSwapStart reaches each in its version: a
// version 2 swapper never sees the modes.
func TestVersion_SwapperPlansInItsVersion(t *testing.T) {
	r, _ := newTestRuntime(t, Options{})
	plan3 := sdk.Plan{Evict: []string{"a", "c"}, Modes: []sdk.EvictMode{sdk.EvictSleep2, sdk.EvictStop}}
	p2 := wire.AppendVersion(nil, 2, &plan3)
	p3 := wire.AppendVersion(nil, 3, &plan3)
	for _, tc := range []struct {
		name    string
		v       uint8
		plan    []byte
		want    sdk.Plan
		wantErr string
	}{
		{"v2", 2, p2, sdk.Plan{Evict: []string{"a", "c"}}, ""},
		{"v3", 3, p3, plan3, ""},
		{"v2 answering v3", 2, p3, sdk.Plan{}, "ABI version 3, want 2"},
		{"v3 answering v2", 3, p2, sdk.Plan{}, "ABI version 2, want 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := compile(t, r, tc.name+".wasm", versionSwapper(int32(tc.v), tc.plan))
			sw, err := r.NewSwapper(context.Background(), m, nil, newFakeEffects())
			if err != nil {
				t.Fatal(err)
			}
			defer sw.Close(context.Background())
			got, err := sw.Plan(sdk.PlanRequest{Now: 1, Target: "b", Running: []string{"a", "c"}})
			if tc.wantErr != "" {
				if err == nil || !errors.Is(err, wire.ErrMalformed) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Plan = %+v, %v; want an error saying %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Plan = %+v, %v; want %+v", got, err, tc.want)
			}
			start := sdk.SwapStartEvent{Now: 2, Target: "b", Running: []string{"a", "c"}, Evict: plan3.Evict, Modes: plan3.Modes}
			if err := sw.OnSwapStart(start); err != nil {
				t.Fatal(err)
			}
			in := sw.sv.in
			n := len(wire.AppendVersion(nil, tc.v, &start))
			b, _ := in.mem.Read(miniIn, uint32(n))
			var seen sdk.SwapStartEvent
			if err := wire.DecodeVersion(b, tc.v, &seen); err != nil {
				t.Fatal(err)
			}
			if tc.v == 2 {
				start.Modes = nil
			}
			if !reflect.DeepEqual(seen, start) {
				t.Errorf("OnSwapStart wrote %+v, want %+v", seen, start)
			}
		})
	}
}
