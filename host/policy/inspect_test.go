package policy

import (
	"context"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/sdk"
)

func TestInspect_GoGuest(t *testing.T) {
	r, _ := newTestRuntime(t, Options{})
	wasm := guest(t, "swapper")
	rep, err := Inspect(context.Background(), r, "swapper.wasm", wasm, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Name != "swapper.wasm" || rep.Kind != sdk.KindSwapper || rep.ABIVersion != sdk.ABIVersion || rep.Size != len(wasm) || rep.CompileTime <= 0 || rep.CacheDir != cacheDir {
		t.Errorf("report %+v", rep)
	}
	found := false
	for _, e := range rep.Exports {
		if e.Name == "plan" && e.Signature == "(i32) -> i64" {
			found = true
		}
	}
	if !found {
		t.Errorf("exports %v", rep.Exports)
	}
	if len(rep.Imports) == 0 || !strings.Contains(rep.Imports[0].Name, ".") {
		t.Errorf("imports %v", rep.Imports)
	}
}

func TestInspect_Refused(t *testing.T) {
	r, _ := newTestRuntime(t, Options{})
	_, err := Inspect(context.Background(), r, "x.wasm", []byte("nope"), nil)
	if err == nil || !strings.Contains(err.Error(), "policy x.wasm: not a WebAssembly module") {
		t.Errorf("got %v", err)
	}
}

// Inspect refuses what serve would refuse when it makes the instance:
// buffers outside the module's memory, settings init rejects (and takes
// settings init accepts).
func TestInspect_InstantiatesAsServe(t *testing.T) {
	r, _ := newTestRuntime(t, Options{})
	ctx := context.Background()
	bad := miniPolicy()
	bad.buffersAddr = 0x7FFFFFF0
	if _, err := Inspect(ctx, r, "mini.wasm", bad.bytes(), nil); err == nil || !strings.Contains(err.Error(), "abi_buffers returned address 0x7ffffff0, outside the module's memory") {
		t.Errorf("abi_buffers out of range: %v", err)
	}
	echo := guest(t, "echo")
	if _, err := Inspect(ctx, r, "echo.wasm", echo, []byte(`{"fail_init": "needs a mode"}`)); err == nil ||
		!strings.Contains(err.Error(), `policy echo.wasm: init: needs a mode (settings {"fail_init": "needs a mode"})`) {
		t.Errorf("init error: %v", err)
	}
	if _, err := Inspect(ctx, r, "echo.wasm", echo, []byte(`{"fail_init": ""}`)); err != nil {
		t.Errorf("settings init accepts: %v", err)
	}
}

func TestBench_Scheduler(t *testing.T) {
	r, _ := newTestRuntime(t, Options{})
	ctx := context.Background()
	m := compile(t, r, "echo.wasm", guest(t, "echo"))
	sw := compile(t, r, "swapper.wasm", guest(t, "swapper"))
	for _, swapper := range []*Module{nil, sw} {
		res, err := Bench(ctx, r, m, BenchOptions{Events: 160, Models: 4, Swapper: swapper, SwapperSettings: []byte(`{"max_running": 4}`)})
		if err != nil {
			t.Fatal(err)
		}
		if res.Policy != "echo.wasm" || res.Kind != sdk.KindScheduler || res.Models != 4 {
			t.Errorf("result %+v", res)
		}
		want := map[string]int{
			"on_request (ready model)":               160,
			"on_serve_done":                          160 + 160,
			"on_request (model loading, 16 callers)": 160,
			"on_swap_done (drains 16)":               10,
		}
		if len(res.Scenarios) != len(want) {
			t.Errorf("scenarios %+v", res.Scenarios)
		}
		for _, s := range res.Scenarios {
			if n, ok := want[s.Name]; !ok || s.Events != n || s.Median <= 0 || s.P99 < s.Median || s.Mean <= 0 {
				t.Errorf("scenario %+v, want %d events", s, n)
			}
		}
	}
}

func TestBench_Swapper(t *testing.T) {
	r, _ := newTestRuntime(t, Options{})
	m := compile(t, r, "swapper.wasm", guest(t, "swapper"))
	res, err := Bench(context.Background(), r, m, BenchOptions{Events: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Scenarios) != 3 || res.Scenarios[0].Name != "plan (evicts 1)" || res.Scenarios[0].Events != 100 || res.Scenarios[1].Events != 10 || res.Scenarios[2].Name != "plan (GPU full)" {
		t.Errorf("scenarios %+v", res.Scenarios)
	}
}

func TestBench_PolicyCrash(t *testing.T) {
	r, _ := newTestRuntime(t, Options{})
	m := compile(t, r, "evil.wasm", guest(t, "evil"))
	_, err := Bench(context.Background(), r, m, BenchOptions{Events: 10, Settings: []byte(`{"misbehave": "panic", "model": "m01"}`)})
	if err == nil || !strings.Contains(err.Error(), "bench: policy evil.wasm crashed in on_request: panic: evil: deliberate panic") {
		t.Errorf("got %v", err)
	}
}
