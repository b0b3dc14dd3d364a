package policy

import (
	"context"
	"fmt"
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
// then makes the instance serve would make of it — abi_buffers read and
// checked against its memory, init called with settings (JSON; nil means
// "{}") on the fake host of Bench — and describes the module. The error
// is Compile's, NewScheduler's or NewSwapper's: it names the module and
// says what is wrong; one from instantiating ends with the settings given.
func Inspect(ctx context.Context, r *Runtime, name string, wasm []byte, settings []byte) (*Report, error) {
	if settings == nil {
		settings = []byte("{}")
	}
	start := time.Now()
	m, err := r.Compile(ctx, name, wasm)
	elapsed := time.Since(start)
	if err != nil {
		return nil, err
	}
	defer m.Close(ctx)
	if err := instantiate(ctx, r, m, settings); err != nil {
		return nil, err
	}
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

// instantiate makes and closes one instance of m as serve makes its
// policies, against Bench's fake host.
func instantiate(ctx context.Context, r *Runtime, m *Module, settings []byte) error {
	h := newBenchHost(8)
	var err error
	switch m.Kind {
	case sdk.KindScheduler:
		var s *Scheduler
		if s, err = r.NewScheduler(ctx, m, settings, h); err == nil {
			s.Close(ctx)
		}
	case sdk.KindSwapper:
		var s *Swapper
		if s, err = r.NewSwapper(ctx, m, settings, h); err == nil {
			s.Close(ctx)
		}
	}
	if err != nil {
		return fmt.Errorf("%w (settings %s)", err, settings)
	}
	return nil
}
