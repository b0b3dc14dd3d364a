package policytest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/sdk"
)

// Host is a fake Loadout host: an sdk.Effects (and so an sdk.Host) that
// keeps a model table, applies effects the way the run loop does, and
// records them in Calls. Set Models (NewHost does), optionally Swapper, and
// Scheduler before driving a scenario. A Host is not safe for concurrent
// use; neither is the run loop it imitates.
type Host struct {
	// Models is the model table by name. Tests may change it between
	// events, e.g. to crash a model (State = sdk.StateFailed) before a Tick.
	Models map[string]*sdk.ModelInfo
	// GPUs is returned by Snapshot.
	GPUs []sdk.GPUInfo
	// HostMemory is the host memory in bytes that sleepers may lease
	// (Snapshot.Host.Total; ABI version 3); 0 accounts none, so nothing
	// sleeps. What they lease (Host.Leased) is the sum of the models'
	// HostLeased.
	HostMemory uint64
	// Evict is each model's configured evict: as a mode, what
	// sdk.EvictDefault resolves to: EvictStop (stop), EvictSleep1 (sleep),
	// EvictSleep2 (sleep2), or EvictDefault or absent for auto (docs/ABI.md,
	// "Eviction modes").
	Evict map[string]sdk.EvictMode
	// SleepsRefused counts explicit sleeps the Host carried out as stops
	// because host memory could not hold them: refusals the real host
	// counts against the policy.
	SleepsRefused int
	// Now is the host time in Unix nanoseconds put on every event; Advance
	// moves it.
	Now int64
	// Swapper answers Plan; nil plans no evictions. StartSwap calls its
	// OnSwapStart, as the host does.
	Swapper Swapper
	// Scheduler receives the events the helpers send.
	Scheduler Scheduler
	// Calls is every effect the policy asked for, in order.
	Calls Calls
	// RefuseSwap makes StartSwap refuse a swap of the named model with the
	// given error, after the checks below pass: what the real host answers
	// when the target does not fit (sdk.ErrDoesNotFit) or when GPU jobs
	// hold the memory it needs for now (sdk.ErrHeldByJob). Delete the
	// entry to let the next swap through.
	RefuseSwap map[string]sdk.ResultError
	// WarmPath makes the Host take the warm path as the run loop does
	// (sdk.Admitter): Admit is checked and recorded (OpAdmit), and while a
	// model's admission holds, Submit grants its requests without calling
	// the scheduler (recorded as OpWarmGrant) and ServeDone does not send
	// OnServeDone unless the scheduler holds a request or asked for it
	// (sdk.AdmitServeDone). Without it Admit answers sdk.ErrNotAllowed and
	// records nothing: a host without the warm path.
	WarmPath bool
	// ReplicaSets are the models with replicas (issue 15), each set under
	// its model's name; every name in a set must be in Models. The Host
	// then answers sdk.ReadReplicas with the set a name belongs to (a set
	// of one for any other model) and lets GrantServe serve a request on
	// any ready replica of the model it asked for, as the run loop does.
	ReplicaSets map[string]sdk.ReplicaSet
	// TicksOnDemand makes the Host tick on demand as the run loop does
	// (sdk.TickRequester): RequestTick is clamped as the host clamps it
	// and kept in NextTick (not in Calls: it is the policy's statement of
	// when to call it, not an effect on the models). Without it
	// RequestTick answers sdk.ErrNotAllowed: a host that ticks
	// periodically.
	TicksOnDemand bool
	// NextTick is the tick the scheduler asked for last (Unix ns, after
	// the host's clamp), 0 for none; a Tick at or after it uses it up.
	// OnDemand reports whether the scheduler has asked at all.
	NextTick int64
	OnDemand bool
	// WaitRecords is the record of queueing delay the Host reports
	// (sdk.WaitReader), by model name, "" for the whole box: a test sets
	// the figures a run loop would have counted. A name it lacks is
	// unknown; nil (the default) is a host that keeps no record.
	WaitRecords map[string]sdk.WaitStats

	admits  map[string]admission // the warm path's admissions, by model
	demand  map[string]*sdk.ModelDemand
	began   map[string]int64 // when each active swap started (Now)
	tb      reporter
	callers map[sdk.RequestID]*caller
	active  map[string]sdk.SwapRequest // swaps started and not completed, by target
	started []sdk.SwapRequest
	stops   map[string]bool // models StopProcesses is stopping; Tick finishes them
}

// admission is one Admit the Host accepted.
type admission struct {
	limit uint32
	flags sdk.AdmitFlags
}

type callerState uint8

const (
	waiting   callerState = iota // submitted and not ended
	granted                      // GrantServe returned true
	served                       // granted, then ServeDone
	errored                      // GrantError
	gone                         // left, and a grant found it gone
	cancelled                    // OnCancel delivered while waiting
)

type caller struct {
	model   string
	state   callerState
	left    bool // the client disconnected (Leave or Cancel)
	hasPos  bool
	pos     int
	granted string // the model it was granted
	code    sdk.ErrorCode
	msg     string
}

// NewHost returns a Host with the given models (in StateStopped unless
// they say otherwise), starting at Now = 1,000,000,000,000 ns. Breaches of
// the host contract and scheduler errors are reported to tb.
func NewHost(tb testing.TB, models ...sdk.ModelInfo) *Host { return newHost(tb, models...) }

// reporter is the part of testing.TB a Host reports through; the scenario
// runner (scenario_run.go) supplies its own, which ties a breach to the
// scenario's step.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
}

func newHost(tb reporter, models ...sdk.ModelInfo) *Host {
	h := &Host{
		Models:  make(map[string]*sdk.ModelInfo, len(models)),
		Now:     1e12,
		tb:      tb,
		callers: make(map[sdk.RequestID]*caller),
		active:  make(map[string]sdk.SwapRequest),
		stops:   make(map[string]bool),
		admits:  make(map[string]admission),
		demand:  make(map[string]*sdk.ModelDemand),
		began:   make(map[string]int64),
	}
	for _, m := range models {
		h.Models[m.Name] = &m
	}
	return h
}

func (h *Host) violate(format string, args ...any) {
	h.tb.Helper()
	h.tb.Errorf("policytest: "+format, args...)
}

// Log records the line.
func (h *Host) Log(level sdk.LogLevel, msg string) {
	h.Calls = append(h.Calls, Call{Op: OpLog, Level: level, Msg: msg})
}

// ModelState returns a copy of the model's entry in Models.
func (h *Host) ModelState(model string) (sdk.ModelInfo, bool) {
	m, ok := h.Models[model]
	if !ok {
		return sdk.ModelInfo{}, false
	}
	return h.info(model, m), true
}

func (h *Host) info(name string, m *sdk.ModelInfo) sdk.ModelInfo {
	info := *m
	info.Name = name
	info.Devices = slices.Clone(m.Devices)
	return info
}

// RunningModels returns every model whose State.Running(), sorted by name.
func (h *Host) RunningModels() []sdk.ModelInfo {
	var out []sdk.ModelInfo
	for _, name := range h.names() {
		if m := h.Models[name]; m.State.Running() {
			out = append(out, h.info(name, m))
		}
	}
	return out
}

// Snapshot returns every model, sorted by name, and GPUs.
func (h *Host) Snapshot() sdk.Snapshot {
	s := sdk.Snapshot{Now: h.Now, GPUs: slices.Clone(h.GPUs), Host: h.hostMemory()}
	for _, name := range h.names() {
		s.Models = append(s.Models, h.info(name, h.Models[name]))
	}
	return s
}

func (h *Host) names() []string {
	names := make([]string, 0, len(h.Models))
	for name := range h.Models {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// Running returns the running set the host hands a swapper for target
// (DESIGN.md rule 4): every model whose State.Running(), plus the targets
// of swaps started and not yet completed, sorted, without target.
func (h *Host) Running(target string) []string {
	var out []string
	for name, m := range h.Models {
		if name != target && m.State.Running() {
			out = append(out, name)
		}
	}
	for name := range h.active {
		if name != target && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Plan forwards to Swapper with the running set of Running(target). An
// unknown target is sdk.ErrUnknownModel; a swapper error is
// sdk.ErrSwapperFailed (the error itself is logged to the test).
func (h *Host) Plan(target string) (sdk.Plan, error) {
	if _, ok := h.Models[target]; !ok {
		return sdk.Plan{}, sdk.ErrUnknownModel
	}
	if h.Swapper == nil {
		return sdk.Plan{}, nil
	}
	p, err := h.Swapper.Plan(sdk.PlanRequest{Now: h.Now, Target: target, Running: h.Running(target)})
	if err != nil {
		h.tb.Logf("policytest: swapper Plan(%q): %v", target, err)
		return sdk.Plan{}, sdk.ErrSwapperFailed
	}
	return p, nil
}

// GrantServe hands the caller the model. It returns false for a caller that
// has left (Leave) and ends it; it reports a breach for an unknown caller,
// one already granted, failed or cancelled, or a model that is not ready.
// On true the model's InFlight goes up and its LastUse becomes Now.
func (h *Host) GrantServe(id sdk.RequestID, model string) bool {
	h.tb.Helper()
	call := Call{Op: OpGrantServe, ID: id, Model: model}
	defer func() { h.Calls = append(h.Calls, call) }()
	c := h.holder(string(OpGrantServe), id)
	if c == nil {
		return false
	}
	m, ok := h.Models[model]
	switch {
	case !ok:
		h.violate("GrantServe(%d, %q): unknown model", id, model)
		return false
	case model != c.model && !h.siblings(model, c.model):
		h.violate("GrantServe(%d, %q): the request asked for model %q", id, model, c.model)
		return false
	case c.left:
		c.state = gone
		return false
	case m.State != sdk.StateReady:
		h.violate("GrantServe(%d, %q): model is %s, not ready", id, model, m.State)
		return false
	}
	m.InFlight++
	m.LastUse = h.Now
	c.state, c.granted = granted, model
	call.OK = true
	return true
}

// holder returns the caller id if the policy may still act on it, and
// reports a breach otherwise.
func (h *Host) holder(op string, id sdk.RequestID) *caller {
	h.tb.Helper()
	c, ok := h.callers[id]
	switch {
	case !ok:
		h.violate("%s(%d): unknown request", op, id)
	case c.state == cancelled:
		h.violate("%s(%d): the request was cancelled (OnCancel); the policy must forget it", op, id)
	case c.state != waiting:
		h.violate("%s(%d): the request has already ended (%s)", op, id, c.outcome())
	default:
		return c
	}
	return nil
}

// GrantError fails the caller. It reports a breach for an unknown caller or
// one that has already ended or was cancelled.
func (h *Host) GrantError(id sdk.RequestID, code sdk.ErrorCode, msg string) {
	h.tb.Helper()
	h.Calls = append(h.Calls, Call{Op: OpGrantError, ID: id, Code: code, Msg: msg})
	if !code.Valid() {
		h.violate("GrantError(%d, %d): unknown error code", id, code)
	}
	if c := h.holder(string(OpGrantError), id); c != nil {
		c.state, c.code, c.msg = errored, code, msg
	}
}

// SetQueuePosition records the caller's position (0: waiting on a swap).
func (h *Host) SetQueuePosition(id sdk.RequestID, pos int) {
	h.tb.Helper()
	h.Calls = append(h.Calls, Call{Op: OpSetQueuePosition, ID: id, Pos: pos})
	if pos < 0 {
		h.violate("SetQueuePosition(%d, %d): negative position", id, pos)
		return
	}
	if c := h.holder(string(OpSetQueuePosition), id); c != nil {
		c.hasPos, c.pos = true, pos
		delete(h.admits, c.model) // a held request ends the warm path
	}
}

// StartSwap applies the swap as the host does: it is refused with
// sdk.ErrUnknownModel for an unknown model, sdk.ErrSwapActive if the target
// already has a swap, sdk.ErrModelBusy if an evicted model has requests in
// flight (DESIGN.md rule 6), sdk.ErrBadArgument for Modes longer than
// Evict or a sleep mode for an asleep model, and with RefuseSwap's error
// for a target listed there. Otherwise the target becomes StateStarting
// (an asleep one is being woken), the running evicted models
// StateStopping, asleep evicted models are stopped at once (their host
// memory given back), the Swapper's OnSwapStart is called with the modes
// resolved (residency.go), and the swap stays active until CompleteSwap.
func (h *Host) StartSwap(s sdk.SwapRequest) (err error) {
	h.tb.Helper()
	s = sdk.SwapRequest{Model: s.Model, Evict: slices.Clone(s.Evict), Devices: slices.Clone(s.Devices), Modes: slices.Clone(s.Modes)}
	defer func() {
		h.Calls = append(h.Calls, Call{Op: OpStartSwap, Model: s.Model, Models: s.Evict, Devices: s.Devices, Modes: s.Modes, Err: err})
	}()
	target, ok := h.Models[s.Model]
	if !ok {
		return sdk.ErrUnknownModel
	}
	if _, ok := h.active[s.Model]; ok {
		return sdk.ErrSwapActive
	}
	for _, e := range s.Evict {
		m, ok := h.Models[e]
		if !ok {
			return sdk.ErrUnknownModel
		}
		if m.InFlight > 0 {
			return sdk.ErrModelBusy
		}
	}
	if err := h.checkModes(s); err != nil {
		return err
	}
	if refusal, ok := h.RefuseSwap[s.Model]; ok {
		return refusal
	}
	running := h.Running(s.Model)
	resolved := h.resolveModes(s)
	for _, e := range s.Evict {
		switch m := h.Models[e]; {
		case m.State.Running():
			m.State = sdk.StateStopping
		case m.Asleep():
			evicted(m, sdk.EvictStop)
		}
	}
	target.State = sdk.StateStarting
	h.active[s.Model] = sdk.SwapRequest{Model: s.Model, Evict: s.Evict, Devices: s.Devices, Modes: resolved}
	h.began[s.Model] = h.Now
	h.revoke(s.Model)
	h.revoke(s.Evict...)
	h.started = append(h.started, s)
	if h.Swapper != nil {
		ev := sdk.SwapStartEvent{Now: h.Now, Target: s.Model, Running: running, Evict: s.Evict, Devices: s.Devices, Modes: slices.Clone(resolved)}
		if err := h.Swapper.OnSwapStart(ev); err != nil {
			h.violate("swapper OnSwapStart(%q): %v", s.Model, err)
		}
	}
	return nil
}

// StopProcesses puts every running model of the list in StateStopping;
// the next Tick finishes the stops (StateStopped) and reports the models as
// changed. An unknown model refuses the whole call with sdk.ErrUnknownModel.
func (h *Host) StopProcesses(models []string) (err error) {
	models = slices.Clone(models)
	defer func() { h.Calls = append(h.Calls, Call{Op: OpStopProcesses, Models: models, Err: err}) }()
	for _, name := range models {
		if _, ok := h.Models[name]; !ok {
			return sdk.ErrUnknownModel
		}
	}
	h.revoke(models...)
	for _, name := range models {
		if m := h.Models[name]; m.State.Running() {
			m.State = sdk.StateStopping
			h.stops[name] = true
		}
	}
	return nil
}

func (h *Host) scheduler(event string) Scheduler {
	h.tb.Helper()
	if h.Scheduler == nil {
		h.tb.Fatalf("policytest: %s: Host.Scheduler is not set", event)
	}
	return h.Scheduler
}

func (h *Host) check(event string, err error) {
	h.tb.Helper()
	if err != nil {
		h.tb.Fatalf("policytest: %s: %v", event, err)
	}
}

// Request sends OnRequest for a new caller id of model, with the model's
// priority, as Submit does.
func (h *Host) Request(id sdk.RequestID, model string) {
	h.tb.Helper()
	h.Submit(sdk.RequestEvent{ID: id, Model: model})
}

// Submit sends OnRequest for a new caller. A zero ev.Now becomes h.Now and
// a zero ev.Priority the model's Priority, as the host resolves them. After
// the call the request must have been granted, failed, or given a queue
// position (DESIGN.md rule 5); a breach is reported.
func (h *Host) Submit(ev sdk.RequestEvent) {
	h.tb.Helper()
	if _, dup := h.callers[ev.ID]; dup {
		h.tb.Fatalf("policytest: Submit: request id %d reused", ev.ID)
	}
	if ev.Now == 0 {
		ev.Now = h.Now
	}
	if m, ok := h.Models[ev.Model]; ok && ev.Priority == 0 {
		ev.Priority = m.Priority
	}
	c := &caller{model: ev.Model}
	h.callers[ev.ID] = c
	if _, ok := h.Models[ev.Model]; ok {
		h.demandOf(ev.Model).Requests++ // before OnRequest, as the run loop counts it
	}
	if h.warm(ev.Model) {
		m := h.Models[ev.Model]
		m.InFlight++
		m.LastUse = h.Now
		c.state, c.granted = granted, ev.Model
		h.Calls = append(h.Calls, Call{Op: OpWarmGrant, ID: ev.ID, Model: ev.Model, OK: true})
		return
	}
	h.check(fmt.Sprintf("OnRequest(%d, %q)", ev.ID, ev.Model), h.scheduler("Submit").OnRequest(ev))
	if c.state == waiting && !c.hasPos {
		h.violate("OnRequest(%d, %q) returned without granting, failing or holding the request (SetQueuePosition)", ev.ID, ev.Model)
	}
}

// CompleteSwap finishes the active swap for model: its evicted models
// become StateStopped, the target StateReady (err == "") or StateFailed,
// then the scheduler gets OnSwapDone with err as the reason.
func (h *Host) CompleteSwap(model string, err string) {
	h.tb.Helper()
	s, ok := h.active[model]
	if !ok {
		h.tb.Fatalf("policytest: CompleteSwap(%q): no swap for it is active (active: %v)", model, h.ActiveSwaps())
	}
	delete(h.active, model)
	h.revoke(model)
	h.revoke(s.Evict...)
	for i, e := range s.Evict {
		if m := h.Models[e]; m.State == sdk.StateStopping {
			evicted(m, s.Modes[i])
		}
	}
	woken(h.Models[model])
	if err == "" {
		h.Models[model].State = sdk.StateReady
		d := h.demandOf(model)
		d.Loads++
		d.LoadTime = h.Now - h.began[model]
	} else {
		h.Models[model].State = sdk.StateFailed
	}
	delete(h.stops, model)
	h.check(fmt.Sprintf("OnSwapDone(%q)", model), h.scheduler("CompleteSwap").OnSwapDone(sdk.SwapDoneEvent{Now: h.Now, Model: model, Err: err}))
}

// ServeDone ends a granted caller: its model's InFlight goes down, LastUse
// becomes Now, and the scheduler gets OnServeDone.
func (h *Host) ServeDone(id sdk.RequestID) {
	h.tb.Helper()
	c, ok := h.callers[id]
	if !ok || c.state != granted {
		h.tb.Fatalf("policytest: ServeDone(%d): the request is not being served (%s)", id, c.outcome())
	}
	c.state = served
	m := h.Models[c.granted]
	m.InFlight--
	m.LastUse = h.Now
	if a, ok := h.admits[c.granted]; ok && a.flags&sdk.AdmitServeDone == 0 && !h.holdsAny() {
		return // the warm path: nothing the scheduler must hear
	}
	h.check(fmt.Sprintf("OnServeDone(%d)", id), h.scheduler("ServeDone").OnServeDone(sdk.ServeDoneEvent{Now: h.Now, ID: id, Model: c.granted}))
}

// Leave marks a waiting caller as gone without telling the scheduler, as
// when a client disconnects just before a grant: GrantServe then returns
// false. Cancel delivers the event.
func (h *Host) Leave(id sdk.RequestID) {
	h.tb.Helper()
	c, ok := h.callers[id]
	if !ok || c.state != waiting {
		h.tb.Fatalf("policytest: Leave(%d): the request is not waiting (%s)", id, c.outcome())
	}
	c.left = true
}

// Cancel tells the scheduler a waiting caller has left (OnCancel). From
// then on any effect naming the caller is a breach.
func (h *Host) Cancel(id sdk.RequestID) {
	h.tb.Helper()
	c, ok := h.callers[id]
	if !ok || c.state != waiting {
		h.tb.Fatalf("policytest: Cancel(%d): the request is not waiting (%s)", id, c.outcome())
	}
	c.left, c.state = true, cancelled
	h.check(fmt.Sprintf("OnCancel(%d)", id), h.scheduler("Cancel").OnCancel(sdk.CancelEvent{Now: h.Now, ID: id, Model: c.model}))
}

// Unload sends OnUnload for the models.
func (h *Host) Unload(reason sdk.UnloadReason, models ...string) {
	h.tb.Helper()
	h.revoke(models...)
	h.check("OnUnload", h.scheduler("Unload").OnUnload(sdk.UnloadEvent{Now: h.Now, Models: models, Reason: reason}))
}

// Tick finishes the stops StopProcesses began (those models become
// StateStopped) and sends OnTick naming them, sorted, as changed.
func (h *Host) Tick() {
	h.tb.Helper()
	var changed []string
	for name := range h.stops {
		if m := h.Models[name]; m.State == sdk.StateStopping {
			m.State = sdk.StateStopped
			changed = append(changed, name)
		}
	}
	clear(h.stops)
	slices.Sort(changed)
	h.revoke(changed...)
	if h.NextTick != 0 && h.NextTick <= h.Now {
		h.NextTick = 0 // this tick is the one asked for
	}
	h.check("OnTick", h.scheduler("Tick").OnTick(sdk.TickEvent{Now: h.Now, Changed: changed}))
}

// RequestTick records the scheduler's next tick (sdk.TickRequester) in
// NextTick, clamped to [Now+sdk.MinTickDelay, Now+sdk.MaxTickDelay] as the
// host clamps it, a time at or before Now taken as Now+sdk.PastTickDelay;
// 0 clears it. Without TicksOnDemand it answers
// sdk.ErrNotAllowed.
func (h *Host) RequestTick(at int64) error {
	if !h.TicksOnDemand {
		return sdk.ErrNotAllowed
	}
	h.OnDemand = true
	switch {
	case at == 0:
	case at <= h.Now:
		at = h.Now + sdk.PastTickDelay
	default:
		at = min(max(at, h.Now+sdk.MinTickDelay), h.Now+sdk.MaxTickDelay)
	}
	h.NextTick = at
	return nil
}

// Shutdown sends OnShutdown; afterwards every caller the scheduler still
// held must have been failed, and any that was not is reported.
func (h *Host) Shutdown(reason string) {
	h.tb.Helper()
	h.check("OnShutdown", h.scheduler("Shutdown").OnShutdown(sdk.ShutdownEvent{Now: h.Now, Reason: reason}))
	for id, c := range h.callers {
		if c.state == waiting {
			h.violate("OnShutdown: request %d (%q) was not failed", id, c.model)
		}
	}
}

// Advance moves Now forward by d.
func (h *Host) Advance(d time.Duration) { h.Now += int64(d) }

// Granted reports whether GrantServe succeeded for the caller.
func (h *Host) Granted(id sdk.RequestID) bool {
	c, ok := h.callers[id]
	return ok && (c.state == granted || c.state == served)
}

// Errored returns the code the caller was failed with; ok is false if it
// was not failed.
func (h *Host) Errored(id sdk.RequestID) (code sdk.ErrorCode, ok bool) {
	c, found := h.callers[id]
	if !found || c.state != errored {
		return 0, false
	}
	return c.code, true
}

// ErrorText returns the message the caller was failed with, or "".
func (h *Host) ErrorText(id sdk.RequestID) string {
	if c, ok := h.callers[id]; ok && c.state == errored {
		return c.msg
	}
	return ""
}

// QueuePosition returns the caller's last position while the scheduler
// holds it: 0 waiting on a swap, 1.. queued. ok is false once the request
// has ended or if it never got a position.
func (h *Host) QueuePosition(id sdk.RequestID) (pos int, ok bool) {
	c, found := h.callers[id]
	if !found || c.state != waiting || !c.hasPos {
		return 0, false
	}
	return c.pos, true
}

// Outcome describes the caller's state for test messages: "granted a",
// "errored CodeQueueFull: …", "queued at 2", "waiting on a swap", …
func (h *Host) Outcome(id sdk.RequestID) string {
	c, ok := h.callers[id]
	if !ok {
		return "unknown request"
	}
	return c.outcome()
}

func (c *caller) outcome() string {
	if c == nil {
		return "unknown request"
	}
	switch c.state {
	case granted:
		return "granted " + c.granted
	case served:
		return "served by " + c.granted
	case errored:
		return fmt.Sprintf("errored %s: %s", CodeName(c.code), c.msg)
	case gone:
		return "left before its grant"
	case cancelled:
		return "cancelled"
	}
	switch {
	case !c.hasPos:
		return "held without a position"
	case c.pos == 0:
		return "waiting on a swap"
	}
	return fmt.Sprintf("queued at %d", c.pos)
}

// Serving returns the callers granted and not yet done (ServeDone), in id
// order.
func (h *Host) Serving() []sdk.RequestID {
	var out []sdk.RequestID
	for id, c := range h.callers {
		if c.state == granted {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// SwapsStarted returns every swap StartSwap accepted, in order.
func (h *Host) SwapsStarted() []sdk.SwapRequest { return slices.Clone(h.started) }

// ActiveSwaps returns the targets of swaps started and not yet completed,
// sorted.
func (h *Host) ActiveSwaps() []string {
	out := make([]string, 0, len(h.active))
	for name := range h.active {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// Admit records the scheduler's warm-path admission (sdk.Admitter) after
// the run loop's checks: the model is known and ready, no active swap
// names it, no request for it is held, and flags are defined. A limit of
// 0 revokes. Without WarmPath it answers sdk.ErrNotAllowed and records
// nothing. The Host revokes an admission, as the run loop does, when a
// swap names the model (StartSwap, CompleteSwap), a request for it is held
// (SetQueuePosition), it is stopped (StopProcesses, Unload, Tick), and a
// request is granted on the warm path only while the model is ready and
// under the limit, so a test may also change Models between events.
func (h *Host) Admit(model string, limit uint32, flags sdk.AdmitFlags) (err error) {
	h.tb.Helper()
	if !h.WarmPath {
		return sdk.ErrNotAllowed
	}
	defer func() {
		h.Calls = append(h.Calls, Call{Op: OpAdmit, Model: model, Limit: limit, Flags: flags, Err: err})
	}()
	m, ok := h.Models[model]
	switch {
	case !ok:
		return sdk.ErrUnknownModel
	case flags&^sdk.AdmitAllFlags != 0:
		return sdk.ErrBadArgument
	case limit == 0:
		h.revoke(model)
		return nil
	case m.State != sdk.StateReady || h.swapNames(model) || h.holds(model):
		return sdk.ErrNotReady
	}
	h.admits[model] = admission{limit: limit, flags: flags}
	return nil
}

// Admitted returns the limit of model's warm-path admission, 0 for none.
func (h *Host) Admitted(model string) uint32 { return h.admits[model].limit }

// warm reports whether a new request for model is granted on the warm
// path: it is admitted, ready and under the admission's limit.
func (h *Host) warm(model string) bool {
	a, ok := h.admits[model]
	m := h.Models[model]
	return ok && m != nil && m.State == sdk.StateReady && m.InFlight < a.limit
}

func (h *Host) revoke(models ...string) {
	for _, m := range models {
		delete(h.admits, m)
	}
}

// swapNames reports whether an active swap loads or evicts model.
func (h *Host) swapNames(model string) bool {
	for t, s := range h.active {
		if t == model || slices.Contains(s.Evict, model) {
			return true
		}
	}
	return false
}

// holds reports whether the scheduler holds a request for model.
func (h *Host) holds(model string) bool {
	for _, c := range h.callers {
		if c.state == waiting && c.model == model {
			return true
		}
	}
	return false
}

// holdsAny reports whether the scheduler holds any request.
func (h *Host) holdsAny() bool {
	for _, c := range h.callers {
		if c.state == waiting {
			return true
		}
	}
	return false
}

// Demand implements sdk.DemandReader as the run loop does: every model of
// h.Models, sorted by name, with the requests Submit sent for it, the
// swaps CompleteSwap ended with it ready, and the last one's duration in
// h's time (Advance between StartSwap and CompleteSwap).
func (h *Host) Demand() []sdk.ModelDemand {
	out := make([]sdk.ModelDemand, 0, len(h.Models))
	for _, name := range h.names() {
		out = append(out, *h.demandOf(name))
	}
	return out
}

// demandOf is model's entry of h.demand, made on first use.
func (h *Host) demandOf(model string) *sdk.ModelDemand {
	d := h.demand[model]
	if d == nil {
		d = &sdk.ModelDemand{Name: model}
		h.demand[model] = d
	}
	return d
}

// Waits implements sdk.WaitReader from h.WaitRecords.
func (h *Host) Waits(model string) (sdk.WaitStats, bool) {
	st, ok := h.WaitRecords[model]
	return st, ok
}

// Replicas implements sdk.ReplicaReader from h.ReplicaSets.
func (h *Host) Replicas(name string) (sdk.ReplicaSet, bool) {
	if _, ok := h.Models[name]; !ok {
		return sdk.ReplicaSet{}, false
	}
	for _, set := range h.ReplicaSets {
		if slices.Contains(set.Replicas, name) {
			set.Replicas = slices.Clone(set.Replicas)
			return set, true
		}
	}
	return sdk.ReplicaSet{Model: name, Min: 1, Max: 1, Replicas: []string{name}}, true
}

// siblings reports whether a and b are replicas of one model.
func (h *Host) siblings(a, b string) bool {
	for _, set := range h.ReplicaSets {
		if slices.Contains(set.Replicas, a) && slices.Contains(set.Replicas, b) {
			return true
		}
	}
	return false
}
