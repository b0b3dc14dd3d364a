package policy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/wire"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"
)

// Module is a compiled policy that passed the load checks. Instantiate it
// with Runtime.NewScheduler or Runtime.NewSwapper, as many times as needed.
type Module struct {
	Name string         // the file path or "builtin:<name>" given to Compile; in every message
	Kind sdk.PolicyKind // scheduler or swapper (never KindNone)
	// ABIVersion is the module's loadout_abi_version: wire.MinVersion (2)
	// to sdk.ABIVersion (3). The host talks to the module in it: a
	// version 2 module gets no residency (an asleep model is just
	// Stopped) and its plans and swaps carry no eviction modes (every
	// victim gets sdk.EvictDefault). See docs/ABI.md, "Versions".
	ABIVersion uint32
	Exports    []string // the names of every exported function, sorted
	Imports    []string // every imported function as "module.name", sorted, without duplicates
	Size       int      // the module's size in bytes

	// CallTimeout, when set before the first Scheduler or Swapper is made
	// from the module, is the deadline of one call into its instances in
	// place of the runtime's Options.CallTimeout; 0 keeps the runtime's.
	// serve gives the built-in policies BuiltinCallTimeout.
	CallTimeout time.Duration

	// OnCrash, when set before the first Scheduler or Swapper is made from
	// the module, is called after an instance of it crashes, on the
	// goroutine that called it, before it is re-instantiated. It must not
	// block. serve compiles the fallback policies on the first crash.
	OnCrash func()

	sigs     map[string]string // export name or "module.name" import → signature
	compiled wazero.CompiledModule
	r        *Runtime

	// spare is the instance the load checks made (its _initialize run),
	// kept for the first Scheduler or Swapper made from the module, which
	// then instantiates nothing (docs/RATIONALE.md, start-up). nil once
	// taken or trimmed.
	mu    sync.Mutex
	spare *spareInstance
}

// spareInstance is an instantiated module whose start functions ran, and
// the output buffer its stdout and stderr write to.
type spareInstance struct {
	mod api.Module
	out *guestOutput
}

// takeSpare returns the spare instance and forgets it, or nil.
func (m *Module) takeSpare() *spareInstance {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.spare
	m.spare = nil
	return s
}

// Trim releases the instance Compile made for its checks and keeps for the
// first Scheduler or Swapper made from m (a Go guest's memory, about
// 5 MiB): for a module that may not be instantiated soon, such as a
// fallback. That first instantiation then starts a fresh instance.
func (m *Module) Trim(ctx context.Context) {
	if s := m.takeSpare(); s != nil {
		_ = s.mod.Close(ctx)
	}
}

// Signature returns the signature of an exported function, or of an
// imported one named "module.name", formatted like "(i32) -> i64"; "" if
// the module has no such function.
func (m *Module) Signature(name string) string { return m.sigs[name] }

// Close releases the compiled code. Instances already made keep working,
// but no new ones can be made, and a Scheduler or Swapper re-instantiates
// from its Module after a crash: close a Module only when nothing made
// from it is still in use.
func (m *Module) Close(ctx context.Context) error {
	m.Trim(ctx)
	if err := m.compiled.Close(ctx); err != nil {
		return fmt.Errorf("policy %s: closing: %w", m.Name, err)
	}
	return nil
}

var wasmMagic = []byte{0x00, 'a', 's', 'm'}

// Compile compiles a policy module and checks it against the policy ABI
// (docs/ABI.md). name identifies it in every message: a file path or
// "builtin:fifo". A module is refused when it is not Wasm or truncated,
// imports from a module other than loadout_v2 and wasi_snapshot_preview1 (or
// a function those do not provide), reports an ABI version this host does
// not speak (it speaks wire.MinVersion to sdk.ABIVersion) or no policy
// kind, or lacks one of its kind's exports with exactly the documented
// signature. Compile instantiates the module once, to read its version and
// kind, and keeps that instance for the first Scheduler or Swapper made
// from the Module (see Trim); with a warm compilation cache it costs tens
// of milliseconds, without one about a second for a Go guest.
func (r *Runtime) Compile(ctx context.Context, name string, wasm []byte) (*Module, error) {
	r.compiling.RLock()
	defer r.compiling.RUnlock()
	if r.closed.Load() {
		return nil, fmt.Errorf("policy %s: runtime is closed", name)
	}
	if len(wasm) < 8 || !bytes.Equal(wasm[:4], wasmMagic) {
		head := wasm[:min(len(wasm), 4)]
		return nil, fmt.Errorf("policy %s: not a WebAssembly module (%d bytes, starting %q)", name, len(wasm), head)
	}
	compiled, err := r.wz.CompileModule(ctx, wasm)
	if err != nil && strings.Contains(err.Error(), "over limit of") {
		// wazero's words for a memory section whose minimum is above
		// the runtime's limit: the module is sound, the limit too low.
		return nil, fmt.Errorf("policy %s: the module needs more memory than the limit of %d pages of 64 KiB (--memory-pages): %w", name, r.opts.MemoryLimitPages, err)
	}
	if err != nil {
		return nil, fmt.Errorf("policy %s: invalid or truncated WebAssembly module: %w", name, err)
	}
	m := &Module{Name: name, Size: len(wasm), compiled: compiled, r: r, sigs: map[string]string{}}
	if err := m.load(ctx); err != nil {
		_ = m.Close(ctx)
		return nil, err
	}
	return m, nil
}

// load fills m from its compiled module and runs every check.
func (m *Module) load(ctx context.Context) error {
	exports := m.compiled.ExportedFunctions()
	for name, def := range exports {
		m.Exports = append(m.Exports, name)
		m.sigs[name] = signature(def.ParamTypes(), def.ResultTypes())
	}
	slices.Sort(m.Exports)
	if err := m.checkImports(); err != nil {
		return err
	}
	for _, e := range commonExports[:2] { // version and kind, which the probe calls
		if err := m.checkExport(exports, e.name, e.sig); err != nil {
			return err
		}
	}
	if err := m.probe(ctx); err != nil {
		return err
	}
	for _, e := range commonExports[2:] {
		if err := m.checkExport(exports, e.name, e.sig); err != nil {
			return err
		}
	}
	for _, ev := range kindEvents[m.Kind] {
		if err := m.checkExport(exports, ev.String(), sigEvent); err != nil {
			return err
		}
	}
	if len(m.compiled.ExportedMemories()) == 0 {
		return fmt.Errorf("policy %s: exports no memory; the host writes events into the guest's memory", m.Name)
	}
	return nil
}

// checkImports refuses imports from any module but loadout_v2 and WASI, and
// functions those modules do not provide with the same signature.
func (m *Module) checkImports() error {
	var foreign []string
	for _, def := range m.compiled.ImportedFunctions() {
		mod, name, _ := def.Import()
		sig := signature(def.ParamTypes(), def.ResultTypes())
		full := mod + "." + name
		m.Imports = append(m.Imports, full)
		m.sigs[full] = sig
		provided, ok := m.r.provided[mod]
		if !ok {
			foreign = append(foreign, fmt.Sprintf("%q (function %s)", mod, name))
			continue
		}
		want, ok := provided[name]
		if !ok {
			if mod == hostModuleName {
				return fmt.Errorf("policy %s: imports %s, which this host does not provide (ABI v%d has: %s)",
					m.Name, full, sdk.ABIVersion, strings.Join(slices.Sorted(maps.Keys(provided)), ", "))
			}
			return fmt.Errorf("policy %s: imports %s, which this host does not provide", m.Name, full)
		}
		if wantSig := signature(want.ParamTypes(), want.ResultTypes()); wantSig != sig {
			return fmt.Errorf("policy %s: imports %s with signature %s, want %s", m.Name, full, sig, wantSig)
		}
	}
	for _, def := range m.compiled.ImportedMemories() {
		mod, name, _ := def.Import()
		foreign = append(foreign, fmt.Sprintf("%q (memory %s)", mod, name))
	}
	slices.Sort(m.Imports)
	m.Imports = slices.Compact(m.Imports) // Go declares fd_write twice
	if len(foreign) > 0 {
		return fmt.Errorf("policy %s: imports from %s; a policy may import only from %s and %s",
			m.Name, strings.Join(foreign, ", "), hostModuleName, wasiModuleName)
	}
	return nil
}

// checkExport checks that export name exists with signature want.
func (m *Module) checkExport(exports map[string]api.FunctionDefinition, name string, want funcType) error {
	def, ok := exports[name]
	if !ok {
		what := "a loadout policy"
		if m.Kind != sdk.KindNone {
			what = "a " + m.Kind.String() + " policy"
		}
		return fmt.Errorf("policy %s: lacks export %s %s, which %s must have", m.Name, name, want, what)
	}
	if !want.equal(def.ParamTypes(), def.ResultTypes()) {
		return fmt.Errorf("policy %s: export %s has signature %s, want %s",
			m.Name, name, signature(def.ParamTypes(), def.ResultTypes()), want)
	}
	return nil
}

// probe instantiates the module once (running _initialize, under a
// deadline) and reads its ABI version and policy kind. The instance becomes
// m's spare when the module passes; it is closed otherwise.
func (m *Module) probe(ctx context.Context) (err error) {
	ctx, cancel := context.WithTimeout(ctx, m.r.startTimeout)
	defer cancel()
	out := new(guestOutput)
	mod, err := m.r.wz.InstantiateModule(ctx, m.compiled, m.r.moduleConfig(out))
	if err != nil {
		return fmt.Errorf("policy %s: instantiating: %s: %w", m.Name, startFailure(err, ctx, out), err)
	}
	defer func() {
		if err != nil {
			_ = mod.Close(context.Background())
			return
		}
		m.mu.Lock()
		m.spare = &spareInstance{mod: mod, out: out}
		m.mu.Unlock()
	}()
	if mod.IsClosed() {
		return fmt.Errorf("policy %s: instantiating: the module exited during _initialize", m.Name)
	}
	get := func(export string) (uint32, error) {
		res, err := mod.ExportedFunction(export).Call(ctx)
		if err != nil {
			return 0, fmt.Errorf("policy %s: calling %s: %w", m.Name, export, err)
		}
		return api.DecodeU32(res[0]), nil
	}
	if m.ABIVersion, err = get(exportABIVersion); err != nil {
		return err
	}
	if !wire.Supported(m.ABIVersion) {
		fix := "rebuild it against the current SDK"
		if m.ABIVersion > sdk.ABIVersion {
			fix = "it needs a newer loadout (or rebuild it against this loadout's SDK)"
		}
		return fmt.Errorf("policy %s: built for ABI v%d, this host speaks versions %d to %d: %s", m.Name, m.ABIVersion, wire.MinVersion, sdk.ABIVersion, fix)
	}
	kind, err := get(exportKind)
	if err != nil {
		return err
	}
	m.Kind = sdk.PolicyKind(kind)
	switch m.Kind {
	case sdk.KindScheduler, sdk.KindSwapper:
		return nil
	case sdk.KindNone:
		return fmt.Errorf("policy %s: registers no policy (loadout_policy_kind is 0): call sdk.RegisterScheduler or sdk.RegisterSwapper from an init function", m.Name)
	default:
		return fmt.Errorf("policy %s: unknown policy kind %d (want %d scheduler or %d swapper)",
			m.Name, kind, sdk.KindScheduler, sdk.KindSwapper)
	}
}

// startFailure describes why instantiating failed, for a message.
func startFailure(err error, ctx context.Context, out *guestOutput) string {
	var exit *sys.ExitError
	if errors.As(err, &exit) && ctx.Err() != nil {
		return "_initialize exceeded its deadline"
	}
	return crashReason(err, false, 0, out.text())
}
