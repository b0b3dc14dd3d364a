package config

import (
	"fmt"
	"strings"

	sdksettings "github.com/loadout-dev/loadout/sdk/settings"
)

// ParseSize parses a memory size and returns it in bytes: "24GiB", "512MiB",
// "1.5GB", "24G", "8Gi", "4096" (bare bytes). Units are case-insensitive and
// may follow a space; KiB/MiB/GiB/TiB, Ki/Mi/Gi/Ti and K/M/G/T are powers of
// 1024, KB/MB/GB/TB powers of 1000. A fraction is allowed with a unit and the
// result is truncated to whole bytes; negative sizes and sizes over
// math.MaxInt64 bytes are errors. It is sdk/settings.ParseSize, the rule
// policies read their sizes with, so `vram: 24G` and a policy's
// `margin: 24G` mean the same.
func ParseSize(s string) (int64, error) { return sdksettings.ParseSize(s) }

// formatSize renders bytes the way Report shows them: the largest binary unit
// that keeps at most one decimal ("24GiB", "1.5GiB", "512MiB", "100B").
func formatSize(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	v, u := float64(n), 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	if u == 0 {
		return fmt.Sprintf("%dB", n)
	}
	s := fmt.Sprintf("%.1f", v)
	s = strings.TrimSuffix(s, ".0")
	return s + units[u]
}
