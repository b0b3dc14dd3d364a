package router

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/gpu"
	"github.com/loadout-dev/loadout/sdk"
)

// replicaModels is model r with replicas r and r@2 (max 2, min lo), one
// request at a time each, 6 GiB: one per 8 GiB device.
func replicaModels(lo int) map[string]ModelConfig {
	return map[string]ModelConfig{
		"r":   {VRAM: 6 * gib, ConcurrencyLimit: 1, MinReplicas: lo, MaxReplicas: 2},
		"r@2": {VRAM: 6 * gib, ConcurrencyLimit: 1, MinReplicas: lo, MaxReplicas: 2, ReplicaOf: "r", Replica: 2},
	}
}

func twoGPUs() *gpu.Ledger {
	return gpu.NewLedger(gpu.NewDeclared([]gpu.DeclaredDevice{{Name: "sim0", Memory: 8 * gib}, {Name: "sim1", Memory: 8 * gib}}), 0)
}

// A request that finds the only ready replica at its limit makes fifo
// start the second (it fits without evicting anything) and is served by
// it once ready; then requests go to the replica with the fewest in
// flight, and /api/models shows one model with both replicas.
func TestRouter_ReplicasScaleOutAndBalance(t *testing.T) {
	ledger := twoGPUs()
	h := newHarness(t, harnessOpts{ledger: ledger, tick: time.Hour, newSwap: prioritylru(t), models: replicaModels(1)})

	g1 := h.acquire("r").wait(t)
	if g1.Model != "r" || g1.Replica != "r" {
		t.Fatalf("first grant: model %q replica %q, want r on r", g1.Model, g1.Replica)
	}
	c2 := h.acquire("r")
	g2 := c2.wait(t)
	if g2.Model != "r" || g2.Replica != "r@2" {
		t.Fatalf("second grant: model %q replica %q, want r on r@2 (started for it)", g2.Model, g2.Replica)
	}
	if d1, d2 := onGPU(t, ledger, "r"), onGPU(t, ledger, "r@2"); d1 == d2 {
		t.Fatalf("both replicas on GPU %d", d1)
	}
	st := h.status("r")
	if st.State != "ready" || st.ReadyReplicas != 2 || st.ReplicaState != ModelAvailable || st.InFlight != 2 || len(st.Replicas) != 2 {
		t.Fatalf("status %+v: want ready, 2 ready replicas, ModelAvailable, 2 in flight", st)
	}
	for _, rs := range st.Replicas {
		if rs.State != ReplicaLoaded || rs.InFlight != 1 || rs.Served != 1 {
			t.Fatalf("replica %+v: want Loaded with 1 in flight and 1 served", rs)
		}
	}
	for _, s := range h.r.Models() {
		if s.Model == "r@2" {
			t.Fatalf("/api/models lists replica r@2 as a model of its own")
		}
	}
	g1.Release()
	g2.Release()

	// With r busy, the next request goes to r@2 and the warm path or the
	// scheduler serves it there, without queueing behind r.
	a := h.acquire("r").wait(t)
	b := h.acquire("r").wait(t)
	if a.Replica == b.Replica {
		t.Fatalf("two concurrent requests both on %s, want one on each replica", a.Replica)
	}
	a.Release()
	b.Release()
}

// min_replicas: once the model loads, fifo starts replicas until the
// minimum runs.
func TestRouter_ReplicasFillMin(t *testing.T) {
	h := newHarness(t, harnessOpts{ledger: twoGPUs(), tick: time.Hour, newSwap: prioritylru(t), models: replicaModels(2)})
	h.acquire("r").wait(t).Release()
	h.await(func() string {
		if st := h.status("r"); st.ReadyReplicas != 2 {
			return fmt.Sprintf("%d replicas ready (%s), want min_replicas 2", st.ReadyReplicas, st.ReplicaState)
		}
		return ""
	})
}

// A replica beyond min_replicas idle for scale_in_after is stopped, and
// the model stays available on the other.
func TestRouter_ReplicasScaleIn(t *testing.T) {
	clock := newManualClock()
	h := newHarness(t, harnessOpts{ledger: twoGPUs(), clock: clock, tick: 5 * time.Millisecond, newSwap: prioritylru(t),
		models: replicaModels(1), scheduler: `{"scale_in_after": "30s"}`})
	g1 := h.acquire("r").wait(t)
	g2 := h.acquire("r").wait(t)
	g1.Release()
	g2.Release()
	if st := h.status("r"); st.ReadyReplicas != 2 {
		t.Fatalf("%d replicas ready, want 2 before scaling in", st.ReadyReplicas)
	}
	clock.advance(time.Minute)
	h.await(func() string {
		st := h.status("r")
		if st.ReadyReplicas != 1 || st.State != "ready" || st.Replicas[1].State != ReplicaUnloaded {
			return fmt.Sprintf("%d replicas ready, state %s, replica 2 %s: want 1, ready, and the highest-numbered one unloaded after scale_in_after",
				st.ReadyReplicas, st.State, st.Replicas[1].State)
		}
		return ""
	})
}

// Replica sets as policies read them: any row names its set; a model
// without replicas is a set of one; an unknown one is not found.
func TestRouter_ReplicaSets(t *testing.T) {
	models := replicaModels(1)
	models["x"] = ModelConfig{VRAM: gib}
	h := newHarness(t, harnessOpts{ledger: twoGPUs(), tick: time.Hour, newSwap: prioritylru(t), models: models})
	var r2, x sdk.ReplicaSet
	var unknown bool
	h.r.OnLoop(func() {
		r2, _ = h.r.loop.fx.Replicas("r@2")
		x, _ = h.r.loop.fx.Replicas("x")
		_, found := h.r.loop.fx.Replicas("nope")
		unknown = !found
	})
	if r2.Model != "r" || r2.Min != 1 || r2.Max != 2 || len(r2.Replicas) != 2 || r2.Replicas[0] != "r" || r2.Replicas[1] != "r@2" {
		t.Fatalf("set of r@2: %+v", r2)
	}
	if x.Model != "x" || x.Max != 1 || len(x.Replicas) != 1 {
		t.Fatalf("set of x: %+v", x)
	}
	if !unknown {
		t.Fatal("an unknown model has a set")
	}
}

// An operator's unload of a model stops every replica of it.
func TestRouter_UnloadStopsEveryReplica(t *testing.T) {
	h := newHarness(t, harnessOpts{ledger: twoGPUs(), tick: time.Hour, newSwap: prioritylru(t), models: replicaModels(2)})
	h.acquire("r").wait(t).Release()
	h.await(func() string {
		if st := h.status("r"); st.ReadyReplicas != 2 {
			return fmt.Sprintf("%d replicas ready, want 2", st.ReadyReplicas)
		}
		return ""
	})
	if err := h.r.Unload(t.Context(), UnloadOptions{Models: []string{"r"}}); err != nil {
		t.Fatal(err)
	}
	st := h.status("r")
	if st.State != "stopped" || st.ReplicaState != ModelTerminated {
		t.Fatalf("after unloading r: %s / %s, want stopped / %s", st.State, st.ReplicaState, ModelTerminated)
	}
}

// A replica min_replicas asks for that does not fit says why in its
// status (nothing waits on it to carry the error to a client).
func TestRouter_ReplicaThatCannotBePlacedSaysWhy(t *testing.T) {
	one := gpu.NewLedger(gpu.NewDeclared([]gpu.DeclaredDevice{{Name: "sim0", Memory: 8 * gib}}), 0)
	// The siblings, as host/config writes them into a router's settings.
	apart := `{"placement": {"models": {"r": {"apart": ["r@2"]}, "r@2": {"apart": ["r"]}}}}`
	h := newHarness(t, harnessOpts{ledger: one, tick: time.Hour, newSwap: prioritylruWith(t, apart), models: replicaModels(2)})
	h.acquire("r").wait(t).Release()
	h.await(func() string {
		st := h.status("r")
		if st.ReadyReplicas != 1 || !strings.Contains(st.Replicas[1].LastError, "cannot be placed") {
			return fmt.Sprintf("status %+v: want one replica ready and the second saying it cannot be placed", st)
		}
		return ""
	})
}

// A reload that lowers a loaded model's replicas from 2 to 1: the
// removed replica drains and leaves the table, the model stays ready on
// its own row, and its status is one entry throughout (a replica whose
// model had become a set of one crashed the observer).
func TestRouter_ReloadToOneReplica(t *testing.T) {
	h := newHarness(t, harnessOpts{ledger: twoGPUs(), tick: time.Hour, newSwap: prioritylru(t), models: replicaModels(2),
		observer: newRecordingObserver()}) // serve always has one; the crash was in it
	h.acquire("r").wait(t).Release()
	h.await(func() string {
		if st := h.status("r"); st.ReadyReplicas != 2 {
			return fmt.Sprintf("%d replicas ready, want 2", st.ReadyReplicas)
		}
		return ""
	})
	g := h.acquire("r").wait(t) // in flight across the reload
	models := map[string]ModelConfig{}
	for _, name := range []string{"a", "b", "c", "e"} {
		models[name] = ModelConfig{Process: h.procs[name]}
	}
	models["r"] = ModelConfig{VRAM: 6 * gib, ConcurrencyLimit: 1, Process: h.procs["r"]}
	if err := h.r.UpdateModels(models, nil); err != nil {
		t.Fatal(err)
	}
	g.Release()
	h.await(func() string {
		var names []string
		for _, st := range h.r.Models() {
			names = append(names, st.Model)
		}
		if strings.Join(names, ",") != "a,b,c,e,r" {
			return fmt.Sprintf("models after the reload: %v, want one entry for r", names)
		}
		if st := h.status("r"); st.State != "ready" || len(st.Replicas) != 0 {
			return fmt.Sprintf("r after the reload: %s with %d replicas, want ready, a model without replicas once r@2 has stopped", st.State, len(st.Replicas))
		}
		return ""
	})
	h.acquire("r").wait(t).Release()
}

// A reload that raises a loaded model's replicas from 1 to 2 (replicas:
// 2, so min_replicas 2): fifo starts the new replica on a tick, with no
// request asking for it, where it fits without evicting.
func TestRouter_ReloadAddsAReplicaThatStarts(t *testing.T) {
	one := map[string]ModelConfig{"r": {VRAM: 6 * gib, ConcurrencyLimit: 1}}
	h := newHarness(t, harnessOpts{ledger: twoGPUs(), tick: 5 * time.Millisecond, newSwap: prioritylru(t), models: one,
		observer: newRecordingObserver()})
	h.acquire("r").wait(t).Release()
	models := map[string]ModelConfig{}
	for _, name := range []string{"a", "b", "c", "e", "r"} {
		models[name] = ModelConfig{Process: h.procs[name]}
	}
	two := replicaModels(2)
	models["r"] = ModelConfig{VRAM: 6 * gib, ConcurrencyLimit: 1, MinReplicas: 2, MaxReplicas: 2, Process: h.procs["r"]}
	r2 := two["r@2"]
	r2.Process = h.world.process("r@2")
	models["r@2"] = r2
	if err := h.r.UpdateModels(models, nil); err != nil {
		t.Fatal(err)
	}
	h.await(func() string {
		if st := h.status("r"); st.ReadyReplicas != 2 || st.ReplicaState != ModelAvailable {
			return fmt.Sprintf("%d replicas ready (%s), want the added one started: min_replicas 2", st.ReadyReplicas, st.ReplicaState)
		}
		return ""
	})
}

// A cold request for a model with min_replicas 2 starts both replicas at
// once: the second does not wait for the first's load.
func TestRouter_ColdLoadStartsMinReplicasTogether(t *testing.T) {
	h := newHarness(t, harnessOpts{ledger: twoGPUs(), tick: time.Hour, newSwap: prioritylru(t), models: replicaModels(2)})
	release := h.procs["r"].hold()
	c := h.acquire("r")
	// r is held loading; r@2 (not held) starts and is ready meanwhile.
	h.world.expectSet(t, "starting r", "starting r@2", "ready r@2")
	release()
	c.wait(t).Release()
}
