package policy

import (
	"context"
	"fmt"

	"github.com/loadout-dev/loadout/sdk"
)

// Scheduler is a live scheduler policy: one Wasm instance, re-made after a
// crash. Call it from one goroutine only (the run loop). Every method
// returns nil, an error naming the policy (the policy reported an error or
// the event could not be delivered), a *CrashError (the instance died during
// the call and has been replaced), or ErrUnhealthy wrapped (the policy is
// disabled). Effects happen through the sdk.Effects given to NewScheduler,
// during the call.
type Scheduler struct {
	sv *supervisor

	// The event being delivered, kept here so that encoding it with
	// wire.AppendVersion does not allocate.
	req       sdk.RequestEvent
	swapDone  sdk.SwapDoneEvent
	serveDone sdk.ServeDoneEvent
	cancel    sdk.CancelEvent
	unload    sdk.UnloadEvent
	tick      sdk.TickEvent
	shutdown  sdk.ShutdownEvent
}

// NewScheduler instantiates m, which must be a scheduler, and initialises it
// with settings (JSON; empty means "{}"). fx receives its effects and answers
// its reads; fx.Plan is how it reaches the swapper. Instantiating costs a few
// milliseconds and about 5 MiB per instance for a Go guest.
func (r *Runtime) NewScheduler(ctx context.Context, m *Module, settings []byte, fx sdk.Effects) (*Scheduler, error) {
	if m.Kind != sdk.KindScheduler {
		return nil, fmt.Errorf("policy %s: is a %s, not a scheduler", m.Name, m.Kind)
	}
	if fx == nil {
		return nil, fmt.Errorf("policy %s: NewScheduler needs an sdk.Effects", m.Name)
	}
	sv, err := newSupervisor(r, m, settings, fx, fx)
	if err != nil {
		return nil, err
	}
	return &Scheduler{sv: sv}, nil
}

// OnRequest delivers a new caller. The scheduler must grant, fail or hold it
// (SetQueuePosition) before the call returns.
func (s *Scheduler) OnRequest(ev sdk.RequestEvent) error {
	s.req = ev
	_, err := s.sv.call(evRequest, &s.req)
	s.req = sdk.RequestEvent{}
	return err
}

// OnSwapDone delivers the end of a swap the scheduler started.
func (s *Scheduler) OnSwapDone(ev sdk.SwapDoneEvent) error {
	s.swapDone = ev
	_, err := s.sv.call(evSwapDone, &s.swapDone)
	s.swapDone = sdk.SwapDoneEvent{}
	return err
}

// OnServeDone delivers that a granted caller finished with its model.
func (s *Scheduler) OnServeDone(ev sdk.ServeDoneEvent) error {
	s.serveDone = ev
	_, err := s.sv.call(evServeDone, &s.serveDone)
	s.serveDone = sdk.ServeDoneEvent{}
	return err
}

// OnCancel delivers that a waiting caller left.
func (s *Scheduler) OnCancel(ev sdk.CancelEvent) error {
	s.cancel = ev
	_, err := s.sv.call(evCancel, &s.cancel)
	s.cancel = sdk.CancelEvent{}
	return err
}

// OnUnload asks the scheduler to unload models.
func (s *Scheduler) OnUnload(ev sdk.UnloadEvent) error {
	s.unload = ev
	_, err := s.sv.call(evUnload, &s.unload)
	s.unload = sdk.UnloadEvent{}
	return err
}

// OnTick delivers a periodic tick or a process state change.
func (s *Scheduler) OnTick(ev sdk.TickEvent) error {
	s.tick = ev
	_, err := s.sv.call(evTick, &s.tick)
	s.tick = sdk.TickEvent{}
	return err
}

// OnShutdown tells the scheduler the host is stopping: it must fail every
// caller it holds.
func (s *Scheduler) OnShutdown(ev sdk.ShutdownEvent) error {
	s.shutdown = ev
	_, err := s.sv.call(evShutdown, &s.shutdown)
	s.shutdown = sdk.ShutdownEvent{}
	return err
}

// Status returns the policy's health and counters.
func (s *Scheduler) Status() Status { return s.sv.statusNow() }

// Close discards the instance. Every later call returns an error.
func (s *Scheduler) Close(ctx context.Context) error {
	s.sv.close()
	return nil
}
