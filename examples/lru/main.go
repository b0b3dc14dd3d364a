// Command lru is an example eviction policy (a swapper) written the way an
// operator would write one: in a module of its own that requires only
// Loadout's SDK (github.com/loadout-dev/loadout/sdk), so its module graph
// holds nothing of the host's.
//
// When a model must load, it evicts the least recently used idle models
// until the target fits: in GPU memory when the host accounts it (the
// snapshot's GPUs, placed by sdk/placement, the host's own rule), else in a
// number of running models (max_running). It never evicts a pinned model
// or one with requests in flight.
//
// Build and check it:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o lru.wasm .
//	loadout policy check lru.wasm
//
// then configure it as `routing: {router: {wasm: lru.wasm, settings: {max_running: 2}}}`.
package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/placement"
)

// settings are the policy's settings, from the config's
// routing.router.settings.
type settings struct {
	// MaxRunning is the most models that run at once when the host has no
	// GPU accounting; 0 means 1 (llama-swap's default: one at a time).
	MaxRunning int `json:"max_running"`
}

// lru is the swapper.
type lru struct {
	h      sdk.Host
	set    settings
	placer placement.Placer
}

// New is the factory registered with the SDK: it validates the settings
// (an unknown key is an error).
func New(h sdk.Host, raw []byte) (sdk.Swapper, error) {
	s := &lru{h: h}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s.set); err != nil {
		return nil, fmt.Errorf("lru settings: %w", err)
	}
	if s.set.MaxRunning < 0 {
		return nil, fmt.Errorf("lru settings: max_running: must be at least 0, got %d", s.set.MaxRunning)
	}
	if s.set.MaxRunning == 0 {
		s.set.MaxRunning = 1
	}
	return s, nil
}

// Plan evicts the least recently used idle models until q.Target fits.
func (s *lru) Plan(q sdk.PlanRequest) (sdk.Plan, error) {
	snap := s.h.Snapshot()
	var target *sdk.ModelInfo
	var idle []sdk.ModelInfo
	for i := range snap.Models {
		m := &snap.Models[i]
		switch {
		case m.Name == q.Target:
			target = m
		case slices.Contains(q.Running, m.Name) && m.State == sdk.StateReady && m.InFlight == 0 && !m.Pinned:
			idle = append(idle, *m)
		}
	}
	if target == nil {
		return sdk.Plan{}, fmt.Errorf("lru: unknown model %q", q.Target)
	}
	if target.State == sdk.StateReady || target.State == sdk.StateStarting {
		return sdk.Plan{}, nil // loaded or loading: nothing to make room for
	}
	// Least recently used first; ties by name, so a plan is reproducible.
	slices.SortFunc(idle, func(a, b sdk.ModelInfo) int {
		if a.LastUse != b.LastUse {
			return cmp.Compare(a.LastUse, b.LastUse)
		}
		return strings.Compare(a.Name, b.Name)
	})
	var plan sdk.Plan
	fits := func() bool { return len(q.Running)-len(plan.Evict) < s.set.MaxRunning }
	need := target.EstimatedVRAM
	if len(snap.GPUs) > 0 && need > 0 {
		free := make([]placement.Device, len(snap.GPUs))
		for i, g := range snap.GPUs {
			free[i] = placement.Device{Index: g.Index, Free: g.Free}
		}
		fits = func() bool {
			devs, ok := s.placer.Choose(plan.Devices, need, free, 0)
			plan.Devices = devs
			return ok
		}
		for _, v := range idle {
			if fits() {
				return plan, nil
			}
			plan.Evict = append(plan.Evict, v.Name)
			for j, d := range v.Devices { // what the host gives back, per device
				for k := range free {
					if free[k].Index == d && j < len(v.Leased) {
						free[k].Free += v.Leased[j]
					}
				}
			}
		}
		if fits() {
			return plan, nil
		}
		return sdk.Plan{}, fmt.Errorf("lru: model %s does not fit even with every idle model evicted", q.Target)
	}
	for _, v := range idle {
		if fits() {
			break
		}
		plan.Evict = append(plan.Evict, v.Name)
	}
	return plan, nil // if it still does not fit, the scheduler waits for a busy model
}

// OnSwapStart is told when a swap it planned starts; lru keeps no state.
func (s *lru) OnSwapStart(sdk.SwapStartEvent) {}

func init() { sdk.RegisterSwapper(New) }

func main() {}
