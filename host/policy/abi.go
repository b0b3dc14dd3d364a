package policy

import (
	"strings"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/tetratelabs/wazero/api"
)

// The loadout_v2 ABI as the host checks it: module names, export names and
// signatures (docs/ABI.md).
const (
	hostModuleName = "loadout_v2"
	wasiModuleName = "wasi_snapshot_preview1"

	exportABIVersion = "loadout_abi_version"
	exportKind       = "loadout_policy_kind"
	exportBuffers    = "abi_buffers"
	exportInit       = "init"
)

var (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

// funcType is a Wasm function signature.
type funcType struct{ params, results []api.ValueType }

// String formats t like "(i32, i32) -> i64"; "()" for no results.
func (t funcType) String() string { return signature(t.params, t.results) }

func (t funcType) equal(params, results []api.ValueType) bool {
	return string(t.params) == string(params) && string(t.results) == string(results)
}

// signature formats a function type as "(i32, i32) -> i64".
func signature(params, results []api.ValueType) string {
	var b strings.Builder
	b.WriteByte('(')
	for i, p := range params {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(api.ValueTypeName(p))
	}
	b.WriteString(") -> ")
	switch len(results) {
	case 0:
		b.WriteString("()")
	case 1:
		b.WriteString(api.ValueTypeName(results[0]))
	default:
		b.WriteByte('(')
		for i, r := range results {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(api.ValueTypeName(r))
		}
		b.WriteByte(')')
	}
	return b.String()
}

var (
	sigGetter = funcType{nil, []api.ValueType{i32}}                  // () -> i32
	sigEvent  = funcType{[]api.ValueType{i32}, []api.ValueType{i64}} // (len i32) -> i64
)

// requiredExport is one export a policy must have.
type requiredExport struct {
	name string
	sig  funcType
}

// commonExports are required of every policy, in the order they are checked.
var commonExports = []requiredExport{
	{exportABIVersion, sigGetter},
	{exportKind, sigGetter},
	{exportBuffers, sigGetter},
	{exportInit, sigEvent},
}

// event indexes an instance's event exports.
type event int

// Event exports, schedulers' then swappers'.
const (
	evRequest event = iota
	evSwapDone
	evServeDone
	evCancel
	evUnload
	evTick
	evShutdown
	evPlan
	evSwapStart
	numEvents
)

var eventNames = [numEvents]string{
	evRequest:   "on_request",
	evSwapDone:  "on_swap_done",
	evServeDone: "on_serve_done",
	evCancel:    "on_cancel",
	evUnload:    "on_unload",
	evTick:      "on_tick",
	evShutdown:  "on_shutdown",
	evPlan:      "plan",
	evSwapStart: "on_swap_start",
}

func (e event) String() string { return eventNames[e] }

// kindEvents lists the event exports a kind must have; each has sigEvent.
var kindEvents = map[sdk.PolicyKind][]event{
	sdk.KindScheduler: {evRequest, evSwapDone, evServeDone, evCancel, evUnload, evTick, evShutdown},
	sdk.KindSwapper:   {evPlan, evSwapStart},
}

// hostImport is one function of module loadout_v2.
type hostImport struct {
	name string
	sig  funcType
	fn   api.GoModuleFunc
}

// hostImports returns module loadout_v2's functions, exactly those of
// docs/ABI.md. Pointers and lengths are i32; request ids and generations
// i64. A module imports only those it uses, so one added later (admit,
// snapshot_delta) is optional: modules built before it load unchanged.
func hostImports() []hostImport {
	p := func(t ...api.ValueType) []api.ValueType { return t }
	r32 := p(i32)
	return []hostImport{
		{"log", funcType{p(i32, i32, i32), nil}, importLog},
		{"set_error", funcType{p(i32, i32), nil}, importSetError},
		{"grant_serve", funcType{p(i64, i32, i32), r32}, importGrantServe},
		{"grant_error", funcType{p(i64, i32, i32, i32), r32}, importGrantError},
		{"start_swap", funcType{p(i32, i32), r32}, importStartSwap},
		{"stop_processes", funcType{p(i32, i32), r32}, importStopProcesses},
		{"set_queue_position", funcType{p(i64, i32), r32}, importSetQueuePosition},
		{"model_state", funcType{p(i32, i32, i32, i32), r32}, importModelState},
		{"running_models", funcType{p(i32, i32), r32}, importRunningModels},
		{"snapshot", funcType{p(i32, i32), r32}, importSnapshot},
		{"snapshot_delta", funcType{p(i64, i32, i32), r32}, importSnapshotDelta},
		{"plan", funcType{p(i32, i32, i32, i32), r32}, importPlan},
		{"admit", funcType{p(i32, i32, i32, i32), r32}, importAdmit},
		{"replicas", funcType{p(i32, i32, i32, i32), r32}, importReplicas},
		{"demand", funcType{p(i32, i32), r32}, importDemand},
		{"waits", funcType{p(i32, i32, i32, i32), r32}, importWaits},
		{"request_tick", funcType{p(i64), r32}, importRequestTick},
	}
}
