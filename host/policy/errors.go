package policy

import (
	"errors"
	"fmt"
)

// ErrUnhealthy is returned, wrapped with the policy's name, by every call to
// a policy that crashed more than Options.MaxCrashes times within
// Options.CrashWindow. Such a policy gets no new instance; the host should
// fail what the policy held and use its fallback. A *CrashError for the
// crash that crossed the limit also matches ErrUnhealthy with errors.Is.
var ErrUnhealthy = errors.New("disabled after crashing repeatedly")

// CrashError reports that a policy's instance died during a call: it
// trapped, exited, panicked, overran its deadline or exhausted its memory.
// The instance has been discarded and, unless the policy is now crash-looping,
// a fresh one has been instantiated and initialised with the same settings,
// so the next call goes to it. Whatever state the old instance held (queued
// requests, for a scheduler) is gone.
type CrashError struct {
	Policy string // the module's name: a file path or "builtin:fifo"
	Event  string // the export that was running, e.g. "on_request"
	// Reason says what killed it: the trap ("wasm error: unreachable"), the
	// panic text, "deadline of 100ms exceeded" or "out of memory".
	Reason string

	disabled bool  // this crash made the policy unhealthy
	cause    error // what wazero returned, if anything
}

// Error implements error: "policy P crashed in on_request: reason".
func (e *CrashError) Error() string {
	s := fmt.Sprintf("policy %s crashed in %s: %s", e.Policy, e.Event, e.Reason)
	if e.disabled {
		s += " (crash-looping; disabled)"
	}
	return s
}

// Unwrap returns the error wazero reported, if any.
func (e *CrashError) Unwrap() error { return e.cause }

// PolicyName returns the name of the policy that crashed (Policy): every
// error of a call into a policy has this method, so a caller that does not
// import this package finds which policy failed with errors.As (the run
// loop does, for loadout_policy_failures_total's policy label).
func (e *CrashError) PolicyName() string { return e.Policy }

// namedError is an error of a call into the policy named policy, whatever
// its cause; its text is the cause's.
type namedError struct {
	policy string
	err    error
}

func (e *namedError) Error() string { return e.err.Error() }
func (e *namedError) Unwrap() error { return e.err }

// PolicyName returns the name of the policy the call went to, as
// CrashError.PolicyName.
func (e *namedError) PolicyName() string { return e.policy }

// Is reports whether target is ErrUnhealthy and this crash disabled the
// policy.
func (e *CrashError) Is(target error) bool { return target == ErrUnhealthy && e.disabled }

// statusError is a call the policy answered with a status the ABI defines
// as a refusal, not a crash: wire.StatusError (the policy returned an
// error), StatusBadInput (it could not decode the event) or StatusNoPolicy
// (nothing of the kind the export needs is registered; for a job plan, the
// swapper does not plan for jobs). The instance stays. Swapper.PlanJob
// reads the status.
type statusError struct {
	policy, event string
	status        uint32 // a wire.Status* value
	text          string // the guest's set_error text (instance.statusText)
}

func (e *statusError) Error() string {
	return fmt.Sprintf("policy %s: %s: %s", e.policy, e.event, e.text)
}
