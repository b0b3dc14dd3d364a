package router

import (
	"fmt"
	"slices"
	"testing"
)

// A configuration reload that removes, adds and changes models: a removed
// busy model finishes its request, then stops and leaves the table; a new
// model loads on its first request; a changed model running idle is
// stopped and its next request loads it with the new configuration.
func TestRouter_UpdateModels(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	ga := h.acquire("a").wait(t) // in flight across the update
	h.world.expect(t, "starting a", "ready a")
	h.acquire("e").wait(t).Release() // e runs idle (a persistent group)
	h.world.expect(t, "starting e", "ready e")

	models := map[string]ModelConfig{}
	for _, name := range []string{"b", "c", "e", "z"} { // a removed, z added
		models[name] = ModelConfig{Process: h.world.process(name)}
	}
	models["e"] = ModelConfig{Process: h.world.process("e"), Priority: 3} // changed
	if err := h.r.UpdateModels(models, []string{"e"}); err != nil {
		t.Fatal(err)
	}
	h.world.expect(t, "stopped e") // idle and changed: stopped at once
	h.expectState("a", "stopping") // removed, draining: takes no new request
	ga.Release()
	h.world.expect(t, "stopped a")
	// The fake reports the stop before the loop handles its stopDone, and
	// the loop may answer a query first: ask until a has left the table.
	h.await(func() string {
		var names []string
		for _, st := range h.r.Models() {
			names = append(names, st.Model)
		}
		if !slices.Equal(names, []string{"b", "c", "e", "z"}) {
			return fmt.Sprintf("models after the update: %v", names)
		}
		return ""
	})
	if err := h.acquire("a").waitErr(t); err.Code != 1 { // sdk.CodeModelNotFound
		t.Fatalf("a removed model: %+v", err)
	}
	h.acquire("z").wait(t).Release()
	h.world.expect(t, "starting z", "ready z")
	h.acquire("e").wait(t).Release()
	h.world.expect(t, "starting e", "ready e")
}

// A reload that removes a model while it loads ends the load at once, as
// an operator's unload does, instead of letting it run to its end (a
// large model's minutes) only to stop it; the model leaves the table and
// its waiter gets an error.
func TestRouter_UpdateModelsAbortsARemovedModelsLoad(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	release := h.procs["a"].hold() // a load that never ends by itself
	defer release()
	c := h.acquire("a")
	h.world.expect(t, "starting a")
	models := map[string]ModelConfig{}
	for _, name := range []string{"b", "c", "e"} { // a removed
		models[name] = ModelConfig{Process: h.world.process(name)}
	}
	if err := h.r.UpdateModels(models, nil); err != nil {
		t.Fatal(err)
	}
	h.world.expect(t, "aborted a")
	c.waitErr(t)
	h.await(func() string {
		for _, st := range h.r.Models() {
			if st.Model == "a" {
				return "a is still in the table: " + st.State
			}
		}
		return ""
	})
}
