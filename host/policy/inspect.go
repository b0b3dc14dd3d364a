package policy

import (
	"context"
	"time"

	"github.com/loadout-dev/loadout/sdk"
)

// Report describes a policy module that passed the load checks: what
// `loadout policy check` prints.
type Report struct {
	Name        string         // the name given to Inspect
	Size        int            // bytes
	Kind        sdk.PolicyKind // scheduler or swapper
	ABIVersion  uint32         // = sdk.ABIVersion
	Exports     []Function     // every exported function, sorted by name
	Imports     []Function     // every imported function, sorted by module and name
	CompileTime time.Duration  // Compile, load checks and one probe instantiation included
	CacheDir    string         // the compilation cache used, "" if none
}

// Function is one exported or imported function of a module.
type Function struct {
	Name      string // export name, or "module.name" for an import
	Signature string // e.g. "(i32) -> i64"
}

// Inspect compiles and checks wasm with r, measuring how long that takes,
// and describes the module. The error is Compile's: it names the module and
// says what is wrong.
func Inspect(ctx context.Context, r *Runtime, name string, wasm []byte) (*Report, error) {
	start := time.Now()
	m, err := r.Compile(ctx, name, wasm)
	elapsed := time.Since(start)
	if err != nil {
		return nil, err
	}
	defer m.Close(ctx)
	rep := &Report{
		Name:        m.Name,
		Size:        m.Size,
		Kind:        m.Kind,
		ABIVersion:  m.ABIVersion,
		CompileTime: elapsed,
		CacheDir:    r.CacheDir(),
	}
	for _, e := range m.Exports {
		rep.Exports = append(rep.Exports, Function{e, m.Signature(e)})
	}
	for _, i := range m.Imports {
		rep.Imports = append(rep.Imports, Function{i, m.Signature(i)})
	}
	return rep, nil
}
