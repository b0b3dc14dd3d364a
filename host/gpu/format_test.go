package gpu

import "testing"

func TestFormatBytes(t *testing.T) {
	for n, want := range map[uint64]string{
		0: "0 B", 100: "100 B", 512 * mib: "512 MiB", 24 * gib: "24 GiB", 3 * gib / 2: "1.5 GiB", 1 << 40: "1 TiB",
	} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
