package policytest

import (
	"testing"

	"github.com/loadout-dev/loadout/sdk"
)

// Scheduler is a scheduler under test: sdk.Scheduler with an error on every
// method. A native policy wrapped by Native never returns one; a WebAssembly
// policy (host/policy's Scheduler) returns the trap, panic or decoding error
// of the call.
type Scheduler interface {
	OnRequest(ev sdk.RequestEvent) error
	OnSwapDone(ev sdk.SwapDoneEvent) error
	OnServeDone(ev sdk.ServeDoneEvent) error
	OnCancel(ev sdk.CancelEvent) error
	OnUnload(ev sdk.UnloadEvent) error
	OnTick(ev sdk.TickEvent) error
	OnShutdown(ev sdk.ShutdownEvent) error
}

// Swapper is a swapper under test: sdk.Swapper with an error on every
// method, like Scheduler.
type Swapper interface {
	Plan(q sdk.PlanRequest) (sdk.Plan, error)
	OnSwapStart(ev sdk.SwapStartEvent) error
}

// Native adapts a native sdk.Scheduler to Scheduler. Its methods return
// nil; a panic in the policy is not recovered, so the test shows its stack.
func Native(s sdk.Scheduler) Scheduler { return native{s} }

type native struct{ s sdk.Scheduler }

func (n native) OnRequest(ev sdk.RequestEvent) error     { n.s.OnRequest(ev); return nil }
func (n native) OnSwapDone(ev sdk.SwapDoneEvent) error   { n.s.OnSwapDone(ev); return nil }
func (n native) OnServeDone(ev sdk.ServeDoneEvent) error { n.s.OnServeDone(ev); return nil }
func (n native) OnCancel(ev sdk.CancelEvent) error       { n.s.OnCancel(ev); return nil }
func (n native) OnUnload(ev sdk.UnloadEvent) error       { n.s.OnUnload(ev); return nil }
func (n native) OnTick(ev sdk.TickEvent) error           { n.s.OnTick(ev); return nil }
func (n native) OnShutdown(ev sdk.ShutdownEvent) error   { n.s.OnShutdown(ev); return nil }

// NativeSwapper adapts a native sdk.Swapper to Swapper.
func NativeSwapper(s sdk.Swapper) Swapper { return nativeSwapper{s} }

type nativeSwapper struct{ s sdk.Swapper }

func (n nativeSwapper) Plan(q sdk.PlanRequest) (sdk.Plan, error) { return n.s.Plan(q) }
func (n nativeSwapper) OnSwapStart(ev sdk.SwapStartEvent) error  { n.s.OnSwapStart(ev); return nil }

// MakeScheduler makes a scheduler under test from its settings JSON, with
// h as its Effects: natively (NativeSchedulerOf) or built to WebAssembly
// and run by the host's runtime, so that a case written once against it
// runs both ways. The error is the policy's for bad settings, or the
// runtime's.
type MakeScheduler func(t testing.TB, h *Host, settings string) (Scheduler, error)

// MakeSwapper is MakeScheduler for a swapper, with h as its Host.
type MakeSwapper func(t testing.TB, h *Host, settings string) (Swapper, error)

// NativeSchedulerOf is the MakeScheduler of a policy's factory (what it
// registers with sdk.RegisterScheduler), run natively through Native.
func NativeSchedulerOf(factory sdk.SchedulerFactory) MakeScheduler {
	return func(_ testing.TB, h *Host, settings string) (Scheduler, error) {
		s, err := factory(h, []byte(settings))
		if err != nil {
			return nil, err
		}
		return Native(s), nil
	}
}

// NativeSwapperOf is the MakeSwapper of a policy's factory (what it
// registers with sdk.RegisterSwapper), run natively through NativeSwapper.
func NativeSwapperOf(factory sdk.SwapperFactory) MakeSwapper {
	return func(_ testing.TB, h *Host, settings string) (Swapper, error) {
		s, err := factory(h, []byte(settings))
		if err != nil {
			return nil, err
		}
		return NativeSwapper(s), nil
	}
}

// PlanFunc is a Swapper made of one function, for scheduler tests that need
// a particular eviction rule without a real swapper. OnSwapStart does
// nothing.
type PlanFunc func(q sdk.PlanRequest) (sdk.Plan, error)

// Plan calls f.
func (f PlanFunc) Plan(q sdk.PlanRequest) (sdk.Plan, error) { return f(q) }

// OnSwapStart does nothing.
func (f PlanFunc) OnSwapStart(sdk.SwapStartEvent) error { return nil }

// EvictAll is a Swapper that evicts every running model: one model at a
// time, like a single exclusive group.
var EvictAll Swapper = PlanFunc(func(q sdk.PlanRequest) (sdk.Plan, error) {
	return sdk.Plan{Evict: append([]string(nil), q.Running...)}, nil
})
