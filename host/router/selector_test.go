package router

import (
	"context"
	"testing"
)

// acquireSelect starts an Acquire for selector sel and returns at once.
func (h *harness) acquireSelect(sel *Selector) *call {
	ctx, cancel := context.WithCancel(context.Background())
	c := &call{model: sel.ID, cancel: cancel, progress: make(chan Progress, 1), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		c.grant, c.err = h.r.Acquire(ctx, Request{Model: sel.ID, Select: sel, Progress: c.progress})
	}()
	h.t.Cleanup(cancel)
	return c
}

// llama-swap's warm strategy: the first ready target, else the first.
func TestRouter_SelectorWarm_PicksReadyTarget(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	sel := &Selector{ID: "chat", Strategy: SelectWarm, Targets: []string{"a", "e"}}

	// Nothing runs: the first target is started.
	g := h.acquireSelect(sel).wait(t)
	if g.Model != "a" {
		t.Fatalf("cold: granted %q, want a (the first target)", g.Model)
	}
	g.Release()
	h.r.Unload(context.Background(), UnloadOptions{Models: []string{"a"}})

	// e is ready, a is not: e serves, and a is not started.
	h.acquire("e").wait(t).Release()
	g = h.acquireSelect(sel).wait(t)
	if g.Model != "e" {
		t.Fatalf("warm: granted %q, want e (the ready target)", g.Model)
	}
	g.Release()
	h.expectState("a", "stopped")
}

// llama-swap's pin strategy: the first target, whatever runs.
func TestRouter_SelectorPin_FirstTarget(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.acquire("e").wait(t).Release()
	g := h.acquireSelect(&Selector{ID: "p", Strategy: SelectPin, Targets: []string{"a", "e"}}).wait(t)
	if g.Model != "a" {
		t.Fatalf("granted %q, want a", g.Model)
	}
	g.Release()
}

// llama-swap's spillover strategy: a target takes Spillover requests
// before the next is started; freed room is filled first.
func TestRouter_SelectorSpillover_FillsThenSpills(t *testing.T) {
	h := newHarness(t, harnessOpts{groups: `{"groups": {
		"pool": {"swap": false, "exclusive": false, "members": ["s1", "s2"]},
		"ab": {"swap": true, "exclusive": true, "members": ["a", "b", "c", "e"]}}}`,
		models: map[string]ModelConfig{"s1": {}, "s2": {}}})
	sel := &Selector{ID: "pool", Strategy: SelectSpillover, Targets: []string{"s1", "s2"}, Spillover: 2}

	g1 := h.acquireSelect(sel).wait(t)
	g2 := h.acquireSelect(sel).wait(t)
	if g1.Model != "s1" || g2.Model != "s1" {
		t.Fatalf("first two on %q and %q, want both on s1", g1.Model, g2.Model)
	}
	g3 := h.acquireSelect(sel).wait(t)
	if g3.Model != "s2" {
		t.Fatalf("third on %q, want s2 (s1 holds its 2)", g3.Model)
	}
	g1.Release()
	g4 := h.acquireSelect(sel).wait(t)
	if g4.Model != "s1" && g4.Model != "s2" {
		t.Fatalf("fourth on %q", g4.Model)
	}
	// s1 and s2 each hold one now or s1 one and s2 two: the least loaded
	// takes it, so s1 (1) beats s2 (1) by order.
	if g4.Model != "s1" {
		t.Fatalf("fourth on %q, want s1 (least loaded, first)", g4.Model)
	}
	for _, g := range []*Grant{g2, g3, g4} {
		g.Release()
	}
}

// A profile switch is a turn of the loop: Profile reads what the last
// switch set, and SetProfile returns what it replaced.
func TestRouter_SetProfile_Switches(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	if got := h.r.Profile(); got != "" {
		t.Fatalf("at start: profile %q, want none", got)
	}
	if prev := h.r.SetProfile("coding"); prev != "" {
		t.Fatalf("first switch replaced %q, want none", prev)
	}
	if got := h.r.Profile(); got != "coding" {
		t.Fatalf("profile %q, want coding", got)
	}
	if prev := h.r.SetProfile(""); prev != "coding" {
		t.Fatalf("second switch replaced %q, want coding", prev)
	}
	if got := h.r.Profile(); got != "" {
		t.Fatalf("profile %q, want none", got)
	}
}
