package main

import (
	"cmp"
	"errors"
	"slices"
	"strconv"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/placement"
)

// PlanJob chooses the GPUs a GPU job takes whole and the models it evicts
// (sdk.JobPlanner), by the rules a model's plan follows: free GPUs first;
// then GPUs whose every model may go — ready, idle (no request in flight),
// unpinned and of no higher priority than the job — the least valuable
// first: the GPU whose most valuable model has the lowest priority, then
// was used least recently, then the lowest index. A GPU a busy, loading or
// stopping model holds is never taken: the job waits, as a model request
// waits for a busy model, rather than cut requests off.
func (s *swapper) PlanJob(q sdk.JobPlanRequest) (sdk.Plan, error) {
	snap := s.h.Snapshot()
	devices := placement.JobCandidates(q.Candidates, snap.Models)
	byName := func(name string) *sdk.ModelInfo {
		i := slices.IndexFunc(snap.Models, func(m sdk.ModelInfo) bool { return m.Name == name })
		if i < 0 {
			return nil
		}
		return &snap.Models[i]
	}
	evictable := func(name string) bool {
		m := byName(name)
		return m != nil && m.State == sdk.StateReady && m.InFlight == 0 && !m.Pinned && m.Priority <= q.Priority
	}
	// worth is what a GPU's models are worth keeping: the highest priority
	// among them, then the latest use.
	type worth struct{ priority, lastUse int64 }
	value := func(d placement.WholeDevice) worth {
		w := worth{priority: -1 << 62}
		for _, h := range d.Holders {
			if m := byName(h); m != nil {
				w.priority = max(w.priority, int64(m.Priority))
				w.lastUse = max(w.lastUse, m.LastUse)
			}
		}
		return w
	}
	slices.SortStableFunc(devices, func(a, b placement.WholeDevice) int {
		va, vb := value(a), value(b)
		if c := cmp.Compare(va.priority, vb.priority); c != 0 {
			return c
		}
		if c := cmp.Compare(va.lastUse, vb.lastUse); c != 0 {
			return c
		}
		return cmp.Compare(a.Index, b.Index)
	})
	chosen, evict, ok := placement.Whole(int(q.GPUs), devices, evictable)
	if !ok {
		n := 0
		for _, d := range devices {
			if !slices.ContainsFunc(d.Holders, func(h string) bool { return !evictable(h) }) {
				n++
			}
		}
		return sdk.Plan{}, errors.New("the job needs " + strconv.FormatUint(uint64(q.GPUs), 10) + " whole GPU(s); " +
			strconv.Itoa(n) + " of the " + strconv.Itoa(len(q.Candidates)) +
			" it may take are free or hold only idle, unpinned models of priority at most " + strconv.Itoa(int(q.Priority)))
	}
	return sdk.Plan{Evict: evict, Devices: chosen}, nil
}
