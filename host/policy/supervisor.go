package policy

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/wire"
)

// Status is a policy's health as the run loop and the admin API report it.
type Status struct {
	Name           string         // the module's name
	Kind           sdk.PolicyKind // scheduler or swapper
	Healthy        bool           // false once crash-looping (every call returns ErrUnhealthy) or closed
	Crashes        int            // crashes since the policy was made, failed re-instantiations included
	Instantiations int            // successful instantiations, the first included
	LastError      string         // the last error a call returned, "" if none

	// Set by the fallback decorators (FallbackScheduler, FallbackSwapper):
	Active         bool      // this policy is the one called now
	Fallback       bool      // this is the fallback, not the configured policy
	DisabledReason string    // why the configured policy is disabled, while it is
	RetryAt        time.Time // when a disabled configured policy is tried again

	// Calls counts the calls into this policy and their latency, per event
	// export called at least once (callstats.go).
	Calls []CallStats
}

// supervisor owns one policy (a module, its settings and its window onto
// the host) across instances: it calls the live instance, and when that
// instance dies it discards it, counts the crash and makes a fresh one
// (DESIGN.md run-loop rule 7). Scheduler and Swapper are thin typed faces on
// it. Only the run-loop goroutine touches it.
type supervisor struct {
	r        *Runtime
	m        *Module
	settings []byte
	fx       sdk.Effects // nil for a swapper
	host     sdk.Host    // fx for a scheduler
	log      *slog.Logger
	timeout  time.Duration
	ver      uint8 // the module's ABI version: every message to and from it is encoded in it

	in       *instance // nil between a failed re-instantiation and the next call
	disabled error     // returned by every call: ErrUnhealthy wrapped once crash-looping, or "closed"
	crashes  []crash
	ncalls   [numEvents]uint64 // calls made, per export (CrashCalls)
	status   Status
	calls    callStats

	// Reused by every call: the encoded event, an import's encoded reply,
	// interned model names and the messages being encoded or decoded.
	buf     []byte
	reply   []byte
	names   map[string]string
	initEv  sdk.InitEvent
	info    sdk.ModelInfo
	list    sdk.ModelList
	snap    sdk.Snapshot
	plan    sdk.Plan
	swapReq sdk.SwapRequest
	stopReq sdk.StopRequest
}

// maxInterned bounds the interned model names of one policy.
const maxInterned = 4096

func newSupervisor(r *Runtime, m *Module, settings []byte, fx sdk.Effects, host sdk.Host) (*supervisor, error) {
	if m.r != r {
		return nil, fmt.Errorf("policy %s: compiled by another runtime", m.Name)
	}
	if r.closed.Load() {
		return nil, fmt.Errorf("policy %s: runtime is closed", m.Name)
	}
	sv := &supervisor{
		r:        r,
		m:        m,
		settings: append([]byte(nil), settings...),
		fx:       fx,
		host:     host,
		log:      r.log.With("policy", m.Name),
		timeout:  cmp.Or(m.CallTimeout, r.opts.CallTimeout),
		ver:      uint8(m.ABIVersion), // checked by Compile: wire.Supported
		buf:      make([]byte, 0, 512),
		reply:    make([]byte, 0, 4096),
		names:    map[string]string{},
		status:   Status{Name: m.Name, Kind: m.Kind, Healthy: true},
	}
	in := newInstance(sv)
	if err := in.instantiate(sv.settings); err != nil {
		return nil, fmt.Errorf("policy %s: %w", m.Name, err)
	}
	sv.in = in
	sv.status.Instantiations = 1
	sv.flushOutput(in)
	return sv, nil
}

// call delivers one event to the policy and returns the length of its
// output in the out-buffer. A status-1 error leaves the instance in place;
// a crash discards it (see crash).
func (sv *supervisor) call(ev event, msg any) (uint32, error) {
	if sv.disabled != nil {
		return 0, sv.disabled
	}
	in := sv.in
	if in == nil {
		var err error
		if in, err = sv.restart(); err != nil {
			return 0, sv.fail(err)
		}
	}
	if in.busy {
		return 0, sv.fail(fmt.Errorf("policy %s: %s called while a call into the same policy is in progress", sv.m.Name, ev))
	}
	sv.ncalls[ev]++
	start := time.Now()
	res, overran, err := in.invoke(in.fns[ev], msg, sv.timeout)
	sv.calls.record(ev, time.Since(start))
	if err == nil && !overran {
		switch status := uint32(res >> 32); status {
		case wire.StatusOK:
			if !in.out.empty() || in.dropped > 0 {
				sv.flushOutput(in)
			}
			return uint32(res), nil
		case wire.StatusPanic:
			return 0, sv.crash(in, ev, in.statusText(status), nil)
		case wire.StatusError, wire.StatusBadInput, wire.StatusNoPolicy:
			sv.flushOutput(in)
			return 0, sv.fail(&statusError{policy: sv.m.Name, event: ev.String(), status: status, text: in.statusText(status)})
		default: // not the ABI: the guest's state is unknown
			return 0, sv.crash(in, ev, in.statusText(status), nil)
		}
	}
	var tooLarge *tooLargeError
	if errors.As(err, &tooLarge) {
		return 0, sv.fail(fmt.Errorf("policy %s: %s: %w", sv.m.Name, ev, err))
	}
	if sv.r.closed.Load() {
		return 0, sv.fail(fmt.Errorf("policy %s: %s: runtime is closed", sv.m.Name, ev))
	}
	return 0, sv.crash(in, ev, crashReason(err, overran, sv.timeout, in.out.text()), err)
}

// statusNow is the policy's status with its call counts.
func (sv *supervisor) statusNow() Status {
	st := sv.status
	st.Calls = sv.calls.stats()
	return st
}

// fail records err as the last error and returns it, named by the policy
// (CrashError.PolicyName).
func (sv *supervisor) fail(err error) error {
	sv.status.LastError = err.Error()
	return sv.named(err)
}

// named returns err with this policy's name (CrashError.PolicyName), once:
// an error that has it already is returned as it is.
func (sv *supervisor) named(err error) error {
	var n interface{ PolicyName() string }
	if errors.As(err, &n) {
		return err
	}
	return &namedError{policy: sv.m.Name, err: err}
}

// crash discards the dead instance, counts the crash, logs one line and,
// unless the policy is now crash-looping, makes a fresh instance with the
// same settings.
func (sv *supervisor) crash(in *instance, ev event, reason string, cause error) error {
	output := in.out.text()
	in.close()
	sv.in = nil
	ce := &CrashError{Policy: sv.m.Name, Event: ev.String(), Reason: reason, cause: cause}
	ce.disabled = sv.countCrash(ev)
	attrs := []any{"event", ce.Event, "reason", reason, "crashes", sv.status.Crashes}
	if output != "" {
		attrs = append(attrs, "output", output)
	}
	sv.log.Warn("policy crashed; instance discarded", attrs...)
	sv.fail(ce)
	if sv.m.OnCrash != nil {
		sv.m.OnCrash()
	}
	if !ce.disabled {
		if _, err := sv.restart(); err != nil {
			sv.log.Error("policy could not be re-instantiated", "err", err)
		}
	}
	return ce
}

// crash is when a crash happened: the clock's time, and the export that
// crashed with the calls made to it by then (supervisor.ncalls); ev is
// -1 for a failed re-instantiation, which no call made.
type crash struct {
	at   time.Time
	ev   event
	call uint64
}

// countCrash records a crash of export ev now (-1: re-instantiating) and
// reports whether it made the policy crash-looping: more than MaxCrashes
// within CrashWindow, or within the last CrashCalls calls to the export
// that crashed. The second: a policy that crashes at every request, where
// requests come minutes apart, never had more than one crash in a minute
// and failed every request for ever; counted in the calls to that export,
// as a scheduler ticked every second makes sixty calls a minute that do
// not crash.
func (sv *supervisor) countCrash(ev event) (disabled bool) {
	now, o := sv.r.opts.Clock(), &sv.r.opts
	sv.status.Crashes++
	keep := sv.crashes[:0]
	for _, c := range sv.crashes {
		if now.Sub(c.at) < o.CrashWindow || (c.ev >= 0 && sv.ncalls[c.ev]-c.call < uint64(o.CrashCalls)) {
			keep = append(keep, c)
		}
	}
	c := crash{at: now, ev: ev}
	if ev >= 0 {
		c.call = sv.ncalls[ev]
	}
	sv.crashes = append(keep, c)
	if len(sv.crashes) <= o.MaxCrashes {
		return false
	}
	sv.disabled = sv.named(fmt.Errorf("policy %s: %w (%d crashes within %s or %d calls)", sv.m.Name, ErrUnhealthy, len(sv.crashes), o.CrashWindow, o.CrashCalls))
	sv.status.Healthy = false
	sv.log.Error("policy disabled: crash-looping", "crashes", len(sv.crashes), "window", o.CrashWindow, "calls", o.CrashCalls)
	return true
}

// restart makes a fresh instance with the policy's settings. A failure
// counts as a crash.
func (sv *supervisor) restart() (*instance, error) {
	in := newInstance(sv)
	if err := in.instantiate(sv.settings); err != nil {
		err = fmt.Errorf("policy %s: re-instantiating: %w", sv.m.Name, err)
		if sv.countCrash(-1) {
			return nil, sv.disabled
		}
		return nil, err
	}
	sv.in = in
	sv.status.Instantiations++
	sv.flushOutput(in)
	return in, nil
}

// flushOutput logs what the instance wrote to stdout and stderr during the
// last call, and how many of its log lines were dropped.
func (sv *supervisor) flushOutput(in *instance) {
	if !in.out.empty() {
		sv.log.Info("policy output", "output", in.out.text())
		in.out.reset()
	}
	if in.dropped > 0 {
		sv.log.Warn("policy log lines dropped", "dropped", in.dropped, "limit_per_call", maxLogsPerCall)
		in.dropped = 0
	}
}

// intern returns b as a string, allocating only the first time a name is
// seen (model names come from a small set).
func (sv *supervisor) intern(b []byte) string {
	if s, ok := sv.names[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(sv.names) < maxInterned {
		sv.names[s] = s
	}
	return s
}

// revive gives a policy disabled for crash-looping a fresh start: its
// crash window is cleared and a new instance made with its settings. A
// closed policy stays closed. The error is the re-instantiation's; the
// policy is then disabled again.
func (sv *supervisor) revive() error {
	if sv.disabled != nil && !errors.Is(sv.disabled, ErrUnhealthy) {
		return sv.disabled
	}
	if sv.in != nil {
		sv.in.close()
		sv.in = nil
	}
	sv.disabled, sv.crashes = nil, sv.crashes[:0]
	in := newInstance(sv)
	if err := in.instantiate(sv.settings); err != nil {
		sv.status.Crashes++
		sv.disabled = sv.named(fmt.Errorf("policy %s: %w (its retry failed: %v)", sv.m.Name, ErrUnhealthy, err))
		return sv.fail(sv.disabled)
	}
	sv.in = in
	sv.status.Instantiations++
	sv.status.Healthy = true
	sv.flushOutput(in)
	return nil
}

// close discards the instance; every later call fails.
func (sv *supervisor) close() {
	if sv.in != nil {
		sv.in.close()
		sv.in = nil
	}
	if sv.disabled == nil || errors.Is(sv.disabled, ErrUnhealthy) {
		sv.disabled = sv.named(fmt.Errorf("policy %s: closed", sv.m.Name))
	}
	sv.status.Healthy = false
}
