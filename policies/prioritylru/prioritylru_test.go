package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/evict"
	"github.com/loadout-dev/loadout/sdk/policytest"
	sdksettings "github.com/loadout-dev/loadout/sdk/settings"
)

// The cases are written once, against policytest.Swapper, and run natively
// here and as WebAssembly in wasm_test.go.

const (
	mib = uint64(1) << 20
	gib = uint64(1) << 30
)

var nativeSwapper = policytest.NativeSwapperOf(New)

// m builds a model for a case: m("a", 8*gib) is a stopped 8 GiB model;
// .on(0) makes it ready on GPU 0.
type m sdk.ModelInfo

func model(name string, vram uint64) m { return m{Name: name, EstimatedVRAM: vram} }

func (x m) on(devices ...int32) m {
	x.State, x.Devices = sdk.StateReady, devices
	return x
}
func (x m) leased(b ...uint64) m      { x.Leased = b; return x }
func (x m) used(t int64) m            { x.LastUse = t; return x }
func (x m) prio(p int32) m            { x.Priority = p; return x }
func (x m) busy() m                   { x.InFlight = 2; return x }
func (x m) pinned() m                 { x.Pinned = true; return x }
func (x m) measured(b uint64) m       { x.MeasuredVRAM = b; return x }
func (x m) state(st sdk.ModelState) m { x.State = st; return x }
func (x m) info() sdk.ModelInfo       { return sdk.ModelInfo(x) }
func models(ms ...m) []sdk.ModelInfo  { return mapSlice(ms, m.info) }

func mapSlice[A, B any](in []A, f func(A) B) []B {
	out := make([]B, len(in))
	for i, a := range in {
		out[i] = f(a)
	}
	return out
}

// account sets h.GPUs as the host's ledger would: each running model's
// lease (its Leased bytes per device, else its VRAM, measured or estimated,
// evenly on its devices), and Free = Total − Leased.
func account(h *policytest.Host, totals ...uint64) {
	h.GPUs = make([]sdk.GPUInfo, len(totals))
	for i, t := range totals {
		h.GPUs[i] = sdk.GPUInfo{Index: int32(i), Name: "gpu" + string(rune('0'+i)), Total: t}
	}
	for _, info := range h.Models {
		if !info.State.Running() || len(info.Devices) == 0 {
			continue
		}
		if len(info.Leased) == len(info.Devices) {
			for j, d := range info.Devices {
				h.GPUs[d].Leased += info.Leased[j]
			}
			continue
		}
		v := evict.VRAM(info)
		for j, d := range info.Devices {
			share := v / uint64(len(info.Devices))
			if uint64(j) < v%uint64(len(info.Devices)) {
				share++
			}
			h.GPUs[d].Leased += share
		}
	}
	for i := range h.GPUs {
		h.GPUs[i].Free = h.GPUs[i].Total - min(h.GPUs[i].Leased, h.GPUs[i].Total)
	}
}

var planCases = []struct {
	name     string
	settings string
	gpus     []uint64
	models   []sdk.ModelInfo
	target   string
	evict    []string
	devices  []int32
	err      string
}{
	// Packing.
	{name: "fits on an empty GPU", gpus: []uint64{24 * gib}, models: models(model("t", 8*gib)),
		target: "t", devices: []int32{0}},
	{name: "packs beside loaded models", gpus: []uint64{24 * gib}, models: models(model("a", 8*gib).on(0), model("b", 8*gib).on(0), model("t", 8*gib)),
		target: "t", devices: []int32{0}},
	{name: "goes to the GPU with the most free", gpus: []uint64{24 * gib, 24 * gib}, models: models(model("a", 8*gib).on(0), model("t", 8*gib)),
		target: "t", devices: []int32{1}},
	{name: "a loaded target evicts nothing", gpus: []uint64{24 * gib}, models: models(model("a", 16*gib).on(0), model("t", 16*gib).on(0)),
		target: "t"},
	{name: "a loading target evicts nothing", gpus: []uint64{24 * gib}, models: models(model("a", 16*gib).on(0), model("t", 16*gib).on(0).state(sdk.StateStarting)),
		target: "t"},
	{name: "no VRAM figure: the host places it", gpus: []uint64{24 * gib}, models: models(model("a", 24*gib).on(0), model("t", 0)),
		target: "t"},
	{name: "no GPUs: nothing to account", models: models(model("a", 24*gib).on(), model("t", 8*gib)),
		target: "t"},

	// Eviction order.
	{name: "full: the least recently used goes", gpus: []uint64{24 * gib},
		models: models(model("a", 8*gib).on(0).used(3), model("b", 8*gib).on(0).used(1), model("c", 8*gib).on(0).used(2), model("t", 8*gib)),
		target: "t", evict: []string{"b"}, devices: []int32{0}},
	{name: "lower priority goes before less recently used", gpus: []uint64{24 * gib},
		models: models(model("a", 8*gib).on(0).used(1).prio(1), model("b", 8*gib).on(0).used(5), model("c", 8*gib).on(0).used(3), model("t", 8*gib).prio(1)),
		target: "t", evict: []string{"c"}, devices: []int32{0}},
	{name: "ties broken by name", gpus: []uint64{16 * gib},
		models: models(model("b", 8*gib).on(0).used(1), model("a", 8*gib).on(0).used(1), model("t", 8*gib)),
		target: "t", evict: []string{"a"}, devices: []int32{0}},
	{name: "several victims when one is not enough", gpus: []uint64{24 * gib},
		models: models(model("a", 8*gib).on(0).used(1), model("b", 8*gib).on(0).used(2), model("c", 8*gib).on(0).used(3), model("t", 16*gib)),
		target: "t", evict: []string{"a", "b"}, devices: []int32{0}},
	{name: "the fewest victims: a small one that does not help stays", gpus: []uint64{24 * gib},
		models: models(model("a", 2*gib).on(0).used(1), model("b", 20*gib).on(0).used(2), model("t", 20*gib)),
		target: "t", evict: []string{"b"}, devices: []int32{0}},
	{name: "measured usage replaces the estimate", gpus: []uint64{24 * gib},
		models: models(model("a", 4*gib).measured(12*gib).on(0).used(1), model("b", 8*gib).on(0).used(2), model("t", 12*gib)),
		target: "t", evict: []string{"a"}, devices: []int32{0}},
	{name: "a stopping model goes first", gpus: []uint64{24 * gib},
		models: models(model("a", 8*gib).on(0).used(9).state(sdk.StateStopping), model("b", 8*gib).on(0).used(1), model("c", 8*gib).on(0).used(2), model("t", 8*gib)),
		target: "t", evict: []string{"a"}, devices: []int32{0}},

	// Never evicted.
	{name: "pinned: never evicted", gpus: []uint64{24 * gib},
		models: models(model("a", 16*gib).on(0).used(1).pinned(), model("b", 8*gib).on(0).used(2), model("t", 8*gib)),
		target: "t", evict: []string{"b"}, devices: []int32{0}},
	{name: "pinned: cannot fit", gpus: []uint64{24 * gib},
		models: models(model("a", 20*gib).on(0).pinned(), model("t", 8*gib)),
		target: "t", err: "model t needs 8 GiB; at most 4 GiB can be freed on any placement"},
	{name: "busy: an idle model goes instead, even if used more recently", gpus: []uint64{24 * gib},
		models: models(model("a", 8*gib).on(0).used(1).busy(), model("b", 8*gib).on(0).used(5), model("c", 8*gib).on(0).used(6), model("t", 8*gib)),
		target: "t", evict: []string{"b"}, devices: []int32{0}},
	{name: "busy: when only a busy model makes room it is named, and the scheduler waits until it is idle", gpus: []uint64{24 * gib},
		models: models(model("a", 16*gib).on(0).used(1).busy(), model("b", 8*gib).on(0).used(2), model("t", 16*gib)),
		target: "t", evict: []string{"a"}, devices: []int32{0}},
	{name: "higher priority: never evicted by lower", gpus: []uint64{24 * gib},
		models: models(model("a", 16*gib).on(0).prio(5), model("t", 16*gib)),
		target: "t", err: "model t needs 16 GiB; at most 8 GiB can be freed on any placement"},
	{name: "higher priority: evicts lower", gpus: []uint64{24 * gib},
		models: models(model("a", 16*gib).on(0), model("t", 16*gib).prio(5)),
		target: "t", evict: []string{"a"}, devices: []int32{0}},
	{name: "equal priority may evict", gpus: []uint64{24 * gib},
		models: models(model("a", 16*gib).on(0).prio(5), model("t", 16*gib).prio(5)),
		target: "t", evict: []string{"a"}, devices: []int32{0}},

	// Several GPUs.
	{name: "split across 2x80GiB", gpus: []uint64{80 * gib, 80 * gib}, models: models(model("t", 120*gib)),
		target: "t", devices: []int32{0, 1}},
	{name: "split after evicting from both GPUs", gpus: []uint64{80 * gib, 80 * gib},
		models: models(model("a", 60*gib).on(0).used(1), model("b", 60*gib).on(1).used(2), model("t", 120*gib)),
		target: "t", evict: []string{"a", "b"}, devices: []int32{0, 1}},
	{name: "one GPU freed beats a split", gpus: []uint64{80 * gib, 80 * gib},
		models: models(model("a", 70*gib).on(0).used(1), model("b", 70*gib).on(1).used(2), model("t", 60*gib)),
		target: "t", evict: []string{"a"}, devices: []int32{0}},
	{name: "a split model frees both its GPUs", gpus: []uint64{80 * gib, 80 * gib},
		models: models(model("a", 120*gib).on(0, 1), model("t", 100*gib)),
		target: "t", evict: []string{"a"}, devices: []int32{0, 1}},
	{name: "an uneven split is credited per device, as the host leased it", gpus: []uint64{24 * gib, 24 * gib},
		models: models(model("v", 16*gib).on(0, 1).leased(2*gib, 14*gib).used(1), model("w", 12*gib).on(0).used(9),
			model("x", 8*gib).on(1).used(8), model("t", 17*gib)),
		target: "t", evict: []string{"v"}, devices: []int32{0, 1}},
	{name: "a model on the other GPU does not help", gpus: []uint64{80 * gib, 24 * gib},
		models: models(model("a", 20*gib).on(1).used(1), model("b", 70*gib).on(0).used(2), model("t", 40*gib)),
		target: "t", evict: []string{"b"}, devices: []int32{0}},

	// Cannot fit.
	{name: "cannot fit even on empty GPUs", gpus: []uint64{24 * gib}, models: models(model("t", 30*gib)),
		target: "t", err: "model t needs 30 GiB; at most 24 GiB can be freed on any placement"},
	{name: "cannot fit even after evicting everything", gpus: []uint64{80 * gib, 80 * gib},
		models: models(model("a", 40*gib).on(0), model("b", 40*gib).on(1).busy(), model("t", 170*gib)),
		target: "t", err: "model t needs 170 GiB; at most 160 GiB can be freed on any placement (2 GPUs"},
	{name: "the margin stays free on every GPU", settings: `{"margin": "1GiB"}`, gpus: []uint64{24 * gib}, models: models(model("t", 24*gib)),
		target: "t", err: "model t needs 24 GiB; at most 23 GiB can be freed on any placement (1 GPU, margin 1 GiB each"},
	{name: "the margin counts when packing", settings: `{"margin": 536870912}`, gpus: []uint64{24 * gib},
		models: models(model("a", 12*gib).on(0).used(1), model("t", 12*gib)),
		target: "t", evict: []string{"a"}, devices: []int32{0}},
	{name: "unknown target", gpus: []uint64{24 * gib}, models: models(model("a", gib)),
		target: "t", err: `unknown model "t"`},

	// Placement constraints (the host writes them into the settings from
	// the models' gpus: and split: and the box's placement:).
	{name: "pack: the fullest GPU that holds it", settings: `{"placement": {"pack": true}}`, gpus: []uint64{24 * gib, 24 * gib},
		models: models(model("a", 8*gib).on(0), model("t", 8*gib)), target: "t", devices: []int32{0}},
	{name: "gpus: only the GPU listed", settings: `{"placement": {"models": {"t": {"gpus": [1]}}}}`, gpus: []uint64{24 * gib, 24 * gib},
		models: models(model("a", 8*gib).on(1), model("t", 8*gib)), target: "t", devices: []int32{1}},
	{name: "gpus: evicts on the GPU listed, not where there is room", settings: `{"placement": {"models": {"t": {"gpus": [1]}}}}`, gpus: []uint64{24 * gib, 24 * gib},
		models: models(model("a", 20*gib).on(1).used(5), model("b", 4*gib).on(0).used(1), model("t", 8*gib)), target: "t", evict: []string{"a"}, devices: []int32{1}},
	{name: "split never: evicts rather than split", settings: `{"placement": {"models": {"t": {"split": "never"}}}}`, gpus: []uint64{24 * gib, 24 * gib},
		models: models(model("a", 12*gib).on(0).used(1), model("b", 12*gib).on(1).used(2), model("t", 20*gib)), target: "t", evict: []string{"a"}, devices: []int32{0}},
	{name: "split auto: splits rather than evict", gpus: []uint64{24 * gib, 24 * gib},
		models: models(model("a", 12*gib).on(0).used(1), model("b", 12*gib).on(1).used(2), model("t", 20*gib)), target: "t", devices: []int32{0, 1}},
	{name: "split always: every GPU listed, though one holds it", settings: `{"placement": {"models": {"t": {"gpus": [0, 2], "split": "always"}}}}`, gpus: []uint64{24 * gib, 24 * gib, 24 * gib},
		models: models(model("t", 8*gib)), target: "t", devices: []int32{0, 2}},
	{name: "split never: cannot fit names the constraint", settings: `{"placement": {"models": {"t": {"gpus": [0, 1], "split": "never"}}}}`, gpus: []uint64{24 * gib, 24 * gib, 80 * gib},
		models: models(model("t", 30*gib)), target: "t", err: "model t needs 30 GiB; at most 24 GiB can be freed on any placement (2 GPUs, gpus: [0 1], split: never"},
}

func TestPriorityLRU_Scenario(t *testing.T) { runPlanCases(t, nativeSwapper) }

func runPlanCases(t *testing.T, mk policytest.MakeSwapper) {
	for _, tc := range planCases {
		t.Run(tc.name, func(t *testing.T) {
			h := policytest.NewHost(t, tc.models...)
			account(h, tc.gpus...)
			s, err := mk(t, h, tc.settings)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			q := sdk.PlanRequest{Now: h.Now, Target: tc.target, Running: h.Running(tc.target)}
			p, err := s.Plan(q)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Plan(%q) = %v, %v; want an error containing %q", tc.target, p, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Plan(%q): %v", tc.target, err)
			}
			if !slices.Equal(p.Evict, tc.evict) || !slices.Equal(p.Devices, tc.devices) {
				t.Errorf("Plan(%q) = evict %q devices %v; want evict %q devices %v", tc.target, p.Evict, p.Devices, tc.evict, tc.devices)
			}
			if len(h.Calls) != 0 {
				t.Errorf("Plan must not log or act; got:\n%s", h.Calls)
			}
			// The same question gets the same answer (scratch reuse must not leak).
			if p2, err := s.Plan(q); err != nil || !slices.Equal(p2.Evict, tc.evict) || !slices.Equal(p2.Devices, tc.devices) {
				t.Errorf("second Plan = %v, %v", p2, err)
			}
		})
	}
}

// TestPriorityLRU_Packing drives a box through loads the way the host does:
// plan, start the swap, the target becomes ready where the plan put it, the
// ledger is updated. Four 8 GiB models on one 24 GiB GPU: three pack, the
// fourth evicts the least recently used, and the swap is logged once.
func TestPriorityLRU_Packing(t *testing.T) { runPacking(t, nativeSwapper) }

func runPacking(t *testing.T, mk policytest.MakeSwapper) {
	h := policytest.NewHost(t, models(model("a", 8*gib), model("b", 8*gib), model("c", 8*gib), model("d", 8*gib))...)
	account(h, 24*gib)
	s, err := mk(t, h, `{"margin": "0"}`)
	if err != nil {
		t.Fatal(err)
	}
	h.Swapper = s
	load := func(target string) sdk.Plan {
		t.Helper()
		p, err := h.Plan(target)
		if err != nil {
			t.Fatalf("Plan(%s): %v", target, err)
		}
		p = sdk.Plan{Evict: slices.Clone(p.Evict), Devices: slices.Clone(p.Devices)}
		if err := h.StartSwap(sdk.SwapRequest{Model: target, Evict: p.Evict, Devices: p.Devices}); err != nil {
			t.Fatalf("StartSwap(%s): %v", target, err)
		}
		for _, e := range p.Evict {
			h.Models[e].State, h.Models[e].Devices = sdk.StateStopped, nil
		}
		h.Models[target].State, h.Models[target].Devices = sdk.StateReady, p.Devices
		h.Models[target].LastUse = h.Now
		h.Advance(1)
		account(h, 24*gib)
		return p
	}
	for _, target := range []string{"a", "b", "c"} {
		if p := load(target); len(p.Evict) != 0 || !slices.Equal(p.Devices, []int32{0}) {
			t.Fatalf("loading %s: plan %+v, want it packed on GPU 0", target, p)
		}
	}
	h.Models["a"].LastUse = h.Now // a is used again: b is now the least recently used
	h.Calls = nil
	if p := load("d"); !slices.Equal(p.Evict, []string{"b"}) || !slices.Equal(p.Devices, []int32{0}) {
		t.Fatalf("loading d on a full GPU: plan %+v, want b evicted", p)
	}
	logs := h.Calls.Of(policytest.OpLog)
	if len(logs) != 1 || logs[0].Level != sdk.LevelInfo || logs[0].Msg != "prioritylru swap: model=d need=8GiB evict=[b] freed=8GiB devices=[0]" {
		t.Errorf("want one info line naming the target, evictions, freed bytes and placement; got:\n%s", logs)
	}
}

var goodSettings = []struct {
	settings string
	margin   uint64
}{
	{``, 0},
	{`{}`, 0},
	{`null`, 0},
	{`{"margin": "512MiB"}`, 512 * mib},
	{`{"margin": "1.5 GiB"}`, 3 * gib / 2},
	{`{"margin": "2G"}`, 2 * gib},
	{`{"margin": "1GB"}`, 1e9},
	{`{"margin": 4096}`, 4096},
}

func TestPriorityLRU_Settings(t *testing.T) {
	for _, tc := range goodSettings {
		s, err := New(policytest.NewHost(t), []byte(tc.settings))
		if err != nil {
			t.Errorf("settings %s: %v", tc.settings, err)
			continue
		}
		if got := s.(*swapper).st.Margin; got != tc.margin {
			t.Errorf("settings %s: margin %d, want %d", tc.settings, got, tc.margin)
		}
	}
}

var badSettings = []struct{ settings, want string }{
	{`{"margins": "1GiB"}`, `settings: margins: unknown setting "margins" (known: margin, placement)`},
	{`{"margin": "lots"}`, `settings: margin: size "lots"`},
	{`{"margin": "1XB"}`, `settings: margin: size "1XB"`},
	{`{"margin": -1}`, `settings: margin: want a size like "512MiB" or a whole number of bytes, got -1`},
	{`{"margin": 1.5}`, `settings: margin: want a size like "512MiB" or a whole number of bytes, got 1.5`},
	{`{"margin": "1.5"}`, `a byte count must be whole; use a unit for fractions`},
	{`{"margin": true}`, `settings: margin: want a size`},
	{`{"margin": "99999999999TiB"}`, `too large`},
	{`{"placement": {"spread": true}}`, `settings: placement.spread: unknown setting "spread" (known: pack, models)`},
	{`{"placement": {"models": {"m": {"gpus": [-1]}}}}`, `settings: placement.models.m.gpus[0]: want a whole number from 0`},
	{`{"placement": {"models": {"m": {"split": "sometimes"}}}}`, `settings: placement.models.m.split: want never, auto or always, got "sometimes"`},
	{`[]`, `settings: $: want an object`},
}

// TestPriorityLRU_BadSettings: invalid settings are init errors that say
// what is wrong.
func TestPriorityLRU_BadSettings(t *testing.T) { runBadSettings(t, nativeSwapper) }

func runBadSettings(t *testing.T, mk policytest.MakeSwapper) {
	for _, tc := range badSettings {
		_, err := mk(t, policytest.NewHost(t), tc.settings)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("settings %s: error %v, want one containing %s", tc.settings, err, tc.want)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 512 * mib: "512 MiB", 24 * gib: "24 GiB", 3 * gib / 2: "1.5 GiB"} {
		if got := sdksettings.FormatSize(n, " "); got != want {
			t.Errorf("formatSize(%d) = %q, want %q", n, got, want)
		}
	}
}
