package gpu

import (
	"os"
	"path/filepath"
	"testing"
)

// sparse makes a file of size bytes without writing them.
func sparse(t *testing.T, path string, size int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
}

func TestFileSizeHeuristic_Scenario(t *testing.T) {
	dir := t.TempDir()
	sparse(t, filepath.Join(dir, "llama-8b-q4.gguf"), 5*int64(gib))
	split := filepath.Join(dir, "split")
	must(t, os.Mkdir(split, 0o755))
	for _, p := range []string{"big-00001-of-00003.gguf", "big-00002-of-00003.gguf", "big-00003-of-00003.gguf"} {
		sparse(t, filepath.Join(split, p), 10*int64(gib))
	}
	sparse(t, filepath.Join(split, "other-00001-of-00002.gguf"), 7*int64(gib)) // not a part of big
	hf := filepath.Join(dir, "hf")
	must(t, os.Mkdir(hf, 0o755))
	sparse(t, filepath.Join(hf, "model-00001-of-00002.safetensors"), 4*int64(gib))
	sparse(t, filepath.Join(hf, "model-00002-of-00002.safetensors"), 2*int64(gib))
	sparse(t, filepath.Join(hf, "tokenizer.json"), 9*int64(gib)) // not weights
	must(t, os.Mkdir(filepath.Join(hf, "sub"), 0o755))

	cases := []struct {
		name, path string
		want       uint64
	}{
		{"one file: size x 1.2 + overhead", filepath.Join(dir, "llama-8b-q4.gguf"), 6*gib + HeuristicOverhead},
		{"a split GGUF counts all its parts", filepath.Join(split, "big-00002-of-00003.gguf"), 36*gib + HeuristicOverhead},
		{"a directory counts its weight files", hf, 6*gib*6/5 + HeuristicOverhead},
		{"missing", filepath.Join(dir, "nope.gguf"), 0},
		{"a directory without weights", filepath.Join(hf, "sub"), 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := FileSizeHeuristic(tc.path); got != tc.want {
				t.Errorf("FileSizeHeuristic(%s) = %d (%s), want %d (%s)", tc.path, got, FormatBytes(got), tc.want, FormatBytes(tc.want))
			}
		})
	}
}

func TestEstimate_Scenario(t *testing.T) {
	dir := t.TempDir()
	weights := filepath.Join(dir, "m.gguf")
	sparse(t, weights, 5*int64(gib))
	cases := []struct {
		name              string
		declared, backend uint64
		weights           string
		want              uint64
		from              EstimateSource
	}{
		{"the config wins", 12 * gib, 9 * gib, weights, 12 * gib, FromConfig},
		{"then the backend", 0, 9 * gib, weights, 9 * gib, FromBackend},
		{"then the file size", 0, 0, weights, 6*gib + HeuristicOverhead, FromFileSize},
		{"unknown weights", 0, 0, filepath.Join(dir, "gone.gguf"), 0, FromNothing},
		{"nothing at all", 0, 0, "", 0, FromNothing},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, from := Estimate(tc.declared, tc.backend, tc.weights)
			if got != tc.want || from != tc.from {
				t.Errorf("Estimate = %d, %s; want %d, %s", got, from, tc.want, tc.from)
			}
		})
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[uint64]string{
		0: "0 B", 100: "100 B", 512 * mib: "512 MiB", 24 * gib: "24 GiB", 3 * gib / 2: "1.5 GiB", 1 << 40: "1 TiB",
	} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
