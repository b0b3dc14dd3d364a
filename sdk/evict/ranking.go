package evict

import (
	"slices"
	"unsafe"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/internal/bytewise"
)

// ranking is what the planner's candidate list (Planner.cands, the running
// models a plan may evict, in eviction order) was built from, so that the
// next plan for the same target, rule and running set updates only the
// candidates whose models changed instead of scanning and sorting every
// running model again. Through Wasm the SDK's snapshot deltas
// (sdk.ReadSnapshotChanges) say which models changed; a host without
// deltas reports every model changed, and the list is rebuilt each time,
// as before. Under the per-call deadline a Go guest pays for every call
// and loop iteration, so a plan of 100 models that changed nothing went
// from hundreds of Order calls to none (docs/BENCHMARKS.md).
//
// The list is the same either way: the candidates sorted by Order, ties by
// position in the running set. A rebuild inserts each candidate at its
// place by binary search, an update removes a changed model's entry and
// inserts it again if it still qualifies, so Order must be a consistent
// order of its arguments' fields (Planner.Order).
type ranking struct {
	valid   bool
	target  sdk.ModelInfo // the target it was built for; Devices and Leased its own
	rule    *Rule
	running []string       // the running set's headers (the SDK interns names)
	models  *sdk.ModelInfo // &snap.Models[0]: the Victims point into it
	n       int            // len(snap.Models)
	gpus    []int32        // the GPUs' indices (occupies)
	missing bool           // a running model was not in the snapshot
	runOf   []int          // by snapshot position: position in the running set, -1 if not running
	inCands []bool         // by snapshot position: has an entry in cands
	pending []int          // snapshot positions changed since the list was last updated
	victim  Victim         // the one being inserted
}

// readSnapshot reads the snapshot into p.snap and records what changed for
// the ranking: a whole read, or a change of the model list's length (a
// reload), drops the list.
func (p *Planner) readSnapshot(h sdk.Host) {
	rk := &p.rk
	n := len(p.snap.Models)
	var all bool
	rk.pending, all = sdk.ReadSnapshotChanges(h, &p.snap, rk.pending)
	if all || len(p.snap.Models) != n || len(rk.pending) > 2*len(p.snap.Models)+16 {
		rk.valid = false
		rk.pending = rk.pending[:0]
	}
}

// rank makes p.cands the candidates of a plan for p.target under r with
// q's running set: updated from the last plan's when it was for the same
// target, rule, running set, model list and GPUs, rebuilt otherwise.
func (p *Planner) rank(q sdk.PlanRequest, r *Rule) {
	rk := &p.rk
	if rk.valid && !p.Volatile && rk.rule == r && rk.models == first(p.snap.Models) && rk.n == len(p.snap.Models) &&
		bytewise.Strings(rk.running, q.Running) && rk.target.Equal(&p.target) && p.sameGPUs() {
		for _, pos := range rk.pending {
			if !p.update(q, r, pos) {
				p.rebuild(q, r)
				return
			}
		}
		rk.pending = rk.pending[:0]
		return
	}
	p.rebuild(q, r)
}

// rebuild makes p.cands from every running model.
func (p *Planner) rebuild(q sdk.PlanRequest, r *Rule) {
	rk, snap := &p.rk, &p.snap
	p.cands = p.cands[:0]
	rk.runOf = slices.Grow(rk.runOf[:0], len(snap.Models))[:len(snap.Models)]
	rk.inCands = slices.Grow(rk.inCands[:0], len(snap.Models))[:len(snap.Models)]
	for i := range rk.runOf {
		rk.runOf[i], rk.inCands[i] = -1, false
	}
	rk.missing = false
	next := 0
	for j, name := range q.Running { // (q.Running never holds the target)
		m := Find(snap.Models, name, &next)
		if m == nil {
			rk.missing = true
			continue
		}
		pos := p.snapPos(m)
		rk.runOf[pos] = j
		p.consider(m, pos, j, r)
	}
	t := &p.target
	devices, leased := rk.target.Devices[:0], rk.target.Leased[:0]
	rk.target = *t
	rk.target.Devices, rk.target.Leased = append(devices, t.Devices...), append(leased, t.Leased...)
	rk.rule = r
	rk.running = append(rk.running[:0], q.Running...)
	rk.models, rk.n = first(snap.Models), len(snap.Models)
	rk.gpus = rk.gpus[:0]
	for _, g := range p.gpus {
		rk.gpus = append(rk.gpus, g.Index)
	}
	rk.pending = rk.pending[:0]
	rk.valid = true
}

// update brings the entry of the model at snapshot position pos up to
// date; false when it cannot (a running name moved): then rebuild.
func (p *Planner) update(q sdk.PlanRequest, r *Rule, pos int) bool {
	rk := &p.rk
	if pos >= len(p.snap.Models) || rk.missing {
		return false
	}
	m := &p.snap.Models[pos]
	j := rk.runOf[pos]
	if j >= 0 && m.Name != q.Running[j] {
		return false
	}
	if rk.inCands[pos] {
		for i := range p.cands {
			if p.cands[i].Model == m {
				p.cands = slices.Delete(p.cands, i, i+1)
				break
			}
		}
		rk.inCands[pos] = false
	}
	if j >= 0 {
		p.consider(m, pos, j, r)
	}
	return true
}

// consider inserts the running model m (at snapshot position pos, running
// position j) into p.cands at its place if it may go: eligible, not
// pinned, not a replica of the target's own model (r.Apart: evicting one
// replica to load another gains nothing), and freeing memory on a GPU r
// allows.
func (p *Planner) consider(m *sdk.ModelInfo, pos, j int, r *Rule) {
	if m.Pinned || (p.Eligible != nil && !p.Eligible(&p.target, m)) || slices.Contains(r.Apart, m.Name) {
		return
	}
	v := VRAM(m)
	if len(m.Leased) == len(m.Devices) && len(m.Leased) > 0 {
		v = 0 // what the host will give back: its lease, exactly
		for _, b := range m.Leased {
			v += b
		}
	}
	if v == 0 || !p.occupies(m.Devices, r) {
		return
	}
	c := &p.rk.victim // the planner's: a local would escape to Order
	*c = Victim{Model: m, Running: j, Class: ClassOf(m), VRAM: v}
	// What credit gives back, worked out once for a model on one GPU (or
	// none, on a one-GPU box: occupies said so): credit's own rule.
	switch {
	case len(m.Devices) == 0:
		c.on1, c.bytes = 1, v
	case len(m.Devices) == 1:
		if i := p.position(m.Devices[0]); i >= 0 {
			c.on1, c.bytes = i+1, v // its lease on the one device, or all of its VRAM
		}
	}
	lo, hi := 0, len(p.cands)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if p.before(c, &p.cands[mid]) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	p.cands = slices.Insert(p.cands, lo, *c)
	p.rk.inCands[pos] = true
}

// before reports whether a goes before b: by Order, ties by position in
// the running set.
func (p *Planner) before(a, b *Victim) bool {
	if c := p.Order(a, b); c != 0 {
		return c < 0
	}
	return a.Running < b.Running
}

// snapPos is the position in p.snap.Models of m, an element of it.
func (p *Planner) snapPos(m *sdk.ModelInfo) int {
	return int((uintptr(unsafe.Pointer(m)) - uintptr(unsafe.Pointer(&p.snap.Models[0]))) / unsafe.Sizeof(*m))
}

// sameGPUs reports whether the snapshot's GPUs have the indices the list
// was built with.
func (p *Planner) sameGPUs() bool {
	if len(p.gpus) != len(p.rk.gpus) {
		return false
	}
	for i := range p.gpus {
		if p.gpus[i].Index != p.rk.gpus[i] {
			return false
		}
	}
	return true
}

func first[T any](l []T) *T {
	if len(l) == 0 {
		return nil
	}
	return &l[0]
}
