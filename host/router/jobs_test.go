package router

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/gpu"
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

// A model request that finds the GPUs held by a job waits in the queue
// (the job will end), and loads once the job's lease is released, instead
// of failing as a model that does not fit.
func TestRouter_RequestWaitsForAJobsGPU(t *testing.T) {
	const gib = 1 << 30
	ledger := gpu.NewLedger(gpu.NewDeclared([]gpu.DeclaredDevice{{Name: "sim0", Memory: 8 * gib}}), 0)
	h := newHarness(t, harnessOpts{
		ledger: ledger,
		tick:   5 * time.Millisecond,
		models: map[string]ModelConfig{"a": {VRAM: 6 * gib}},
	})
	if _, err := ledger.AcquireDevices("job-1", []int{0}); err != nil {
		t.Fatal(err)
	}
	c := h.acquire("a")
	if p := c.held(t, false); p.Position < 1 {
		t.Fatalf("held at %+v, want queued", p)
	}
	h.world.expectNone(t)
	if c := h.r.Counters()["scheduler"]; c.RefusedEffects != 0 {
		t.Fatalf("a job holding the GPU counted as a policy's refused effect: %+v", c)
	}
	ledger.Release("job-1")
	h.world.expect(t, "starting a", "ready a") // the next tick drains the queue
	c.wait(t).Release()
}
