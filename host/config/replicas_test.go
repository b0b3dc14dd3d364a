package config

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

const prio = "routing: {router: {use: prioritylru}}\n"

// replicas: N makes N rows, each with a port of its own assigned after
// every model's, its model's placement and group, listed under neither
// /v1/models nor a client's name.
func TestParse_Replicas(t *testing.T) {
	cfg, errs, _ := parse(t, prio+`startPort: 7000
models:
  a: {backend: sim, replicas: 3, gpus: [0, 1]}
  b: {cmd: "srv --port ${PORT}", min_replicas: 1, max_replicas: 2}
  c: {backend: sim}
`)
	eq(t, "errors", errs, []string(nil))
	eq(t, "ids", cfg.ModelIDs(), []string{"a", "a@2", "a@3", "b", "b@2", "c"})
	eq(t, "served", cfg.ServedIDs(), []string{"a", "b", "c"})
	eq(t, "replicas of a", cfg.Replicas("a"), []string{"a", "a@2", "a@3"})
	a, a3, b, b2 := cfg.Models["a"], cfg.Models["a@3"], cfg.Models["b"], cfg.Models["b@2"]
	if a.MinReplicas != 3 || a.MaxReplicas != 3 || b.MinReplicas != 1 || b.MaxReplicas != 2 {
		t.Errorf("ranges: a %d-%d, b %d-%d", a.MinReplicas, a.MaxReplicas, b.MinReplicas, b.MaxReplicas)
	}
	if a3.ReplicaOf != "a" || a3.Replica != 3 || !slices.Equal(a3.GPUs, []int{0, 1}) || !a3.Unlisted {
		t.Errorf("a@3: %+v", a3)
	}
	ports := map[int]string{}
	for _, id := range cfg.ModelIDs() {
		if m := cfg.Models[id]; m.Port != 0 {
			if other, dup := ports[m.Port]; dup {
				t.Errorf("%s and %s share port %d", id, other, m.Port)
			}
			ports[m.Port] = id
		}
	}
	if a.Port != 7000 || b.Port != 7001 || cfg.Models["c"].Port != 7002 {
		t.Errorf("the models' own ports moved: a %d b %d c %d", a.Port, b.Port, cfg.Models["c"].Port)
	}
	if want := "srv --port " + strconv.Itoa(b2.Port); b2.Cmd != want || b.Cmd != "srv --port 7001" {
		t.Errorf("b cmd %q, b@2 cmd %q (want %q)", b.Cmd, b2.Cmd, want)
	}
	if !strings.HasSuffix(b2.Proxy, ":"+strconv.Itoa(b2.Port)) {
		t.Errorf("b@2 proxy %q, want its own port %d", b2.Proxy, b2.Port)
	}
	if _, ok := cfg.ResolveModel("a@2"); ok {
		t.Error("a replica's id resolves as a model name")
	}
}

// Bad replica settings are errors at their line.
func TestParse_ReplicaErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{prio + "models: {a: {backend: sim, replicas: 0}}\n", "c.yaml:2:38: models.a.replicas: want 1 to 64 replicas, got 0"},
		{prio + "models: {a: {backend: sim, replicas: 2, max_replicas: 3}}\n",
			"c.yaml:2:38: models.a.replicas: set replicas (a fixed number), or min_replicas and max_replicas (a range the scheduler scales within), not both"},
		{prio + "models: {a: {backend: sim, min_replicas: 3, max_replicas: 2}}\n",
			"c.yaml:2:59: models.a.max_replicas: max_replicas 2 is below min_replicas 3 (line 2)"},
		{prio + "models: {a@2: {backend: sim}}\n",
			"c.yaml:2:10: models.a@2: a model id may not end in @ and a number: that names a replica (replica 2 of model m is m@2)"},
		{prio + "models: {a: {backend: sim, replicas: 2}, b: {backend: sim, aliases: [a@2]}}\n",
			"c.yaml:2:70: models.b.aliases[0]: alias \"a@2\" may not end in @ and a number: that names a replica (replica 2 of model m is m@2)"},
		{"models: {a: {backend: sim, replicas: 2}}\n",
			"c.yaml:1:38: models.a.replicas: replicas need a router that places models by VRAM (routing.router use: prioritylru or ollama, or a Wasm router): the group router runs one model of a group at a time, so a model's replicas would evict each other"},
		{prio + "gpus: [{memory: 80GiB}, {memory: 80GiB}]\nmodels: {a: {backend: sim, vram: 50GiB, replicas: 3, gpus: [0, 1]}}\n",
			"c.yaml:3:51: models.a.replicas: 3 replicas of vram: 50GiB do not fit on gpus: [0, 1] at once: they hold 2"},
	} {
		_, errs, _ := parse(t, tc.src)
		eq(t, tc.src, errs, []string{tc.want})
	}
}

// ModelOf undoes ReplicaID, and leaves every other id alone.
func TestModelOf(t *testing.T) {
	for _, id := range []string{"m", "org/llama-3@q8", "a@b"} {
		for k := 1; k <= 3; k++ {
			if got := ModelOf(ReplicaID(id, k)); got != id {
				t.Errorf("ModelOf(%q) = %q, want %q", ReplicaID(id, k), got, id)
			}
		}
	}
	for id, want := range map[string]string{"@2": "@2", "m@": "m@", "m@x": "m@x", "": ""} {
		if got := ModelOf(id); got != want {
			t.Errorf("ModelOf(%q) = %q, want %q", id, got, want)
		}
	}
}
