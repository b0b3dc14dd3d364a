package main

import (
	"github.com/loadout-dev/loadout/sdk/evict"
)

// parseSettings parses the settings JSON, every key optional:
//
//	{"margin": "512MiB", "placement": {...}}
//
// Both are sdk/evict's (placement is written by the host); the swapper
// has no setting of its own: what other routers take as settings (a
// half-life, a learning rate) it learns from the traffic. Errors are
// *sdksettings.Error naming the setting.
func parseSettings(raw []byte) (evict.Settings, error) {
	st, _, err := evict.ParseSettings(raw)
	return st, err
}
