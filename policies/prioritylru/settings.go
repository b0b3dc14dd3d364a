package main

import "github.com/loadout-dev/loadout/sdk/evict"

// settings are the swapper's settings, parsed: sdk/evict's (margin and
// the host's placement), which are all it has.
type settings = evict.Settings

// parseSettings parses the settings JSON, every key optional:
//
//	{"margin": "512MiB",
//	 "placement": {"pack": true, "models": {"MODEL": {"gpus": [1, 2], "split": "never"}}}}
//
// margin is an sdksettings.Size (a size string or a whole number of bytes).
// placement is written by the host (host/config's RouterSettingsJSON)
// from the models' gpus: and split: and the box's placement:, never by an
// operator. sdk/evict parses both. Errors are *sdksettings.Error naming
// the setting.
func parseSettings(raw []byte) (settings, error) {
	st, _, err := evict.ParseSettings(raw)
	return st, err
}
