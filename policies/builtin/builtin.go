// Package builtin embeds the built-in policy modules in the loadout binary,
// so `loadout serve` works with no .wasm file on disk. The modules are
// built into policies/builtin/wasm by `make policies` before the binary is
// built; a binary built without them still runs, and Lookup says what to do.
//
// It owns only the embedded bytes: loading and checking a module is
// host/policy's job.
package builtin

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
)

//go:embed wasm
var modules embed.FS

// The built-in policies by kind: the one list of them. host/config checks
// a configured `use:` against it; `make policies` builds every directory
// policies/NAME with a main.go, and a test checks that they are these.
var (
	schedulers = []string{"fifo"}
	routers    = []string{"adaptive", "foresight", "gdsf", "group", "matrix", "ollama", "prioritylru", "s3fifo", "sieve"}
	builtins   = slices.Sorted(slices.Values(append(slices.Clone(schedulers), routers...)))
)

// Schedulers returns the names of the built-in schedulers, sorted.
func Schedulers() []string { return slices.Clone(schedulers) }

// Routers returns the names of the built-in routers (swappers), sorted.
func Routers() []string { return slices.Clone(routers) }

// Names returns the names of every built-in policy, sorted, whether or not
// this binary embeds their modules.
func Names() []string { return slices.Clone(builtins) }

// Lookup returns the WebAssembly module of the built-in policy name (e.g.
// "fifo"). It fails for a name that is not a built-in, listing the
// built-ins, and for a built-in whose module was not built before this
// binary was.
func Lookup(name string) ([]byte, error) {
	if !slices.Contains(builtins, name) {
		return nil, fmt.Errorf("no built-in policy %q (built-ins: %s)", name, strings.Join(builtins, ", "))
	}
	b, err := modules.ReadFile("wasm/" + name + ".wasm")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("built-in policy %q is not embedded in this binary: run `make policies` before building", name)
	}
	if err != nil {
		return nil, fmt.Errorf("built-in policy %q: %w", name, err)
	}
	return b, nil
}
