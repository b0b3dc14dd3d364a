// Package swapperpolicy is a simple swapper: at most MaxRunning models run,
// and the first ones of the (sorted) running set make room. It is built to
// Wasm by ../swapper and run natively by the benchmarks.
package swapperpolicy

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/loadout-dev/loadout/sdk"
)

// Settings are the swapper's JSON settings.
type Settings struct {
	MaxRunning  int    `json:"max_running"`  // default 4
	FailTarget  string `json:"fail_target"`  // Plan returns an error for this target
	LoopTarget  string `json:"loop_target"`  // Plan never returns for this target
	PanicTarget string `json:"panic_target"` // Plan panics for this target
}

// Swapper is the swapper.
type Swapper struct {
	h   sdk.Host
	set Settings
}

// New makes the swapper.
func New(h sdk.Host, settings []byte) (*Swapper, error) {
	s := &Swapper{h: h}
	if err := json.Unmarshal(settings, &s.set); err != nil {
		return nil, fmt.Errorf("swapper: settings: %w", err)
	}
	if s.set.MaxRunning <= 0 {
		s.set.MaxRunning = 4
	}
	return s, nil
}

// Plan evicts the first models of the running set until the target fits.
func (s *Swapper) Plan(q sdk.PlanRequest) (sdk.Plan, error) {
	if q.Target == s.set.FailTarget && q.Target != "" {
		return sdk.Plan{}, fmt.Errorf("cannot place %s", q.Target)
	}
	if q.Target == s.set.LoopTarget && q.Target != "" {
		spin()
	}
	if q.Target == s.set.PanicTarget && q.Target != "" {
		panic("swapperpolicy: panic_target " + q.Target)
	}
	var p sdk.Plan
	if n := len(q.Running) + 1 - s.set.MaxRunning; n > 0 {
		p.Evict = q.Running[:n]
	}
	return p, nil
}

// OnSwapStart logs the decision.
func (s *Swapper) OnSwapStart(ev sdk.SwapStartEvent) {
	s.h.Log(sdk.LevelInfo, "swap "+ev.Target+" evicting ["+strings.Join(ev.Evict, " ")+"]")
}

// spin never returns: the host's deadline must stop it.
func spin() {
	//lint:ignore SA5002 the point: the host's deadline must stop it
	for {
	}
}
