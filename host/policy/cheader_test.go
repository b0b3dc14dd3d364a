package policy

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/wire"
	"github.com/tetratelabs/wazero/api"
)

// The C header for policies written in C (sdk/c/loadout_v3.h) is generated
// from the tables this host checks modules against (hostImports,
// commonExports, kindEvents) and from the SDK's constants, so it cannot
// drift from docs/ABI.md's ABI: TestCHeader_InSync fails when the file
// differs, and
//
//	go test ./host/policy -run TestCHeader -update
//
// rewrites it. sdk/c/loadout_v2.h, version 2's, is no longer generated:
// it is kept as it was for C policies built against version 2, which the
// host still loads (TestCHeader_V2Kept).

var updateCHeader = flag.Bool("update", false, "rewrite sdk/c/loadout_v3.h from the ABI tables")

var cHeaderPath = filepath.Join("..", "..", "sdk", "c", fmt.Sprintf("loadout_v%d.h", sdk.ABIVersion))

// TestCHeader_V2Kept: version 2's header is still there, for version 2,
// and declares the imports from the same module as the current one.
func TestCHeader_V2Kept(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "sdk", "c", "loadout_v2.h"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"#define LOADOUT_ABI_VERSION 2\n", `import_module("` + hostModuleName + `")`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("loadout_v2.h lacks %q", want)
		}
	}
}

func TestCHeader_InSync(t *testing.T) {
	want, err := cHeader()
	if err != nil {
		t.Fatal(err)
	}
	if *updateCHeader {
		if err := os.WriteFile(cHeaderPath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(cHeaderPath)
	if err != nil {
		t.Fatalf("%v (generate it: go test ./host/policy -run TestCHeader -update)", err)
	}
	if string(got) != want {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(want, "\n")
		for i := range max(len(gl), len(wl)) {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("%s is out of date with the ABI at line %d:\n  file: %q\n  ABI:  %q\nregenerate it: go test ./host/policy -run TestCHeader -update", cHeaderPath, i+1, g, w)
			}
		}
	}
}

// cConst is one #define.
type cConst struct {
	name    string
	value   int64
	comment string
}

// cParam names an import's parameters, in order, for C: the host's table
// has only their types.
var cParams = map[string][]string{
	"log":                {"level", "msg", "msg_len"},
	"set_error":          {"msg", "msg_len"},
	"grant_serve":        {"id", "model", "model_len"},
	"grant_error":        {"id", "code", "msg", "msg_len"},
	"start_swap":         {"msg", "msg_len"},
	"stop_processes":     {"msg", "msg_len"},
	"set_queue_position": {"id", "pos"},
	"model_state":        {"name", "name_len", "buf", "limit"},
	"running_models":     {"buf", "limit"},
	"snapshot":           {"buf", "limit"},
	"snapshot_delta":     {"base", "buf", "limit"},
	"plan":               {"target", "target_len", "buf", "limit"},
	"admit":              {"model", "model_len", "limit", "flags"},
	"replicas":           {"name", "name_len", "buf", "limit"},
	"demand":             {"buf", "limit"},
	"waits":              {"name", "name_len", "buf", "limit"},
	"request_tick":       {"at_ns"},
}

// cType is a parameter's C type by its name, checked against its Wasm type.
func cType(name string, t api.ValueType) (string, error) {
	var c string
	switch {
	case name == "id" || name == "base":
		c = "uint64_t"
	case name == "at_ns":
		c = "int64_t"
	case name == "buf":
		c = "void *"
	case name == "msg" || name == "model" || name == "name" || name == "target":
		c = "const void *"
	case strings.HasSuffix(name, "_len") || name == "limit":
		c = "uint32_t"
	default:
		c = "int32_t"
	}
	if want := map[bool]api.ValueType{true: api.ValueTypeI64, false: api.ValueTypeI32}[strings.HasSuffix(c, "64_t")]; t != want {
		return "", fmt.Errorf("parameter %s is %s in the ABI; its C type %s lowers to %s", name, api.ValueTypeName(t), c, api.ValueTypeName(want))
	}
	return c, nil
}

func cResult(results []api.ValueType) string {
	switch {
	case len(results) == 0:
		return "void"
	case results[0] == api.ValueTypeI64:
		return "int64_t"
	}
	return "int32_t"
}

// cHeader renders the header.
func cHeader() (string, error) {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	defines := func(title string, cs []cConst) {
		w("\n/* %s */\n", title)
		width := 0
		for _, c := range cs {
			width = max(width, len(c.name))
		}
		for _, c := range cs {
			v := fmt.Sprint(c.value)
			if c.value < 0 {
				v = "(" + v + ")"
			}
			w("#define %-*s %s", width, c.name, v)
			if c.comment != "" {
				w(" /* %s */", c.comment)
			}
			w("\n")
		}
	}
	w(`/*
 * loadout_v%d.h: the Loadout policy ABI, version %d, for policies written in C
 * (clang --target=wasm32-wasi -mexec-model=reactor). docs/ABI.md describes
 * it; examples/lru-c is a policy built with it.
 *
 * GENERATED from the host's import and export tables (host/policy) and the
 * SDK's constants by
 *
 *     go test ./host/policy -run TestCHeader -update
 *
 * and checked by the same test without -update. Do not edit.
 *
 * Messages (docs/ABI.md, sdk/codec.go): version u8 | kind u8 | fields, all
 * little-endian and fixed width; a string or byte slice is a u32 length and
 * the bytes; a list is a u32 count and the items.
 */
#ifndef LOADOUT_V%d_H
#define LOADOUT_V%d_H

#include <stdint.h>
`, sdk.ABIVersion, sdk.ABIVersion, sdk.ABIVersion, sdk.ABIVersion)
	defines("The ABI version: loadout_abi_version's value and every message's first byte.", []cConst{
		{"LOADOUT_ABI_VERSION", sdk.ABIVersion, ""},
		{"LOADOUT_HEADER_SIZE", wire.HeaderSize, "version, kind"},
	})
	kinds := []cConst{
		{"LOADOUT_MSG_INIT", int64(wire.MsgInit), "InitEvent: now i64, settings bytes (JSON)"},
		{"LOADOUT_MSG_REQUEST", int64(wire.MsgRequest), "RequestEvent: now i64, id u64, model str, priority i32, client str"},
		{"LOADOUT_MSG_SWAP_DONE", int64(wire.MsgSwapDone), "SwapDoneEvent: now i64, model str, err str"},
		{"LOADOUT_MSG_SERVE_DONE", int64(wire.MsgServeDone), "ServeDoneEvent: now i64, id u64, model str"},
		{"LOADOUT_MSG_CANCEL", int64(wire.MsgCancel), "CancelEvent: now i64, id u64, model str"},
		{"LOADOUT_MSG_UNLOAD", int64(wire.MsgUnload), "UnloadEvent: now i64, models [str], reason u8"},
		{"LOADOUT_MSG_TICK", int64(wire.MsgTick), "TickEvent: now i64, changed [str]"},
		{"LOADOUT_MSG_SHUTDOWN", int64(wire.MsgShutdown), "ShutdownEvent: now i64, reason str"},
		{"LOADOUT_MSG_PLAN_REQUEST", int64(wire.MsgPlanRequest), "PlanRequest: now i64, target str, running [str]"},
		{"LOADOUT_MSG_PLAN", int64(wire.MsgPlan), "Plan: evict [str], devices [i32], modes [u8] (LOADOUT_EVICT_*, parallel to evict; shorter: the rest default)"},
		{"LOADOUT_MSG_SWAP_START", int64(wire.MsgSwapStart), "SwapStartEvent: now i64, target str, running [str], evict [str], devices [i32], modes [u8]"},
		{"LOADOUT_MSG_SWAP_REQUEST", int64(wire.MsgSwapRequest), "SwapRequest: model str, evict [str], devices [i32], modes [u8]"},
		{"LOADOUT_MSG_MODEL_INFO", int64(wire.MsgModelInfo), "ModelInfo: name str, state u8, in_flight u32, concurrency_limit u32, priority i32, pinned u8, group str, last_use i64, ttl i64, estimated_vram u64, measured_vram u64, devices [i32], leased [u64], then the residency (LOADOUT_RESIDENCY_SIZE bytes): sleep_level u8, can_sleep u8, load_time i64, wake_time1 i64, wake_time2 i64, host_bytes1 u64, host_bytes2 u64, host_leased u64"},
		{"LOADOUT_MSG_MODEL_LIST", int64(wire.MsgModelList), "ModelList: models [ModelInfo fields]"},
		{"LOADOUT_MSG_SNAPSHOT", int64(wire.MsgSnapshot), "Snapshot: now i64, models [ModelInfo fields], gpus [index i32, name str, total u64, free u64, leased u64], host_total u64, host_leased u64"},
		{"LOADOUT_MSG_STOP_REQUEST", int64(wire.MsgStopRequest), "StopRequest: models [str]"},
		{"LOADOUT_MSG_JOB_PLAN_REQUEST", int64(wire.MsgJobPlanRequest), "JobPlanRequest, to plan: now i64, job str, gpus u32, priority i32, candidates [i32], running [str]; answer STATUS_NO_POLICY to leave jobs to the host"},
		{"LOADOUT_MSG_REPLICA_SET", int64(wire.MsgReplicaSet), "ReplicaSet, the replicas import's reply: model str, min u32, max u32, replicas [str]"},
		{"LOADOUT_MSG_SNAPSHOT_DELTA", int64(wire.MsgSnapshotDelta), "SnapshotDelta, from snapshot_delta: now i64, base u64, gen u64, total u32, changed [position u32 + ModelInfo fields], gpus_changed bool, then the gpus list as in Snapshot only if gpus_changed, host_total u64, host_leased u64"},
		{"LOADOUT_MSG_DEMAND", int64(wire.MsgDemand), "DemandList, the demand import's reply: models [name str, requests u64, loads u32, load_time i64]"},
		{"LOADOUT_MSG_WAITS", int64(wire.MsgWaits), "WaitStats, the waits import's reply: granted u32, p95 i64 (ns), above u32, held u32"},
	}
	if err := checkAllKinds(kinds); err != nil {
		return "", err
	}
	defines("Message kinds: every message's second byte.", kinds)
	defines("Export statuses: the high 32 bits of an event export's i64 result; the low 32 bits are the output's length.", []cConst{
		{"LOADOUT_STATUS_OK", wire.StatusOK, ""},
		{"LOADOUT_STATUS_ERROR", wire.StatusError, "the policy's error; set_error was called"},
		{"LOADOUT_STATUS_PANIC", wire.StatusPanic, ""},
		{"LOADOUT_STATUS_BAD_INPUT", wire.StatusBadInput, "the event could not be decoded"},
		{"LOADOUT_STATUS_NO_POLICY", wire.StatusNoPolicy, ""},
	})
	defines("Policy kinds: loadout_policy_kind's value.", []cConst{
		{"LOADOUT_KIND_NONE", int64(sdk.KindNone), ""},
		{"LOADOUT_KIND_SCHEDULER", int64(sdk.KindScheduler), ""},
		{"LOADOUT_KIND_SWAPPER", int64(sdk.KindSwapper), ""},
	})
	var states []cConst
	for s := sdk.ModelState(0); !strings.HasPrefix(s.String(), "state("); s++ {
		states = append(states, cConst{"LOADOUT_STATE_" + strings.ToUpper(s.String()), int64(s), ""})
	}
	defines("Model states (ModelInfo.state).", states)
	codes := []cConst{
		{"LOADOUT_CODE_INTERNAL", int64(sdk.CodeInternal), "500"},
		{"LOADOUT_CODE_MODEL_NOT_FOUND", int64(sdk.CodeModelNotFound), "404"},
		{"LOADOUT_CODE_QUEUE_FULL", int64(sdk.CodeQueueFull), "429"},
		{"LOADOUT_CODE_CONCURRENCY_LIMIT", int64(sdk.CodeConcurrencyLimit), "429"},
		{"LOADOUT_CODE_UNAVAILABLE", int64(sdk.CodeUnavailable), "503"},
		{"LOADOUT_CODE_SWAP_FAILED", int64(sdk.CodeSwapFailed), "502"},
		{"LOADOUT_CODE_TIMEOUT", int64(sdk.CodeTimeout), "504"},
		{"LOADOUT_CODE_TOO_LARGE", int64(sdk.CodeTooLarge), "507"},
	}
	for c := sdk.ErrorCode(0); c.Valid(); c++ {
		if int(c) >= len(codes) || codes[c].value != int64(c) {
			return "", fmt.Errorf("error code %d has no C name: add it to cHeader", c)
		}
	}
	defines("Error codes (grant_error).", codes)
	results := []cConst{
		{"LOADOUT_ERR_UNKNOWN_REQUEST", int64(sdk.ErrUnknownRequest), ""},
		{"LOADOUT_ERR_UNKNOWN_MODEL", int64(sdk.ErrUnknownModel), ""},
		{"LOADOUT_ERR_NOT_READY", int64(sdk.ErrNotReady), ""},
		{"LOADOUT_ERR_NOT_ALLOWED", int64(sdk.ErrNotAllowed), ""},
		{"LOADOUT_ERR_MODEL_BUSY", int64(sdk.ErrModelBusy), ""},
		{"LOADOUT_ERR_SWAP_ACTIVE", int64(sdk.ErrSwapActive), ""},
		{"LOADOUT_ERR_SWAPPER_FAILED", int64(sdk.ErrSwapperFailed), ""},
		{"LOADOUT_ERR_BAD_ARGUMENT", int64(sdk.ErrBadArgument), ""},
		{"LOADOUT_ERR_DOES_NOT_FIT", int64(sdk.ErrDoesNotFit), ""},
		{"LOADOUT_ERR_HELD_BY_JOB", int64(sdk.ErrHeldByJob), ""},
	}
	for i := range results {
		results[i].comment = sdk.ResultError(results[i].value).Error()
	}
	for r := sdk.ResultError(-1); r > -64; r-- {
		if !strings.HasPrefix(r.Error(), "host error") && (int(-r) > len(results) || results[-r-1].value != int64(r)) {
			return "", fmt.Errorf("host result %d (%s) has no C name: add it to cHeader", r, r)
		}
	}
	defines("Host import results below zero (sdk.ResultError).", results)
	var modes []cConst
	for m := sdk.EvictMode(0); !strings.HasPrefix(m.String(), "evict("); m++ {
		name := strings.ToUpper(m.String())
		if m == sdk.EvictSleep1 {
			name = "SLEEP1"
		}
		modes = append(modes, cConst{"LOADOUT_EVICT_" + name, int64(m), ""})
	}
	modes[sdk.EvictDefault].comment = "the model's configured evict: (docs/ABI.md, \"Eviction modes\")"
	modes[sdk.EvictStop].comment = "stop its server; the only mode for an asleep model"
	modes[sdk.EvictSleep1].comment = "sleep at level 1: weights to host memory"
	modes[sdk.EvictSleep2].comment = "sleep at level 2: weights dropped"
	defines("Eviction modes (Plan, SwapRequest, SwapStartEvent: modes).", modes)
	defines("Residency (ModelInfo: sleep_level, can_sleep; its encoded size).", []cConst{
		{"LOADOUT_CAN_SLEEP_1", 1, "can_sleep bit: the backend sleeps at level 1"},
		{"LOADOUT_CAN_SLEEP_2", 2, "can_sleep bit: the backend sleeps at level 2"},
		{"LOADOUT_RESIDENCY_SIZE", residencySize, "bytes of ModelInfo's residency fields, after leased"},
	})
	defines("Admission flags (admit; the warm path).", []cConst{
		{"LOADOUT_ADMIT_SERVE_DONE", int64(sdk.AdmitServeDone), "keep sending on_serve_done for the model"},
	})
	defines("Bounds of a requested tick after now, ns (request_tick; ticks on demand).", []cConst{
		{"LOADOUT_MIN_TICK_DELAY", sdk.MinTickDelay, "a sooner tick is clamped to now + this"},
		{"LOADOUT_MAX_TICK_DELAY", sdk.MaxTickDelay, "a later tick is clamped to now + this"},
		{"LOADOUT_PAST_TICK_DELAY", sdk.PastTickDelay, "a tick at or before now is taken as now + this"},
	})
	defines("Log levels (log).", []cConst{
		{"LOADOUT_LEVEL_DEBUG", int64(sdk.LevelDebug), ""},
		{"LOADOUT_LEVEL_INFO", int64(sdk.LevelInfo), ""},
		{"LOADOUT_LEVEL_WARN", int64(sdk.LevelWarn), ""},
		{"LOADOUT_LEVEL_ERROR", int64(sdk.LevelError), ""},
	})
	defines("Unload reasons (UnloadEvent.reason).", []cConst{
		{"LOADOUT_UNLOAD_ADMIN", int64(sdk.UnloadAdmin), ""},
		{"LOADOUT_UNLOAD_TTL", int64(sdk.UnloadTTL), ""},
	})

	w(`
/*
 * Host imports, module "%s", as loadout_host_NAME. Reads use the retry
 * pattern: the host writes the reply to (buf, limit) only if it fits and
 * always returns its full length; a result below zero is a LOADOUT_ERR_*
 * value.
 */
#define LOADOUT_IMPORT(name) __attribute__((import_module("%s"), import_name(#name)))
`, hostModuleName, hostModuleName)
	for _, imp := range hostImports() {
		names, ok := cParams[imp.name]
		if !ok || len(names) != len(imp.sig.params) {
			return "", fmt.Errorf("import %s %s: name its parameters in cParams", imp.name, imp.sig)
		}
		var ps []string
		for i, n := range names {
			c, err := cType(n, imp.sig.params[i])
			if err != nil {
				return "", fmt.Errorf("import %s: %w", imp.name, err)
			}
			if strings.HasSuffix(c, "*") {
				ps = append(ps, c+n)
			} else {
				ps = append(ps, c+" "+n)
			}
		}
		w("LOADOUT_IMPORT(%s) %s loadout_host_%s(%s);\n", imp.name, cResult(imp.sig.results), imp.name, strings.Join(ps, ", "))
	}

	w(`
/*
 * Exports, as loadout_NAME. A policy defines the common ones and those of
 * its kind; the declarations carry the export names, so a definition needs
 * nothing else.
 * An event export takes the length of the message the host wrote at the
 * in-buffer's address and returns (int64_t)status << 32 | out_len.
 */
#define LOADOUT_EXPORT(name) __attribute__((export_name(#name)))
`)
	export := func(name string, sig funcType, comment string) {
		params := "void"
		if len(sig.params) == 1 {
			params = "int32_t len"
		}
		w("LOADOUT_EXPORT(%s) %s loadout_%s(%s);", name, cResult(sig.results), strings.TrimPrefix(name, "loadout_"), params)
		if comment != "" {
			w(" /* %s */", comment)
		}
		w("\n")
	}
	w("\n/* Every policy. */\n")
	comments := map[string]string{
		exportABIVersion: "LOADOUT_ABI_VERSION",
		exportKind:       "LOADOUT_KIND_*",
		exportBuffers:    "address of 4 u32: in-buffer address, capacity, out-buffer address, capacity",
		exportInit:       "LOADOUT_MSG_INIT",
	}
	for _, e := range commonExports {
		export(e.name, e.sig, comments[e.name])
	}
	for _, k := range []sdk.PolicyKind{sdk.KindScheduler, sdk.KindSwapper} {
		w("\n/* A %s. */\n", k)
		for _, ev := range kindEvents[k] {
			export(ev.String(), sigEvent, "")
		}
		if k == sdk.KindSwapper {
			export(exportPlanIsPure, sigGetter, "optional: 1 if plan depends only on settings, target and running set")
		}
	}
	w("\n#endif /* LOADOUT_V%d_H */\n", sdk.ABIVersion)
	return b.String(), nil
}

// residencySize is the encoded size of ModelInfo's version 3 fields:
// sleep_level u8, can_sleep u8, then six 8-byte fields.
const residencySize = 2 + 6*8

// checkAllKinds fails when sdk/wire declares a message kind (a constant of
// type Kind) that the header does not list: kinds cannot be enumerated at
// run time, so the declarations are read from the source.
func checkAllKinds(listed []cConst) error {
	src := filepath.Join("..", "..", "sdk", "wire", "wire.go")
	f, err := parser.ParseFile(token.NewFileSet(), src, nil, 0)
	if err != nil {
		return err
	}
	values := map[int64]bool{}
	for _, c := range listed {
		values[c.value] = true
	}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			v := spec.(*ast.ValueSpec)
			if id, ok := v.Type.(*ast.Ident); !ok || id.Name != "Kind" || len(v.Values) != 1 {
				continue
			}
			lit, ok := v.Values[0].(*ast.BasicLit)
			if !ok {
				return fmt.Errorf("%s: %s is not a literal", src, v.Names[0].Name)
			}
			n, err := strconv.ParseInt(lit.Value, 0, 64)
			if err != nil {
				return err
			}
			if !values[n] {
				return fmt.Errorf("%s declares %s = %d, which the C header does not list: add it to cHeader's kinds, with its layout", src, v.Names[0].Name, n)
			}
		}
	}
	return nil
}
