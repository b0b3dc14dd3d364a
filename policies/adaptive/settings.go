package main

import (
	"strconv"

	"github.com/loadout-dev/loadout/sdk/evict"
	sdksettings "github.com/loadout-dev/loadout/sdk/settings"
)

// settings are the swapper's settings, parsed: sdk/evict's (margin and
// the host's placement) and its two of its own.
type settings struct {
	evict.Settings
	// Decay is what each real swap leaves of the requests the LFU expert
	// counted before it, in (0, 1]: 1 counts every request since
	// start-up alike; smaller forgets sooner.
	Decay float64
	// Rate is the learning rate: an expert that loses a duel has its
	// weight multiplied by e^-Rate before the weights are summed to 1
	// again, > 0.
	Rate float64
}

// The defaults: the LFU expert sees about the last ten swaps' requests;
// a lost duel costs an expert 36% of its weight (LeCaR's learning rate).
const (
	defaultDecay = 0.9
	defaultRate  = 0.45
)

// parseSettings parses the settings JSON, every key optional:
//
//	{"decay": 0.9, "rate": 0.45, "margin": "512MiB", "placement": {...}}
//
// margin and placement are sdk/evict's (placement is written by the
// host). Errors are *sdksettings.Error naming the setting, such as a
// decay outside (0, 1] or a rate that is not above 0.
func parseSettings(raw []byte) (settings, error) {
	est, top, err := evict.ParseSettings(raw, "decay", "rate")
	st := settings{Settings: est, Decay: defaultDecay, Rate: defaultRate}
	if err != nil {
		return st, err
	}
	if v := top.Get("decay"); !v.IsNull() {
		d, err := v.Float()
		if err != nil {
			return st, err
		}
		if !(d > 0 && d <= 1) {
			return st, sdksettings.NewError(v.Path(), "want a number in (0, 1], got "+strconv.FormatFloat(d, 'g', -1, 64))
		}
		st.Decay = d
	}
	if v := top.Get("rate"); !v.IsNull() {
		r, err := v.Float()
		if err != nil {
			return st, err
		}
		if !(r > 0 && r < 100) {
			return st, sdksettings.NewError(v.Path(), "want a number above 0 (and below 100), got "+strconv.FormatFloat(r, 'g', -1, 64))
		}
		st.Rate = r
	}
	return st, nil
}
