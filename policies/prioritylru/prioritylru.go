package main

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/placement"
	sdksettings "github.com/loadout-dev/loadout/sdk/settings"
)

// swapper is the prioritylru swapper. Plan reads the host's snapshot, so
// it does not claim sdk.PurePlanner. Its slices are scratch space reused by
// every Plan: in Go compiled to Wasm each allocation costs ~1.3 µs, and a
// plan is asked for on every request.
type swapper struct {
	h  sdk.Host
	st settings
	// defRule is the placement rule of a model with no constraint; rules
	// those of the models with one (gpus:, split:), by name.
	defRule rule
	rules   map[string]*rule

	snap    sdk.Snapshot       // Plan's snapshot, read into the same storage each time
	gpus    []sdk.GPUInfo      // the snapshot's GPUs
	free    []uint64           // by GPU position: free bytes once the chosen victims are gone
	cands   []victim           // running models that may be evicted, in eviction order
	placer  placement.Placer   // place's scratch
	devices []placement.Device // place's input: the GPUs with s.free
	chosen  []bool             // by position in the running set: evicted
	evict   []string           // the plan's Evict
	devs    []int32            // the plan's Devices
}

// victim is a running model Plan may evict.
type victim struct {
	name     string
	running  int // position in the running set
	class    int // evictNow, evictIdle or evictLater: the order of eviction
	priority int32
	lastUse  int64    // Unix ns; 0 (never used) sorts first
	vram     uint64   // bytes: leased, else measured, else estimated
	devices  []int32  // the GPUs it occupies (the snapshot's slice)
	leased   []uint64 // the bytes it holds on each of devices, when the host accounts them
	chosen   bool
}

// Victim classes, evicted in this order.
const (
	evictNow   = iota // stopping already: evicting it costs nothing
	evictIdle         // ready, no request in flight: evicted at once
	evictLater        // serving, or starting: the scheduler waits until it is idle
)

// New makes the swapper from its settings JSON; it is the factory
// registered with sdk.RegisterSwapper.
func New(h sdk.Host, raw []byte) (sdk.Swapper, error) {
	st, err := parseSettings(raw)
	if err != nil {
		return nil, fmt.Errorf("prioritylru settings: %w", err)
	}
	sw := &swapper{h: h, st: st}
	sw.defRule, sw.rules = newRules(st)
	return sw, nil
}

// vram is a model's footprint in bytes: measured when known, else estimated.
func vram(m *sdk.ModelInfo) uint64 {
	if m.MeasuredVRAM > 0 {
		return m.MeasuredVRAM
	}
	return m.EstimatedVRAM
}

// Plan decides what must stop before q.Target loads, and where it goes.
// See the package documentation for the rules. The returned slices are the
// swapper's own and valid until the next call (the SDK encodes them at
// once).
func (s *swapper) Plan(q sdk.PlanRequest) (sdk.Plan, error) {
	// One small read first: a model that is loaded or loading already has
	// its memory (the common case: a scheduler plans on every request), and
	// one with no VRAM figure is placed by the host. Only then the
	// snapshot, every model and GPU, which costs ten times as much in Wasm.
	t, ok := s.h.ModelState(q.Target)
	if !ok {
		return sdk.Plan{}, fmt.Errorf("prioritylru: unknown model %q", q.Target)
	}
	need := vram(&t)
	if t.State == sdk.StateReady || t.State == sdk.StateStarting || need == 0 {
		return sdk.Plan{}, nil
	}
	sdk.ReadSnapshot(s.h, &s.snap) // reuses s.snap's storage: no allocation per model
	snap := &s.snap
	if len(snap.GPUs) == 0 { // no GPU to account: the host places it
		return sdk.Plan{}, nil
	}
	s.gpus = snap.GPUs
	s.free = s.free[:0]
	for _, g := range s.gpus {
		s.free = append(s.free, g.Free)
	}
	r := s.ruleFor(q.Target)
	if s.place(need, r) {
		return sdk.Plan{Devices: s.devs}, nil
	}

	// Who may go: running, never pinned, never of higher priority than the
	// target, and only if it frees something on a GPU the target may use.
	// (q.Running never holds the target.)
	s.cands = s.cands[:0]
	next := 0
	for j, name := range q.Running {
		m := find(snap.Models, name, &next)
		if m == nil || m.Pinned || m.Priority > t.Priority {
			continue
		}
		v := vram(m)
		if len(m.Leased) == len(m.Devices) && len(m.Leased) > 0 {
			v = 0 // what the host will give back: its lease, exactly
			for _, b := range m.Leased {
				v += b
			}
		}
		if v == 0 || !s.occupies(m.Devices, r) {
			continue
		}
		class := evictLater
		switch {
		case m.State == sdk.StateStopping:
			class = evictNow
		case m.State == sdk.StateReady && m.InFlight == 0:
			class = evictIdle
		}
		s.cands = append(s.cands, victim{name: m.Name, running: j, class: class, priority: m.Priority, lastUse: m.LastUse, vram: v, devices: m.Devices, leased: m.Leased})
	}
	slices.SortFunc(s.cands, evictionOrder)

	// Evict in order until the target fits ...
	fits := false
	for i := range s.cands {
		s.credit(&s.cands[i], true)
		if fits = s.place(need, r); fits {
			break
		}
	}
	if !fits {
		return sdk.Plan{}, s.cannotFit(&t, need, r)
	}
	// ... then keep back, most valuable first, every victim whose memory
	// turned out not to be needed: the fewest evictions.
	for i := len(s.cands) - 1; i >= 0; i-- {
		c := &s.cands[i]
		if !c.chosen {
			continue
		}
		s.credit(c, false)
		if !s.place(need, r) {
			s.credit(c, true)
		}
	}
	s.place(need, r) // the final placement into s.devs
	// Evict in the order of q.Running (sorted by name).
	s.chosen = s.chosen[:0]
	for range q.Running {
		s.chosen = append(s.chosen, false)
	}
	for i := range s.cands {
		if s.cands[i].chosen {
			s.chosen[s.cands[i].running] = true
		}
	}
	s.evict = s.evict[:0]
	for j, name := range q.Running {
		if s.chosen[j] {
			s.evict = append(s.evict, name)
		}
	}
	return sdk.Plan{Evict: s.evict, Devices: s.devs}, nil
}

// evictionOrder: stopping models first, then idle ones, then busy or
// starting ones; within a class the lowest priority, then the least
// recently used, then by name (the running set's order, which is sorted by
// name: an int comparison instead of a string one).
func evictionOrder(a, b victim) int {
	if c := cmp.Compare(a.class, b.class); c != 0 {
		return c
	}
	if c := cmp.Compare(a.priority, b.priority); c != 0 {
		return c
	}
	if c := cmp.Compare(a.lastUse, b.lastUse); c != 0 {
		return c
	}
	return cmp.Compare(a.running, b.running)
}

// find returns the snapshot's entry for name, or nil. The host sends the
// snapshot and the running set both sorted by name, so a search that starts
// where the previous one ended (*next) walks the snapshot once per plan;
// it falls back to the whole list otherwise. It compares with == only: the
// SDK interns decoded names, so a match is a pointer comparison, while an
// ordering comparison walks the bytes, and in Wasm with a deadline every
// loop iteration is an exit to the host.
func find(models []sdk.ModelInfo, name string, next *int) *sdk.ModelInfo {
	for k := *next; k < len(models); k++ {
		if models[k].Name == name {
			*next = k + 1
			return &models[k]
		}
	}
	for k := 0; k < *next && k < len(models); k++ {
		if models[k].Name == name {
			return &models[k]
		}
	}
	return nil
}

// position returns the position in s.gpus of the GPU with index, or -1.
func (s *swapper) position(index int32) int {
	for p := range s.gpus {
		if s.gpus[p].Index == index {
			return p
		}
	}
	return -1
}

// occupies reports whether a model on devices holds memory on a GPU of the
// snapshot that r allows. A model with no devices on a one-GPU box is on
// that GPU.
func (s *swapper) occupies(devices []int32, r *rule) bool {
	if len(devices) == 0 {
		return len(s.gpus) == 1 && r.allows(s.gpus[0].Index)
	}
	for _, d := range devices {
		if s.position(d) >= 0 && r.allows(d) {
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
func (s *swapper) credit(c *victim, add bool) {
	c.chosen = add
	if len(c.leased) == len(c.devices) && len(c.leased) > 0 {
		for j, d := range c.devices {
			if p := s.position(d); p >= 0 {
				s.adjust(p, c.leased[j], add)
			}
		}
		return
	}
	if len(c.devices) == 0 {
		s.adjust(0, c.vram, add)
		return
	}
	n := uint64(len(c.devices))
	for j, d := range c.devices {
		share := c.vram / n
		if uint64(j) < c.vram%n {
			share++
		}
		if p := s.position(d); p >= 0 {
			s.adjust(p, share, add)
		}
	}
}

func (s *swapper) adjust(p int, b uint64, add bool) {
	if add {
		s.free[p] += b
	} else {
		s.free[p] -= b
	}
}

// cannotFit is the error for a target that does not fit even with every
// model it may evict gone (serving ones included: they would go once
// idle); s.free has them all credited. Under a placement constraint the
// figure is what the constraint allows: the GPUs it lists, one of them
// under split: never.
func (s *swapper) cannotFit(target *sdk.ModelInfo, need uint64, r *rule) error {
	var best, one uint64
	n := 0
	for p := range s.free {
		if !r.allows(s.gpus[p].Index) {
			continue
		}
		n++
		best += s.usable(p)
		one = max(one, s.usable(p))
	}
	under := ""
	switch {
	case r.Split == placement.SplitNever:
		best, under = one, ", split: never"
	case r.Split == placement.SplitAlways:
		under = ", split: always"
	}
	if len(r.gpus) > 0 {
		under = fmt.Sprintf(", gpus: %v", r.gpus) + under
	}
	gpus := "GPUs"
	if n == 1 {
		gpus = "GPU"
	}
	return fmt.Errorf("model %s needs %s; at most %s can be freed on any placement (%d %s%s, margin %s each; pinned and higher-priority models are never evicted)",
		target.Name, sdksettings.FormatSize(need, " "), sdksettings.FormatSize(best, " "), n, gpus, under, sdksettings.FormatSize(s.st.margin, " "))
}

// OnSwapStart logs the swap once, when it really starts: the target, the
// evicted models, the bytes they free and the placement.
func (s *swapper) OnSwapStart(ev sdk.SwapStartEvent) {
	snap := s.h.Snapshot()
	var need, freed uint64
	next := 0
	if t := find(snap.Models, ev.Target, &next); t != nil {
		need = vram(t)
	}
	next = 0
	for _, e := range ev.Evict {
		if m := find(snap.Models, e, &next); m != nil {
			freed += vram(m)
		}
	}
	devices := "host"
	if len(ev.Devices) > 0 {
		devices = fmt.Sprint(ev.Devices)
	}
	s.h.Log(sdk.LevelInfo, fmt.Sprintf("prioritylru swap: model=%s need=%s evict=[%s] freed=%s devices=%s",
		ev.Target, sdksettings.FormatSize(need, ""), strings.Join(ev.Evict, ","), sdksettings.FormatSize(freed, ""), devices))
}
