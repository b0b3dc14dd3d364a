package main

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// devicesOf returns the devices model holds leases on, in index order.
func (v gpuView) devicesOf(model string) []int {
	var out []int
	for _, d := range v.Devices {
		for _, h := range d.Holders {
			if h.Owner == model {
				out = append(out, d.Index)
			}
		}
	}
	return out
}

// On 4 × 24 GiB with the prioritylru router placing: gpus: is respected
// on an empty box (spread would pick device 0), split: auto never splits
// what fits on one device, split: always spreads over every device it
// lists though one would hold it, split: never refuses what would need a
// split — with a clear error, at once — and split: auto splits it.
func TestServe_PlacementConstraints(t *testing.T) {
	s := startServer(t, "../../testdata/e2e/placement.yaml")
	s.mustChat("only3")
	if got := s.gpus().devicesOf("only3"); !slices.Equal(got, []int{3}) {
		t.Fatalf("only3 (gpus: [3]) on %v", got)
	}
	for _, m := range []string{"p0", "p1", "p2", "p3"} {
		s.mustChat(m)
	}
	v := s.gpus()
	for i, m := range []string{"p0", "p1", "p2", "p3"} {
		if got := v.devicesOf(m); !slices.Equal(got, []int{i}) {
			t.Fatalf("%s (gpus: [%d]) on %v", m, i, got)
		}
	}
	// 14 GiB free on 0, 1 and 2, 10 on 3.
	s.mustChat("auto12")
	if got := s.gpus().devicesOf("auto12"); len(got) != 1 {
		t.Fatalf("auto12 fits on one device but was split over %v", got)
	}
	s.mustChat("across")
	if got := s.gpus().devicesOf("across"); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("across (gpus: [1, 2], split: always) on %v", got)
	}
	code, body := s.post("/v1/chat/completions", chat("whole", false))
	if code != 503 || !strings.Contains(body, "split: never") || !strings.Contains(body, "needs 20 GiB") {
		t.Fatalf("whole (20 GiB, split: never, at most 14 GiB on any one device): %d %s", code, body)
	}
	if got := s.gpus().devicesOf("whole"); got != nil {
		t.Fatalf("the refused model holds %v", got)
	}
	s.mustChat("auto20")
	if got := s.gpus().devicesOf("auto20"); len(got) != 2 {
		t.Fatalf("auto20 (20 GiB, split: auto, 12 GiB the most on one device) on %v, want a split over two", got)
	}
}

// placement: pack, the host placing: the second model goes beside the
// first on the fuller device (spread would take the empty one), and a
// model that fits on one device only is never split.
func TestServe_PlacementPack(t *testing.T) {
	s := startServer(t, "../../testdata/e2e/placement-pack.yaml")
	s.mustChat("x")
	s.mustChat("y")
	v := s.gpus()
	if x, y := v.devicesOf("x"), v.devicesOf("y"); !slices.Equal(x, []int{0}) || !slices.Equal(y, []int{0}) {
		t.Fatalf("pack: x on %v, y on %v; want both on device 0", x, y)
	}
	s.mustChat("z") // 70 GiB: 60 free on device 0, 80 on device 1
	if got := s.gpus().devicesOf("z"); !slices.Equal(got, []int{1}) {
		t.Fatalf("z on %v, want device 1 whole", got)
	}
}

// An impossible constraint is a configuration error at its line, from
// config check and from serve, which does not start.
func TestServe_ImpossibleConstraintRefused(t *testing.T) {
	cfg := writeConfig(t, t.TempDir(), "gpus: [{memory: 24GiB}, {memory: 24GiB}]\nmodels:\n"+
		"  a: {backend: sim, gpus: [0, 2]}\n"+
		"  b: {backend: sim, vram: 30GiB, split: never}\n")
	out, err := exec.Command(loadoutBin, "config", "check", cfg).CombinedOutput()
	for _, want := range []string{
		cfg + ":3:31: models.a.gpus[1]: GPU 2 does not exist: the box has 2 GPUs (indices 0 to 1)",
		cfg + ":4:41: models.b.split: split: never, but vram: 30GiB is larger than every device",
	} {
		if err == nil || !strings.Contains(string(out), want) {
			t.Fatalf("config check: err=%v, want %q in\n%s", err, want, out)
		}
	}
	serve := exec.Command(loadoutBin, "serve", "--config", cfg, "--listen", "127.0.0.1:0")
	serve.Env = append(os.Environ(), "XDG_DATA_HOME="+t.TempDir())
	if out, err := serve.CombinedOutput(); err == nil || !strings.Contains(string(out), cfg+":3:31") {
		t.Fatalf("serve with an impossible constraint: err=%v\n%s", err, out)
	}
}
