package settings

import (
	"errors"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"
)

// Duration is a length of time from 0 up. In JSON it is a Go duration
// string ("30s", "1m30s", "250ms") or a number of seconds (30, 0.5).
type Duration time.Duration

// ParseDuration parses a Go duration string ("30s", "1m30s"); a negative
// duration is an error.
func ParseDuration(s string) (Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New(`want a duration like "30s" or "1m30s", got ` + strconv.Quote(s))
	}
	if d < 0 {
		return 0, errors.New("duration " + strconv.Quote(s) + " is negative")
	}
	return Duration(d), nil
}

// secondsDuration reads n, a JSON number's text, as seconds.
func secondsDuration(n string) (Duration, error) {
	secs, err := strconv.ParseFloat(n, 64)
	if err != nil || secs < 0 || secs > float64(math.MaxInt64/int64(time.Second)) {
		return 0, errors.New("want a number of seconds from 0 up, got " + n)
	}
	return Duration(secs * float64(time.Second)), nil
}

// UnmarshalJSON reads a duration string or a number of seconds, so that
// Duration also works in structs decoded by encoding/json.
func (d *Duration) UnmarshalJSON(b []byte) error {
	v, err := Decode(b)
	if err != nil {
		return err
	}
	*d, err = v.Duration()
	return err
}

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return jsontext.AppendQuote(nil, d.String()) }

// String is time.Duration's form ("1m30s").
func (d Duration) String() string { return time.Duration(d).String() }

// Size is a number of bytes from 0 up. In JSON it is a string with a unit
// ("512MiB", "24GiB", "1.5GB", "24G") or a whole number of bytes.
type Size int64

// sizeUnits maps a lower-cased unit to its multiplier in bytes. Units with
// an "i" (KiB, Gi) and bare letters (K, G) are powers of 1024; two-letter
// units with a B (KB, GB) are powers of 1000. A bare G is binary because
// memory is sold and reported in GiB (nvidia-smi, docker --memory 24g).
var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1 << 10, "ki": 1 << 10, "kib": 1 << 10, "kb": 1e3,
	"m": 1 << 20, "mi": 1 << 20, "mib": 1 << 20, "mb": 1e6,
	"g": 1 << 30, "gi": 1 << 30, "gib": 1 << 30, "gb": 1e9,
	"t": 1 << 40, "ti": 1 << 40, "tib": 1 << 40, "tb": 1e12,
}

// ParseSize parses a memory size and returns it in bytes: "24GiB",
// "512MiB", "1.5GB", "24G", "8Gi", "4096" (bare bytes). Units are
// case-insensitive and may follow a space; KiB/MiB/GiB/TiB, Ki/Mi/Gi/Ti and
// K/M/G/T are powers of 1024, KB/MB/GB/TB powers of 1000. A fraction is
// allowed with a unit and the result is truncated to whole bytes; negative
// sizes and sizes over math.MaxInt64 bytes are errors. It is the one size
// rule: the configuration's sizes (host/config.ParseSize) are read by it
// too.
func ParseSize(s string) (int64, error) {
	in := strings.TrimSpace(s)
	i := 0
	for i < len(in) && (in[i] >= '0' && in[i] <= '9' || in[i] == '.') {
		i++
	}
	num, unit := in[:i], strings.ToLower(strings.TrimSpace(in[i:]))
	if num == "" {
		if strings.HasPrefix(in, "-") {
			return 0, errors.New("size " + strconv.Quote(s) + " is negative")
		}
		return 0, errors.New("size " + strconv.Quote(s) + ": want a number with an optional unit, like 24GiB, 512MiB, 1.5GB or 4096")
	}
	whole, frac, hasFrac := strings.Cut(num, ".")
	if strings.Contains(frac, ".") || whole == "" || hasFrac && frac == "" {
		return 0, errors.New("size " + strconv.Quote(s) + ": malformed number " + strconv.Quote(num))
	}
	mult, ok := sizeUnits[unit]
	if !ok {
		return 0, errors.New("size " + strconv.Quote(s) + ": unknown unit " + strconv.Quote(in[i:]) + " (want B, KiB, MiB, GiB, TiB, KB, MB, GB, TB, or K, M, G, T for powers of 1024)")
	}
	if hasFrac && mult == 1 {
		return 0, errors.New("size " + strconv.Quote(s) + ": a byte count must be whole; use a unit for fractions (1.5GiB)")
	}
	tooLarge := errors.New("size " + strconv.Quote(s) + " is too large")
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w > math.MaxInt64/mult {
		return 0, tooLarge
	}
	n := w * mult
	if hasFrac {
		part := fracBytes(frac, uint64(mult))
		if n > math.MaxInt64-part {
			return 0, tooLarge
		}
		n += part
	}
	return n, nil
}

// fracBytes is the whole bytes of 0.frac × mult, truncated; frac is
// decimal digits (beyond the 19th they cannot change the result).
func fracBytes(frac string, mult uint64) int64 {
	if len(frac) > 19 {
		frac = frac[:19]
	}
	f, _ := strconv.ParseUint(frac, 10, 64)
	den := uint64(1)
	for range len(frac) {
		den *= 10
	}
	// f < den, so f × mult / den < mult and hi < den: Div64 cannot panic.
	hi, lo := bits.Mul64(f, mult)
	q, _ := bits.Div64(hi, lo, den)
	return int64(q)
}

// UnmarshalJSON reads a size string or a whole number of bytes, so that
// Size also works in structs decoded by encoding/json.
func (s *Size) UnmarshalJSON(b []byte) error {
	v, err := Decode(b)
	if err != nil {
		return err
	}
	*s, err = v.Size()
	return err
}

// FormatSize renders bytes for people, the inverse of ParseSize for the
// sizes it writes: the largest binary unit that keeps the number at or
// above 1, at most one decimal, sep between number and unit ("24 GiB" in
// messages, "24GiB" in key=value logs and reports; "100B" below 1 KiB).
func FormatSize(n uint64, sep string) string {
	const units = "KMGTPE"
	if n < 1024 {
		return strconv.FormatUint(n, 10) + sep + "B"
	}
	if n < 1<<53 {
		// The same figure in integers, where float64 holds n and its
		// quotients by 1024 exactly: n/2^s rounded to tenths as
		// FormatFloat rounds (half to even). Formatting a float costs a
		// policy that logs its swaps more than the rest of the line in
		// Wasm.
		u, s := 0, uint(10)
		for n>>s >= 1024 {
			s += 10
			u++
		}
		q, rem, half := (10*n)>>s, (10*n)&(1<<s-1), uint64(1)<<(s-1)
		if rem > half || (rem == half && q&1 == 1) {
			q++
		}
		num := strconv.FormatUint(q/10, 10)
		if d := q % 10; d != 0 {
			num += "." + string(rune('0'+d))
		}
		return num + sep + units[u:u+1] + "iB"
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
