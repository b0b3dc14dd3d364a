package policy

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/sdk"
)

func TestCompile_GoGuest(t *testing.T) {
	r, _ := newTestRuntime(t, Options{})
	for _, tc := range []struct {
		guest string
		kind  sdk.PolicyKind
	}{{"echo", sdk.KindScheduler}, {"swapper", sdk.KindSwapper}} {
		m := compile(t, r, tc.guest+".wasm", guest(t, tc.guest))
		if m.Kind != tc.kind || m.ABIVersion != sdk.ABIVersion || m.Name != tc.guest+".wasm" {
			t.Errorf("%s: got kind %s, ABI v%d, name %q", tc.guest, m.Kind, m.ABIVersion, m.Name)
		}
		if !slices.IsSorted(m.Exports) || !slices.Contains(m.Exports, "on_request") || !slices.Contains(m.Exports, "plan") {
			t.Errorf("%s: exports %v", tc.guest, m.Exports)
		}
		if got := m.Signature("on_request"); got != "(i32) -> i64" {
			t.Errorf("%s: on_request signature %q", tc.guest, got)
		}
		if got := m.Signature("loadout_v2.grant_serve"); got != "(i64, i32, i32) -> i32" {
			t.Errorf("%s: grant_serve import signature %q", tc.guest, got)
		}
		for _, imp := range m.Imports {
			if !strings.HasPrefix(imp, "loadout_v2.") && !strings.HasPrefix(imp, "wasi_snapshot_preview1.") {
				t.Errorf("%s: import %s", tc.guest, imp)
			}
		}
	}
}

func TestCompile_MiniPolicy(t *testing.T) {
	r, _ := newTestRuntime(t, Options{})
	m := compile(t, r, "mini.wasm", miniPolicy().bytes())
	if m.Kind != sdk.KindScheduler {
		t.Fatalf("kind %s", m.Kind)
	}
}

// TestCompile_Refused checks every way a module is refused at load: each
// error names the file and says what is wrong.
func TestCompile_Refused(t *testing.T) {
	echo := guest(t, "echo")
	tests := []struct {
		name string
		wasm func() []byte
		want []string
	}{
		{"not wasm", func() []byte { return []byte("#!/bin/sh\necho hello\n") }, []string{"not a WebAssembly module"}},
		{"empty", func() []byte { return nil }, []string{"not a WebAssembly module (0 bytes"}},
		{"truncated go guest", func() []byte { return echo[:len(echo)/2] }, []string{"invalid or truncated"}},
		{"truncated mini", func() []byte { b := miniPolicy().bytes(); return b[:len(b)-7] }, []string{"invalid or truncated"}},
		{"wrong ABI version", func() []byte { s := miniPolicy(); s.version = 1; return s.bytes() },
			[]string{"built for ABI v1, this host speaks versions 2 to 3"}},
		{"newer ABI version", func() []byte { s := miniPolicy(); s.version = 4; return s.bytes() },
			[]string{"built for ABI v4, this host speaks versions 2 to 3: it needs a newer loadout"}},
		{"no policy registered", func() []byte { s := miniPolicy(); s.kind = 0; return s.bytes() },
			[]string{"registers no policy", "sdk.RegisterScheduler"}},
		{"unknown kind", func() []byte { s := miniPolicy(); s.kind = 7; return s.bytes() }, []string{"unknown policy kind 7"}},
		{"missing version export", func() []byte { s := miniPolicy(); s.omit = []string{"loadout_abi_version"}; return s.bytes() },
			[]string{"lacks export loadout_abi_version () -> i32"}},
		{"missing scheduler export", func() []byte { s := miniPolicy(); s.omit = []string{"on_tick"}; return s.bytes() },
			[]string{"lacks export on_tick (i32) -> i64", "scheduler policy"}},
		{"missing swapper export", func() []byte { s := miniPolicy(); s.kind = 2; s.omit = []string{"plan"}; return s.bytes() },
			[]string{"lacks export plan (i32) -> i64", "swapper policy"}},
		{"missing init", func() []byte { s := miniPolicy(); s.omit = []string{"init"}; return s.bytes() },
			[]string{"lacks export init (i32) -> i64"}},
		{"wrong event signature", func() []byte {
			s := miniPolicy()
			s.sigs["on_request"] = [2][]byte{{wI64}, {wI64}}
			return s.bytes()
		}, []string{"export on_request has signature (i64) -> i64, want (i32) -> i64"}},
		{"wrong version signature", func() []byte {
			s := miniPolicy()
			s.sigs["loadout_abi_version"] = [2][]byte{nil, {wI64}}
			s.bodies["loadout_abi_version"] = i64c(1)
			return s.bytes()
		}, []string{"export loadout_abi_version has signature () -> i64, want () -> i32"}},
		{"foreign import", func() []byte {
			s := miniPolicy()
			s.extraImports = []wasmImport{{"env", "fopen", []byte{wI32}, []byte{wI32}}}
			return s.bytes()
		}, []string{`imports from "env" (function fopen)`, "only from loadout_v2 and wasi_snapshot_preview1"}},
		{"unknown host import", func() []byte {
			s := miniPolicy()
			s.extraImports = []wasmImport{{"loadout_v2", "launch_missiles", nil, nil}}
			return s.bytes()
		}, []string{"imports loadout_v2.launch_missiles, which this host does not provide"}},
		{"host import with wrong signature", func() []byte {
			s := miniPolicy()
			s.extraImports = []wasmImport{{"loadout_v2", "grant_serve", []byte{wI32, wI32, wI32}, []byte{wI32}}}
			return s.bytes()
		}, []string{"imports loadout_v2.grant_serve with signature (i32, i32, i32) -> i32, want (i64, i32, i32) -> i32"}},
		{"unknown wasi import", func() []byte {
			s := miniPolicy()
			s.extraImports = []wasmImport{{"wasi_snapshot_preview1", "sock_open", nil, nil}}
			return s.bytes()
		}, []string{"imports wasi_snapshot_preview1.sock_open, which this host does not provide"}},
		{"no memory", func() []byte { s := miniPolicy(); s.noMemory = true; return s.bytes() }, []string{"exports no memory"}},
	}
	r, _ := newTestRuntime(t, Options{})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := r.Compile(context.Background(), "policies/"+strings.ReplaceAll(tc.name, " ", "_")+".wasm", tc.wasm())
			if err == nil {
				t.Fatalf("compiled a bad module: %+v", m)
			}
			msg := err.Error()
			t.Log(msg)
			if !strings.Contains(msg, "policies/"+strings.ReplaceAll(tc.name, " ", "_")+".wasm") {
				t.Errorf("error does not name the file: %s", msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q lacks %q", msg, w)
				}
			}
		})
	}
}

func TestNewScheduler_Refused(t *testing.T) {
	r, _ := newTestRuntime(t, Options{})
	ctx := context.Background()
	swapper := compile(t, r, "swapper.wasm", guest(t, "swapper"))
	if _, err := r.NewScheduler(ctx, swapper, nil, newFakeEffects()); err == nil || !strings.Contains(err.Error(), "swapper.wasm: is a swapper, not a scheduler") {
		t.Errorf("swapper as scheduler: %v", err)
	}
	echo := compile(t, r, "echo.wasm", guest(t, "echo"))
	if _, err := r.NewSwapper(ctx, echo, nil, newFakeEffects()); err == nil || !strings.Contains(err.Error(), "is a scheduler, not a swapper") {
		t.Errorf("scheduler as swapper: %v", err)
	}
	if _, err := r.NewScheduler(ctx, echo, []byte(`{"fail_init": "no such thing"}`), newFakeEffects()); err == nil ||
		!strings.Contains(err.Error(), "policy echo.wasm: init: no such thing") {
		t.Errorf("init error: %v", err)
	}
	if _, err := r.NewScheduler(ctx, echo, []byte(`{not json`), newFakeEffects()); err == nil || !strings.Contains(err.Error(), "echo: settings") {
		t.Errorf("bad settings: %v", err)
	}
	bad := miniPolicy()
	bad.buffersAddr = 0x7FFFFFF0
	m := compile(t, r, "mini.wasm", bad.bytes())
	if _, err := r.NewScheduler(ctx, m, nil, newFakeEffects()); err == nil || !strings.Contains(err.Error(), "abi_buffers returned address 0x7ffffff0, outside the module's memory") {
		t.Errorf("abi_buffers out of range: %v", err)
	}
	small := miniPolicy()
	small.inCap = 8
	m = compile(t, r, "mini.wasm", small.bytes())
	if _, err := r.NewScheduler(ctx, m, nil, newFakeEffects()); err == nil || !strings.Contains(err.Error(), "in-buffer holds 8 bytes") {
		t.Errorf("tiny in-buffer: %v", err)
	}
}

// TestCompile_SpareInstance checks that the instance Compile's checks made
// serves the first Scheduler made from the module, that later ones and one
// made after Trim instantiate afresh, and that each is a separate instance.
func TestCompile_SpareInstance(t *testing.T) {
	r, _ := newTestRuntime(t, Options{})
	ctx := context.Background()
	m := compile(t, r, "echo.wasm", guest(t, "echo"))
	if m.spare == nil {
		t.Fatal("Compile kept no spare instance")
	}
	spare := m.spare.mod
	var scheds []*Scheduler
	for i := range 2 {
		fx := newFakeEffects(model("a", sdk.StateReady))
		s, err := r.NewScheduler(ctx, m, nil, fx)
		if err != nil {
			t.Fatalf("NewScheduler %d: %v", i, err)
		}
		defer s.Close(ctx)
		if m.spare != nil {
			t.Fatalf("NewScheduler %d left the spare in place", i)
		}
		if took := s.sv.in.mod == spare; took != (i == 0) {
			t.Errorf("NewScheduler %d: took the spare %v", i, took)
		}
		if err := s.OnRequest(sdk.RequestEvent{Now: 1, ID: 7, Model: "a"}); err != nil {
			t.Fatal(err)
		}
		wantCalls(t, fx, "grant_serve 7 a")
		scheds = append(scheds, s)
	}
	if st := scheds[0].Status(); st.Instantiations != 1 {
		t.Errorf("status %+v", st)
	}

	trimmed := compile(t, r, "echo.wasm", guest(t, "echo"))
	old := trimmed.spare.mod
	trimmed.Trim(ctx)
	if trimmed.spare != nil || !old.IsClosed() {
		t.Fatal("Trim kept the spare instance open")
	}
	s, err := r.NewScheduler(ctx, trimmed, nil, newFakeEffects())
	if err != nil {
		t.Fatalf("NewScheduler after Trim: %v", err)
	}
	s.Close(ctx)
}

// A memory limit WebAssembly cannot have is NewRuntime's error (wazero
// panics on one); a sound module whose memory is above a low limit is
// refused saying so, not as invalid.
func TestRuntime_MemoryLimit(t *testing.T) {
	for _, pages := range []uint32{MaxMemoryLimitPages + 1, 1 << 31} {
		if r, err := NewRuntime(context.Background(), Options{MemoryLimitPages: pages, CacheDir: cacheDir}); err == nil {
			r.Close(context.Background())
			t.Errorf("NewRuntime with %d pages: no error", pages)
		} else if !strings.Contains(err.Error(), "want 1 to 65536 pages") {
			t.Errorf("NewRuntime with %d pages: %v", pages, err)
		}
	}
	r, _ := newTestRuntime(t, Options{MemoryLimitPages: 1})
	_, err := r.Compile(context.Background(), "echo.wasm", guest(t, "echo"))
	if err == nil || !strings.Contains(err.Error(), "needs more memory than the limit of 1 pages") || strings.Contains(err.Error(), "invalid") {
		t.Errorf("echo under a 1-page limit: %v", err)
	}
}
