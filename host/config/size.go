package config

import (
	"fmt"
	"math/big"
	"strings"
)

// sizeUnits maps a lower-cased unit to its multiplier in bytes. Units with an
// "i" (KiB, Gi) and bare letters (K, G) are powers of 1024; two-letter units
// with a B (KB, GB) are powers of 1000. A bare G is binary because memory is
// sold and reported in GiB (nvidia-smi, docker --memory 24g): "24G" on a 24 GiB
// card means the card.
var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1 << 10, "ki": 1 << 10, "kib": 1 << 10, "kb": 1e3,
	"m": 1 << 20, "mi": 1 << 20, "mib": 1 << 20, "mb": 1e6,
	"g": 1 << 30, "gi": 1 << 30, "gib": 1 << 30, "gb": 1e9,
	"t": 1 << 40, "ti": 1 << 40, "tib": 1 << 40, "tb": 1e12,
}

// ParseSize parses a memory size and returns it in bytes: "24GiB", "512MiB",
// "1.5GB", "24G", "8Gi", "4096" (bare bytes). Units are case-insensitive and
// may follow a space; KiB/MiB/GiB/TiB, Ki/Mi/Gi/Ti and K/M/G/T are powers of
// 1024, KB/MB/GB/TB powers of 1000. A fraction is allowed with a unit and the
// result is truncated to whole bytes; negative sizes and sizes over
// math.MaxInt64 bytes are errors.
func ParseSize(s string) (int64, error) {
	in := strings.TrimSpace(s)
	i := 0
	for i < len(in) && (in[i] >= '0' && in[i] <= '9' || in[i] == '.') {
		i++
	}
	num, unit := in[:i], strings.ToLower(strings.TrimSpace(in[i:]))
	if num == "" {
		if strings.HasPrefix(in, "-") {
			return 0, fmt.Errorf("size %q is negative", s)
		}
		return 0, fmt.Errorf("size %q: want a number with an optional unit, like 24GiB, 512MiB, 1.5GB or 4096", s)
	}
	if strings.Count(num, ".") > 1 || num == "." || strings.HasPrefix(num, ".") || strings.HasSuffix(num, ".") {
		return 0, fmt.Errorf("size %q: malformed number %q", s, num)
	}
	mult, ok := sizeUnits[unit]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q (want B, KiB, MiB, GiB, TiB, KB, MB, GB, TB, or K, M, G, T for powers of 1024)", s, in[i:])
	}
	if unit == "" || unit == "b" {
		if strings.Contains(num, ".") {
			return 0, fmt.Errorf("size %q: a byte count must be whole; use a unit for fractions (1.5GiB)", s)
		}
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, fmt.Errorf("size %q: malformed number %q", s, num)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	q := new(big.Int).Quo(r.Num(), r.Denom())
	if !q.IsInt64() {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return q.Int64(), nil
}

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
