// Package wasmbuild compiles Go policy packages to WebAssembly for tests and
// benchmarks, with the same command `make policies` uses. Builds go through
// the Go build cache, so a package already built costs a link at most.
package wasmbuild

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

var (
	mu    sync.Mutex
	built = map[string][]byte{}
)

// Command returns the go build command that compiles pkg (an import path inside
// this module; tests run in their package directory, inside the module) into a wasip1 reactor module at out.
func Command(pkg, out string) *exec.Cmd {
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-trimpath", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	return cmd
}

// Build compiles pkg and returns the module's bytes, memoised for the life
// of the test binary. Errors carry the compiler's output.
func Build(pkg string) ([]byte, error) {
	mu.Lock()
	defer mu.Unlock()
	if b, ok := built[pkg]; ok {
		return b, nil
	}
	dir, err := os.MkdirTemp("", "loadout-wasm-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "policy.wasm")
	cmd := Command(pkg, out)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building %s to wasm: %w\n%s", pkg, err, msg)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return nil, err
	}
	built[pkg] = b
	return b, nil
}

// MustBuild is Build for tests and benchmarks: it fails tb on error.
func MustBuild(tb interface {
	Helper()
	Fatalf(string, ...any)
}, pkg string) []byte {
	tb.Helper()
	b, err := Build(pkg)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	return b
}
