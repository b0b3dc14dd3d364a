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
	runPos  []int          // by running position: snapshot position (all of them unless missing)
	inCands []bool         // by snapshot position: has an entry in cands
	pending []int          // snapshot positions changed since the list was last updated
	victim  Victim         // the one being inserted
	// rerun's scratch: runPos to be, and whether each name was paired
	// with the last running set's.
	runPosNew []int
	paired    []bool
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
// q's running set, updated from the last plan's list when it was made for
// the same model list and GPUs, rebuilt otherwise. An update takes out
// the entries of the models that changed and puts back those that still
// qualify; for a new running set it first works out every model's
// running position again (rerun), and for another target or rule it asks
// every running model whether it qualifies (a cheap test, where placing
// each candidate anew cost several Order calls): on a box that swaps a
// model for another on every plan, neither the target nor the running
// set is ever the last plan's.
func (p *Planner) rank(q sdk.PlanRequest, r *Rule) {
	rk := &p.rk
	if !rk.valid || p.Volatile || rk.missing || rk.models != first(p.snap.Models) || rk.n != len(p.snap.Models) || !p.sameGPUs() ||
		(!bytewise.Strings(rk.running, q.Running) && !p.rerun(q)) {
		p.rebuild(q, r)
		return
	}
	// Out first, every entry whose model changed: it sits where its old
	// fields put it, and a binary search that met it could misplace
	// another.
	for _, pos := range rk.pending {
		if pos >= len(p.snap.Models) {
			p.rebuild(q, r)
			return
		}
		if j := rk.runOf[pos]; j >= 0 && p.snap.Models[pos].Name != q.Running[j] { // a running name moved
			p.rebuild(q, r)
			return
		}
		if rk.inCands[pos] {
			p.drop(pos)
		}
	}
	if rk.rule != r || !rk.target.Equal(&p.target) {
		// Another target or rule: which models qualify may differ.
		kept := p.cands[:0]
		for _, c := range p.cands {
			if p.qualifies(c.Model, r) {
				kept = append(kept, c)
			} else {
				rk.inCands[p.snapPos(c.Model)] = false
			}
		}
		clear(p.cands[len(kept):])
		p.cands = kept
		for j, pos := range rk.runPos {
			if !rk.inCands[pos] {
				p.consider(&p.snap.Models[pos], pos, j, r)
			}
		}
	}
	for _, pos := range rk.pending {
		if j := rk.runOf[pos]; j >= 0 && !rk.inCands[pos] {
			p.consider(&p.snap.Models[pos], pos, j, r)
		}
	}
	p.remember(q, r)
}

// rerun brings the list to q's running set, when the last plan's was
// another: every model's running position again (runOf, runPos), each
// candidate's, and the models that joined or left the set pending. The
// two sets are merged by name, the kept names by their string headers
// (the SDK interns them): a swap changes a name or two. The names the
// merge pairs keep their order, so the candidates it keeps stay in order
// (ties go by running position); any other name is pending, to be put
// back in its place. False when the snapshot lacks a name, or q names
// one twice.
func (p *Planner) rerun(q sdk.PlanRequest) bool {
	rk, snap := &p.rk, &p.snap
	old, oldPos := rk.running, rk.runPos
	rk.runPosNew, rk.paired = rk.runPosNew[:0], rk.paired[:0]
	i, next := 0, 0
	for _, name := range q.Running {
		pos, paired := -1, false
		for i < len(old) {
			if o := old[i]; bytewise.SameString(o, name) || o == name {
				pos, paired = oldPos[i], true
				i++
				break
			} else if name < o {
				break
			}
			i++ // it left the set (or q is not sorted: then name is pending)
		}
		if !paired {
			m := Find(snap.Models, name, &next)
			if m == nil {
				return false
			}
			pos = p.snapPos(m)
		}
		rk.runPosNew, rk.paired = append(rk.runPosNew, pos), append(rk.paired, paired)
	}
	for _, pos := range oldPos {
		rk.runOf[pos] = -1
	}
	for j, pos := range rk.runPosNew {
		if rk.runOf[pos] != -1 {
			return false // named twice
		}
		rk.runOf[pos] = j
		if !rk.paired[j] {
			rk.pending = append(rk.pending, pos)
		}
	}
	for _, pos := range oldPos {
		if rk.runOf[pos] == -1 {
			rk.pending = append(rk.pending, pos)
		}
	}
	rk.runPos, rk.runPosNew = rk.runPosNew, rk.runPos
	for i := range p.cands {
		c := &p.cands[i]
		c.Running = rk.runOf[p.snapPos(c.Model)]
	}
	return true
}

// drop takes the entry of the model at snapshot position pos out of
// p.cands.
func (p *Planner) drop(pos int) {
	m := &p.snap.Models[pos]
	for i := range p.cands {
		if p.cands[i].Model == m {
			p.cands = slices.Delete(p.cands, i, i+1)
			break
		}
	}
	p.rk.inCands[pos] = false
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
	rk.runPos = rk.runPos[:0]
	next := 0
	for j, name := range q.Running { // (q.Running never holds the target)
		m := Find(snap.Models, name, &next)
		if m == nil {
			rk.missing = true
			continue
		}
		pos := p.snapPos(m)
		rk.runOf[pos] = j
		rk.runPos = append(rk.runPos, pos)
		p.consider(m, pos, j, r)
	}
	p.remember(q, r)
	rk.valid = true
}

// remember records what p.cands was made for: the target, rule, running
// set, model list and GPUs of this plan.
func (p *Planner) remember(q sdk.PlanRequest, r *Rule) {
	rk, snap := &p.rk, &p.snap
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
}

// qualifies reports whether the running model m may go: eligible, not
// pinned, not a replica of the target's own model (r.Apart: evicting one
// replica to load another gains nothing), and freeing memory on a GPU r
// allows.
func (p *Planner) qualifies(m *sdk.ModelInfo, r *Rule) bool {
	return !m.Pinned && (p.Eligible == nil || p.Eligible(&p.target, m)) && !slices.Contains(r.Apart, m.Name) &&
		victimVRAM(m) != 0 && p.occupies(m.Devices, r)
}

// victimVRAM is what evicting m gives back: its lease, exactly, when it
// has one; else its VRAM figure.
func victimVRAM(m *sdk.ModelInfo) uint64 {
	if len(m.Leased) == len(m.Devices) && len(m.Leased) > 0 {
		var v uint64
		for _, b := range m.Leased {
			v += b
		}
		return v
	}
	return VRAM(m)
}

// consider inserts the running model m (at snapshot position pos, running
// position j) into p.cands at its place if it qualifies.
func (p *Planner) consider(m *sdk.ModelInfo, pos, j int, r *Rule) {
	if !p.qualifies(m, r) {
		return
	}
	c := &p.rk.victim // the planner's: a local would escape to Order
	*c = Victim{Model: m, Running: j, Class: ClassOf(m), VRAM: victimVRAM(m)}
	// What credit gives back, worked out once for a model on one GPU (or
	// none, on a one-GPU box: occupies said so): credit's own rule.
	switch {
	case len(m.Devices) == 0:
		c.on1, c.bytes = 1, c.VRAM
	case len(m.Devices) == 1:
		if i := p.position(m.Devices[0]); i >= 0 {
			c.on1, c.bytes = i+1, c.VRAM // its lease on the one device, or all of its VRAM
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
