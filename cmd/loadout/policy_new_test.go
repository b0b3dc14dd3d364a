package main

import (
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/internal/sdksource"
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

// offline is the environment of a machine with no network and, with
// bare, an empty module cache (a release's user): what a new module
// builds with comes from the module itself (third_party/), or with
// --sdk-path from the source tree and the module cache its build filled.
func offline(t *testing.T, bare bool) []string {
	env := []string{"GOPROXY=off", "GOFLAGS=-mod=mod"}
	if bare {
		env = append(env, "GOMODCACHE="+t.TempDir())
	}
	return env
}

// TestPolicyNew_OutOfTheBox is the newcomer's first hour: a new module of
// each kind is gofmt-clean, passes go vet and its own tests (its scenario
// files included), builds to WebAssembly with the one-line build, passes
// `loadout policy check`, and passes its scenarios in the sandbox with
// `loadout policy test`. Its module graph holds nothing of the host's.
// It is written as the README says, by a binary built from this source
// tree (TestMain builds it as `make build` does) with no flag, and all of
// it runs offline with an empty module cache, as from a release; and
// again with --sdk-path.
func TestPolicyNew_OutOfTheBox(t *testing.T) {
	if testing.Short() {
		t.Skip("builds policy modules natively and to WebAssembly")
	}
	sdkDir, err := filepath.Abs(filepath.Join("..", "..", "sdk"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, kind, sdkPath string }{{"lru", "swapper", ""}, {"arrival", "scheduler", ""}, {"lru", "swapper", sdkDir}} {
		t.Run(tc.kind+map[bool]string{true: "/sdk-path"}[tc.sdkPath != ""], func(t *testing.T) {
			parent := t.TempDir()
			args := []string{"policy", "new", tc.name, "--kind", tc.kind}
			if tc.sdkPath != "" {
				args = append(args, "--sdk-path", tc.sdkPath)
			}
			cmd := exec.Command(loadoutBin, args...)
			cmd.Dir = parent
			b, err := cmd.CombinedOutput()
			out := string(b)
			if err != nil {
				t.Fatalf("loadout %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			dir := tc.name
			if strings.Contains(out, "go mod tidy") {
				t.Errorf("the next steps say to fetch the SDK:\n%s", out)
			}
			for _, want := range []string{"wrote " + dir + ": a " + tc.kind + " policy module", "make test", "loadout policy test " + tc.name + ".wasm testdata/scenarios/*.yaml"} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
			dir = filepath.Join(parent, tc.name)
			env := offline(t, tc.sdkPath == "")
			for _, f := range []string{"main.go", tc.name + "_test.go"} {
				src, err := os.ReadFile(filepath.Join(dir, f))
				if err != nil {
					t.Fatal(err)
				}
				if formatted, err := format.Source(src); err != nil || string(formatted) != string(src) {
					t.Errorf("%s is not gofmt-clean (%v)", f, err)
				}
			}
			goIn(t, dir, env, "mod", "tidy") // the README's step; offline too
			goIn(t, dir, env, "vet", "./...")
			goIn(t, dir, append(env, "GOOS=wasip1", "GOARCH=wasm"), "vet", "./...")
			if out := goIn(t, dir, env, "test", "-count=1", "-v", "./..."); !strings.Contains(out, "--- PASS: TestScenarios/") {
				t.Errorf("the native test ran no scenario file:\n%s", out)
			}
			if sc, err := exec.LookPath("staticcheck"); err == nil { // on PATH in CI (.ci/run)
				if out, err := exec.Command("sh", "-c", "cd "+dir+" && "+sc+" ./...").CombinedOutput(); err != nil {
					t.Errorf("staticcheck: %v\n%s", err, out)
				}
			}
			if graph := goIn(t, dir, env, "list", "-m", "all"); strings.Contains(graph, "wazero") || strings.Contains(graph, "grpc") {
				t.Errorf("the module graph pulls in host dependencies:\n%s", graph)
			}
			wasm := filepath.Join(dir, tc.name+".wasm")
			goIn(t, dir, append(env, "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0"), "build", "-buildmode=c-shared", "-o", wasm, ".")
			if out, err := runPolicyCmd(t, "check", wasm); err != nil || !strings.Contains(out, "kind:         "+tc.kind) {
				t.Fatalf("policy check: %v\n%s", err, out)
			}
			scenarios, _ := filepath.Glob(filepath.Join(dir, "testdata", "scenarios", "*.yaml"))
			if len(scenarios) < 3 {
				t.Fatalf("%d scenario files, want several", len(scenarios))
			}
			args = append([]string{"--timeout", "10s", "test", wasm}, scenarios...)
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
	if err := os.WriteFile(filepath.Join(dir, "taken", "x"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"new", "Bad Name", "--kind", "swapper", "--dir", dir, "--sdk-path", sdkDir}, `policy name "Bad Name": use lower-case letters`},
		{[]string{"new", "x", "--dir", dir, "--sdk-path", sdkDir}, `--kind: want scheduler or swapper, got ""`},
		{[]string{"new", "x", "--kind", "router", "--dir", dir}, `--kind: want scheduler or swapper, got "router"`},
		{[]string{"new", "taken", "--kind", "swapper", "--dir", dir, "--sdk-path", sdkDir}, "taken already exists; pick another name or --dir (nothing was written)"},
		{[]string{"new", "taken", "--kind", "swapper", "--dir", dir}, "taken already exists"},
		{[]string{"new", "empty", "--kind", "scheduler", "--dir", dir}, "empty already exists"},
		{[]string{"new", "x", "--kind", "swapper", "--dir", dir, "--sdk-path", dir}, "--sdk-path " + dir + ": open"},
		{[]string{"new", "x", "--kind", "swapper", "--dir", dir, "--sdk-path", filepath.Join("..", "..")}, "is not module github.com/loadout-dev/loadout/sdk"},
		// What go.mod would refuse or `go test` fail on (module main
		// cannot import its own package).
		{[]string{"new", "main", "--kind", "scheduler", "--dir", dir}, `module path "main" is reserved by the go command`},
		{[]string{"new", "x", "--kind", "scheduler", "--dir", dir, "--module", "all"}, `--module: module path "all" is reserved`},
		{[]string{"new", "x", "--kind", "scheduler", "--dir", dir, "--module", "bad module path!"}, `--module: malformed import path "bad module path!"`},
		{[]string{"new", "x", "--kind", "scheduler", "--dir", dir, "--sdk-version", "banana"}, `--sdk-version "banana": `},
		{[]string{"new", "x", "--kind", "scheduler", "--dir", dir, "--sdk-version", "v2.0.0"}, `--sdk-version "v2.0.0": `},
		{[]string{"new", "x", "--kind", "scheduler", "--dir", dir, "--sdk-path", sdkDir, "--sdk-version", "v1.0.0"}, "--sdk-path and --sdk-version: give one"},
	} {
		if out, err := runPolicyCmd(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error containing %q\n%s", tc.args, err, tc.want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); err == nil {
		t.Error("a refused new left a directory behind")
	}
	if b, err := os.ReadFile(filepath.Join(dir, "taken", "x")); err != nil || string(b) != "mine" {
		t.Errorf("a refused new touched what was there: %q, %v", b, err)
	}
	if entries, err := os.ReadDir(filepath.Join(dir, "empty")); err != nil || len(entries) != 0 {
		t.Errorf("a refused new wrote into an existing empty directory: %v, %v", entries, err)
	}
}

// A loadout built without its SDK (a bare `go build`, from a source tree)
// has nothing to unpack and no released SDK to name: with no flag, new
// says what to do and writes nothing.
func TestPolicyNew_NoEmbeddedSDK(t *testing.T) {
	dir := t.TempDir()
	_, _, err := writePolicyModule("x", policyNewOptions{kind: "swapper", dir: dir,
		embedded: func() (*sdksource.Archive, error) { return nil, sdksource.ErrNotEmbedded }})
	for _, want := range []string{"carries no policy SDK (it was built with a bare `go build`; `make build` embeds it)", "pass --sdk-path with a source tree's sdk directory"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to contain %q", err, want)
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
