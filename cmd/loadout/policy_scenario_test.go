package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/internal/wasmbuild"
)

// builtinFile builds the built-in policy name to a .wasm file in dir.
func builtinFile(t *testing.T, dir, name string) string {
	t.Helper()
	wasm := wasmbuild.MustBuild(t, "github.com/loadout-dev/loadout/policies/"+name)
	path := filepath.Join(dir, name+".wasm")
	if err := os.WriteFile(path, wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// The built-in policies' scenario files pass against their modules through
// the command, as an operator would run them.
func TestPolicyTest_BuiltinScenarios(t *testing.T) {
	if testing.Short() {
		t.Skip("builds policies to WebAssembly")
	}
	dir := t.TempDir()
	for _, name := range []string{"fifo", "group", "prioritylru"} {
		files, err := filepath.Glob(filepath.Join("..", "..", "policies", name, "testdata", "scenarios", "*.yaml"))
		if err != nil || len(files) < 4 {
			t.Fatalf("%s: %d scenario files (%v); want several", name, len(files), err)
		}
		args := append([]string{"--timeout", "10s", "test", builtinFile(t, dir, name)}, files...)
		out, err := runPolicyCmd(t, args...)
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		if want := "all " + strconv.Itoa(len(files)) + " scenarios passed"; !strings.Contains(out, want) {
			t.Errorf("%s: output lacks %q:\n%s", name, want, out)
		}
	}
}

func TestPolicyTest_Failures(t *testing.T) {
	if testing.Short() {
		t.Skip("builds policies to WebAssembly")
	}
	dir := t.TempDir()
	fifo := builtinFile(t, dir, "fifo")
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	wrong := write("wrong.yaml", `kind: scheduler
models: [{name: a}, {name: b, state: ready}]
steps:
  - request: {id: 1, model: a}
    expect:
      - start_swap: {model: a}
      - queue: {id: 1, pos: 0}
`)
	broken := write("broken.yaml", "kind: scheduler\nsteps:\n  - request: {id: 1, model: a, prio: 3}\n")
	swapper := write("swapper.yaml", "kind: swapper\nsteps: [plan: {target: a}]\n")
	good := write("good.yaml", "kind: scheduler\nmodels: [{name: a, state: ready}]\nsteps:\n  - request: {id: 1, model: a}\n    expect: [grant: 1]\n")
	out, err := runPolicyCmd(t, "--timeout", "10s", "test", fifo, wrong, broken, swapper, good)
	if err == nil || err.Error() != "3 of 4 scenarios failed against "+fifo {
		t.Errorf("error %v", err)
	}
	for _, want := range []string{
		"FAIL  " + wrong + "\n  " + wrong + ":6: step 1 (request: {id: 1, model: a}): effect 1 differs\n    want: start_swap: {model: a}\n    got:  start_swap: {model: a, evict: [b]}\n",
		"FAIL  " + broken + "\n  " + broken + `:3: unknown field "prio"`,
		swapper + ":1: the scenario is for a swapper; the policy is a scheduler",
		"ok    " + good,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	out, err = runPolicyCmd(t, "--timeout", "10s", "test", "-v", fifo, good)
	if err != nil || !strings.Contains(out, "step 1, line 4, at 0s: request: {id: 1, model: a}\n  expect:\n    - grant: {id: 1, model: a}\n") {
		t.Errorf("-v: %v\n%s", err, out)
	}
	if _, err := runPolicyCmd(t, "test", fifo); err == nil {
		t.Error("test without a scenario succeeded")
	}
	help, err := runPolicyCmd(t, "test", "--help")
	if err != nil || !strings.Contains(help, "swap_done") || !strings.Contains(help, "docs/POLICIES.md") {
		t.Errorf("test --help: %v\n%s", err, help)
	}
}
