// Command settingsguest is a third-party swapper for tests: it evicts
// nothing and reads {"limits": {"MODEL": {"keep": N}}} through
// sdk/settings, so that a bad setting comes back to the host as a
// positioned settings error like a built-in's.
package main

import (
	"github.com/loadout-dev/loadout/sdk"
	sdksettings "github.com/loadout-dev/loadout/sdk/settings"
)

type swapper struct{}

func (swapper) Plan(sdk.PlanRequest) (sdk.Plan, error) { return sdk.Plan{}, nil }
func (swapper) OnSwapStart(sdk.SwapStartEvent)         {}

func newSwapper(_ sdk.Host, raw []byte) (sdk.Swapper, error) {
	root, err := sdksettings.Decode(raw)
	if err != nil {
		return nil, err
	}
	top, err := root.Object("limits")
	if err != nil {
		return nil, err
	}
	limits, err := top.Get("limits").Object()
	if err != nil {
		return nil, err
	}
	for _, model := range limits.Keys() {
		l, err := limits.Get(model).Object("keep")
		if err != nil {
			return nil, err
		}
		if _, err := l.Get("keep").Int(0, 8); err != nil {
			return nil, err
		}
	}
	return swapper{}, nil
}

func init() { sdk.RegisterSwapper(newSwapper) }

func main() {}
