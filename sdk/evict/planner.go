package evict

import (
	"errors"
	"slices"
	"strconv"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/internal/bytewise"
	"github.com/loadout-dev/loadout/sdk/placement"
	sdksettings "github.com/loadout-dev/loadout/sdk/settings"
)

// Class says what evicting a running model costs now; every order a
// policy gives should put the classes in this order first.
type Class int

// Victim classes, cheapest first.
const (
	Stopping Class = iota // stopping already: evicting it costs nothing
	Idle                  // ready, no request in flight: evicted at once
	Busy                  // serving, or starting: the scheduler waits until it is idle
)

// Victim is a running model a plan may evict.
type Victim struct {
	Model   *sdk.ModelInfo // the snapshot's entry, valid during the plan
	Running int            // position in the plan request's running set (sorted by name)
	Class   Class
	VRAM    uint64 // bytes it gives back: its lease, else measured, else estimated
	chosen  bool
	// For a victim on one GPU (or none, on a one-GPU box): 1 + that GPU's
	// position in the snapshot and the bytes credit gives back there; 0
	// otherwise (credit then works them out from Model).
	on1   int
	bytes uint64
}

// NotHigherPriority is the Eligible of prioritylru and every router after
// it (adaptive, foresight, s3fifo, sieve, gdsf): a model of higher priority than
// the target is never evicted; equal priorities may evict each other.
// sdk/evict never evicts a pinned one whatever Eligible says.
func NotHigherPriority(target, m *sdk.ModelInfo) bool { return m.Priority <= target.Priority }

// Planner makes the plans of a VRAM-aware router. The zero value with
// Eligible and Order set is ready; its scratch space is reused, so it is
// not safe for concurrent use (a policy has one, on the run loop).
type Planner struct {
	// Policy names the policy in errors ("prioritylru: unknown model").
	Policy string
	// Margin is the bytes left free on every GPU the target uses, beyond
	// its VRAM figure.
	Margin uint64
	// Eligible reports whether the running model m may be evicted at all
	// to load target. nil: any model but a pinned one. It must depend on
	// target's and m's fields only: the planner keeps its answers between
	// plans while neither changed (ranking.go).
	Eligible func(target, m *sdk.ModelInfo) bool
	// Order is the eviction order, like cmp.Compare: negative when a goes
	// first. It should order by Class first (stopping, idle, busy): a
	// busy victim makes the scheduler wait. Ties it leaves are broken by
	// the running set's order (by name). It must be a consistent order
	// (a strict weak order, as for slices.SortStableFunc) of a's and b's
	// fields only: the planner keeps the candidates sorted between plans
	// and inserts a changed one by binary search.
	Order func(a, b *Victim) int
	// Volatile says that Order reads more than its arguments' fields
	// (figures the policy refreshes before each plan, such as a
	// cost-aware router's values from sdk.ReadDemand): the planner then
	// sorts the candidates afresh for every plan instead of keeping them
	// between plans. Order must still be a consistent order within a plan.
	Volatile bool
	// Kept says, in the error of a model that does not fit, which models
	// Eligible keeps ("pinned and higher-priority models are never
	// evicted").
	Kept string
	// Mode says how victim v is evicted to load target (ABI version 3):
	// the plan's Modes, one per Evict. nil: the plan has no Modes, and the
	// host evicts every victim as the model's evict: setting says
	// (sdk.EvictDefault) — a planner that does not ask changes nothing. A
	// victim is a running model, so a sleep mode is one the host may carry
	// out (docs/ABI.md, "Eviction modes").
	Mode func(target *sdk.ModelInfo, v *Victim) sdk.EvictMode
	// SleepOrder, when set (and Mode is not), fills the sleep tier (ABI
	// version 3, sleep.go): the plan's victims that can sleep and the
	// models asleep now compete for host memory, a before b when
	// SleepOrder(a, b) < 0 (the one likelier to be asked for again, or
	// whose wake saves more, first); a victim left out is stopped, a
	// sleeper left out is added to Evict and stopped. nil: the host
	// decides (sdk.EvictDefault).
	SleepOrder func(a, b *sdk.ModelInfo) int

	target  sdk.ModelInfo      // the model being planned for
	snap    sdk.Snapshot       // the plan's snapshot, read into the same storage each time
	gpus    []sdk.GPUInfo      // the snapshot's GPUs
	free    []uint64           // by GPU position: free bytes once the chosen victims are gone
	total   uint64             // the sum of free's usable bytes (beyond the margin)
	huge    bool               // a free figure so large that total could overflow
	cands   []Victim           // running models that may be evicted, in eviction order (kept between plans)
	placer  placement.Placer   // place's scratch
	devices []placement.Device // place's input: the GPUs with free
	chosen  []int              // the victims' positions in the running set, ascending
	evict   []string           // the plan's Evict
	modes   []sdk.EvictMode    // the plan's Modes, when Mode or SleepOrder is set
	devs    []int32            // the plan's Devices
	fitDevs []int32            // the devices of the last placement that fitted
	rk      ranking            // what p.cands was built from (ranking.go)
}

// VRAM is a model's footprint in bytes: measured when known, else
// estimated (the config's vram:, the backend's estimate, a file-size
// heuristic); 0 when the host has no figure.
func VRAM(m *sdk.ModelInfo) uint64 {
	if m.MeasuredVRAM > 0 {
		return m.MeasuredVRAM
	}
	return m.EstimatedVRAM
}

// ClassOf is the class of a running model.
func ClassOf(m *sdk.ModelInfo) Class {
	switch {
	case m.State == sdk.StateStopping:
		return Stopping
	case m.State == sdk.StateReady && m.InFlight == 0:
		return Idle
	}
	return Busy
}

// Plan decides what must stop before q.Target loads, and where it goes
// under r (rules.For(q.Target)):
//
//  1. a model already loaded or loading, one with no VRAM figure (the host
//     places it), or any model on a box with no GPU needs nothing;
//  2. a model that fits as things are evicts nothing and goes where
//     sdk/placement puts it;
//  3. otherwise the Eligible running models that hold memory on a GPU r
//     allows are evicted in Order until it fits, then every victim whose
//     memory turned out not to be needed is kept back, the last in Order
//     first, so the fewest models stop;
//  4. a model that does not fit even with all of them gone fails with an
//     error that says how much could be freed at most.
//
// Evict lists the victims in the order of q.Running. The returned slices
// are the planner's own, valid until its next Plan (the SDK encodes them
// at once).
func (p *Planner) Plan(h sdk.Host, q sdk.PlanRequest, r *Rule) (sdk.Plan, error) {
	// One small read first: a model that is loaded or loading already has
	// its memory (the common case: a scheduler plans on every request), and
	// one with no VRAM figure is placed by the host. Only then the
	// snapshot, every model and GPU, which costs ten times as much in Wasm.
	var ok bool
	p.target, ok = h.ModelState(q.Target)
	t := &p.target // the planner's: a local would escape to Eligible
	if !ok {
		return sdk.Plan{}, errors.New(p.Policy + ": unknown model " + strconv.Quote(q.Target))
	}
	need := VRAM(t)
	if t.State == sdk.StateReady || t.State == sdk.StateStarting || need == 0 {
		return sdk.Plan{}, nil
	}
	p.readSnapshot(h) // into p.snap's storage: through Wasm, only what changed
	snap := &p.snap
	if len(snap.GPUs) == 0 { // no GPU to account: the host places it
		return sdk.Plan{}, nil
	}
	p.gpus = snap.GPUs
	if t.Asleep() && len(t.Devices) > 0 {
		// A sleeping server wakes only on the GPUs it was started on
		// (ABI version 3: an asleep model's Devices); elsewhere the host
		// cold-loads it. So there first, if it fits with evictions.
		if sr := sleeperRule(r, t.Devices); sr != nil {
			if plan, err := p.planUnder(q, need, sr); err == nil {
				return plan, nil
			}
		}
	}
	return p.planUnder(q, need, r)
}

// sleeperRule is r narrowed to the GPUs devices an asleep model's server
// holds: only those, and all of them when there are several; nil when r
// allows none of them.
func sleeperRule(r *Rule, devices []int32) *Rule {
	n := new(Rule) // a new pointer: the ranking keys its candidates by rule (ranking.go)
	*n = *r
	n.GPUs = nil
	for _, d := range devices {
		if r.Allows(d) {
			n.GPUs = append(n.GPUs, d)
		}
	}
	if len(n.GPUs) == 0 {
		return nil
	}
	n.Filters = append(slices.Clip(r.Filters), placement.Allowed(n.GPUs))
	if len(n.GPUs) > 1 {
		n.Split = placement.SplitAlways
	}
	return n
}

// planUnder is Plan's steps 2 to 4 for q.Target, of need bytes, under r,
// from the snapshot as read.
func (p *Planner) planUnder(q sdk.PlanRequest, need uint64, r *Rule) (sdk.Plan, error) {
	t := &p.target
	p.free = p.free[:0]
	p.total, p.huge = 0, false
	for i, g := range p.gpus {
		p.free = append(p.free, g.Free)
		p.total += p.usable(i)
		p.huge = p.huge || g.Free >= hugeFree
	}
	if p.placeApart(need, r) || p.fits(need, r) {
		return sdk.Plan{Devices: p.devs}, nil
	}
	// Who may go, in order: the running, eligible models that free
	// something on a GPU the target may use (ranking.go keeps the list
	// between plans and updates only what changed).
	p.rank(q, r)
	// Evict in order until the target fits ...
	fits, k := false, 0
	for ; k < len(p.cands); k++ {
		p.credit(&p.cands[k], true)
		if fits = p.fits(need, r); fits {
			p.fitDevs = append(p.fitDevs[:0], p.devs...)
			break
		}
	}
	if !fits {
		return sdk.Plan{}, p.cannotFit(t, need, r)
	}
	// ... then keep back, the last in order first, every victim whose
	// memory turned out not to be needed: the fewest evictions. (Victims
	// past k were not credited in this plan.)
	for i := k; i >= 0; i-- {
		c := &p.cands[i]
		if !c.chosen || !p.fitsWithout(c, need) {
			continue
		}
		p.credit(c, false)
		if p.fits(need, r) {
			p.fitDevs = append(p.fitDevs[:0], p.devs...)
		} else {
			p.credit(c, true)
		}
	}
	// The final placement: the last that fitted, made for exactly the
	// memory the chosen victims now free (a victim kept back that did not
	// fit was credited again, back to that state).
	p.devs = append(p.devs[:0], p.fitDevs...)
	// Evict in the order of q.Running (sorted by name): the victims'
	// positions in it, sorted (a handful).
	p.chosen, p.evict = p.chosen[:0], p.evict[:0]
	for i := 0; i <= k; i++ {
		c := &p.cands[i]
		if !c.chosen {
			continue
		}
		j := len(p.chosen)
		p.chosen, p.evict = append(p.chosen, 0), append(p.evict, "")
		for ; j > 0 && p.chosen[j-1] > c.Running; j-- {
			p.chosen[j], p.evict[j] = p.chosen[j-1], p.evict[j-1]
		}
		p.chosen[j], p.evict[j] = c.Running, q.Running[c.Running]
	}
	if p.Mode == nil && p.SleepOrder != nil {
		return sdk.Plan{Evict: p.evict, Devices: p.devs, Modes: p.sleepTier()}, nil
	}
	return sdk.Plan{Evict: p.evict, Devices: p.devs, Modes: p.victimModes(t, k)}, nil
}

// victimModes is the plan's Modes, parallel to p.evict, for the chosen
// victims among p.cands[:k+1]: nil when the planner has no Mode.
func (p *Planner) victimModes(t *sdk.ModelInfo, k int) []sdk.EvictMode {
	if p.Mode == nil {
		return nil
	}
	p.modes = p.modes[:0]
	for range p.chosen {
		p.modes = append(p.modes, sdk.EvictDefault)
	}
	for i := 0; i <= k; i++ {
		if c := &p.cands[i]; c.chosen {
			p.modes[slices.Index(p.chosen, c.Running)] = p.Mode(t, c)
		}
	}
	return p.modes
}

// Find returns the entry of models named name, or nil. The host sends the
// snapshot and the running set both sorted by name, so a search starts
// where the previous one ended (*next) and halves the rest of the list
// (a walk through it cost a call per model in Wasm: a log line's lookup
// of a swap's target walked half the snapshot); it falls back to walking
// the whole list when that finds nothing (a list not sorted, or a name
// not in it). The SDK interns decoded names, so a match is first tried as
// the same string header, which costs no call in Wasm.
func Find(models []sdk.ModelInfo, name string, next *int) *sdk.ModelInfo {
	if k := search(len(models), func(i int) string { return models[i].Name }, name, next); k >= 0 {
		return &models[k]
	}
	return nil
}

// search is Find's search over a list of n entries sorted by name, nameAt
// giving entry i's: the index of the one named name, or -1.
func search(n int, nameAt func(int) string, name string, next *int) int {
	if k := *next; k < n && bytewise.SameString(nameAt(k), name) {
		*next = k + 1 // where it was last, or the one after the last found
		return k
	}
	// Names are unique: the first entry from *next on not before name is
	// the one, if any is.
	lo, hi := *next, n
	for hi-lo > 4 {
		mid := int(uint(lo+hi) >> 1)
		if m := nameAt(mid); !bytewise.SameString(m, name) && m < name {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	for k := lo; k < n && k < hi+1; k++ {
		if m := nameAt(k); bytewise.SameString(m, name) || m == name {
			*next = k + 1
			return k
		}
	}
	for k := *next; k < n; k++ {
		if m := nameAt(k); bytewise.SameString(m, name) || m == name {
			*next = k + 1
			return k
		}
	}
	for k := 0; k < *next && k < n; k++ {
		if m := nameAt(k); bytewise.SameString(m, name) || m == name {
			return k
		}
	}
	return -1
}

// Place reports whether need bytes fit on devices (free memory by GPU)
// under r and the planner's margin, and where: sdk/placement's rule, as
// Plan applies it. The returned slice is the planner's own, valid until
// its next call.
func (p *Planner) Place(need uint64, devices []placement.Device, r *Rule) ([]int32, bool) {
	var fits bool
	p.devs, fits = p.placer.Place(p.devs, need, devices, p.Margin, r.Rule)
	return p.devs, fits
}

// fits reports whether need bytes fit given p.free, as place does, without
// placing when it cannot: false at once when the usable memory of every
// GPU together (p.total) is short of need — then no placement can hold it
// (a single device's share is part of the sum, a split's the sum of
// fewer; r's filters only take devices away) — and place's answer
// otherwise. The evict loops ask it after every credit; in Wasm a
// placement costs dozens of jumps.
func (p *Planner) fits(need uint64, r *Rule) bool {
	return (p.huge || p.total >= need) && p.place(need, r)
}

// fitsWithout is false when need cannot fit once the chosen victim c is
// kept back: fits' shortcut worked out before taking c's memory back, so
// that a victim that is plainly needed costs nothing to keep. True when it
// cannot tell (then credit and fits decide).
func (p *Planner) fitsWithout(c *Victim, need uint64) bool {
	if p.huge || c.on1 == 0 {
		return true
	}
	free := p.free[c.on1-1]
	return p.total-placement.Usable(placement.Device{Free: free}, p.Margin)+
		placement.Usable(placement.Device{Free: free - c.bytes}, p.Margin) >= need
}

// hugeFree is a GPU's free memory past which p.total could overflow; a
// snapshot with one turns fits' shortcut off.
const hugeFree = 1 << 56

// place decides where need bytes go given p.free and writes the devices
// to p.devs; it reports whether it fits.
func (p *Planner) place(need uint64, r *Rule) bool {
	p.devices = p.devices[:0]
	for i, g := range p.gpus {
		p.devices = append(p.devices, placement.Device{Index: g.Index, Free: p.free[i]})
	}
	_, fits := p.Place(need, p.devices, r)
	return fits
}

// position returns the position in p.gpus of the GPU with index, or -1.
func (p *Planner) position(index int32) int {
	for i := range p.gpus {
		if p.gpus[i].Index == index {
			return i
		}
	}
	return -1
}

// occupies reports whether a model on devices holds memory on a GPU of the
// snapshot that r allows. A model with no devices on a one-GPU box is on
// that GPU.
func (p *Planner) occupies(devices []int32, r *Rule) bool {
	if len(devices) == 0 {
		return len(p.gpus) == 1 && r.Allows(p.gpus[0].Index)
	}
	for _, d := range devices {
		if p.position(d) >= 0 && r.Allows(d) {
			return true
		}
	}
	return false
}

// credit adds (or, with add false, takes back) a victim's memory to the
// free memory of its GPUs and marks it chosen (or not): the bytes its lease
// holds on each device, as the host's ledger will credit them, so a plan
// that fits here fits when the host leases it. Without a lease (no GPU
// accounting) a model split over several GPUs is counted as split evenly.
func (p *Planner) credit(c *Victim, add bool) {
	c.chosen = add
	if c.on1 == 0 {
		p.creditEach(c, add)
		return
	}
	// One GPU: adjust, written out small enough to inline (the evict
	// loops' path); a take-back adds the bytes' two's complement.
	b := c.bytes
	if !add {
		b = -b
	}
	i := c.on1 - 1
	before := p.free[i]
	p.free[i] = before + b
	p.total += placement.Usable(placement.Device{Free: before + b}, p.Margin) - placement.Usable(placement.Device{Free: before}, p.Margin)
	p.huge = p.huge || before+b >= hugeFree
}

// creditEach is credit for a victim on several GPUs (or on an unknown
// one): device by device.
func (p *Planner) creditEach(c *Victim, add bool) {
	m := c.Model
	if len(m.Leased) == len(m.Devices) && len(m.Leased) > 0 {
		for j, d := range m.Devices {
			if i := p.position(d); i >= 0 {
				p.adjust(i, m.Leased[j], add)
			}
		}
		return
	}
	if len(m.Devices) == 0 {
		p.adjust(0, c.VRAM, add)
		return
	}
	n := uint64(len(m.Devices))
	for j, d := range m.Devices {
		share := c.VRAM / n
		if uint64(j) < c.VRAM%n {
			share++
		}
		if i := p.position(d); i >= 0 {
			p.adjust(i, share, add)
		}
	}
}

// adjust adds b bytes to GPU i's free memory, or takes them back, and
// keeps p.total, the sum of every GPU's usable memory, in step.
func (p *Planner) adjust(i int, b uint64, add bool) {
	p.total -= p.usable(i)
	if add {
		p.free[i] += b
	} else {
		p.free[i] -= b
	}
	p.total += p.usable(i)
	p.huge = p.huge || p.free[i] >= hugeFree
}

// usable is GPU i's free memory beyond the margin, in bytes.
func (p *Planner) usable(i int) uint64 {
	return placement.Usable(placement.Device{Free: p.free[i]}, p.Margin)
}

// cannotFit is the error for a target that does not fit even with every
// model it may evict gone (serving ones included: they would go once
// idle); p.free has them all credited. Under a placement constraint the
// figure is what the constraint allows: the GPUs it lists, one of them
// under split: never.
func (p *Planner) cannotFit(target *sdk.ModelInfo, need uint64, r *Rule) error {
	var best, one uint64
	n := 0
	for i := range p.free {
		if !r.Allows(p.gpus[i].Index) {
			continue
		}
		n++
		best += p.usable(i)
		one = max(one, p.usable(i))
	}
	under := ""
	switch {
	case r.Split == placement.SplitNever:
		best, under = one, ", split: never"
	case r.Split == placement.SplitAlways:
		under = ", split: always"
	}
	if len(r.GPUs) > 0 {
		under = ", gpus: " + placement.FormatDevices(r.GPUs) + under
	}
	gpus := "GPUs"
	if n == 1 {
		gpus = "GPU"
	}
	kept := "pinned models are never evicted"
	if p.Kept != "" {
		kept = p.Kept
	}
	return errors.New("model " + target.Name + " needs " + sdksettings.FormatSize(need, " ") +
		"; at most " + sdksettings.FormatSize(best, " ") + " can be freed on any placement (" +
		strconv.Itoa(n) + " " + gpus + under + ", margin " + sdksettings.FormatSize(p.Margin, " ") + " each; " + kept + ")")
}

// Snapshot is the snapshot the planner's last plan read, in its own
// storage (valid until its next plan); empty when no plan has read one (a
// target already loaded, or one with no VRAM figure, needs none). A
// swapper's OnSwapStart, which follows its plan in the same event, can
// read it instead of decoding the host's snapshot again.
func (p *Planner) Snapshot() *sdk.Snapshot { return &p.snap }

// Models is the models of the snapshot the planner's last plan read
// (Snapshot), or h's whole snapshot when no plan has read one: what a
// swapper's OnSwapStart reads its swap's candidates from.
func (p *Planner) Models(h sdk.Host) []sdk.ModelInfo {
	if len(p.snap.Models) > 0 {
		return p.snap.Models
	}
	return h.Snapshot().Models
}
