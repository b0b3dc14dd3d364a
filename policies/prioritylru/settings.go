package main

import (
	"github.com/loadout-dev/loadout/sdk/evict"
	sdksettings "github.com/loadout-dev/loadout/sdk/settings"
)

// settings are the swapper's settings, parsed.
type settings struct {
	margin    uint64          // bytes kept free on every device the target uses
	placement evict.Placement // the box's pack or spread, the models' constraints
}

// parseSettings parses the settings JSON, every key optional:
//
//	{"margin": "512MiB",
//	 "placement": {"pack": true, "models": {"MODEL": {"gpus": [1, 2], "split": "never"}}}}
//
// margin is an sdksettings.Size (a size string or a whole number of bytes).
// placement is written by the host (host/config's RouterSettingsJSON)
// from the models' gpus: and split: and the box's placement:, never by an
// operator; sdk/evict parses it. Errors are *sdksettings.Error naming the
// setting.
func parseSettings(raw []byte) (settings, error) {
	var st settings
	root, err := sdksettings.Decode(raw)
	if err != nil {
		return st, err
	}
	top, err := root.Object("margin", "placement")
	if err != nil {
		return st, err
	}
	if v := top.Get("margin"); !v.IsNull() {
		m, err := v.Size()
		if err != nil {
			return st, err
		}
		st.margin = uint64(m)
	}
	st.placement, err = evict.ParsePlacement(top.Get("placement"))
	return st, err
}
