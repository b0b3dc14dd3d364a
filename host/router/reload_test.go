package router

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/sdk"
)

// harnessPolicies are the harness's fifo and group policies, fresh.
func harnessPolicies(t *testing.T) Policies {
	rt, fifo, group := policies(t)
	ctx := context.Background()
	return Policies{
		SchedulerName: "builtin:fifo (reloaded)", SwapperName: "builtin:group (reloaded)",
		NewScheduler: func(fx sdk.Effects) (SchedulerPolicy, error) {
			return rt.NewScheduler(ctx, fifo, []byte("{}"), fx)
		},
		NewSwapper: func(h sdk.Host) (SwapperPolicy, error) {
			return rt.NewSwapper(ctx, group, []byte(groupsExclusiveAB), h)
		},
	}
}

// A hot reload loses nothing: requests the old scheduler held are served
// by the new one, a request in flight finishes and its release reaches
// the new scheduler, and new requests go to the new policies.
func TestRouter_ReplacePolicies_HandsOverHeldRequests(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	ga := h.acquire("a").wait(t) // in flight across the reload
	h.world.expect(t, "starting a", "ready a")
	cb := h.acquire("b") // queued: loading b would evict busy a
	cb.held(t, false)

	pause, err := h.r.ReplacePolicies(harnessPolicies(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("scheduling paused %v for the reload", pause)
	cb.pending(t)
	ga.Release() // the new scheduler hears it and may now evict a
	h.world.expect(t, "stopped a", "starting b", "ready b")
	cb.wait(t).Release()
	h.acquire("b").wait(t).Release()
	h.world.expectNone(t)
}

// A policy that cannot be made is refused, and the old policies keep
// scheduling.
func TestRouter_ReplacePolicies_BrokenPolicyIsRefused(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	broken := harnessPolicies(t)
	broken.NewScheduler = func(sdk.Effects) (SchedulerPolicy, error) {
		return nil, errors.New("settings: max_queue: want a number")
	}
	cb := h.acquire("b")
	h.world.expect(t, "starting b", "ready b")
	gb := cb.wait(t)
	ca := h.acquire("a") // queued behind busy b
	ca.held(t, false)
	if _, err := h.r.ReplacePolicies(broken); err == nil || !strings.Contains(err.Error(), "max_queue") {
		t.Fatalf("a broken scheduler was accepted: %v", err)
	}
	gb.Release()
	h.world.expect(t, "stopped b", "starting a", "ready a")
	ca.wait(t).Release()
}
