package policy

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/loadout-dev/loadout/internal/wasmbuild"
)

// cacheDir is a compilation cache shared by every test of the package, so
// that each Go guest is compiled once per run, not once per test.
var cacheDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "loadout-policy-cache-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cacheDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const guestPkg = "github.com/loadout-dev/loadout/host/policy/testdata/guests/"

// guest builds the test guest at testdata/guests/<name> to Wasm.
func guest(tb testing.TB, name string) []byte {
	tb.Helper()
	return wasmbuild.MustBuild(tb, guestPkg+name)
}

// newTestRuntime makes a runtime on the shared cache, logging to the
// returned recorder. opts may set limits; CacheDir and Logger are filled in.
func newTestRuntime(tb testing.TB, opts Options) (*Runtime, *logRecorder) {
	tb.Helper()
	log, rec := newLogRecorder()
	opts.Logger = log
	if opts.CacheDir == "" {
		opts.CacheDir = cacheDir
	}
	r, err := NewRuntime(context.Background(), opts)
	if err != nil {
		tb.Fatalf("NewRuntime: %v", err)
	}
	tb.Cleanup(func() { r.Close(context.Background()) })
	return r, rec
}

// compile compiles a guest or fails tb.
func compile(tb testing.TB, r *Runtime, name string, wasm []byte) *Module {
	tb.Helper()
	m, err := r.Compile(context.Background(), name, wasm)
	if err != nil {
		tb.Fatalf("Compile: %v", err)
	}
	return m
}

// newScheduler compiles the named Go guest and instantiates it with
// settings against fx.
func newScheduler(tb testing.TB, r *Runtime, guestName, settings string, fx *fakeEffects) *Scheduler {
	tb.Helper()
	m := compile(tb, r, guestName+".wasm", guest(tb, guestName))
	s, err := r.NewScheduler(context.Background(), m, []byte(settings), fx)
	if err != nil {
		tb.Fatalf("NewScheduler: %v", err)
	}
	tb.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// newSwapper compiles the swapper guest and instantiates it.
func newSwapper(tb testing.TB, r *Runtime, settings string, h *fakeEffects) *Swapper {
	tb.Helper()
	m := compile(tb, r, "swapper.wasm", guest(tb, "swapper"))
	s, err := r.NewSwapper(context.Background(), m, []byte(settings), h)
	if err != nil {
		tb.Fatalf("NewSwapper: %v", err)
	}
	tb.Cleanup(func() { s.Close(context.Background()) })
	return s
}
