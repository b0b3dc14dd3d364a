package main

import (
	sdksettings "github.com/loadout-dev/loadout/sdk/settings"
)

// settings are the swapper's settings, parsed.
type settings struct {
	margin uint64 // bytes kept free on every device the target uses
}

// parseSettings parses the settings JSON: {"margin": "512MiB"} with every
// key optional (margin is an sdksettings.Size: a size string or a whole
// number of bytes). Errors are *sdksettings.Error naming the setting.
func parseSettings(raw []byte) (settings, error) {
	var st settings
	root, err := sdksettings.Decode(raw)
	if err != nil {
		return st, err
	}
	top, err := root.Object("margin")
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
	return st, nil
}
