package config

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/sdk/placement"
)

const twoGPUs = "gpus: [{memory: 24GiB}, {memory: 80GiB}]\n"

func TestParse_Placement(t *testing.T) {
	cfg, errs, _ := parse(t, twoGPUs+`placement: pack
models:
  a: {backend: sim, gpus: [1, 0], split: never, vram: 70GiB}
  b: {backend: sim, split: always}
  c: {backend: sim}
`)
	eq(t, "errors", errs, []string(nil))
	if cfg.Placement != PlacementPack {
		t.Errorf("Placement %q", cfg.Placement)
	}
	a, b, c := cfg.Models["a"], cfg.Models["b"], cfg.Models["c"]
	if !slices.Equal(a.GPUs, []int{1, 0}) || a.Split != placement.SplitNever || b.Split != placement.SplitAlways || c.Constrained() {
		t.Errorf("a %v %v, b %v, c %v %v", a.GPUs, a.Split, b.Split, c.GPUs, c.Split)
	}
	cfg, _, _ = parse(t, "models: {a: {backend: sim}}\n")
	if cfg.Placement != PlacementSpread {
		t.Errorf("default Placement %q, want spread", cfg.Placement)
	}
}

// An impossible constraint is a configuration error at its line.
func TestParse_PlacementErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"models: {a: {backend: sim, gpus: []}}\n",
			"c.yaml:1:34: models.a.gpus: gpus: [] allows no device; list the device indices the model may use, or drop the key for every device"},
		{"models: {a: {backend: sim, gpus: [0, x]}}\n",
			`c.yaml:1:38: models.a.gpus[1]: want a device index (0, 1, ...), got "x"`},
		{"models: {a: {backend: sim, gpus: [1, 1]}}\n", "c.yaml:1:38: models.a.gpus[1]: device 1 is listed twice"},
		{"models: {a: {backend: sim, split: sometimes}}\n", `c.yaml:1:35: models.a.split: want never, auto or always, got "sometimes"`},
		{"models: {a: {backend: sim, split: always, gpus: [2]}}\n",
			"c.yaml:1:35: models.a.split: split: always needs at least two devices to split over, but gpus: lists one (line 1)"},
		{"placement: tight\nmodels: {a: {backend: sim}}\n",
			`c.yaml:1:12: placement: want pack (the fullest device that holds a model) or spread (the emptiest), got "tight"`},
		{twoGPUs + "models:\n  a: {backend: sim, gpus: [0, 2]}\n",
			"c.yaml:3:31: models.a.gpus[1]: GPU 2 does not exist: the box has 2 GPUs (indices 0 to 1)"},
		{twoGPUs + "models:\n  a: {backend: sim, vram: 90GiB, split: never}\n",
			"c.yaml:3:41: models.a.split: split: never, but vram: 90GiB is larger than every device of the GPUs it may use (the largest holds 80GiB): it could never load"},
		{twoGPUs + "models:\n  a: {backend: sim, vram: 30GiB, gpus: [0]}\n",
			"c.yaml:3:40: models.a.gpus: vram: 30GiB is larger than gpus: [0] hold together (24GiB): it could never load"},
		{twoGPUs + "models:\n  a: {backend: sim, vram: 110GiB, split: always}\n",
			"c.yaml:3:42: models.a.split: vram: 110GiB is larger than the GPUs it may use hold together (104GiB): it could never load"},
		{"gpus: [{memory: 24GiB}]\nmodels:\n  a: {backend: sim, split: always}\n",
			"c.yaml:3:28: models.a.split: split: always needs at least two GPUs to split over: the box has 1 GPU (index 0)"},
		{"routing: {router: {use: prioritylru, settings: {placement: {}}}}\nmodels: {a: {backend: sim}}\n",
			"c.yaml:1:49: routing.router.settings.placement: set by Loadout from the models' gpus: and split: and the top-level placement:; remove it here"},
	} {
		_, errs, _ := parse(t, tc.src)
		eq(t, tc.src, errs, []string{tc.want})
	}
	// A model without a constraint that can never fit is the runtime's
	// error, as before, and a warning at its vram: (the rest of the box
	// serves); one that fits split over every device is neither.
	_, errs, warns := parse(t, twoGPUs+"models:\n  a: {backend: sim, vram: 200GiB}\n")
	eq(t, "unconstrained", errs, []string(nil))
	eq(t, "unconstrained, too big", warns, []string{"c.yaml:3:27: models.a.vram: 200GiB is larger than every GPU of the box holds together (104GiB): it could never load, and every request for it fails"})
	_, errs, warns = parse(t, twoGPUs+"models:\n  a: {backend: sim, vram: 100GiB}\n")
	eq(t, "unconstrained, split over both", append(errs, warns...), []string(nil))
}

// CheckPlacement against the devices serve finds (NVML), with its margin.
func TestConfig_CheckPlacement(t *testing.T) {
	cfg, errs, _ := parse(t, "models:\n  a: {backend: sim, gpus: [3]}\n  b: {backend: sim, vram: 24GiB, split: never}\n  c: {backend: sim}\n")
	eq(t, "parse without declared devices", errs, []string(nil))
	const gib = 1 << 30
	if err := cfg.CheckPlacement([]uint64{24 * gib, 24 * gib, 24 * gib, 24 * gib}, 0); err != nil {
		t.Fatalf("4 × 24 GiB: %v", err)
	}
	err := cfg.CheckPlacement([]uint64{24 * gib, 24 * gib}, 512<<20)
	want := []string{
		"c.yaml:2:28: models.a.gpus[0]: GPU 3 does not exist: the box has 2 GPUs (indices 0 to 1)",
		"c.yaml:3:41: models.b.split: split: never, but vram: 24GiB is larger than every device of the GPUs it may use (the largest holds 23.5GiB): it could never load",
	}
	if err == nil || err.Error() != strings.Join(want, "\n") {
		t.Fatalf("CheckPlacement:\n%v\nwant\n%s", err, strings.Join(want, "\n"))
	}
}

// The built-in prioritylru receives the constraints in its settings.
func TestRouterSettingsJSON_Placement(t *testing.T) {
	cfg, errs, _ := parse(t, `placement: pack
routing: {router: {use: prioritylru, settings: {margin: 1GiB}}}
models:
  a: {backend: sim, gpus: [1, 0], split: never}
  b: {backend: sim}
  c: {backend: sim, split: always}
`)
	eq(t, "errors", errs, []string(nil))
	b, err := cfg.RouterSettingsJSON()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"margin":"1GiB","placement":{"pack":true,"models":{"a":{"gpus":[1,0],"split":"never"},"c":{"split":"always"}}}}`
	if string(b) != want || !json.Valid(b) {
		t.Fatalf("RouterSettingsJSON = %s\nwant %s", b, want)
	}
	// Every router built on sdk/evict gets them.
	for _, r := range []string{"ollama", "adaptive", "foresight", "s3fifo", "sieve", "gdsf"} {
		cfg, errs, _ = parse(t, "routing: {router: {use: "+r+"}}\nmodels: {a: {backend: sim, gpus: [1]}}\n")
		eq(t, r+" errors", errs, []string(nil))
		if b, _ := cfg.RouterSettingsJSON(); string(b) != `{"placement":{"models":{"a":{"gpus":[1]}}}}` {
			t.Errorf("%s: RouterSettingsJSON = %s, want the placement", r, b)
		}
	}
	// Nothing to say: the settings as written.
	cfg, _, _ = parse(t, "routing: {router: {use: prioritylru}}\nmodels: {a: {backend: sim}}\n")
	if b, _ := cfg.RouterSettingsJSON(); string(b) != "{}" {
		t.Fatalf("unconstrained: %s", b)
	}
	// Another router: the settings as written.
	cfg, _, _ = parse(t, "routing: {router: {use: matrix, settings: {matrix: {vars: {a: a}, sets: {s: a}}}}}\nmodels: {a: {backend: sim, gpus: [0]}}\n")
	if b, _ := cfg.RouterSettingsJSON(); strings.Contains(string(b), "placement") {
		t.Fatalf("matrix got the placement: %s", b)
	}
}
