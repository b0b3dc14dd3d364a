package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// settings are the swapper's settings, parsed.
type settings struct {
	margin uint64 // bytes kept free on every device the target uses
}

// parseSettings parses the settings JSON: {"margin": "512MiB"} with every
// key optional; an unknown key is an error.
func parseSettings(raw []byte) (settings, error) {
	var st settings
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return st, nil
	}
	var top map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&top); err != nil {
		return st, fmt.Errorf("want a JSON object: %w", err)
	}
	for key := range top {
		if key != "margin" {
			return st, fmt.Errorf("unknown setting %q (known: margin)", key)
		}
	}
	if val, ok := top["margin"]; ok {
		m, err := sizeSetting(val)
		if err != nil {
			return st, fmt.Errorf("margin: %w", err)
		}
		st.margin = m
	}
	return st, nil
}

// sizeSetting reads a size: a string with a unit ("512MiB", "24GiB") or a
// whole number of bytes.
func sizeSetting(val json.RawMessage) (uint64, error) {
	var s string
	if err := json.Unmarshal(val, &s); err == nil {
		return parseSize(s)
	}
	var n json.Number
	if err := json.Unmarshal(val, &n); err != nil {
		return 0, fmt.Errorf("want a size like \"512MiB\" or a number of bytes, got %s", val)
	}
	b, err := strconv.ParseUint(n.String(), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("want a whole, non-negative number of bytes, got %s", n)
	}
	return b, nil
}

// sizeUnits are the units parseSize knows, lower-cased, in bytes: the same
// as the config's sizes (host/config.ParseSize). KiB, Ki and K are powers
// of 1024; KB powers of 1000.
var sizeUnits = map[string]uint64{
	"": 1, "b": 1,
	"k": 1 << 10, "ki": 1 << 10, "kib": 1 << 10, "kb": 1e3,
	"m": 1 << 20, "mi": 1 << 20, "mib": 1 << 20, "mb": 1e6,
	"g": 1 << 30, "gi": 1 << 30, "gib": 1 << 30, "gb": 1e9,
	"t": 1 << 40, "ti": 1 << 40, "tib": 1 << 40, "tb": 1e12,
}

// parseSize parses "512MiB", "24GiB", "1.5GB", "24G" or "4096" into bytes
// (a fraction is truncated to whole bytes).
func parseSize(s string) (uint64, error) {
	in := strings.TrimSpace(s)
	i := 0
	for i < len(in) && (in[i] >= '0' && in[i] <= '9' || in[i] == '.') {
		i++
	}
	num, unit := in[:i], strings.ToLower(strings.TrimSpace(in[i:]))
	mult, ok := sizeUnits[unit]
	if num == "" || !ok {
		return 0, fmt.Errorf("size %q: want a number with an optional unit, like 512MiB, 24GiB or 4096", s)
	}
	if !strings.Contains(num, ".") {
		n, err := strconv.ParseUint(num, 10, 64)
		if err != nil || n > math.MaxUint64/mult {
			return 0, fmt.Errorf("size %q is too large", s)
		}
		return n * mult, nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || unit == "" || unit == "b" {
		return 0, fmt.Errorf("size %q: a fraction needs a unit, like 1.5GiB", s)
	}
	if f*float64(mult) >= math.MaxUint64 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return uint64(f * float64(mult)), nil
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
