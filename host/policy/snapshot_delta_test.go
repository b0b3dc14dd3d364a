package policy

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/wire"
)

// TestSnapshotDelta_Guest: a Go guest that reads the snapshot both through
// deltas (sdk.ReadSnapshotChanges) and whole (Host.Snapshot) on every plan
// sees the same snapshot both ways, whatever changed in between — a field,
// the GPUs, a model removed or added by a reload, its own storage dropped,
// a second storage, a crash — and the delta names exactly the models that
// changed.
func TestSnapshotDelta_Guest(t *testing.T) {
	r, _ := newTestRuntime(t, Options{})
	m := compile(t, r, "snapreader.wasm", guest(t, "snapreader"))
	fx := newFakeEffects(model("a", sdk.StateReady), model("b", sdk.StateReady), model("c", sdk.StateStopped))
	s, err := r.NewSwapper(context.Background(), m, nil, fx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	steps := []struct {
		name   string
		change func()
		target string
		want   string // the guest's log line; "" for a crash
	}{
		{"first read is whole", nil, "x", "changed=[0 1 2] all=true models=3"},
		{"nothing changed", nil, "x", "changed=[] all=false models=3"},
		{"one field", func() { fx.models[1].LastUse = 99 }, "x", "changed=[1] all=false models=3"},
		{"two models", func() { fx.models[0].InFlight, fx.models[2].State = 1, sdk.StateStarting }, "x", "changed=[0 2] all=false models=3"},
		{"devices and leases", func() { fx.models[2].Devices, fx.models[2].Leased = []int32{0, 1}, []uint64{1, 2} }, "x", "changed=[2] all=false models=3"},
		{"GPUs only", func() { fx.gpus[0].Free -= 1 << 30 }, "x", "changed=[] all=false models=3"},
		{"a model removed by a reload", func() { fx.models = slices.Delete(fx.models, 0, 1) }, "x", "changed=[0 1] all=false models=2"},
		{"a model added at the end", func() { fx.models = append(fx.models, model("d", sdk.StateStopped)) }, "x", "changed=[2] all=false models=3"},
		{"a model added first", func() { fx.models = slices.Insert(fx.models, 0, model("0", sdk.StateStopped)) }, "x", "changed=[0 1 2 3] all=false models=4"},
		{"every model removed", func() { fx.models = fx.models[:0] }, "x", "changed=[] all=false models=0"},
		{"models back", func() { fx.models = append(fx.models, model("a", sdk.StateReady)) }, "x", "changed=[0] all=false models=1"},
		{"the guest dropped its snapshot", nil, "reset", "changed=[0] all=true models=1"},
		{"a second storage", nil, "other", "changed=[0] all=true models=1"},
		{"back to the first: whole again", nil, "x", "changed=[0] all=true models=1"},
		{"and deltas again", func() { fx.models[0].Pinned = true }, "x", "changed=[0] all=false models=1"},
		{"a crash", nil, "panic", ""},
		{"the new instance reads whole", nil, "x", "changed=[0] all=true models=1"},
	}
	for _, st := range steps {
		if st.change != nil {
			st.change()
		}
		fx.logs = fx.logs[:0]
		_, err := s.Plan(sdk.PlanRequest{Target: st.target})
		if st.want == "" {
			if err == nil {
				t.Fatalf("%s: the plan did not fail", st.name)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got := strings.Join(fx.logs, "|"); got != "INFO: "+st.want {
			t.Errorf("%s: the guest logged %q, want %q", st.name, got, st.want)
		}
	}
}

// TestSentSnapshot_Retry: a reply that does not fit is not recorded as
// sent, so the guest's retry with a larger buffer gets the same delta; one
// that was written is, so the next has only what changed after it.
func TestSentSnapshot_Retry(t *testing.T) {
	snap := &sdk.Snapshot{Now: 1, Models: []sdk.ModelInfo{model("a", sdk.StateReady), model("b", sdk.StateStopped)},
		GPUs: []sdk.GPUInfo{{Index: 0, Total: 8}}}
	var s sentSnapshot
	d := s.diff(snap, 0)
	if d.Base != 0 || d.Gen != 1 || !slices.Equal(d.Changed, []uint32{0, 1}) || !d.GPUsChanged {
		t.Fatalf("first reply = %+v", d)
	}
	first := wire.Append(nil, d)
	// Not written (too large): the same again.
	if again := wire.Append(nil, s.diff(snap, 0)); string(again) != string(first) {
		t.Fatal("a reply not written changed the next one")
	}
	s.commit(snap)
	snap.Models[0].Devices[0] = 3 // the host's storage changes under what was sent
	d = s.diff(snap, 1)
	if d.Base != 1 || d.Gen != 2 || !slices.Equal(d.Changed, []uint32{0}) || d.GPUsChanged {
		t.Fatalf("a delta = %+v; want model 0 only, against generation 1", d)
	}
	if d = s.diff(snap, 7); d.Base != 0 || len(d.Changed) != 2 {
		t.Fatalf("a stale base: %+v; want the whole snapshot", d)
	}
	var got sdk.SnapshotDelta
	if err := wire.Decode(wire.Append(nil, d), &got); err != nil || got.Total != 2 || len(got.Models) != 2 {
		t.Fatalf("decoded %+v, %v", got, err)
	}
}
