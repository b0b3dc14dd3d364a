package config

import (
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

// formatSize renders bytes the way Report shows them ("24GiB", "1.5GiB",
// "100B"): sdk/settings.FormatSize, the one rule.
func formatSize(n int64) string { return sdksettings.FormatSize(uint64(max(n, 0)), "") }
