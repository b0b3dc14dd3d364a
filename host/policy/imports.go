package policy

import (
	"context"
	"errors"
	"math"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/wire"
	"github.com/tetratelabs/wazero/api"
)

// Limits on what a guest can make the host do per call.
const (
	maxLogsPerCall = 64      // log lines; the rest are counted and reported once
	maxLogLen      = 4 << 10 // bytes of one log line
	maxErrLen      = 4 << 10 // bytes of set_error text
)

// The host functions of module loadout_v2 (docs/ABI.md). Each finds the
// instance making the call from ctx (callerOf) and dispatches to that
// instance's sdk.Effects or sdk.Host. Guest pointers are checked against the
// caller's memory: a bad one gets sdk.ErrBadArgument, never a host panic.
// Outside a call the host made (a load-check probe) every import is a no-op
// that returns sdk.ErrNotAllowed.

func ret(stack []uint64, v int32) { stack[0] = api.EncodeI32(v) }

func retErr(stack []uint64, e sdk.ResultError) { ret(stack, int32(e)) }

// guestBytes returns a view of n bytes of guest memory at ptr; a zero
// length is always valid.
func guestBytes(mod api.Module, ptr, n uint32) ([]byte, bool) {
	if n == 0 {
		return nil, true
	}
	return mod.Memory().Read(ptr, n)
}

// validBuf reports whether the reply buffer (buf, limit) lies inside the
// guest's memory; it is checked before any work is done.
func validBuf(mod api.Module, buf, limit uint32) bool {
	return uint64(buf)+uint64(limit) <= uint64(mod.Memory().Size())
}

// reply writes the encoded reply to the guest at (buf, limit) if it fits,
// and returns its full length either way: the retry pattern.
func reply(mod api.Module, stack []uint64, reply []byte, buf, limit uint32) {
	n := len(reply)
	if n > math.MaxInt32 {
		retErr(stack, sdk.ErrBadArgument)
		return
	}
	if uint64(n) <= uint64(limit) && n > 0 && !mod.Memory().Write(buf, reply) {
		retErr(stack, sdk.ErrBadArgument)
		return
	}
	ret(stack, int32(n))
}

// log(level i32, ptr, len): to the caller's sdk.Host.Log, at most
// maxLogsPerCall lines per call of at most maxLogLen bytes.
func importLog(ctx context.Context, mod api.Module, stack []uint64) {
	in := callerOf(ctx)
	if in == nil {
		return
	}
	if in.logs >= maxLogsPerCall {
		in.dropped++
		return
	}
	in.logs++
	b, ok := guestBytes(mod, uint32(stack[1]), uint32(stack[2]))
	if !ok {
		in.sv.log.Warn("policy passed an invalid pointer to log", "ptr", uint32(stack[1]), "len", uint32(stack[2]))
		return
	}
	in.sv.host.Log(sdk.LogLevel(api.DecodeI32(stack[0])), string(truncate(b, maxLogLen)))
}

// set_error(ptr, len)
func importSetError(ctx context.Context, mod api.Module, stack []uint64) {
	in := callerOf(ctx)
	if in == nil {
		return
	}
	b, ok := guestBytes(mod, uint32(stack[0]), uint32(stack[1]))
	if !ok {
		in.errText = append(in.errText[:0], "(set_error was passed an invalid pointer)"...)
		return
	}
	in.errText = append(in.errText[:0], truncate(b, maxErrLen)...)
}

// effects returns the caller's sdk.Effects, or nil and the refusal to
// return (swappers and probes may not act).
func effects(ctx context.Context) (*instance, sdk.Effects) {
	in := callerOf(ctx)
	if in == nil || in.sv.fx == nil {
		return in, nil
	}
	return in, in.sv.fx
}

// grant_serve(id i64, model_ptr, model_len) -> i32
func importGrantServe(ctx context.Context, mod api.Module, stack []uint64) {
	in, fx := effects(ctx)
	if fx == nil {
		retErr(stack, sdk.ErrNotAllowed)
		return
	}
	b, ok := guestBytes(mod, uint32(stack[1]), uint32(stack[2]))
	if !ok {
		retErr(stack, sdk.ErrBadArgument)
		return
	}
	if fx.GrantServe(sdk.RequestID(stack[0]), in.sv.intern(b)) {
		ret(stack, 1)
	} else {
		ret(stack, 0)
	}
}

// grant_error(id i64, code i32, msg_ptr, msg_len) -> i32
func importGrantError(ctx context.Context, mod api.Module, stack []uint64) {
	_, fx := effects(ctx)
	if fx == nil {
		retErr(stack, sdk.ErrNotAllowed)
		return
	}
	code := sdk.ErrorCode(api.DecodeI32(stack[1]))
	b, ok := guestBytes(mod, uint32(stack[2]), uint32(stack[3]))
	if !ok || code < sdk.CodeInternal || code > sdk.CodeTooLarge {
		retErr(stack, sdk.ErrBadArgument)
		return
	}
	fx.GrantError(sdk.RequestID(stack[0]), code, string(truncate(b, maxErrLen)))
	ret(stack, 0)
}

// start_swap(ptr, len) -> i32: a SwapRequest message.
func importStartSwap(ctx context.Context, mod api.Module, stack []uint64) {
	in, fx := effects(ctx)
	if fx == nil {
		retErr(stack, sdk.ErrNotAllowed)
		return
	}
	b, ok := guestBytes(mod, uint32(stack[0]), uint32(stack[1]))
	req := &in.sv.swapReq
	if !ok || wire.DecodeVersion(b, in.sv.ver, req) != nil {
		retErr(stack, sdk.ErrBadArgument)
		return
	}
	err := fx.StartSwap(*req)
	*req = sdk.SwapRequest{}
	ret(stack, sdk.AsResult(err))
}

// stop_processes(ptr, len) -> i32: a StopRequest message.
func importStopProcesses(ctx context.Context, mod api.Module, stack []uint64) {
	in, fx := effects(ctx)
	if fx == nil {
		retErr(stack, sdk.ErrNotAllowed)
		return
	}
	b, ok := guestBytes(mod, uint32(stack[0]), uint32(stack[1]))
	req := &in.sv.stopReq
	if !ok || wire.DecodeVersion(b, in.sv.ver, req) != nil {
		retErr(stack, sdk.ErrBadArgument)
		return
	}
	err := fx.StopProcesses(req.Models)
	*req = sdk.StopRequest{}
	ret(stack, sdk.AsResult(err))
}

// set_queue_position(id i64, pos i32) -> i32
func importSetQueuePosition(ctx context.Context, _ api.Module, stack []uint64) {
	_, fx := effects(ctx)
	if fx == nil {
		retErr(stack, sdk.ErrNotAllowed)
		return
	}
	pos := api.DecodeI32(stack[1])
	if pos < 0 {
		retErr(stack, sdk.ErrBadArgument)
		return
	}
	fx.SetQueuePosition(sdk.RequestID(stack[0]), int(pos))
	ret(stack, 0)
}

// model_state(name_ptr, name_len, buf, limit) -> i32: a ModelInfo message.
func importModelState(ctx context.Context, mod api.Module, stack []uint64) {
	sv, name, ok := nameAndBuf(ctx, mod, stack)
	if !ok {
		return
	}
	info, found := sv.host.ModelState(name)
	if !found {
		retErr(stack, sdk.ErrUnknownModel)
		return
	}
	sv.info = info
	sv.reply = wire.AppendVersion(sv.reply[:0], sv.ver, &sv.info)
	sv.info = sdk.ModelInfo{}
	reply(mod, stack, sv.reply, uint32(stack[2]), uint32(stack[3]))
}

// running_models(buf, limit) -> i32: a ModelList message.
func importRunningModels(ctx context.Context, mod api.Module, stack []uint64) {
	sv, ok := bufOnly(ctx, mod, stack)
	if !ok {
		return
	}
	sv.list.Models = sv.host.RunningModels()
	sv.reply = wire.AppendVersion(sv.reply[:0], sv.ver, &sv.list)
	sv.list.Models = nil
	reply(mod, stack, sv.reply, uint32(stack[0]), uint32(stack[1]))
}

// bufOnly checks the arguments of an import called (buf, limit) —
// running_models', snapshot's and demand's — and returns the caller's
// supervisor; or, having answered ErrNotAllowed (outside a call) or
// ErrBadArgument, false.
func bufOnly(ctx context.Context, mod api.Module, stack []uint64) (*supervisor, bool) {
	in := callerOf(ctx)
	if in == nil {
		retErr(stack, sdk.ErrNotAllowed)
		return nil, false
	}
	if !validBuf(mod, uint32(stack[0]), uint32(stack[1])) {
		retErr(stack, sdk.ErrBadArgument)
		return nil, false
	}
	return in.sv, true
}

// snapshot(buf, limit) -> i32: a Snapshot message.
func importSnapshot(ctx context.Context, mod api.Module, stack []uint64) {
	sv, ok := bufOnly(ctx, mod, stack)
	if !ok {
		return
	}
	sdk.ReadSnapshot(sv.host, &sv.snap) // kept: its storage is reused by a host that can
	sv.reply = wire.AppendVersion(sv.reply[:0], sv.ver, &sv.snap)
	reply(mod, stack, sv.reply, uint32(stack[0]), uint32(stack[1]))
}

// plan(target_ptr, target_len, buf, limit) -> i32: a Plan message. The host
// forwards it through the scheduler's sdk.Effects to the swapper; the
// scheduler's deadline clock is paused meanwhile, so a slow swapper is
// charged to the swapper (which has its own deadline), not the scheduler.
func importPlan(ctx context.Context, mod api.Module, stack []uint64) {
	in, fx := effects(ctx)
	if fx == nil {
		retErr(stack, sdk.ErrNotAllowed)
		return
	}
	b, ok := guestBytes(mod, uint32(stack[0]), uint32(stack[1]))
	if !ok || !validBuf(mod, uint32(stack[2]), uint32(stack[3])) {
		retErr(stack, sdk.ErrBadArgument)
		return
	}
	sv := in.sv
	target := sv.intern(b)
	in.clock.pause()
	p, err := fx.Plan(target)
	in.clock.resume()
	if err != nil {
		var re sdk.ResultError
		if errors.As(err, &re) {
			retErr(stack, re)
			return
		}
		sv.log.Warn("swapper failed to plan", "target", target, "err", err)
		retErr(stack, sdk.ErrSwapperFailed)
		return
	}
	sv.plan = p
	sv.reply = wire.AppendVersion(sv.reply[:0], sv.ver, &sv.plan)
	sv.plan = sdk.Plan{}
	reply(mod, stack, sv.reply, uint32(stack[2]), uint32(stack[3]))
}

// admit(model_ptr, model_len, limit i32, flags i32) -> i32: the warm-path
// admission (sdk.Admitter). An sdk.Effects that does not take the warm path
// answers sdk.ErrNotAllowed, and the policy is called for every request.
func importAdmit(ctx context.Context, mod api.Module, stack []uint64) {
	in, fx := effects(ctx)
	ad, ok := fx.(sdk.Admitter)
	if !ok {
		retErr(stack, sdk.ErrNotAllowed)
		return
	}
	b, ok := guestBytes(mod, uint32(stack[0]), uint32(stack[1]))
	if !ok {
		retErr(stack, sdk.ErrBadArgument)
		return
	}
	err := ad.Admit(in.sv.intern(b), uint32(stack[2]), sdk.AdmitFlags(uint32(stack[3])))
	ret(stack, sdk.AsResult(err))
}
