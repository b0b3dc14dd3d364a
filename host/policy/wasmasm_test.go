package policy

import (
	"encoding/binary"

	"github.com/loadout-dev/loadout/sdk"
)

// A tiny WebAssembly binary writer for hand-made test modules: the load
// checks and the traps a Go guest cannot produce. It writes the type,
// import, function, memory, export, code and data sections; nothing else.

const (
	wI32 byte = 0x7f
	wI64 byte = 0x7e
)

// wasmFunc is a function defined by the module.
type wasmFunc struct {
	export          string // "" if not exported
	params, results []byte
	body            []byte // instructions, without the final end
}

// wasmImport is an imported function.
type wasmImport struct {
	module, name    string
	params, results []byte
}

// wasmData is an active data segment in memory 0.
type wasmData struct {
	offset uint32
	bytes  []byte
}

// wasmModule is a module to assemble. Function indexes count imports first.
type wasmModule struct {
	imports  []wasmImport
	funcs    []wasmFunc
	memPages uint32 // 0: no memory
	data     []wasmData
}

func uleb(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

func sleb(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func wname(b []byte, s string) []byte { return append(uleb(b, uint64(len(s))), s...) }

func wvec(b []byte, items [][]byte) []byte {
	b = uleb(b, uint64(len(items)))
	for _, it := range items {
		b = append(b, it...)
	}
	return b
}

func section(b []byte, id byte, items [][]byte) []byte {
	if len(items) == 0 {
		return b
	}
	body := wvec(nil, items)
	b = append(b, id)
	b = uleb(b, uint64(len(body)))
	return append(b, body...)
}

func functype(params, results []byte) []byte {
	b := []byte{0x60}
	b = append(uleb(b, uint64(len(params))), params...)
	return append(uleb(b, uint64(len(results))), results...)
}

// bytes assembles the module.
func (m wasmModule) bytes() []byte {
	out := []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}
	var types, imports, funcs, exports, code, data [][]byte
	for _, im := range m.imports {
		idx := uint64(len(types))
		types = append(types, functype(im.params, im.results))
		e := wname(wname(nil, im.module), im.name)
		imports = append(imports, uleb(append(e, 0x00), idx))
	}
	var mems [][]byte
	if m.memPages > 0 {
		mems = append(mems, uleb([]byte{0x00}, uint64(m.memPages)))
		exports = append(exports, append(wname(nil, "memory"), 0x02, 0x00))
	}
	for i, f := range m.funcs {
		idx := uint64(len(types))
		types = append(types, functype(f.params, f.results))
		funcs = append(funcs, uleb(nil, idx))
		if f.export != "" {
			exports = append(exports, uleb(append(wname(nil, f.export), 0x00), uint64(len(m.imports)+i)))
		}
		body := append([]byte{0x00}, f.body...) // no locals
		body = append(body, 0x0b)
		code = append(code, append(uleb(nil, uint64(len(body))), body...))
	}
	for _, d := range m.data {
		seg := []byte{0x00, 0x41}
		seg = sleb(seg, int64(int32(d.offset)))
		seg = append(seg, 0x0b)
		seg = uleb(seg, uint64(len(d.bytes)))
		data = append(data, append(seg, d.bytes...))
	}
	out = section(out, 1, types)
	out = section(out, 2, imports)
	out = section(out, 3, funcs)
	out = section(out, 5, mems)
	out = section(out, 7, exports)
	out = section(out, 10, code)
	out = section(out, 11, data)
	return out
}

// Instructions.
func i32c(v int32) []byte    { return sleb([]byte{0x41}, int64(v)) }
func i64c(v int64) []byte    { return sleb([]byte{0x42}, v) }
func call(idx uint32) []byte { return uleb([]byte{0x10}, uint64(idx)) }
func ops(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

var (
	opUnreachable = []byte{0x00}
	opDrop        = []byte{0x1a}
	opI32Load     = []byte{0x28, 0x02, 0x00} // align 4, offset 0
	opLoopForever = []byte{0x03, 0x40, 0x0c, 0x00, 0x0b}
)

// Layout of the mini policy's memory.
const (
	miniDesc   = 0    // abi_buffers' four u32
	miniIn     = 1024 // in-buffer
	miniInCap  = 1024
	miniOut    = 4096 // out-buffer
	miniOutCap = 1024
	miniErr    = 8192 // the text mini passes to set_error
)

const miniErrText = "mini: deliberate error"

// miniPolicy returns a hand-made scheduler that speaks the ABI: every event
// export returns status 0. Tweak the result before assembling it.
func miniPolicy() *miniSpec {
	s := &miniSpec{version: int32(sdk.ABIVersion), kind: 1, inCap: miniInCap, bodies: map[string][]byte{}, sigs: map[string][2][]byte{}}
	return s
}

// miniSpec describes a mini policy module.
type miniSpec struct {
	version, kind int32
	inCap         uint32
	buffersAddr   int32             // what abi_buffers returns
	omit          []string          // exports to leave out
	bodies        map[string][]byte // export → body replacing "return 0"
	sigs          map[string][2][]byte
	extraImports  []wasmImport // added after set_error
	extraData     []wasmData   // added after the descriptor and the error text
	noMemory      bool
}

// setErrorIdx is set_error's function index in a mini policy.
const setErrorIdx = 0

// statusBody returns a body that calls set_error with the mini text and
// returns status<<32.
func statusBody(status int64) []byte {
	return ops(i32c(miniErr), i32c(int32(len(miniErrText))), call(setErrorIdx), i64c(status<<32))
}

func (s *miniSpec) bytes() []byte {
	m := wasmModule{memPages: 1}
	if s.noMemory {
		m.memPages = 0
	}
	m.imports = append(m.imports, wasmImport{"loadout_v2", "set_error", []byte{wI32, wI32}, nil})
	m.imports = append(m.imports, s.extraImports...)
	le := func(v ...uint32) []byte {
		var b []byte
		for _, x := range v {
			b = binary.LittleEndian.AppendUint32(b, x)
		}
		return b
	}
	m.data = []wasmData{
		{miniDesc, le(miniIn, s.inCap, miniOut, miniOutCap)},
		{miniErr, []byte(miniErrText)},
	}
	m.data = append(m.data, s.extraData...)
	if s.noMemory {
		m.data = nil
	}
	add := func(name string, params, results []byte, body []byte) {
		for _, o := range s.omit {
			if o == name {
				return
			}
		}
		if sig, ok := s.sigs[name]; ok {
			params, results = sig[0], sig[1]
		}
		if b, ok := s.bodies[name]; ok {
			body = b
		}
		m.funcs = append(m.funcs, wasmFunc{name, params, results, body})
	}
	add("loadout_abi_version", nil, []byte{wI32}, i32c(s.version))
	add("loadout_policy_kind", nil, []byte{wI32}, i32c(s.kind))
	add("abi_buffers", nil, []byte{wI32}, i32c(s.buffersAddr))
	for _, name := range []string{"init", "on_request", "on_swap_done", "on_serve_done", "on_cancel", "on_unload", "on_tick", "on_shutdown", "plan", "on_swap_start"} {
		add(name, []byte{wI32}, []byte{wI64}, i64c(0))
	}
	return m.bytes()
}
