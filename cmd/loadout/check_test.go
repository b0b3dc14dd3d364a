package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/internal/wasmbuild"
)

// checkFile runs config check's policy step on a configuration: parse,
// then load and initialise the policies with their settings.
func checkFile(t *testing.T, path string) error {
	t.Helper()
	cfg, _, err := config.Load(path)
	if err != nil {
		t.Fatalf("config %s: %v", path, err)
	}
	return checkPolicies(context.Background(), cfg)
}

// TestConfigCheck_PolicySettingsErrors: a setting a built-in policy
// refuses is reported by config check at its file:line:col with its key
// path, whether it was written under routing.*.settings or came from
// llama-swap's legacy top-level groups: and matrix:, and what check
// accepts, serve runs (the same policy decides both).
func TestConfigCheck_PolicySettingsErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const models = "models:\n  a: {backend: sim}\n  b: {backend: sim}\n  llama-70b: {backend: sim}\n"
	for _, tc := range []struct {
		name, body, want string
	}{
		{"fifo-unknown.yaml", models + "routing:\n  scheduler:\n    use: fifo\n    settings:\n      max_qeue: 3\n",
			`fifo-unknown.yaml:9:7: routing.scheduler.settings.max_qeue: unknown setting "max_qeue" (known: fifo, max_queue, max_wait, load_order, scale_in_after, reload_evicted, drain_after)`},
		{"fifo-wait.yaml", models + "routing:\n  scheduler:\n    use: fifo\n    settings: {max_wait: soon}\n",
			`fifo-wait.yaml:8:16: routing.scheduler.settings.max_wait: want a duration like "30s" or "1m30s", got "soon"`},
		{"matrix-var.yaml", models + "routing:\n  router:\n    use: matrix\n    settings:\n      matrix:\n        vars:\n          l: llama-70b\n          \"bad id\": a\n        sets: {s: l & b}\n",
			`matrix-var.yaml:12:11: routing.router.settings.matrix.vars["bad id"]: var ids are 1 to 32 ASCII letters, digits, '-' or '.' (llama-swap's rule), got "bad id"`},
		{"matrix-undefined.yaml", models + "routing:\n  router:\n    use: matrix\n    settings:\n      matrix:\n        vars: {l: llama-70b, y: nope}\n",
			`matrix-undefined.yaml:10:30: routing.router.settings.matrix.vars.y: model "nope" is not defined`},
		{"matrix-expr.yaml", models + "routing:\n  router:\n    use: matrix\n    settings:\n      matrix:\n        sets:\n          s1: a & b\n          s2: \"(a & c\"\n",
			`matrix-expr.yaml:12:11: routing.router.settings.matrix.sets.s2: column 7: expected ")" to close "(" at column 1, got end of expression`},
		{"legacy-matrix.yaml", models + "matrix:\n  vars:\n    x: a\n  sets:\n    both: x & zz\n",
			`legacy-matrix.yaml:9:5: matrix.sets.both: column 5: "zz" is neither a var nor a model id (vars: x)`},
		{"legacy-groups.yaml", models + "groups:\n  one:\n    members: [a, b]\n  two:\n    members: [llama-70b, a]\n",
			`legacy-groups.yaml:9:26: groups.two.members[1]: model "a" is in two groups: "one" (groups.one.members[0]) and "two"`},
		{"groups-default.yaml", models + "routing:\n  router:\n    use: group\n    settings:\n      groups:\n        \"(default)\": {members: [a]}\n",
			`groups-default.yaml:10:9: routing.router.settings.groups["(default)"]: (default) is the name of the implicit group`},
		{"prioritylru.yaml", models + "routing:\n  router:\n    use: prioritylru\n    settings: {margin: lots}\n",
			`prioritylru.yaml:8:16: routing.router.settings.margin: size "lots"`},
	} {
		err := checkFile(t, write(tc.name, tc.body))
		if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, tc.want)) {
			t.Errorf("%s: config check = %v\nwant %s", tc.name, err, tc.want)
		}
	}
	// llama-swap's newest matrix rules: a var id with '-' and '.', model ids
	// in sets and evict_costs. Check accepts it because the policy does.
	ok := write("matrix-ok.yaml", models+"matrix:\n  vars: {llama-70b: llama-70b, g.1: a}\n  evict_costs: {llama-70b: 30, b: 2}\n  sets: {s: llama-70b & g.1 | b}\n")
	if err := checkFile(t, ok); err != nil {
		t.Errorf("matrix-ok.yaml: %v", err)
	}
}

// TestConfigCheck_ThirdPartySettingsError: a third-party .wasm policy that
// reports its settings errors through sdk/settings gets them at
// file:line:col like a built-in.
func TestConfigCheck_ThirdPartySettingsError(t *testing.T) {
	dir := t.TempDir()
	wasm := wasmbuild.MustBuild(t, "github.com/loadout-dev/loadout/cmd/loadout/testdata/settingsguest")
	if err := os.WriteFile(filepath.Join(dir, "guest.wasm"), wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "c.yaml")
	body := "models:\n  a: {backend: sim}\nrouting:\n  router:\n    wasm: guest.wasm\n    settings:\n      limits:\n        a: {keep: 3}\n        b:\n          keep: 99\n"
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	err := checkFile(t, cfg)
	want := cfg + `:10:11: routing.router.settings.limits.b.keep: want a whole number from 0 to 8, got 99`
	if err == nil || err.Error() != want {
		t.Errorf("config check = %v\nwant %s", err, want)
	}
	// A plain error (no settings path) is still positioned, at the policy.
	body = "models:\n  a: {backend: sim}\nrouting:\n  router:\n    wasm: guest.wasm\n    settings: {limits: {a: {keep: 1}}}\n"
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := checkFile(t, cfg); err != nil {
		t.Errorf("good settings: %v", err)
	}
}
