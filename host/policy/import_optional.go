package policy

import (
	"context"

	"github.com/tetratelabs/wazero/api"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/wire"
)

// replicas(name_ptr, name_len, buf, limit) -> i32: a ReplicaSet message
// for the model or replica named, or ErrUnknownModel. Optional (issue 15):
// a module imports it only if it reads replica sets; for either policy.
func importReplicas(ctx context.Context, mod api.Module, stack []uint64) {
	sv, name, ok := nameAndBuf(ctx, mod, stack)
	if !ok {
		return
	}
	set, found := sdk.ReadReplicas(sv.host, name)
	if !found {
		retErr(stack, sdk.ErrUnknownModel)
		return
	}
	sv.reply = wire.AppendVersion(sv.reply[:0], sv.ver, &set)
	reply(mod, stack, sv.reply, uint32(stack[2]), uint32(stack[3]))
}

// nameAndBuf reads the arguments of an import called (name_ptr, name_len,
// buf, limit) — model_state's, replicas' and waits' — and returns the caller's
// supervisor and the name, interned; or, having answered ErrNotAllowed
// (outside a call) or ErrBadArgument, false.
func nameAndBuf(ctx context.Context, mod api.Module, stack []uint64) (*supervisor, string, bool) {
	in := callerOf(ctx)
	if in == nil {
		retErr(stack, sdk.ErrNotAllowed)
		return nil, "", false
	}
	b, ok := guestBytes(mod, uint32(stack[0]), uint32(stack[1]))
	if !ok || !validBuf(mod, uint32(stack[2]), uint32(stack[3])) {
		retErr(stack, sdk.ErrBadArgument)
		return nil, "", false
	}
	return in.sv, in.sv.intern(b), true
}

// demand(buf, limit) -> i32: a DemandList message, every model's counts
// (sdk.ModelDemand), or ErrNotAllowed from a host that counts none.
// Optional (issue 11): a module imports it only if it reads demand; for
// either policy.
func importDemand(ctx context.Context, mod api.Module, stack []uint64) {
	sv, ok := bufOnly(ctx, mod, stack)
	if !ok {
		return
	}
	l, ok := sdk.ReadDemand(sv.host)
	if !ok {
		retErr(stack, sdk.ErrNotAllowed)
		return
	}
	sv.reply = wire.AppendVersion(sv.reply[:0], sv.ver, &sdk.DemandList{Models: l})
	reply(mod, stack, sv.reply, uint32(stack[0]), uint32(stack[1]))
}

// waits(name_ptr, name_len, buf, limit) -> i32: a WaitStats message, the
// host's record of queueing delay (sdk.WaitStats) for the model named, or
// for the whole box when the name is empty; ErrUnknownModel for a model it
// does not know, ErrNotAllowed from a host that keeps none or to a
// version 2 module (the message is version 3's). Optional (issue 26): a
// module imports it only if it reads waits; for either policy.
func importWaits(ctx context.Context, mod api.Module, stack []uint64) {
	sv, name, ok := nameAndBuf(ctx, mod, stack)
	if !ok {
		return
	}
	if _, keeps := sv.host.(sdk.WaitReader); !keeps || sv.ver < 3 {
		retErr(stack, sdk.ErrNotAllowed)
		return
	}
	w, found := sdk.ReadWaits(sv.host, name)
	if !found {
		retErr(stack, sdk.ErrUnknownModel)
		return
	}
	sv.reply = wire.AppendVersion(sv.reply[:0], sv.ver, &w)
	reply(mod, stack, sv.reply, uint32(stack[2]), uint32(stack[3]))
}

// request_tick(at i64) -> i32: the scheduler's next tick (sdk.TickRequester;
// docs/ABI.md, "Ticks on demand"). Optional: a module imports it only if
// it asks for ticks, and one that does not is ticked periodically. A
// swapper, or an sdk.Effects that does not tick on demand, answers
// sdk.ErrNotAllowed.
func importRequestTick(ctx context.Context, _ api.Module, stack []uint64) {
	_, fx := effects(ctx)
	tr, ok := fx.(sdk.TickRequester)
	if !ok {
		retErr(stack, sdk.ErrNotAllowed)
		return
	}
	ret(stack, sdk.AsResult(tr.RequestTick(int64(stack[0]))))
}
