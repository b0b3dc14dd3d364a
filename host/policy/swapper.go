package policy

import (
	"context"
	"errors"
	"fmt"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/wire"
)

// Swapper is a live swapper (eviction) policy: one Wasm instance, re-made
// after a crash. Call it from one goroutine only; a scheduler's plan import
// calls it (through sdk.Effects.Plan) while that scheduler's own call is in
// progress, which is fine: they are different instances. Errors are as for
// Scheduler.
type Swapper struct {
	sv *supervisor

	q     sdk.PlanRequest
	jq    sdk.JobPlanRequest
	start sdk.SwapStartEvent
}

// NewSwapper instantiates m, which must be a swapper, and initialises it
// with settings (JSON; empty means "{}"). h answers its reads; a swapper may
// only log and read (every effect import returns sdk.ErrNotAllowed).
func (r *Runtime) NewSwapper(ctx context.Context, m *Module, settings []byte, h sdk.Host) (*Swapper, error) {
	if m.Kind != sdk.KindSwapper {
		return nil, fmt.Errorf("policy %s: is a %s, not a swapper", m.Name, m.Kind)
	}
	if h == nil {
		return nil, fmt.Errorf("policy %s: NewSwapper needs an sdk.Host", m.Name)
	}
	sv, err := newSupervisor(r, m, settings, nil, h)
	if err != nil {
		return nil, err
	}
	return &Swapper{sv: sv}, nil
}

// Plan asks what must happen before q.Target can load: the models to evict
// and, optionally, the devices to place it on.
func (s *Swapper) Plan(q sdk.PlanRequest) (sdk.Plan, error) {
	s.q = q
	n, err := s.sv.call(evPlan, &s.q)
	s.q = sdk.PlanRequest{}
	if err != nil {
		return sdk.Plan{}, err
	}
	return s.readPlan(n)
}

// PlanJob asks which models a GPU job evicts (sdk.JobPlanner): a
// JobPlanRequest through the plan export. A module that does not plan for
// jobs — one built before JobPlanRequest existed (it cannot decode it), or
// one whose swapper is not an sdk.JobPlanner or answers
// sdk.ErrJobPlanUnsupported — gives an error wrapping
// sdk.ErrJobPlanUnsupported, and the caller applies its own rule; that is
// not recorded as the policy's last error (Status). Other errors are as
// for Plan.
func (s *Swapper) PlanJob(q sdk.JobPlanRequest) (sdk.Plan, error) {
	s.jq = q
	lastError := s.sv.status.LastError
	n, err := s.sv.call(evPlan, &s.jq)
	s.jq = sdk.JobPlanRequest{}
	if err != nil {
		var se *statusError
		if errors.As(err, &se) && (se.status == wire.StatusBadInput || se.status == wire.StatusNoPolicy) {
			// Not the policy's failure: its status keeps the error it had.
			s.sv.status.LastError = lastError
			return sdk.Plan{}, fmt.Errorf("%w: %v", sdk.ErrJobPlanUnsupported, err)
		}
		return sdk.Plan{}, err
	}
	return s.readPlan(n)
}

// readPlan decodes the Plan of n bytes a plan call left in the out-buffer.
// An answer that is not a Plan of the module's ABI version (longer than
// the out-buffer, outside its memory, malformed) is a crash, as a status
// outside the ABI is: the guest's state is unknown, and a module that
// answers so every time is disabled and its fallback plans, rather than
// every load failing.
func (s *Swapper) readPlan(n uint32) (sdk.Plan, error) {
	in := s.sv.in
	if n > in.outCap {
		return sdk.Plan{}, s.sv.crash(in, evPlan, fmt.Sprintf("its plan of %d bytes exceeds the %d-byte out-buffer", n, in.outCap), nil)
	}
	b, ok := in.mem.Read(in.outAddr, n)
	if !ok {
		return sdk.Plan{}, s.sv.crash(in, evPlan, "its out-buffer is outside the module's memory", nil)
	}
	var p sdk.Plan
	if err := wire.DecodeVersion(b, s.sv.ver, &p); err != nil {
		return sdk.Plan{}, s.sv.crash(in, evPlan, "its plan is not the ABI's: "+err.Error(), err)
	}
	return p, nil
}

// OnSwapStart tells the swapper that a swap it planned is starting.
func (s *Swapper) OnSwapStart(ev sdk.SwapStartEvent) error {
	s.start = ev
	_, err := s.sv.call(evSwapStart, &s.start)
	s.start = sdk.SwapStartEvent{}
	return err
}

// Status returns the policy's health and counters.
func (s *Swapper) Status() Status { return s.sv.statusNow() }

// Close discards the instance. Every later call returns an error.
func (s *Swapper) Close(ctx context.Context) error {
	s.sv.close()
	return nil
}
