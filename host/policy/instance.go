package policy

import (
	"context"
	"fmt"
	"time"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/wire"
	"github.com/tetratelabs/wazero/api"
)

// instanceKey is the context key under which a call's ctx carries the
// *instance being called, so that a host import finds the sdk.Effects of the
// instance that made it (nested calls included: each instance has its own
// ctx).
type instanceKey struct{}

// callerOf returns the instance whose call ctx is, or nil outside a call
// the host made (a probe instantiation).
func callerOf(ctx context.Context) *instance {
	in, _ := ctx.Value(instanceKey{}).(*instance)
	return in
}

// instance is one instantiation of a policy module, with everything a call
// reuses: the guest's buffer addresses, the export handles, the
// parameter/result stack and the deadline machinery.
//
// The deadline: ctx is cancelled by clock (deadline), which is started
// when a call starts and stopped when it returns. wazero, configured with
// WithCloseOnContextDone, watches ctx during every call and closes the
// module when it is cancelled; compiled code checks for that at every loop
// back-edge, so even `for {}` stops. A call stopped means the instance is
// discarded, so the ctx never needs to be made again. See docs/RATIONALE.md,
// "Per-call deadline mechanism", for why this beats context.WithTimeout.
type instance struct {
	sv  *supervisor
	mod api.Module
	mem api.Memory
	fns [numEvents]api.Function // nil where the kind has no such export
	ini api.Function

	inAddr, inCap, outAddr, outCap uint32
	stack                          [1]uint64 // params and results of an event export

	ctx   context.Context
	clock *deadline // the calls' deadline; cancels ctx
	busy  bool      // a call is in progress

	pure    bool         // a swapper whose plan_is_pure returned 1 after init
	sent    sentSnapshot // what snapshot_delta last sent this instance
	errText []byte       // set_error text of the current call
	logs    int          // log lines this call
	dropped int          // log lines dropped this call
	out     *guestOutput // the instance's stdout and stderr
}

// newInstance allocates an instance of sv's module, not yet instantiated.
func newInstance(sv *supervisor) *instance {
	in := &instance{sv: sv, out: new(guestOutput)}
	base, cancel := context.WithCancel(context.Background())
	in.ctx = context.WithValue(base, instanceKey{}, in)
	in.clock = newDeadline(cancel)
	return in
}

// instantiate makes the instance live: instantiate the compiled module
// (running _initialize) or take the module's spare instance, where that
// was done already, read abi_buffers, look up the exports and call init
// with the settings, each step under the runtime's start timeout. On error
// the instance is closed.
func (in *instance) instantiate(settings []byte) (err error) {
	sv := in.sv
	defer func() {
		if err != nil {
			in.close()
		}
	}()
	st := sv.r.startTimeout
	var mod api.Module
	if spare := sv.m.takeSpare(); spare != nil {
		mod, in.out = spare.mod, spare.out
	} else {
		in.clock.start(st)
		mod, err = sv.r.wz.InstantiateModule(in.ctx, sv.m.compiled, sv.r.moduleConfig(in.out))
		overran := in.clock.stop()
		if err != nil || overran {
			return fmt.Errorf("instantiating: %s", crashReason(err, overran, st, in.out.text()))
		}
	}
	in.mod = mod
	if mod.IsClosed() {
		return fmt.Errorf("instantiating: the module exited during _initialize")
	}
	if in.mem = mod.Memory(); in.mem == nil {
		return fmt.Errorf("instantiating: the module has no memory")
	}
	in.clock.start(st)
	err = mod.ExportedFunction(exportBuffers).CallWithStack(in.ctx, in.stack[:])
	overran := in.clock.stop()
	if err != nil || overran {
		return fmt.Errorf("calling %s: %s", exportBuffers, crashReason(err, overran, st, in.out.text()))
	}
	if err := in.readBuffers(uint32(in.stack[0])); err != nil {
		return err
	}
	for _, ev := range kindEvents[sv.m.Kind] {
		in.fns[ev] = mod.ExportedFunction(ev.String())
	}
	in.ini = mod.ExportedFunction(exportInit)

	sv.initEv = sdk.InitEvent{Now: sv.r.opts.Clock().UnixNano(), Settings: settings}
	res, overran, callErr := in.invoke(in.ini, &sv.initEv, st)
	sv.initEv = sdk.InitEvent{}
	if callErr != nil || overran {
		return fmt.Errorf("%s: %s", exportInit, crashReason(callErr, overran, st, in.out.text()))
	}
	if status := uint32(res >> 32); status != wire.StatusOK {
		return fmt.Errorf("%s: %s", exportInit, in.statusText(status))
	}
	if fn := mod.ExportedFunction(exportPlanIsPure); fn != nil && sv.m.Kind == sdk.KindSwapper {
		in.clock.start(st)
		err := fn.CallWithStack(in.ctx, in.stack[:])
		overran = in.clock.stop()
		if err != nil || overran {
			return fmt.Errorf("calling %s: %s", exportPlanIsPure, crashReason(err, overran, st, in.out.text()))
		}
		in.pure = uint32(in.stack[0]) == 1
	}
	return nil
}

// readBuffers reads and checks the four u32 at addr that abi_buffers
// returned: in-buffer address and capacity, out-buffer address and capacity.
func (in *instance) readBuffers(addr uint32) error {
	size := uint64(in.mem.Size())
	if uint64(addr)+16 > size {
		return fmt.Errorf("%s returned address %#x, outside the module's memory of %d bytes", exportBuffers, addr, size)
	}
	var v [4]uint32
	for i := range v {
		v[i], _ = in.mem.ReadUint32Le(addr + uint32(4*i))
	}
	for _, b := range []struct {
		what      string
		addr, cap uint32
	}{{"in-buffer", v[0], v[1]}, {"out-buffer", v[2], v[3]}} {
		if uint64(b.addr)+uint64(b.cap) > size {
			return fmt.Errorf("%s: the %s [%#x, +%d) lies outside the module's memory of %d bytes", exportBuffers, b.what, b.addr, b.cap, size)
		}
	}
	if v[1] < 64 {
		return fmt.Errorf("%s: the in-buffer holds %d bytes; an event needs more", exportBuffers, v[1])
	}
	in.inAddr, in.inCap, in.outAddr, in.outCap = v[0], v[1], v[2], v[3]
	return nil
}

// invoke writes msg into the guest's in-buffer, calls fn with its length
// under a deadline of d and returns the export's raw result, whether the
// deadline fired and wazero's error. It allocates nothing.
func (in *instance) invoke(fn api.Function, msg any, d time.Duration) (res uint64, overran bool, err error) {
	sv := in.sv
	sv.buf = wire.AppendVersion(sv.buf[:0], sv.ver, msg)
	if uint64(len(sv.buf)) > uint64(in.inCap) {
		return 0, false, &tooLargeError{size: len(sv.buf), capacity: in.inCap}
	}
	if !in.mem.Write(in.inAddr, sv.buf) {
		return 0, false, fmt.Errorf("the in-buffer at %#x is outside the module's memory", in.inAddr)
	}
	in.stack[0] = uint64(len(sv.buf))
	in.errText = in.errText[:0]
	in.logs, in.dropped = 0, 0
	in.busy = true
	in.clock.start(d)
	err = fn.CallWithStack(in.ctx, in.stack[:])
	overran = in.clock.stop()
	in.busy = false
	return in.stack[0], overran, err
}

// tooLargeError refuses an event larger than the guest's in-buffer: the
// host's problem to report, not a crash.
type tooLargeError struct {
	size     int
	capacity uint32
}

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("event of %d bytes exceeds the policy's %d-byte input buffer", e.size, e.capacity)
}

// statusText describes a non-zero export status with the guest's set_error
// text.
func (in *instance) statusText(status uint32) string {
	text := string(in.errText)
	if text == "" {
		text = "(no error text)"
	}
	switch status {
	case wire.StatusError:
		return text
	case wire.StatusPanic:
		return text // the SDK's text starts with "panic: "
	case wire.StatusBadInput:
		return "could not decode the event: " + text
	case wire.StatusNoPolicy:
		return "no policy registered: " + text
	default:
		return fmt.Sprintf("unknown status %d: %s", status, text)
	}
}

// close discards the instance: stops its timer, cancels its ctx and closes
// the module, releasing its memory.
func (in *instance) close() {
	in.clock.close()
	if in.mod != nil {
		_ = in.mod.Close(context.Background())
	}
}
