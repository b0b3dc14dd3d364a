package evict

import (
	"slices"

	"github.com/loadout-dev/loadout/sdk"
)

// The sleep tier (ABI version 3; DESIGN.md, "Residency"). Host memory
// holds sleepers, and it is smaller than the models that would like to
// sleep in it: it is a cache of its own, one level below the GPUs. A
// planner with SleepOrder fills it after choosing its victims: every
// victim that can sleep and every model already asleep compete for it,
// most deserving first (SleepOrder); each gets level 1 if host memory
// still holds its weights, else level 2 if it holds its process's
// overhead, else nothing. A victim that gets nothing is stopped; a
// sleeper that gets nothing is added to the plan's Evict, stopped, and
// gives its host memory to a more deserving one. A sleeper keeps the
// level it sleeps at (the host cannot change it without a wake).

// sleepTier returns the plan's Modes for its victims and appends the
// sleepers to stop to p.evict, from p.snap (read by this plan). It
// returns nil and changes nothing when the host accounts no host memory
// (a version 2 host, or none): the victims are then evicted as
// configured.
func (p *Planner) sleepTier() []sdk.EvictMode {
	snap := &p.snap
	if snap.Host.Total == 0 {
		return nil
	}
	// Host memory the tier may hand out: what is free, and what the
	// sleepers hold now (each may lose its place).
	avail := snap.Host.Free()
	type entrant struct {
		m     *sdk.ModelInfo
		evict int // its index in p.evict, for a victim; -1 for a sleeper
	}
	var entrants []entrant
	next := 0
	for i, name := range p.evict {
		if m := Find(snap.Models, name, &next); m != nil && m.CanSleep != 0 {
			entrants = append(entrants, entrant{m, i})
		}
	}
	for i := range snap.Models {
		// The target may be asleep itself: it is being woken, not a
		// sleeper to keep or stop (its host memory is free once awake).
		if m := &snap.Models[i]; m.Asleep() && m.Name != p.target.Name {
			avail += m.HostLeased
			entrants = append(entrants, entrant{m, -1})
		}
	}
	p.modes = p.modes[:0]
	for range p.evict {
		p.modes = append(p.modes, sdk.EvictStop)
	}
	slices.SortStableFunc(entrants, func(a, b entrant) int { return p.SleepOrder(a.m, b.m) })
	var stops []string
	for _, e := range entrants {
		if e.evict < 0 { // a sleeper: it stays at its level, or goes
			if e.m.HostLeased <= avail {
				avail -= e.m.HostLeased
			} else {
				stops = append(stops, e.m.Name)
			}
			continue
		}
		switch m := e.m; {
		case m.CanSleep&1 != 0 && m.HostBytes1 > 0 && m.HostBytes1 <= avail:
			avail -= m.HostBytes1
			p.modes[e.evict] = sdk.EvictSleep1
		case m.CanSleep&2 != 0 && m.HostBytes2 > 0 && m.HostBytes2 <= avail:
			avail -= m.HostBytes2
			p.modes[e.evict] = sdk.EvictSleep2
		}
	}
	slices.Sort(stops)
	for _, name := range stops {
		p.evict = append(p.evict, name)
		p.modes = append(p.modes, sdk.EvictStop)
	}
	return p.modes
}
