package config

import (
	"math"
	"strconv"
	"strings"
	"testing"
)

func TestParseSize_Table(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr string
	}{
		{in: "0", want: 0},
		{in: "4096", want: 4096},
		{in: "100B", want: 100},
		{in: "24GiB", want: 24 << 30},
		{in: "24gib", want: 24 << 30},
		{in: "24 GiB", want: 24 << 30},
		{in: " 24GiB ", want: 24 << 30},
		{in: "24G", want: 24 << 30},
		{in: "24g", want: 24 << 30},
		{in: "8Gi", want: 8 << 30},
		{in: "512MiB", want: 512 << 20},
		{in: "512M", want: 512 << 20},
		{in: "1.5GB", want: 1_500_000_000},
		{in: "1.5GiB", want: 3 << 29},
		{in: "2KB", want: 2000},
		{in: "2KiB", want: 2048},
		{in: "2k", want: 2048},
		{in: "1TiB", want: 1 << 40},
		{in: "1TB", want: 1e12},
		{in: "0.3KiB", want: 307}, // 307.2 truncated
		{in: "8388607TiB", want: math.MaxInt64 - (1<<40 - 1)},
		{in: "8388608TiB", wantErr: "too large"},
		{in: "9223372036854775807", want: math.MaxInt64},
		{in: "9223372036854775808", wantErr: "too large"},
		{in: "8388608.5TiB", wantErr: "too large"},
		{in: "", wantErr: "want a number"},
		{in: "GiB", wantErr: "want a number"},
		{in: "-1", wantErr: "negative"},
		{in: "-1GiB", wantErr: "negative"},
		{in: "1.5", wantErr: "must be whole"},
		{in: "1..5GiB", wantErr: "malformed"},
		{in: ".5GiB", wantErr: "malformed"},
		{in: "5.GiB", wantErr: "malformed"},
		{in: "24XB", wantErr: `unknown unit "XB"`},
		{in: "24 G B", wantErr: "unknown unit"},
		{in: "1e9", wantErr: "unknown unit"},
		{in: "0x10", wantErr: "unknown unit"},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		switch {
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("ParseSize(%q) = %d, %v; want error containing %q", tt.in, got, err, tt.wantErr)
		case tt.wantErr == "" && (err != nil || got != tt.want):
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

func TestFormatSize_RoundTrip(t *testing.T) {
	for _, n := range []int64{0, 100, 1 << 10, 512 << 20, 24 << 30, 3 << 29, 1 << 40} {
		s := formatSize(n)
		got, err := ParseSize(s)
		if err != nil || got != n {
			t.Errorf("ParseSize(formatSize(%d) = %q) = %d, %v", n, s, got, err)
		}
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"24GiB", "512MiB", "1.5GB", "24G", "4096", "0.3KiB", "-1", "", "9223372036854775807", "8388608.5TiB", "1..2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err != nil {
			return
		}
		if n < 0 {
			t.Fatalf("ParseSize(%q) = %d, negative", s, n)
		}
		// A bare byte count means exactly that many bytes.
		if b, perr := strconv.ParseInt(strings.TrimSpace(s), 10, 64); perr == nil && b != n {
			t.Fatalf("ParseSize(%q) = %d, want %d", s, n, b)
		}
	})
}
