package main

import (
	"math"

	"github.com/loadout-dev/loadout/sdk/placement"
	sdksettings "github.com/loadout-dev/loadout/sdk/settings"
)

// settings are the swapper's settings, parsed.
type settings struct {
	margin uint64 // bytes kept free on every device the target uses
	pack   bool   // the box's placement: pack (else spread)
	// models are the placement constraints of the models that have one,
	// by name.
	models map[string]constraint
}

// constraint is one model's placement constraint: the devices it may use
// (none: every device) and when it may be split.
type constraint struct {
	gpus  []int32
	split placement.SplitMode
}

// parseSettings parses the settings JSON, every key optional:
//
//	{"margin": "512MiB",
//	 "placement": {"pack": true, "models": {"MODEL": {"gpus": [1, 2], "split": "never"}}}}
//
// margin is an sdksettings.Size (a size string or a whole number of bytes).
// placement is written by the host (host/config's RouterSettingsJSON)
// from the models' gpus: and split: and the box's placement:, never by an
// operator. Errors are *sdksettings.Error naming the setting.
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
	place, err := top.Get("placement").Object("pack", "models")
	if err != nil {
		return st, err
	}
	if v := place.Get("pack"); !v.IsNull() {
		if st.pack, err = v.Bool(); err != nil {
			return st, err
		}
	}
	models, err := place.Get("models").Object()
	if err != nil {
		return st, err
	}
	for _, name := range models.Keys() {
		c, err := parseConstraint(models.Get(name))
		if err != nil {
			return st, err
		}
		if st.models == nil {
			st.models = map[string]constraint{}
		}
		st.models[name] = c
	}
	return st, nil
}

func parseConstraint(v sdksettings.Value) (constraint, error) {
	var c constraint
	f, err := v.Object("gpus", "split")
	if err != nil {
		return c, err
	}
	gpus, err := f.Get("gpus").List()
	if err != nil {
		return c, err
	}
	for _, g := range gpus {
		i, err := g.Int(0, math.MaxInt32)
		if err != nil {
			return c, err
		}
		c.gpus = append(c.gpus, int32(i))
	}
	if s := f.Get("split"); !s.IsNull() {
		str, err := s.String()
		if err != nil {
			return c, err
		}
		if c.split, err = placement.ParseSplitMode(str); err != nil {
			return c, s.Errorf("%v", err)
		}
	}
	return c, nil
}
