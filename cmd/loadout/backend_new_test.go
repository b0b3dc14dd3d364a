package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The scaffold is the example backend's source: rendered with the
// example's name it is the example, file for file, so the two never drift.
func TestBackendNew_MatchesExample(t *testing.T) {
	parent := t.TempDir()
	dir, err := writeBackendModule("llamacpp-python", backendNewOptions{dir: parent, pluginsVersion: "v0.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"backend.go", "options.go", "backend_test.go"} {
		got, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join("..", "..", "examples", "llamacpp-python", f))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s differs from examples/llamacpp-python/%s: change both (cmd/loadout/backend_scaffold/%s.tmpl)", f, f, f)
		}
	}
}

// A new backend module builds offline against the protocol module this
// loadout embeds, passes go vet and its tests, holds nothing of the host in
// its module graph, and passes `loadout backend check`.
func TestBackendNew_OutOfTheBox(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a backend module")
	}
	parent := t.TempDir()
	out, err := exec.Command(loadoutBin, "backend", "new", "myserver", "--dir", parent, "--module", "example.com/myserver").CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	dir := filepath.Join(parent, "myserver")
	if !strings.Contains(string(out), "wrote "+dir+": a backend plugin module") {
		t.Errorf("output:\n%s", out)
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "testdata", "llamacpp", "make_gguf.py"))
	if err != nil {
		t.Fatal(err)
	}
	// Its tests run a real server where llama-cpp-python is installed.
	offline := []string{"GOPROXY=off", "GOFLAGS=-mod=readonly", "LOADOUT_MAKE_GGUF=" + script}
	goIn(t, dir, offline, "vet", "./...")
	goIn(t, dir, offline, "test", "-count=1", "./...")
	goIn(t, dir, offline, "build", "-o", "myserver", ".")
	if graph := goIn(t, dir, offline, "list", "-m", "all"); strings.Contains(graph, "wazero") || strings.Contains(graph, "sqlite") || strings.Contains(graph, "go-nvml") {
		t.Errorf("the module graph holds host dependencies:\n%s", graph)
	}
	check, err := exec.Command(loadoutBin, "backend", "check", filepath.Join(dir, "myserver"), "--options", `{"model": "/m.gguf"}`).CombinedOutput()
	if err != nil || !strings.Contains(string(check), "name             myserver 0.1.0") || !strings.Contains(string(check), "no problems") {
		t.Errorf("backend check: %v\n%s", err, check)
	}
}

// backend new refuses, as policy new does (one rule), what its go.mod
// could not take, and writes nothing.
func TestBackendNew_Refusals(t *testing.T) {
	parent := t.TempDir()
	for _, tc := range []struct {
		name string
		o    backendNewOptions
		want string
	}{
		{"main", backendNewOptions{}, `module path "main" is reserved by the go command`},
		{"x", backendNewOptions{module: "a b"}, `--module: malformed import path "a b"`},
		{"x", backendNewOptions{pluginsVersion: "latest"}, `--plugins-version "latest": `},
		{"x", backendNewOptions{pluginsVersion: "v0.1.0", pluginsPath: "../../plugins"}, "--plugins-path and --plugins-version: give one"},
	} {
		tc.o.dir = parent
		if _, err := writeBackendModule(tc.name, tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %+v: %v, want an error containing %q", tc.name, tc.o, err, tc.want)
		}
	}
	if entries, _ := os.ReadDir(parent); len(entries) != 0 {
		t.Errorf("refused news wrote %v", entries)
	}
}
