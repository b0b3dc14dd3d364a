package main

import (
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// goIn runs the go command in dir and fails t with its output on error.
func goIn(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

// TestPolicyNew_OutOfTheBox is the newcomer's first hour: a new module of
// each kind is gofmt-clean, passes go vet and its own tests (its scenario
// files included), builds to WebAssembly with the one-line build, passes
// `loadout policy check`, and passes its scenarios in the sandbox with
// `loadout policy test`. Its module graph holds nothing of the host's.
func TestPolicyNew_OutOfTheBox(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two policy modules natively and to WebAssembly")
	}
	sdkDir, err := filepath.Abs(filepath.Join("..", "..", "sdk"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, kind string }{{"lru", "swapper"}, {"arrival", "scheduler"}} {
		t.Run(tc.kind, func(t *testing.T) {
			parent := t.TempDir()
			out, err := runPolicyCmd(t, "new", tc.name, "--kind", tc.kind, "--dir", parent, "--sdk-path", sdkDir)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			dir := filepath.Join(parent, tc.name)
			for _, want := range []string{"wrote " + dir + ": a " + tc.kind + " policy module", "make test", "loadout policy test " + tc.name + ".wasm testdata/scenarios/*.yaml"} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			for _, f := range []string{"main.go", tc.name + "_test.go"} {
				src, err := os.ReadFile(filepath.Join(dir, f))
				if err != nil {
					t.Fatal(err)
				}
				if formatted, err := format.Source(src); err != nil || string(formatted) != string(src) {
					t.Errorf("%s is not gofmt-clean (%v)", f, err)
				}
			}
			goIn(t, dir, nil, "vet", "./...")
			goIn(t, dir, []string{"GOOS=wasip1", "GOARCH=wasm"}, "vet", "./...")
			if out := goIn(t, dir, nil, "test", "-count=1", "-v", "./..."); !strings.Contains(out, "--- PASS: TestScenarios/") {
				t.Errorf("the native test ran no scenario file:\n%s", out)
			}
			if sc, err := exec.LookPath("staticcheck"); err == nil { // on PATH in CI (.ci/run)
				if out, err := exec.Command("sh", "-c", "cd "+dir+" && "+sc+" ./...").CombinedOutput(); err != nil {
					t.Errorf("staticcheck: %v\n%s", err, out)
				}
			}
			if graph := goIn(t, dir, nil, "list", "-m", "all"); strings.Contains(graph, "wazero") || strings.Contains(graph, "grpc") {
				t.Errorf("the module graph pulls in host dependencies:\n%s", graph)
			}
			wasm := filepath.Join(dir, tc.name+".wasm")
			goIn(t, dir, []string{"GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0"}, "build", "-buildmode=c-shared", "-o", wasm, ".")
			if out, err := runPolicyCmd(t, "check", wasm); err != nil || !strings.Contains(out, "kind:         "+tc.kind) {
				t.Fatalf("policy check: %v\n%s", err, out)
			}
			scenarios, _ := filepath.Glob(filepath.Join(dir, "testdata", "scenarios", "*.yaml"))
			if len(scenarios) < 3 {
				t.Fatalf("%d scenario files, want several", len(scenarios))
			}
			args := append([]string{"--timeout", "10s", "test", wasm}, scenarios...)
			if out, err := runPolicyCmd(t, args...); err != nil {
				t.Fatalf("policy test: %v\n%s", err, out)
			}
		})
	}
}

func TestPolicyNew_Refusals(t *testing.T) {
	dir := t.TempDir()
	sdkDir := filepath.Join("..", "..", "sdk")
	if err := os.MkdirAll(filepath.Join(dir, "taken"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "taken", "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"new", "Bad Name", "--kind", "swapper", "--dir", dir, "--sdk-path", sdkDir}, `policy name "Bad Name": use lower-case letters`},
		{[]string{"new", "x", "--dir", dir, "--sdk-path", sdkDir}, `--kind: want scheduler or swapper, got ""`},
		{[]string{"new", "x", "--kind", "router", "--dir", dir}, `--kind: want scheduler or swapper, got "router"`},
		{[]string{"new", "taken", "--kind", "swapper", "--dir", dir, "--sdk-path", sdkDir}, "already exists and is not empty"},
		{[]string{"new", "x", "--kind", "swapper", "--dir", dir, "--sdk-path", dir}, "--sdk-path " + dir + ": open"},
		{[]string{"new", "x", "--kind", "swapper", "--dir", dir, "--sdk-path", filepath.Join("..", "..")}, "is not module github.com/loadout-dev/loadout/sdk"},
		// A test binary is a build from a source tree: no released SDK to name.
		{[]string{"new", "x", "--kind", "swapper", "--dir", dir}, "was built from a source tree, so it knows no released SDK version to require: pass --sdk-path"},
	} {
		if out, err := runPolicyCmd(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error containing %q\n%s", tc.args, err, tc.want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); err == nil {
		t.Error("a refused new left a directory behind")
	}
}

// With --sdk-version, as outside a source tree, the module requires that
// release and replaces nothing.
func TestPolicyNew_SDKVersion(t *testing.T) {
	dir := t.TempDir()
	out, err := runPolicyCmd(t, "new", "fair", "--kind", "scheduler", "--dir", dir, "--sdk-version", "v0.7.1", "--module", "example.com/policies/fair")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	mod, err := os.ReadFile(filepath.Join(dir, "fair", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"module example.com/policies/fair\n", "require github.com/loadout-dev/loadout/sdk v0.7.1\n"} {
		if !strings.Contains(string(mod), want) {
			t.Errorf("go.mod lacks %q:\n%s", want, mod)
		}
	}
	if strings.Contains(string(mod), "replace") {
		t.Errorf("go.mod replaces the SDK:\n%s", mod)
	}
	if !strings.Contains(out, "go mod tidy") {
		t.Errorf("the next steps do not say to fetch the SDK:\n%s", out)
	}
	help, err := runPolicyCmd(t, "new", "--help")
	if err != nil || !strings.Contains(help, "--sdk-path string") || !strings.Contains(help, "least recently used") {
		t.Errorf("new --help: %v\n%s", err, help)
	}
}
