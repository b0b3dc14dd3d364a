//go:build wasip1

package sdk

import (
	"errors"
	"github.com/loadout-dev/loadout/sdk/wire"
	"runtime"
	"strconv"
	"unsafe"
)

// Buffer sizes of the guest side of the ABI. The host writes each event into
// inBuf; exports that produce output (plan) write it into outBuf.
const (
	inBufSize  = 256 << 10
	outBufSize = 64 << 10
)

var (
	inBuf     [inBufSize]byte
	outBuf    [outBufSize]byte
	bufDesc   [4]uint32
	scratch   = make([]byte, 4096) // replies of host reads; grows on demand
	sendBuf   []byte               // arguments encoded for host imports
	scheduler Scheduler
	swapper   Swapper
	wasmFx    wasmEffects
)

//go:wasmimport loadout_v2 log
func hostLog(level int32, p unsafe.Pointer, n uint32)

//go:wasmimport loadout_v2 set_error
func hostSetError(p unsafe.Pointer, n uint32)

//go:wasmimport loadout_v2 grant_serve
func hostGrantServe(id uint64, p unsafe.Pointer, n uint32) int32

//go:wasmimport loadout_v2 grant_error
func hostGrantError(id uint64, code int32, p unsafe.Pointer, n uint32) int32

//go:wasmimport loadout_v2 start_swap
func hostStartSwap(p unsafe.Pointer, n uint32) int32

//go:wasmimport loadout_v2 stop_processes
func hostStopProcesses(p unsafe.Pointer, n uint32) int32

//go:wasmimport loadout_v2 set_queue_position
func hostSetQueuePosition(id uint64, pos int32) int32

//go:wasmimport loadout_v2 model_state
func hostModelState(p unsafe.Pointer, n uint32, buf unsafe.Pointer, limit uint32) int32

//go:wasmimport loadout_v2 running_models
func hostRunningModels(buf unsafe.Pointer, limit uint32) int32

//go:wasmimport loadout_v2 snapshot
func hostSnapshot(buf unsafe.Pointer, limit uint32) int32

// snapshot_delta is optional (docs/ABI.md, "Snapshot deltas"): the host
// sends the models that changed since generation base (0: all of them).
//
//go:wasmimport loadout_v2 snapshot_delta
func hostSnapshotDelta(base uint64, buf unsafe.Pointer, limit uint32) int32

//go:wasmimport loadout_v2 plan
func hostPlan(p unsafe.Pointer, n uint32, buf unsafe.Pointer, limit uint32) int32

// admit is an optional import (docs/ABI.md, "The warm path"): a module
// that never calls Admitter.Admit does not import it.
//
//go:wasmimport loadout_v2 admit
func hostAdmit(p unsafe.Pointer, n uint32, limit uint32, flags uint32) int32

// request_tick is an optional import (docs/ABI.md, "Ticks on demand"):
// a module that never calls TickRequester.RequestTick does not import it.
//
//go:wasmimport loadout_v2 request_tick
func hostRequestTick(at int64) int32

func strPtr(s string) unsafe.Pointer { return unsafe.Pointer(unsafe.StringData(s)) }

func bytesPtr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

// reply returns the host read's reply in scratch, or ok=false for a
// negative result. A host read writes its reply only when it fits and
// always returns the full length, so when n exceeds the buffer the caller
// grows scratch with grow and calls again. Written without closures: in Go
// compiled to Wasm every allocation costs about 1.3 µs.
func reply(n int32) (b []byte, retry bool, ok bool) {
	switch {
	case n < 0:
		return nil, false, false
	case int(n) > len(scratch):
		scratch = make([]byte, int(n))
		return nil, true, true
	}
	return scratch[:n], false, true
}

type wasmEffects struct{}

func (wasmEffects) Log(level LogLevel, msg string) {
	hostLog(int32(level), strPtr(msg), uint32(len(msg)))
}

// Decoded replies live in globals: a local whose address reaches
// decodeMessage would escape to the heap on every call.
var (
	replyInfo  ModelInfo
	replyList  ModelList
	replySnap  Snapshot
	replyPlan  Plan
	replyError error
)

// ModelState's reply is decoded into replyInfo, whose Devices and Leased
// storage is reused; what is handed out is infoDevices and infoLeased, the
// last lists handed out, which are never written again: a model's devices
// rarely change between reads, so reading one model costs no allocation.
var (
	infoDevices []int32
	infoLeased  []uint64
)

func (wasmEffects) ModelState(model string) (ModelInfo, bool) {
	for {
		n := hostModelState(strPtr(model), uint32(len(model)), bytesPtr(scratch), uint32(len(scratch)))
		b, retry, ok := reply(n)
		if retry {
			continue
		}
		if !ok {
			return ModelInfo{}, false
		}
		if decodeMessage(b, &replyInfo) != nil {
			return ModelInfo{}, false
		}
		info := replyInfo
		info.Devices = handOut(&infoDevices, replyInfo.Devices)
		info.Leased = handOut(&infoLeased, replyInfo.Leased)
		return info, true
	}
}

func (wasmEffects) RunningModels() []ModelInfo {
	for {
		b, retry, ok := reply(hostRunningModels(bytesPtr(scratch), uint32(len(scratch))))
		if retry {
			continue
		}
		replyList = ModelList{}
		if !ok || decodeMessage(b, &replyList) != nil {
			return nil
		}
		return replyList.Models
	}
}

func (wasmEffects) Snapshot() Snapshot {
	for {
		b, retry, ok := reply(hostSnapshot(bytesPtr(scratch), uint32(len(scratch))))
		if retry {
			continue
		}
		replySnap = Snapshot{}
		if !ok || decodeMessage(b, &replySnap) != nil {
			return Snapshot{}
		}
		return replySnap
	}
}

// SnapshotInto is Snapshot decoded into dst's storage (sdk.ReadSnapshot),
// through snapshot_delta when the host has it.
func (fx wasmEffects) SnapshotInto(dst *Snapshot) { fx.SnapshotChangesInto(dst, nil) }

// deltas tracks the snapshot the last snapshot_delta reply was applied to;
// noDeltas is set once the host refused the import (ErrNotAllowed).
var (
	deltas   deltaReader
	noDeltas bool
)

// SnapshotChangesInto reads the models that changed since dst's generation
// into dst (sdk.ReadSnapshotChanges), or the whole snapshot through the
// snapshot import when the host does not send deltas or the reply is not
// one dst can take.
func (wasmEffects) SnapshotChangesInto(dst *Snapshot, changed []int) ([]int, bool) {
	for !noDeltas {
		base := deltas.base(dst)
		n := hostSnapshotDelta(base, bytesPtr(scratch), uint32(len(scratch)))
		b, retry, ok := reply(n)
		if retry {
			continue
		}
		if !ok {
			if ResultError(n) == ErrNotAllowed {
				noDeltas = true
			}
			break
		}
		var all bool
		var err error
		if changed, all, err = deltas.apply(b, dst, base, changed); err == nil {
			return changed, all
		}
		break
	}
	deltas.forget()
	for {
		b, retry, ok := reply(hostSnapshot(bytesPtr(scratch), uint32(len(scratch))))
		if retry {
			continue
		}
		if !ok || decodeMessage(b, dst) != nil {
			dst.Now, dst.Models, dst.GPUs, dst.Host = 0, dst.Models[:0], dst.GPUs[:0], HostMemoryInfo{}
		}
		return changed, true
	}
}

func (wasmEffects) GrantServe(id RequestID, model string) bool {
	return hostGrantServe(uint64(id), strPtr(model), uint32(len(model))) == 1
}

func (wasmEffects) GrantError(id RequestID, code ErrorCode, msg string) {
	hostGrantError(uint64(id), int32(code), strPtr(msg), uint32(len(msg)))
}

func send(m message, call func(p unsafe.Pointer, n uint32) int32) error {
	sendBuf = appendMessage(sendBuf[:0], m)
	if r := call(bytesPtr(sendBuf), uint32(len(sendBuf))); r < 0 {
		return ResultError(r)
	}
	return nil
}

func (wasmEffects) StartSwap(s SwapRequest) error { return send(&s, hostStartSwap) }

func (wasmEffects) StopProcesses(models []string) error {
	return send(&StopRequest{Models: models}, hostStopProcesses)
}

func (wasmEffects) SetQueuePosition(id RequestID, pos int) {
	hostSetQueuePosition(uint64(id), int32(pos))
}

func (wasmEffects) Plan(target string) (Plan, error) {
	for {
		n := hostPlan(strPtr(target), uint32(len(target)), bytesPtr(scratch), uint32(len(scratch)))
		b, retry, ok := reply(n)
		if retry {
			continue
		}
		if !ok {
			return Plan{}, ResultError(n)
		}
		replyPlan = Plan{}
		if err := decodeMessage(b, &replyPlan); err != nil {
			return Plan{}, err
		}
		return replyPlan, nil
	}
}

func (wasmEffects) Admit(model string, limit uint32, flags AdmitFlags) error {
	if r := hostAdmit(strPtr(model), uint32(len(model)), limit, uint32(flags)); r < 0 {
		return ResultError(r)
	}
	return nil
}

func (wasmEffects) RequestTick(at int64) error {
	if r := hostRequestTick(at); r < 0 {
		return ResultError(r)
	}
	return nil
}

//go:wasmexport loadout_abi_version
func abiVersion() uint32 { return ABIVersion }

//go:wasmexport loadout_policy_kind
func policyKind() uint32 {
	switch {
	case registeredScheduler != nil:
		return uint32(KindScheduler)
	case registeredSwapper != nil:
		return uint32(KindSwapper)
	}
	return uint32(KindNone)
}

// planIsPure reports, after init, whether the swapper implements
// PurePlanner and claims it (1) or not (0).
//
//go:wasmexport plan_is_pure
func planIsPure() uint32 {
	if p, ok := swapper.(PurePlanner); ok && p.PurePlan() {
		return 1
	}
	return 0
}

//go:wasmexport abi_buffers
func abiBuffers() uint32 {
	bufDesc = [4]uint32{
		uint32(uintptr(unsafe.Pointer(&inBuf[0]))), inBufSize,
		uint32(uintptr(unsafe.Pointer(&outBuf[0]))), outBufSize,
	}
	return uint32(uintptr(unsafe.Pointer(&bufDesc[0])))
}

func result(status uint32, outLen uint32) uint64 { return uint64(status)<<32 | uint64(outLen) }

func setError(msg string) { hostSetError(strPtr(msg), uint32(len(msg))) }

// yieldEvery is how many exports run between yields to the Go scheduler.
// Yielding lets goroutines the policy started, and the runtime's background
// GC work, run so the guest heap stays small; a yield costs about 5 µs in
// Wasm, so doing it at the end of every export would triple the cost of a
// typical event (docs/RATIONALE.md).
const yieldEvery = 64

var exportCount uint32

// enter decodes the event in inBuf[:n] into m (a global, so nothing
// escapes). It returns ok=false and the status to return when the event is
// malformed.
func enter(n uint32, m message) (uint64, bool) {
	if n > inBufSize {
		setError("event of " + strconv.FormatUint(uint64(n), 10) + " bytes exceeds the " + strconv.Itoa(inBufSize) + "-byte input buffer")
		return result(wire.StatusBadInput, 0), false
	}
	if err := decodeMessage(inBuf[:n], m); err != nil {
		setError(err.Error())
		return result(wire.StatusBadInput, 0), false
	}
	return 0, true
}

// leave ends every export: it turns a panic into wire.StatusPanic and yields
// now and then. Deferred directly, so recover sees the panic.
func leave(res *uint64) {
	if r := recover(); r != nil {
		setError("panic: " + panicText(r))
		*res = result(wire.StatusPanic, 0)
	}
	exportCount++
	if exportCount%yieldEvery == 0 {
		runtime.Gosched()
	}
}

// panicText is the panic value r as fmt's %v writes it, for what a policy
// panics with: an error (a runtime error too), a String method, a string,
// a bool or a number. Printing any other value would link package fmt and
// its reflection into every guest, so such a value is described, not
// printed.
func panicText(r any) string {
	switch v := r.(type) {
	case error:
		return v.Error()
	case interface{ String() string }:
		return v.String()
	case string:
		return v
	case bool:
		return strconv.FormatBool(v)
	case int:
		return strconv.Itoa(v)
	case int8:
		return strconv.Itoa(int(v))
	case int16:
		return strconv.Itoa(int(v))
	case int32:
		return strconv.Itoa(int(v))
	case int64:
		return strconv.FormatInt(v, 10)
	case uint:
		return strconv.FormatUint(uint64(v), 10)
	case uint8:
		return strconv.FormatUint(uint64(v), 10)
	case uint16:
		return strconv.FormatUint(uint64(v), 10)
	case uint32:
		return strconv.FormatUint(uint64(v), 10)
	case uint64:
		return strconv.FormatUint(v, 10)
	case uintptr:
		return strconv.FormatUint(uint64(v), 10)
	case float32:
		return strconv.FormatFloat(float64(v), 'g', -1, 32)
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	return "a value that is not an error, a Stringer, a string, a bool or a number"
}

var errNoScheduler = errors.New("no scheduler registered (call sdk.RegisterScheduler from init)")

func noScheduler() uint64 {
	setError(errNoScheduler.Error())
	return result(wire.StatusNoPolicy, 0)
}

func noSwapper() uint64 {
	setError("no swapper registered (call sdk.RegisterSwapper from init)")
	return result(wire.StatusNoPolicy, 0)
}

// The events being handled. Policies receive them by value.
var (
	evInit      InitEvent
	evRequest   RequestEvent
	evSwapDone  SwapDoneEvent
	evServeDone ServeDoneEvent
	evCancel    CancelEvent
	evUnload    UnloadEvent
	evTick      TickEvent
	evShutdown  ShutdownEvent
	evPlan      PlanRequest
	evJobPlan   JobPlanRequest
	evSwapStart SwapStartEvent
)

func initPolicy() error {
	settings := evInit.Settings
	if len(settings) == 0 {
		settings = []byte("{}")
	}
	switch {
	case registeredScheduler != nil:
		s, err := registeredScheduler(wasmFx, settings)
		if err != nil {
			return err
		}
		scheduler = s
	case registeredSwapper != nil:
		s, err := registeredSwapper(wasmFx, settings)
		if err != nil {
			return err
		}
		swapper = s
	default:
		return errNoScheduler
	}
	return nil
}

//go:wasmexport init
func abiInit(n uint32) (res uint64) {
	defer leave(&res)
	internStrings, internTable = true, make(map[string]string)
	if r, ok := enter(n, &evInit); !ok {
		return r
	}
	if err := initPolicy(); err != nil {
		setError(err.Error())
		return result(wire.StatusError, 0)
	}
	return result(wire.StatusOK, 0)
}

//go:wasmexport on_request
func onRequest(n uint32) (res uint64) {
	defer leave(&res)
	if scheduler == nil {
		return noScheduler()
	}
	if r, ok := enter(n, &evRequest); !ok {
		return r
	}
	scheduler.OnRequest(evRequest)
	return result(wire.StatusOK, 0)
}

//go:wasmexport on_swap_done
func onSwapDone(n uint32) (res uint64) {
	defer leave(&res)
	if scheduler == nil {
		return noScheduler()
	}
	if r, ok := enter(n, &evSwapDone); !ok {
		return r
	}
	scheduler.OnSwapDone(evSwapDone)
	return result(wire.StatusOK, 0)
}

//go:wasmexport on_serve_done
func onServeDone(n uint32) (res uint64) {
	defer leave(&res)
	if scheduler == nil {
		return noScheduler()
	}
	if r, ok := enter(n, &evServeDone); !ok {
		return r
	}
	scheduler.OnServeDone(evServeDone)
	return result(wire.StatusOK, 0)
}

//go:wasmexport on_cancel
func onCancel(n uint32) (res uint64) {
	defer leave(&res)
	if scheduler == nil {
		return noScheduler()
	}
	if r, ok := enter(n, &evCancel); !ok {
		return r
	}
	scheduler.OnCancel(evCancel)
	return result(wire.StatusOK, 0)
}

//go:wasmexport on_unload
func onUnload(n uint32) (res uint64) {
	defer leave(&res)
	if scheduler == nil {
		return noScheduler()
	}
	if r, ok := enter(n, &evUnload); !ok {
		return r
	}
	scheduler.OnUnload(evUnload)
	return result(wire.StatusOK, 0)
}

//go:wasmexport on_tick
func onTick(n uint32) (res uint64) {
	defer leave(&res)
	if scheduler == nil {
		return noScheduler()
	}
	if r, ok := enter(n, &evTick); !ok {
		return r
	}
	scheduler.OnTick(evTick)
	return result(wire.StatusOK, 0)
}

//go:wasmexport on_shutdown
func onShutdown(n uint32) (res uint64) {
	defer leave(&res)
	if scheduler == nil {
		return noScheduler()
	}
	if r, ok := enter(n, &evShutdown); !ok {
		return r
	}
	scheduler.OnShutdown(evShutdown)
	return result(wire.StatusOK, 0)
}

var planOut Plan

// plan answers a PlanRequest, or a JobPlanRequest (its own message kind)
// with the swapper's JobPlanner. A swapper that is not one, or that
// answers ErrJobPlanUnsupported, gets StatusNoPolicy: the host then places
// the job by its own rule.
//
//go:wasmexport plan
func plan(n uint32) (res uint64) {
	defer leave(&res)
	if swapper == nil {
		return noSwapper()
	}
	var err error
	if n >= wire.HeaderSize && wire.Kind(inBuf[1]) == wire.MsgJobPlanRequest {
		if r, ok := enter(n, &evJobPlan); !ok {
			return r
		}
		jp, ok := swapper.(JobPlanner)
		if !ok {
			setError(ErrJobPlanUnsupported.Error() + " (it does not implement sdk.JobPlanner)")
			return result(wire.StatusNoPolicy, 0)
		}
		planOut, err = jp.PlanJob(evJobPlan)
		if errors.Is(err, ErrJobPlanUnsupported) {
			setError(err.Error())
			return result(wire.StatusNoPolicy, 0)
		}
	} else {
		if r, ok := enter(n, &evPlan); !ok {
			return r
		}
		planOut, err = swapper.Plan(evPlan)
	}
	if err != nil {
		setError(err.Error())
		return result(wire.StatusError, 0)
	}
	out := appendMessage(outBuf[:0], &planOut)
	if len(out) > outBufSize {
		setError("plan of " + strconv.Itoa(len(out)) + " bytes exceeds the " + strconv.Itoa(outBufSize) + "-byte output buffer")
		return result(wire.StatusError, 0)
	}
	return result(wire.StatusOK, uint32(len(out)))
}

//go:wasmexport on_swap_start
func onSwapStart(n uint32) (res uint64) {
	defer leave(&res)
	if swapper == nil {
		return noSwapper()
	}
	if r, ok := enter(n, &evSwapStart); !ok {
		return r
	}
	swapper.OnSwapStart(evSwapStart)
	return result(wire.StatusOK, 0)
}
