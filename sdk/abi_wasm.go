//go:build wasip1

package sdk

import (
	"fmt"
	"runtime"
	"unsafe"
)

// Buffer sizes of the guest side of the ABI. The host writes each event into
// inBuf; exports that produce output (plan) write it into outBuf.
const (
	inBufSize  = 256 << 10
	outBufSize = 64 << 10
)

var (
	inBuf      [inBufSize]byte
	outBuf     [outBufSize]byte
	bufDesc    [4]uint32
	scratch    = make([]byte, 4096) // replies of host reads; grows on demand
	sendBuf    []byte               // arguments encoded for host imports
	scheduler  Scheduler
	swapper    Swapper
	wasmFx     wasmEffects
	lastOutLen uint32
)

//go:wasmimport loadout_v1 log
func hostLog(level int32, p unsafe.Pointer, n uint32)

//go:wasmimport loadout_v1 set_error
func hostSetError(p unsafe.Pointer, n uint32)

//go:wasmimport loadout_v1 grant_serve
func hostGrantServe(id uint64, p unsafe.Pointer, n uint32) int32

//go:wasmimport loadout_v1 grant_error
func hostGrantError(id uint64, code int32, p unsafe.Pointer, n uint32) int32

//go:wasmimport loadout_v1 start_swap
func hostStartSwap(p unsafe.Pointer, n uint32) int32

//go:wasmimport loadout_v1 stop_processes
func hostStopProcesses(p unsafe.Pointer, n uint32) int32

//go:wasmimport loadout_v1 set_queue_position
func hostSetQueuePosition(id uint64, pos int32) int32

//go:wasmimport loadout_v1 model_state
func hostModelState(p unsafe.Pointer, n uint32, buf unsafe.Pointer, limit uint32) int32

//go:wasmimport loadout_v1 running_models
func hostRunningModels(buf unsafe.Pointer, limit uint32) int32

//go:wasmimport loadout_v1 snapshot
func hostSnapshot(buf unsafe.Pointer, limit uint32) int32

//go:wasmimport loadout_v1 plan
func hostPlan(p unsafe.Pointer, n uint32, buf unsafe.Pointer, limit uint32) int32

func strPtr(s string) unsafe.Pointer { return unsafe.Pointer(unsafe.StringData(s)) }

func bytesPtr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

// read calls a (buf, limit) → len host read, growing scratch and retrying
// when the reply is larger than the buffer. It returns the reply or the
// negative result.
func read(call func(buf unsafe.Pointer, limit uint32) int32) ([]byte, int32) {
	for {
		n := call(bytesPtr(scratch), uint32(len(scratch)))
		if n < 0 {
			return nil, n
		}
		if int(n) <= len(scratch) {
			return scratch[:n], n
		}
		scratch = make([]byte, int(n))
	}
}

type wasmEffects struct{}

func (wasmEffects) Log(level LogLevel, msg string) {
	hostLog(int32(level), strPtr(msg), uint32(len(msg)))
}

func (wasmEffects) ModelState(model string) (ModelInfo, bool) {
	b, n := read(func(buf unsafe.Pointer, limit uint32) int32 {
		return hostModelState(strPtr(model), uint32(len(model)), buf, limit)
	})
	var info ModelInfo
	if n < 0 || DecodeMessage(b, &info) != nil {
		return ModelInfo{}, false
	}
	return info, true
}

func (wasmEffects) RunningModels() []ModelInfo {
	b, n := read(hostRunningModels)
	var l ModelList
	if n < 0 || DecodeMessage(b, &l) != nil {
		return nil
	}
	return l.Models
}

func (wasmEffects) Snapshot() Snapshot {
	b, n := read(hostSnapshot)
	var s Snapshot
	if n < 0 || DecodeMessage(b, &s) != nil {
		return Snapshot{}
	}
	return s
}

func (wasmEffects) GrantServe(id RequestID, model string) bool {
	return hostGrantServe(uint64(id), strPtr(model), uint32(len(model))) == 1
}

func (wasmEffects) GrantError(id RequestID, code ErrorCode, msg string) {
	hostGrantError(uint64(id), int32(code), strPtr(msg), uint32(len(msg)))
}

func send(m Message, call func(p unsafe.Pointer, n uint32) int32) error {
	sendBuf = AppendMessage(sendBuf[:0], m)
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
	b, n := read(func(buf unsafe.Pointer, limit uint32) int32 {
		return hostPlan(strPtr(target), uint32(len(target)), buf, limit)
	})
	if n < 0 {
		return Plan{}, ResultError(n)
	}
	var p Plan
	if err := DecodeMessage(b, &p); err != nil {
		return Plan{}, err
	}
	return p, nil
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

// guard runs one export: it decodes the event in inBuf[:n] into m, calls
// fn, turns a panic into StatusPanic, and yields to the Go scheduler so
// goroutines the policy started (and the GC's) run and the heap stays small.
func guard(n uint32, m Message, fn func() error) (res uint64) {
	defer runtime.Gosched()
	defer func() {
		if r := recover(); r != nil {
			setError(fmt.Sprintf("panic: %v", r))
			res = result(StatusPanic, 0)
		}
	}()
	if n > inBufSize {
		setError(fmt.Sprintf("event of %d bytes exceeds the %d-byte input buffer", n, inBufSize))
		return result(StatusBadInput, 0)
	}
	if m != nil {
		if err := DecodeMessage(inBuf[:n], m); err != nil {
			setError(err.Error())
			return result(StatusBadInput, 0)
		}
	}
	lastOutLen = 0
	if err := fn(); err != nil {
		setError(err.Error())
		return result(StatusError, 0)
	}
	return result(StatusOK, lastOutLen)
}

var errNoScheduler = fmt.Errorf("no scheduler registered (call sdk.RegisterScheduler from init)")

func onScheduler(n uint32, m Message, fn func(Scheduler)) uint64 {
	if scheduler == nil {
		setError(errNoScheduler.Error())
		return result(StatusNoPolicy, 0)
	}
	return guard(n, m, func() error { fn(scheduler); return nil })
}

//go:wasmexport init
func abiInit(n uint32) uint64 {
	var ev InitEvent
	return guard(n, &ev, func() error {
		settings := ev.Settings
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
	})
}

//go:wasmexport on_request
func onRequest(n uint32) uint64 {
	var ev RequestEvent
	return onScheduler(n, &ev, func(s Scheduler) { s.OnRequest(ev) })
}

//go:wasmexport on_swap_done
func onSwapDone(n uint32) uint64 {
	var ev SwapDoneEvent
	return onScheduler(n, &ev, func(s Scheduler) { s.OnSwapDone(ev) })
}

//go:wasmexport on_serve_done
func onServeDone(n uint32) uint64 {
	var ev ServeDoneEvent
	return onScheduler(n, &ev, func(s Scheduler) { s.OnServeDone(ev) })
}

//go:wasmexport on_cancel
func onCancel(n uint32) uint64 {
	var ev CancelEvent
	return onScheduler(n, &ev, func(s Scheduler) { s.OnCancel(ev) })
}

//go:wasmexport on_unload
func onUnload(n uint32) uint64 {
	var ev UnloadEvent
	return onScheduler(n, &ev, func(s Scheduler) { s.OnUnload(ev) })
}

//go:wasmexport on_tick
func onTick(n uint32) uint64 {
	var ev TickEvent
	return onScheduler(n, &ev, func(s Scheduler) { s.OnTick(ev) })
}

//go:wasmexport on_shutdown
func onShutdown(n uint32) uint64 {
	var ev ShutdownEvent
	return onScheduler(n, &ev, func(s Scheduler) { s.OnShutdown(ev) })
}

//go:wasmexport plan
func plan(n uint32) uint64 {
	if swapper == nil {
		setError("no swapper registered (call sdk.RegisterSwapper from init)")
		return result(StatusNoPolicy, 0)
	}
	var q PlanRequest
	return guard(n, &q, func() error {
		p, err := swapper.Plan(q)
		if err != nil {
			return err
		}
		out := AppendMessage(outBuf[:0], &p)
		if len(out) > outBufSize {
			return fmt.Errorf("plan of %d bytes exceeds the %d-byte output buffer", len(out), outBufSize)
		}
		lastOutLen = uint32(len(out))
		return nil
	})
}

//go:wasmexport on_swap_start
func onSwapStart(n uint32) uint64 {
	if swapper == nil {
		setError("no swapper registered (call sdk.RegisterSwapper from init)")
		return result(StatusNoPolicy, 0)
	}
	var ev SwapStartEvent
	return guard(n, &ev, func() error { swapper.OnSwapStart(ev); return nil })
}
