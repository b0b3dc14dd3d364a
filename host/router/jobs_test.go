package router

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/gpu"
	"github.com/loadout-dev/loadout/host/policy"
	"github.com/loadout-dev/loadout/internal/wasmbuild"
	"github.com/loadout-dev/loadout/sdk"
)

// A GPU job may evict idle models only: IdleDevices leaves out a device
// with a busy or pinned model, EvictIdle refuses it (stopping nothing), and
// stops the idle ones and releases their leases.
func TestRouter_EvictIdle_NeverABusyOrPinnedModel(t *testing.T) {
	const gib = 1 << 30
	ledger := gpu.NewLedger(gpu.NewDeclared([]gpu.DeclaredDevice{
		{Name: "sim0", Memory: 8 * gib}, {Name: "sim1", Memory: 8 * gib}, {Name: "sim2", Memory: 8 * gib}}), 0)
	h := newHarness(t, harnessOpts{
		ledger: ledger,
		groups: `{"groups": {"all": {"swap": false, "exclusive": false, "members": ["a", "b", "c", "e"]}}}`,
		models: map[string]ModelConfig{"a": {VRAM: 6 * gib}, "b": {VRAM: 6 * gib}, "c": {VRAM: 6 * gib, Pinned: true}},
	})
	busy := h.acquire("a").wait(t) // a stays busy
	h.acquire("b").wait(t).Release()
	h.acquire("c").wait(t).Release()
	dev := func(m string) int { l, _ := ledger.Lease(m); return gpu.SortedDevices(l)[0] }
	da, db, dc := dev("a"), dev("b"), dev("c")
	if got := h.r.IdleDevices(); !slices.Equal(got, []int{db}) {
		t.Fatalf("IdleDevices = %v, want only b's GPU %d (a busy on %d, c pinned on %d)", got, db, da, dc)
	}
	for _, d := range []int{da, dc} {
		_, err := h.r.EvictIdle(context.Background(), []int{d, db})
		var re *Error
		if !errors.As(err, &re) || re.Code != sdk.CodeUnavailable {
			t.Fatalf("EvictIdle on GPU %d: %v, want a refusal", d, err)
		}
	}
	if h.status("b").State != "ready" {
		t.Fatal("a refused EvictIdle stopped b")
	}
	stopped, err := h.r.EvictIdle(context.Background(), []int{db})
	if err != nil || !slices.Equal(stopped, []string{"b"}) {
		t.Fatalf("EvictIdle = %v, %v; want [b]", stopped, err)
	}
	if _, held := ledger.Lease("b"); held {
		t.Fatal("the evicted model still holds its lease")
	}
	if got, _ := ledger.UnheldDevices(); !slices.Equal(got, []int{db}) {
		t.Fatalf("unheld devices %v, want [%d]", got, db)
	}
	busy.Release()
}

// prioritylruModule builds and compiles the built-in prioritylru swapper
// once per test binary, in the runtime the other policies use.
var (
	prioOnce sync.Once
	prioMod  *policy.Module
	prioErr  error
)

func prioritylru(t testing.TB) func(sdk.Host) (SwapperPolicy, error) {
	t.Helper()
	rt, _, _ := policies(t)
	prioOnce.Do(func() {
		const pkg = "github.com/loadout-dev/loadout/policies/prioritylru"
		wasm, err := wasmbuild.Build(pkg)
		if err != nil {
			prioErr = err
			return
		}
		prioMod, prioErr = rt.Compile(context.Background(), pkg, wasm)
	})
	if prioErr != nil {
		t.Fatalf("prioritylru: %v", prioErr)
	}
	return func(h sdk.Host) (SwapperPolicy, error) {
		return rt.NewSwapper(context.Background(), prioMod, []byte("{}"), h)
	}
}

// A model request that finds its GPU held by a job waits in the queue (the
// job will end) instead of failing, whichever swapper plans: group, which
// leaves placement to the host (the host's lease says "held by jobs"), or
// prioritylru, which places and whose plan fails while the job holds the
// memory (the host asks it what it would plan without the jobs). It loads
// as soon as the job's lease is released: the periodic tick is an hour
// away, so the release itself must wake the scheduler.
func TestRouter_RequestWaitsForAJobsGPU(t *testing.T) {
	const gib = 1 << 30
	for _, swapper := range []string{"group", "prioritylru"} {
		t.Run(swapper, func(t *testing.T) {
			ledger := gpu.NewLedger(gpu.NewDeclared([]gpu.DeclaredDevice{{Name: "sim0", Memory: 8 * gib}}), 0)
			o := harnessOpts{ledger: ledger, tick: time.Hour, models: map[string]ModelConfig{"a": {VRAM: 6 * gib}}}
			if swapper == "prioritylru" {
				o.newSwap = prioritylru(t)
			}
			h := newHarness(t, o)
			if _, err := ledger.AcquireDevices("job-1", []int{0}); err != nil {
				t.Fatal(err)
			}
			c := h.acquire("a")
			if p := c.held(t, false); p.Position < 1 {
				t.Fatalf("held at %+v, want queued", p)
			}
			h.world.expectNone(t)
			for kind, c := range h.r.Counters() {
				if c.RefusedEffects != 0 || c.Failures != 0 {
					t.Fatalf("a job holding the GPU counted against the %s policy: %+v", kind, c)
				}
			}
			ledger.Release("job-1")
			h.world.expect(t, "starting a", "ready a")
			c.wait(t).Release()
		})
	}
}

// With prioritylru, a request while a job holds one GPU goes to another
// where VRAM allows; one that could never fit, jobs or not, fails at once
// rather than waiting for the job.
func TestRouter_JobsGPU_PlacedElsewhereOrRefused(t *testing.T) {
	const gib = 1 << 30
	ledger := gpu.NewLedger(gpu.NewDeclared([]gpu.DeclaredDevice{{Name: "sim0", Memory: 8 * gib}, {Name: "sim1", Memory: 8 * gib}}), 0)
	h := newHarness(t, harnessOpts{
		ledger: ledger, tick: time.Hour, newSwap: prioritylru(t),
		groups: `{}`,
		models: map[string]ModelConfig{"a": {VRAM: 6 * gib}, "huge": {VRAM: 20 * gib}},
	})
	if _, err := ledger.AcquireDevices("job-1", []int{0}); err != nil {
		t.Fatal(err)
	}
	h.acquire("a").wait(t).Release()
	if d := h.status("a").Devices; !slices.Equal(d, []int{1}) {
		t.Fatalf("a placed on %v, want GPU 1 (the job holds 0)", d)
	}
	e := h.acquire("huge").waitErr(t)
	if e.Code != sdk.CodeUnavailable || strings.Contains(e.Message, "jobs hold") {
		t.Fatalf("huge: %+v, want the swapper's refusal, not a wait for the job", e)
	}
}
