package main

import (
	"strconv"

	"github.com/loadout-dev/loadout/sdk/evict"
	sdksettings "github.com/loadout-dev/loadout/sdk/settings"
)

// settings are the swapper's settings, parsed: sdk/evict's (margin and
// the host's placement), patience and free_waits.
type settings struct {
	evict.Settings
	// Patience, in [0, 1], is how readily a model that is loading or
	// serving is evicted in place of an idle one, the request that
	// needs the room then waiting until it is idle: 0 (the default)
	// never while an idle model can go; above 0, such a model's value is
	// divided by Patience before the order compares it, so at 1 the
	// order is by value alone. More patience, fewer cold loads and longer
	// waits (docs/BENCHMARKS.md, "A router that forecasts demand").
	Patience float64
	// NoFreeWaits is free_waits: false: at patience 0 a busy or
	// starting model goes after every idle one even where the host's
	// record of waits has room (doc.go, "Waits that are free"), for an
	// operator who watches the p99 rather than the p95.
	NoFreeWaits bool
}

// parseSettings parses the settings JSON, every key optional:
//
//	{"patience": 0.5, "free_waits": true, "margin": "512MiB", "placement": {...}}
//
// margin and placement are sdk/evict's (placement is written by the
// host). What other routers take as settings (a half-life, a learning
// rate) foresight learns from the traffic; patience is not learned,
// because it trades waits for cold loads, which is the operator's
// choice; free_waits (default true) is the operator's too, as it trades
// the p99 for cold loads at an unchanged p95. Errors are
// *sdksettings.Error naming the setting, such as a patience outside
// [0, 1] or a free_waits that is not a boolean.
func parseSettings(raw []byte) (settings, error) {
	est, top, err := evict.ParseSettings(raw, "patience", "free_waits")
	st := settings{Settings: est}
	if err != nil {
		return st, err
	}
	if v := top.Get("patience"); !v.IsNull() {
		p, err := v.Float()
		if err != nil {
			return st, err
		}
		if !(p >= 0 && p <= 1) {
			return st, sdksettings.NewError(v.Path(), "want a number in [0, 1], got "+strconv.FormatFloat(p, 'g', -1, 64))
		}
		st.Patience = p
	}
	if v := top.Get("free_waits"); !v.IsNull() {
		free, err := v.Bool()
		if err != nil {
			return st, err
		}
		st.NoFreeWaits = !free
	}
	return st, nil
}
