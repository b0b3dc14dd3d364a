package main

import (
	"strconv"
	"strings"

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

// formatSize renders bytes for people: the largest binary unit that keeps
// the number at or above 1, at most one decimal, sep between number and
// unit ("24 GiB" in errors, "24GiB" in key=value logs).
func formatSize(n uint64, sep string) string {
	const units = "KMGTPE"
	if n < 1024 {
		return strconv.FormatUint(n, 10) + sep + "B"
	}
	v, u := float64(n)/1024, 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	s := strconv.FormatFloat(v, 'f', 1, 64)
	s = strings.TrimSuffix(s, ".0")
	return s + sep + units[u:u+1] + "iB"
}
