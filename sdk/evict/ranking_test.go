package evict

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/placement"
)

// changesHost is a Host with snapshot deltas, as the SDK's Wasm glue has
// them: SnapshotChangesInto writes into dst only the models that differ
// from what it last wrote there, in place, and says which.
type changesHost struct {
	snap    sdk.Snapshot
	last    *sdk.Snapshot
	sent    sdk.Snapshot
	partial int // reads that were deltas
}

func cloneModel(m sdk.ModelInfo) sdk.ModelInfo {
	m.Devices, m.Leased = slices.Clone(m.Devices), slices.Clone(m.Leased)
	return m
}

func cloneSnap(s sdk.Snapshot) sdk.Snapshot {
	c := sdk.Snapshot{Now: s.Now, GPUs: slices.Clone(s.GPUs)}
	for _, m := range s.Models {
		c.Models = append(c.Models, cloneModel(m))
	}
	return c
}

func (h *changesHost) Log(sdk.LogLevel, string) {}
func (h *changesHost) ModelState(name string) (sdk.ModelInfo, bool) {
	for _, m := range h.snap.Models {
		if m.Name == name {
			return cloneModel(m), true
		}
	}
	return sdk.ModelInfo{}, false
}
func (h *changesHost) RunningModels() []sdk.ModelInfo { return nil }
func (h *changesHost) Snapshot() sdk.Snapshot         { return cloneSnap(h.snap) }

func (h *changesHost) SnapshotChangesInto(dst *sdk.Snapshot, changed []int) ([]int, bool) {
	defer func() { h.last, h.sent = dst, cloneSnap(h.snap) }()
	if h.last != dst {
		*dst = cloneSnap(h.snap)
		return changed, true
	}
	h.partial++
	n := len(h.snap.Models)
	if cap(dst.Models) < n {
		dst.Models = append(dst.Models, make([]sdk.ModelInfo, n-len(dst.Models))...)
	}
	dst.Models = dst.Models[:n]
	for i, m := range h.snap.Models {
		if i >= len(h.sent.Models) || !reflect.DeepEqual(m, h.sent.Models[i]) {
			dst.Models[i] = cloneModel(m)
			changed = append(changed, i)
		}
	}
	dst.Now, dst.GPUs = h.snap.Now, slices.Clone(h.snap.GPUs)
	return changed, false
}

// A planner that keeps its ranking between plans, fed snapshot deltas,
// makes exactly the plans (and errors) that Plan made before it kept one
// (referencePlan, fed whole snapshots), through random changes to every
// field a ranking reads, the running set (sorted by name, or not), the
// target, the GPUs and the model list, with many ties in the order.
func TestRanking_SameAsBefore(t *testing.T) {
	order := func(a, b *Victim) int {
		if c := cmp.Compare(a.Class, b.Class); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Model.Priority, b.Model.Priority); c != 0 {
			return c
		}
		return cmp.Compare(a.Model.LastUse, b.Model.LastUse)
	}
	eligible := func(target, m *sdk.ModelInfo) bool { return m.Priority <= target.Priority }
	rng := rand.New(rand.NewPCG(1, 2))
	shuffle := rand.New(rand.NewPCG(3, 4)) // apart, so that rng's draws are as before
	h := &changesHost{}
	for d := range 2 {
		h.snap.GPUs = append(h.snap.GPUs, sdk.GPUInfo{Index: int32(d), Total: 80 * gib})
	}
	name := func(i int) string { return fmt.Sprintf("m%03d", i) }
	randomModel := func(i int) sdk.ModelInfo {
		m := sdk.ModelInfo{Name: name(i), Priority: int32(rng.IntN(3)), LastUse: int64(rng.IntN(4)), EstimatedVRAM: uint64(4+rng.IntN(16)) * gib}
		if rng.IntN(3) > 0 {
			m.State = []sdk.ModelState{sdk.StateReady, sdk.StateReady, sdk.StateStarting, sdk.StateStopping}[rng.IntN(4)]
			d := int32(rng.IntN(2))
			m.Devices = []int32{d}
			if rng.IntN(4) == 0 {
				m.Devices = []int32{0, 1}
			}
			if rng.IntN(2) == 0 {
				for range m.Devices {
					m.Leased = append(m.Leased, m.EstimatedVRAM/uint64(len(m.Devices)))
				}
			}
			m.InFlight = uint32(rng.IntN(2))
			m.Pinned = rng.IntN(8) == 0
		}
		return m
	}
	next := 0
	for range 24 {
		h.snap.Models = append(h.snap.Models, randomModel(next))
		next++
	}
	refresh := func() { // the GPUs' free memory from the models that hold memory
		var used [2]uint64
		for _, m := range h.snap.Models {
			if m.State.Running() {
				for _, d := range m.Devices {
					used[d] += m.EstimatedVRAM / uint64(len(m.Devices))
				}
			}
		}
		for d := range h.snap.GPUs {
			h.snap.GPUs[d].Leased = used[d]
			h.snap.GPUs[d].Free = h.snap.GPUs[d].Total - min(used[d], h.snap.GPUs[d].Total)
		}
	}
	kept := &Planner{Policy: "p", Margin: gib / 2, Eligible: eligible, Order: order}
	rs := NewRules(Placement{Pack: true, Models: map[string]Constraint{"on1": {GPUs: []int32{1}}, "whole": {Split: placement.SplitNever}}}, gib/2)
	rules := []*Rule{{}, rs.For("on1"), rs.For("whole"), rs.For("other")}
	target := name(0)
	hits, plans, evicting, errs := 0, 0, 0, 0
	for step := range 4000 {
		switch k := rng.IntN(20); {
		case k < 8: // a few fields of a few models
			for range 1 + rng.IntN(3) {
				m := &h.snap.Models[rng.IntN(len(h.snap.Models))]
				switch rng.IntN(6) {
				case 0:
					m.LastUse = int64(rng.IntN(4))
				case 1:
					m.InFlight = uint32(rng.IntN(2))
				case 2:
					m.Priority = int32(rng.IntN(3))
				case 3:
					m.Pinned = !m.Pinned
				case 4:
					n := m.Name
					*m = randomModel(0)
					m.Name = n
				case 5:
					m.MeasuredVRAM = uint64(rng.IntN(3)) * gib
				}
			}
		case k < 9: // a reload removes one
			if len(h.snap.Models) > 4 {
				i := rng.IntN(len(h.snap.Models))
				h.snap.Models = slices.Delete(h.snap.Models, i, i+1)
			}
		case k < 10: // a reload adds one
			h.snap.Models = append(h.snap.Models, randomModel(next))
			next++
		case k < 12: // another target
			target = h.snap.Models[rng.IntN(len(h.snap.Models))].Name
		}
		slices.SortFunc(h.snap.Models, func(a, b sdk.ModelInfo) int { return strings.Compare(a.Name, b.Name) })
		refresh()
		var running []string
		tm := -1
		for i, m := range h.snap.Models {
			if m.Name == target {
				tm = i
			} else if m.State.Running() {
				running = append(running, m.Name)
			}
		}
		if tm < 0 {
			target = h.snap.Models[0].Name
			continue
		}
		if shuffle.IntN(10) == 0 { // a host that does not sort the running set
			shuffle.Shuffle(len(running), func(i, j int) { running[i], running[j] = running[j], running[i] })
		}
		h.snap.Models[tm].State = sdk.StateStopped // plans that must place it
		h.snap.Models[tm].Devices, h.snap.Models[tm].Leased = nil, nil
		refresh()
		r := rules[step/500%len(rules)]
		q := sdk.PlanRequest{Now: int64(step), Target: target, Running: running}
		before := h.partial
		got, gotErr := kept.Plan(h, q, r)
		if h.partial > before && kept.rk.valid {
			hits++
		}
		plans++
		fresh := &Planner{Policy: "p", Margin: gib / 2, Eligible: eligible, Order: order}
		want, wantErr := referencePlan(fresh, leanHost{snap: cloneSnap(h.snap), t: cloneModel(h.snap.Models[tm])}, q, r)
		if len(want.Evict) > 0 {
			evicting++
		}
		if wantErr != nil {
			errs++
		}
		if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || !reflect.DeepEqual(got, want) &&
			!(len(got.Evict) == 0 && len(want.Evict) == 0 && slices.Equal(got.Devices, want.Devices)) {
			t.Fatalf("step %d, target %s: kept planner %+v, %v; fresh %+v, %v", step, target, got, gotErr, want, wantErr)
		}
	}
	if testing.Verbose() {
		t.Logf("%d plans, %d with a kept ranking and deltas, %d evicting, %d errors", plans, hits, evicting, errs)
	}
	if hits < plans/4 || evicting < plans/10 || errs == 0 {
		t.Fatalf("only %d of %d plans used deltas with a kept ranking: the test does not exercise updates", hits, plans)
	}
}

// referencePlan is Plan as it was before the ranking was kept between
// plans (a scan of the running set and an insertion sort on every plan):
// the oracle TestRanking_SameAsBefore holds today's Plan to.
func referencePlan(p *Planner, h sdk.Host, q sdk.PlanRequest, r *Rule) (sdk.Plan, error) {
	var ok bool
	p.target, ok = h.ModelState(q.Target)
	t := &p.target
	if !ok {
		return sdk.Plan{}, fmt.Errorf("%s: unknown model %q", p.Policy, q.Target)
	}
	need := VRAM(t)
	if t.State == sdk.StateReady || t.State == sdk.StateStarting || need == 0 {
		return sdk.Plan{}, nil
	}
	sdk.ReadSnapshot(h, &p.snap)
	snap := &p.snap
	if len(snap.GPUs) == 0 {
		return sdk.Plan{}, nil
	}
	p.gpus = snap.GPUs
	p.free = p.free[:0]
	for _, g := range p.gpus {
		p.free = append(p.free, g.Free)
	}
	if p.placeApart(need, r) || p.place(need, r) {
		return sdk.Plan{Devices: p.devs}, nil
	}
	var cands []Victim
	next := 0
	for j, name := range q.Running {
		m := Find(snap.Models, name, &next)
		if m == nil || m.Pinned || (p.Eligible != nil && !p.Eligible(t, m)) || slices.Contains(r.Apart, m.Name) {
			continue
		}
		v := VRAM(m)
		if len(m.Leased) == len(m.Devices) && len(m.Leased) > 0 {
			v = 0
			for _, b := range m.Leased {
				v += b
			}
		}
		if v == 0 || !p.occupies(m.Devices, r) {
			continue
		}
		cands = append(cands, Victim{Model: m, Running: j, Class: ClassOf(m), VRAM: v})
	}
	for i := 1; i < len(cands); i++ {
		for j := i; j > 0 && p.Order(&cands[j], &cands[j-1]) < 0; j-- {
			cands[j], cands[j-1] = cands[j-1], cands[j]
		}
	}
	fits := false
	for i := range cands {
		p.credit(&cands[i], true)
		if fits = p.place(need, r); fits {
			break
		}
	}
	if !fits {
		return sdk.Plan{}, p.cannotFit(t, need, r)
	}
	for i := len(cands) - 1; i >= 0; i-- {
		c := &cands[i]
		if !c.chosen {
			continue
		}
		p.credit(c, false)
		if !p.place(need, r) {
			p.credit(c, true)
		}
	}
	p.place(need, r)
	chosen := make([]bool, len(q.Running))
	for i := range cands {
		if cands[i].chosen {
			chosen[cands[i].Running] = true
		}
	}
	var evict []string
	for j, name := range q.Running {
		if chosen[j] {
			evict = append(evict, name)
		}
	}
	return sdk.Plan{Evict: evict, Devices: p.devs}, nil
}
