package policytest

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/sdk"
)

// Policy is the policy a scenario runs against: a factory that makes a
// fresh instance, bound to the scenario's Host, for every run. Set exactly
// one of the two fields. SchedulerPolicy and SwapperPolicy make one from a
// native policy's factory; a host that loads WebAssembly modules
// (host/policy) fills the fields with its own instances, whose methods have
// exactly the shapes of Scheduler and Swapper.
type Policy struct {
	// NewScheduler makes a scheduler with fx as its Effects and settings
	// (JSON) as its settings. An error is the policy's init error.
	NewScheduler func(fx sdk.Effects, settings []byte) (Scheduler, error)
	// NewSwapper makes a swapper with h as its Host.
	NewSwapper func(h sdk.Host, settings []byte) (Swapper, error)
}

// SchedulerPolicy is the Policy of a native scheduler: f is the factory the
// policy registers with sdk.RegisterScheduler.
func SchedulerPolicy(f sdk.SchedulerFactory) Policy {
	return Policy{NewScheduler: func(fx sdk.Effects, settings []byte) (Scheduler, error) {
		s, err := f(fx, settings)
		if err != nil {
			return nil, err
		}
		return Native(s), nil
	}}
}

// SwapperPolicy is the Policy of a native swapper: f is the factory the
// policy registers with sdk.RegisterSwapper.
func SwapperPolicy(f sdk.SwapperFactory) Policy {
	return Policy{NewSwapper: func(h sdk.Host, settings []byte) (Swapper, error) {
		s, err := f(h, settings)
		if err != nil {
			return nil, err
		}
		return NativeSwapper(s), nil
	}}
}

// Kind is KindScheduler or KindSwapper by the field that is set, KindNone
// when neither or both are.
func (p Policy) Kind() sdk.PolicyKind {
	switch {
	case p.NewScheduler != nil && p.NewSwapper == nil:
		return sdk.KindScheduler
	case p.NewSwapper != nil && p.NewScheduler == nil:
		return sdk.KindSwapper
	}
	return sdk.KindNone
}

// RunScenarioFiles runs every scenario file that matches pattern (a
// filepath.Glob pattern such as "testdata/scenarios/*.yaml") against p, each
// as a subtest named after its file. A file that does not parse, a
// scenario for the other kind of policy, and a scenario whose policy
// answers differently all fail their subtest with the file, the line and
// the first differing effect. No file matching the pattern fails t.
//
// A panic in a native policy is not recovered, so the test shows its stack.
func RunScenarioFiles(t *testing.T, p Policy, pattern string) {
	t.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatalf("policytest: scenario files %q: %v", pattern, err)
	}
	if len(files) == 0 {
		t.Fatalf("policytest: no scenario file matches %q", pattern)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), filepath.Ext(file)), func(t *testing.T) {
			sc, err := LoadScenario(file)
			if err != nil {
				t.Fatal(err)
			}
			if err := sc.Run(p, nil); err != nil {
				t.Error(err)
			}
		})
	}
}

// step is one parsed step.
type step struct {
	index        int // from 1
	line         int
	at           time.Duration // since the scenario's start
	event        string        // one of schedulerEvents or swapperEvents
	y            *stepYAML
	checkEffects bool // expect: was given (even empty)
	expect       []wantEffect
	checkLogs    bool  // logs: was given (even empty)
	checkTick    bool  // next_tick: was given
	nextTick     int64 // its value in host time; 0 for none
}

// wantEffect is one expected effect.
type wantEffect struct {
	line     int
	name     string // the effect's key in the file
	call     Call   // for effects: the Op and the fields to compare
	anyModel bool   // grant: no model given, any matches
	msgGiven bool   // error: message given, a substring of the real one
	plan     *sdk.Plan
	planErr  *string
}

// fakeSwapper answers a scheduler scenario's plans (swapper:).
type fakeSwapper struct {
	rule      string // evict_all, none, groups, fail, plans
	groupOf   map[string]int
	exclusive bool
	err       string
	plans     map[string]sdk.Plan
}

// Plan applies the rule: evict_all evicts every running model; none
// nothing; groups the running members of the target's group (a model in no
// group is alone), and every other running model too when exclusive; fail
// fails; plans answers the target's listed plan, or nothing.
func (f fakeSwapper) Plan(q sdk.PlanRequest) (sdk.Plan, error) {
	var p sdk.Plan
	switch f.rule {
	case "evict_all":
		p.Evict = slices.Clone(q.Running)
	case "groups":
		tg, ok := f.groupOf[q.Target]
		for _, m := range q.Running {
			if mg, in := f.groupOf[m]; f.exclusive || (ok && in && mg == tg) {
				p.Evict = append(p.Evict, m)
			}
		}
	case "fail":
		return p, errors.New(f.err)
	case "plans":
		pl := f.plans[q.Target]
		p = sdk.Plan{Evict: slices.Clone(pl.Evict), Devices: slices.Clone(pl.Devices), Modes: slices.Clone(pl.Modes)}
	}
	return p, nil
}

func (fakeSwapper) OnSwapStart(sdk.SwapStartEvent) error { return nil }

// idleScheduler lets a swapper scenario complete swaps (swap_done), which
// a Host delivers to its Scheduler.
type idleScheduler struct{}

func (idleScheduler) OnRequest(sdk.RequestEvent) error     { return nil }
func (idleScheduler) OnSwapDone(sdk.SwapDoneEvent) error   { return nil }
func (idleScheduler) OnServeDone(sdk.ServeDoneEvent) error { return nil }
func (idleScheduler) OnCancel(sdk.CancelEvent) error       { return nil }
func (idleScheduler) OnUnload(sdk.UnloadEvent) error       { return nil }
func (idleScheduler) OnTick(sdk.TickEvent) error           { return nil }
func (idleScheduler) OnShutdown(sdk.ShutdownEvent) error   { return nil }

// runReporter collects a Host's breach reports during a run; Fatalf stops
// the run (Run recovers stopRun).
type runReporter struct {
	errs []string
	logs []string
}

type stopRun struct{}

func (r *runReporter) Helper() {}
func (r *runReporter) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *runReporter) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	panic(stopRun{})
}
func (r *runReporter) Logf(format string, args ...any) {
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
}

// run is one run of a scenario.
type run struct {
	sc    *Scenario
	h     *Host
	rep   *runReporter
	trace io.Writer
	gpus  []gpuYAML
	cur   *step
}

// Run runs the scenario against a fresh instance of p: it delivers every
// step's event through a Host, as the run loop would, and compares what
// the policy did with what the step expects. It returns nil when every
// step matched, or an error that names the file, the line and the step and
// shows the first differing effect beside every effect of that step. A
// breach of the host contract (see Host) fails the step it happened in.
//
// If trace is not nil, every step is written to it with the effects and
// log lines it caused, in the scenario format: a new scenario's
// expectations can be written from a run of the policy, then checked.
func (sc *Scenario) Run(p Policy, trace io.Writer) (err error) {
	if k := p.Kind(); k == sdk.KindNone {
		return errors.New("policytest: a Policy needs exactly one of NewScheduler and NewSwapper")
	} else if k != sc.Kind {
		return fmt.Errorf("%s:%d: the scenario is for a %s; the policy is a %s", sc.File, sc.fileHeader, sc.Kind, k)
	}
	r := &run{sc: sc, rep: &runReporter{}, trace: trace, gpus: sc.gpus}
	r.h = newHost(r.rep, sc.models...)
	r.h.WarmPath = sc.warmPath
	r.h.TicksOnDemand = sc.onDemand
	r.h.HostMemory = sc.hostMemory
	r.h.Evict = maps.Clone(sc.evict)
	r.h.WaitRecords = maps.Clone(sc.waits)
	for name, n := range sc.demand {
		r.h.demandOf(name).Requests = n
	}
	r.h.Now = scenarioStart
	r.h.GPUs = deriveGPUs(r.gpus, r.h.Models)
	defer func() {
		if v := recover(); v != nil {
			if _, ok := v.(stopRun); !ok {
				panic(v)
			}
			err = r.breach()
		}
	}()
	if err := r.start(p); err != nil || sc.initErr != nil {
		return err
	}
	for i := range sc.steps {
		r.cur = &sc.steps[i]
		if err := r.step(r.cur); err != nil {
			return err
		}
	}
	return nil
}

// start makes the instance and checks init_error.
func (r *run) start(p Policy) error {
	sc, h := r.sc, r.h
	var err error
	if sc.Kind == sdk.KindScheduler {
		h.Swapper = sc.swapper
		var s Scheduler
		if s, err = p.NewScheduler(h, sc.settings); err == nil {
			h.Scheduler = s
		}
	} else {
		h.Scheduler = idleScheduler{}
		var s Swapper
		if s, err = p.NewSwapper(h, sc.settings); err == nil {
			h.Swapper = s
		}
	}
	switch want := sc.initErr; {
	case want == nil && err != nil:
		return fmt.Errorf("%s:%d: init with settings %s: %v", sc.File, sc.fileHeader, sc.settings, err)
	case want != nil && err == nil:
		return fmt.Errorf("%s:%d: init with settings %s succeeded; want an error containing %q", sc.File, sc.fileHeader, sc.settings, *want)
	case want != nil && !strings.Contains(err.Error(), *want):
		return fmt.Errorf("%s:%d: init with settings %s: error %q; want one containing %q", sc.File, sc.fileHeader, sc.settings, err, *want)
	}
	if r.trace != nil && sc.initErr != nil {
		fmt.Fprintf(r.trace, "init: %v (expected)\n", err)
	}
	return nil
}

// breach is the error for a run stopped by the Host (Fatalf) or with
// breaches reported.
func (r *run) breach() error {
	where := fmt.Sprintf("%s:%d", r.sc.File, r.sc.fileHeader)
	if r.cur != nil {
		where = fmt.Sprintf("%s:%d: step %d (%s)", r.sc.File, r.cur.line, r.cur.index, describe(r.cur))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: ", where)
	if len(r.rep.errs) == 1 {
		b.WriteString(r.rep.errs[0])
	} else {
		b.WriteString("the host reported:")
		for _, e := range r.rep.errs {
			b.WriteString("\n  " + e)
		}
	}
	r.writeLogs(&b)
	return errors.New(b.String())
}

func (r *run) writeLogs(b *strings.Builder) {
	for _, l := range r.rep.logs {
		b.WriteString("\n  (" + l + ")")
	}
}

// step delivers one step and compares.
func (r *run) step(st *step) error {
	h, y := r.h, st.y
	h.Now = scenarioStart + int64(st.at)
	mark := len(h.Calls)
	var (
		gotPlan *sdk.Plan
		planErr error
		hostOwn int = -1 // index in h.Calls of a record that is the host's own (swap_start)
	)
	switch st.event {
	case "request":
		h.Submit(sdk.RequestEvent{ID: sdk.RequestID(y.Request.ID), Model: y.Request.Model, Priority: y.Request.Priority, Client: y.Request.Client})
	case "swap_done":
		h.CompleteSwap(y.SwapDone.Model, y.SwapDone.Error)
	case "serve_done":
		h.ServeDone(sdk.RequestID(y.ServeDone.ID))
	case "cancel":
		h.Cancel(sdk.RequestID(y.Cancel.ID))
	case "leave":
		h.Leave(sdk.RequestID(y.Leave.ID))
	case "unload":
		h.Unload(sdk.UnloadReason(y.Unload.Reason), y.Unload.Models...)
	case "tick":
		h.Tick()
	case "shutdown":
		reason := ""
		if y.Shutdown != nil {
			reason = y.Shutdown.Reason
		}
		h.Shutdown(reason)
	case "set":
		r.set(y.Set)
	case "plan":
		running := h.Running(y.Plan.Target)
		if y.Plan.Running != nil {
			running = *y.Plan.Running
		}
		p, err := h.Swapper.Plan(sdk.PlanRequest{Now: h.Now, Target: y.Plan.Target, Running: running})
		gotPlan, planErr = &p, err
		if len(h.Calls) > mark {
			r.rep.Errorf("Plan(%q) logged or acted (%s); a plan is a speculative, pure query (sdk.Swapper): log in OnSwapStart", y.Plan.Target, strings.TrimSpace(Calls(h.Calls[mark:]).String()))
		}
	case "swap_start":
		s := y.SwapStart
		if err := h.StartSwap(sdk.SwapRequest{Model: s.Target, Evict: s.Evict, Devices: s.Devices, Modes: modes(s.Modes)}); err != nil {
			r.rep.Fatalf("the host refused the swap: %v", err)
		}
		hostOwn = len(h.Calls) - 1
	}
	if len(r.rep.errs) > 0 {
		return r.breach()
	}
	var effects, logs Calls
	for i, c := range h.Calls[mark:] {
		switch {
		case mark+i == hostOwn:
		case c.Op == OpLog:
			logs = append(logs, c)
		default:
			effects = append(effects, c)
		}
	}
	if r.trace != nil {
		r.writeTrace(st, effects, logs, gotPlan, planErr)
	}
	if st.event == "plan" {
		return r.comparePlan(st, gotPlan, planErr)
	}
	if st.checkEffects {
		if err := r.compareEffects(st, effects); err != nil {
			return err
		}
	}
	if st.checkTick && h.NextTick != st.nextTick {
		return fmt.Errorf("%s:%d: step %d: next_tick: the scheduler asked for %s; want %s", r.sc.File, st.line, st.index,
			tickName(h.NextTick), tickName(st.nextTick))
	}
	if st.checkLogs {
		return r.compareLogs(st, logs)
	}
	return nil
}

// set applies a set step.
func (r *run) set(s *setYAML) {
	h := r.h
	for i := range s.Models {
		m := &s.Models[i]
		// Checked at parse time: the model exists, leased matches devices.
		_ = (&parser{}).apply(h.Models[m.Name], m, 0)
		if m.Evict != nil {
			if h.Evict == nil {
				h.Evict = map[string]sdk.EvictMode{}
			}
			h.Evict[m.Name] = sdk.EvictMode(*m.Evict)
		}
		if m.Requests != nil {
			h.demandOf(m.Name).Requests = *m.Requests
		}
	}
	for name, w := range s.Waits {
		if w == nil {
			delete(h.WaitRecords, name)
			continue
		}
		if h.WaitRecords == nil {
			h.WaitRecords = map[string]sdk.WaitStats{}
		}
		h.WaitRecords[name] = w.stats()
	}
	if s.HostMemory != nil {
		h.HostMemory = uint64(*s.HostMemory)
	}
	if s.GPUs != nil {
		r.gpus = *s.GPUs
	}
	for model, refusal := range s.RefuseSwap {
		if refusal == 0 {
			delete(h.RefuseSwap, model)
			continue
		}
		if h.RefuseSwap == nil {
			h.RefuseSwap = map[string]sdk.ResultError{}
		}
		h.RefuseSwap[model] = sdk.ResultError(refusal)
	}
	h.GPUs = deriveGPUs(r.gpus, h.Models)
}

// deriveGPUs builds the GPUs from their specs: Index defaults to the
// position, Leased to what the running models hold on the device (their
// Leased bytes, else their VRAM, measured else estimated, split evenly over
// their Devices), Free to Total minus Leased.
func deriveGPUs(specs []gpuYAML, models map[string]*sdk.ModelInfo) []sdk.GPUInfo {
	if len(specs) == 0 {
		return nil
	}
	held := map[int32]uint64{}
	for _, m := range models {
		if !m.State.Running() || len(m.Devices) == 0 {
			continue
		}
		if len(m.Leased) == len(m.Devices) {
			for j, d := range m.Devices {
				held[d] += m.Leased[j]
			}
			continue
		}
		v := m.MeasuredVRAM
		if v == 0 {
			v = m.EstimatedVRAM
		}
		n := uint64(len(m.Devices))
		for j, d := range m.Devices {
			share := v / n
			if uint64(j) < v%n {
				share++
			}
			held[d] += share
		}
	}
	out := make([]sdk.GPUInfo, len(specs))
	for i, g := range specs {
		info := sdk.GPUInfo{Index: int32(i), Name: g.Name, Total: uint64(g.Total)}
		if g.Index != nil {
			info.Index = *g.Index
		}
		info.Leased = held[info.Index]
		if g.Leased != nil {
			info.Leased = uint64(*g.Leased)
		}
		info.Free = info.Total - min(info.Leased, info.Total)
		if g.Free != nil {
			info.Free = uint64(*g.Free)
		}
		out[i] = info
	}
	return out
}

// compareEffects compares the step's effects with its expect: list, in
// order, and reports the first difference.
func (r *run) compareEffects(st *step, got Calls) error {
	for i := range max(len(got), len(st.expect)) {
		switch {
		case i >= len(got):
			w := st.expect[i]
			return r.differ(st, w.line, fmt.Sprintf("effect %d of %d is missing\n  want: %s\n  got:  nothing more", i+1, len(st.expect), w), got)
		case i >= len(st.expect):
			return r.differ(st, st.line, fmt.Sprintf("one effect more than the %d expected\n  got:  %s", len(st.expect), formatCall(got[i])), got)
		case !st.expect[i].matches(got[i]):
			w := st.expect[i]
			return r.differ(st, w.line, fmt.Sprintf("effect %d differs\n  want: %s\n  got:  %s", i+1, w, formatCall(got[i])), got)
		}
	}
	return nil
}

func (r *run) differ(st *step, line int, what string, got Calls) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:%d: step %d (%s): %s", r.sc.File, line, st.index, describe(st), what)
	b.WriteString("\n  the step's effects:")
	if len(got) == 0 {
		b.WriteString(" none")
	}
	for _, c := range got {
		b.WriteString("\n    - " + formatCall(c))
	}
	r.writeLogs(&b)
	return errors.New(b.String())
}

// compareLogs checks the step's log lines: as many as logs: lists, each
// containing its entry.
func (r *run) compareLogs(st *step, got Calls) error {
	want := st.y.Logs
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = strings.Contains(got[i].Msg, want[i])
	}
	if ok {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s:%d: step %d (%s): log lines differ\n  want %d, containing:", r.sc.File, st.line, st.index, describe(st), len(want))
	for _, w := range want {
		b.WriteString("\n    - " + strconv.Quote(w))
	}
	fmt.Fprintf(&b, "\n  got %d:", len(got))
	for _, c := range got {
		b.WriteString("\n    - " + strconv.Quote(c.Msg))
	}
	return errors.New(b.String())
}

// comparePlan checks a plan step's answer.
func (r *run) comparePlan(st *step, got *sdk.Plan, err error) error {
	if !st.checkEffects || len(st.expect) == 0 {
		return nil
	}
	w := st.expect[0]
	gotText := formatPlan(got)
	if err != nil {
		gotText = "plan_error: " + strconv.Quote(err.Error())
	}
	switch {
	case w.planErr != nil && err != nil && strings.Contains(err.Error(), *w.planErr):
		return nil
	case w.plan != nil && err == nil && slices.Equal(w.plan.Evict, got.Evict) && slices.Equal(w.plan.Devices, got.Devices) &&
		slices.Equal(trimModes(w.plan.Modes), trimModes(got.Modes)):
		return nil
	}
	return fmt.Errorf("%s:%d: step %d (%s): the plan differs\n  want: %s\n  got:  %s", r.sc.File, w.line, st.index, describe(st), w, gotText)
}

func (w wantEffect) matches(c Call) bool {
	if c.Op != w.call.Op {
		return false
	}
	switch c.Op {
	case OpGrantServe:
		return c.ID == w.call.ID && c.OK == w.call.OK && (w.anyModel || c.Model == w.call.Model)
	case OpGrantError:
		return c.ID == w.call.ID && c.Code == w.call.Code && (!w.msgGiven || strings.Contains(c.Msg, w.call.Msg))
	case OpStartSwap:
		return c.Model == w.call.Model && slices.Equal(c.Models, w.call.Models) && slices.Equal(c.Devices, w.call.Devices) &&
			slices.Equal(trimModes(c.Modes), trimModes(w.call.Modes)) && sameRefusal(c.Err, w.call.Err)
	case OpStopProcesses:
		return slices.Equal(c.Models, w.call.Models) && sameRefusal(c.Err, w.call.Err)
	case OpSetQueuePosition:
		return c.ID == w.call.ID && c.Pos == w.call.Pos
	case OpAdmit:
		return c.Model == w.call.Model && c.Limit == w.call.Limit && c.Flags == w.call.Flags && sameRefusal(c.Err, w.call.Err)
	case OpWarmGrant:
		return c.ID == w.call.ID && (w.anyModel || c.Model == w.call.Model)
	}
	return false
}

func sameRefusal(got, want error) bool {
	if got == nil || want == nil {
		return got == nil && want == nil
	}
	var g sdk.ResultError
	return errors.As(got, &g) && errors.Is(want, g)
}

// String renders the expected effect as a scenario file would.
func (w wantEffect) String() string {
	switch {
	case w.plan != nil:
		return formatPlan(w.plan)
	case w.planErr != nil:
		return "plan_error: " + strconv.Quote(*w.planErr)
	case w.call.Op == OpGrantServe && w.anyModel:
		if w.call.OK {
			return "grant: " + strconv.FormatUint(uint64(w.call.ID), 10)
		}
		return fmt.Sprintf("grant: {id: %d, ok: false}", w.call.ID)
	case w.call.Op == OpWarmGrant && w.anyModel:
		return "warm_grant: " + strconv.FormatUint(uint64(w.call.ID), 10)
	case w.call.Op == OpGrantError && !w.msgGiven:
		return fmt.Sprintf("error: {id: %d, code: %s}", w.call.ID, codeString(w.call.Code))
	}
	return formatCall(w.call)
}

// formatCall renders an effect as a scenario file's expect: entry.
func formatCall(c Call) string {
	switch c.Op {
	case OpGrantServe:
		if !c.OK {
			return fmt.Sprintf("grant: {id: %d, model: %s, ok: false}", c.ID, yamlString(c.Model))
		}
		return fmt.Sprintf("grant: {id: %d, model: %s}", c.ID, yamlString(c.Model))
	case OpGrantError:
		return fmt.Sprintf("error: {id: %d, code: %s, message: %s}", c.ID, codeString(c.Code), strconv.Quote(c.Msg))
	case OpStartSwap:
		s := "start_swap: {model: " + yamlString(c.Model)
		if len(c.Models) > 0 {
			s += ", evict: " + yamlList(c.Models)
		}
		if len(c.Devices) > 0 {
			s += ", devices: " + intList(c.Devices)
		}
		if m := trimModes(c.Modes); m != nil {
			s += ", modes: " + modesString(m)
		}
		if c.Err != nil {
			s += ", refused: " + refusalString(c.Err)
		}
		return s + "}"
	case OpStopProcesses:
		if c.Err != nil {
			return fmt.Sprintf("stop: {models: %s, refused: %s}", yamlList(c.Models), refusalString(c.Err))
		}
		return "stop: " + yamlList(c.Models)
	case OpSetQueuePosition:
		return fmt.Sprintf("queue: {id: %d, pos: %d}", c.ID, c.Pos)
	case OpAdmit:
		s := fmt.Sprintf("admit: {model: %s, limit: %d", yamlString(c.Model), c.Limit)
		if c.Flags != 0 {
			s += fmt.Sprintf(", flags: %d", c.Flags)
		}
		if c.Err != nil {
			s += ", refused: " + refusalString(c.Err)
		}
		return s + "}"
	case OpWarmGrant:
		return fmt.Sprintf("warm_grant: {id: %d, model: %s}", c.ID, yamlString(c.Model))
	case OpLog:
		return "log: " + strconv.Quote(c.Msg)
	}
	return c.String()
}

func formatPlan(p *sdk.Plan) string {
	var parts []string
	if len(p.Evict) > 0 {
		parts = append(parts, "evict: "+yamlList(p.Evict))
	}
	if len(p.Devices) > 0 {
		parts = append(parts, "devices: "+intList(p.Devices))
	}
	if m := trimModes(p.Modes); m != nil {
		parts = append(parts, "modes: "+modesString(m))
	}
	return "plan: {" + strings.Join(parts, ", ") + "}"
}

// plainScalar matches the strings YAML reads back, unquoted in a flow
// collection, as the same string.
var plainScalar = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.\-/]*$`)

// yamlString renders s as a YAML scalar that reads back as the string s.
func yamlString(s string) string {
	switch strings.ToLower(s) {
	case "true", "false", "yes", "no", "on", "off", "null", "y", "n":
		return strconv.Quote(s)
	}
	if plainScalar.MatchString(s) {
		return s
	}
	return strconv.Quote(s)
}

func yamlList(l []string) string {
	q := make([]string, len(l))
	for i, s := range l {
		q[i] = yamlString(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

func intList(l []int32) string {
	q := make([]string, len(l))
	for i, v := range l {
		q[i] = strconv.Itoa(int(v))
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// describe renders a step's event as a scenario file would.
func describe(st *step) string {
	y := st.y
	switch st.event {
	case "request":
		s := fmt.Sprintf("request: {id: %d, model: %s", y.Request.ID, yamlString(y.Request.Model))
		if y.Request.Priority != 0 {
			s += fmt.Sprintf(", priority: %d", y.Request.Priority)
		}
		if y.Request.Client != "" {
			s += ", client: " + yamlString(y.Request.Client)
		}
		return s + "}"
	case "swap_done":
		if y.SwapDone.Error != "" {
			return fmt.Sprintf("swap_done: {model: %s, error: %s}", yamlString(y.SwapDone.Model), strconv.Quote(y.SwapDone.Error))
		}
		return "swap_done: " + yamlString(y.SwapDone.Model)
	case "serve_done":
		return fmt.Sprintf("serve_done: %d", y.ServeDone.ID)
	case "cancel":
		return fmt.Sprintf("cancel: %d", y.Cancel.ID)
	case "leave":
		return fmt.Sprintf("leave: %d", y.Leave.ID)
	case "unload":
		return fmt.Sprintf("unload: {models: %s, reason: %s}", yamlList(y.Unload.Models), reasonNames[y.Unload.Reason])
	case "shutdown":
		if y.Shutdown != nil && y.Shutdown.Reason != "" {
			return "shutdown: " + yamlString(y.Shutdown.Reason)
		}
	case "plan":
		s := "plan: {target: " + yamlString(y.Plan.Target)
		if y.Plan.Running != nil {
			s += ", running: " + yamlList(*y.Plan.Running)
		}
		return s + "}"
	case "swap_start":
		s := "swap_start: {target: " + yamlString(y.SwapStart.Target)
		if len(y.SwapStart.Evict) > 0 {
			s += ", evict: " + yamlList(y.SwapStart.Evict)
		}
		if len(y.SwapStart.Devices) > 0 {
			s += ", devices: " + intList(y.SwapStart.Devices)
		}
		return s + "}"
	}
	return st.event
}

// writeTrace writes one step and what it caused.
func (r *run) writeTrace(st *step, effects, logs Calls, plan *sdk.Plan, planErr error) {
	w := r.trace
	fmt.Fprintf(w, "step %d, line %d, at %s: %s\n", st.index, st.line, st.at, describe(st))
	switch {
	case st.event == "plan" && planErr != nil:
		fmt.Fprintf(w, "  expect: [plan_error: %s]\n", strconv.Quote(planErr.Error()))
	case st.event == "plan":
		fmt.Fprintf(w, "  expect: [%s]\n", formatPlan(plan))
	case r.sc.Kind == sdk.KindSwapper: // a swapper's only effects are log lines
	case len(effects) == 0:
		fmt.Fprintf(w, "  expect: []\n")
	default:
		fmt.Fprintf(w, "  expect:\n")
		for _, c := range effects {
			fmt.Fprintf(w, "    - %s\n", formatCall(c))
		}
	}
	if len(logs) > 0 {
		fmt.Fprintf(w, "  logs:\n")
		for _, c := range logs {
			fmt.Fprintf(w, "    - %s\n", strconv.Quote(c.Msg))
		}
	}
}

// tickName writes a requested tick as next_tick: does.
func tickName(at int64) string {
	if at == 0 {
		return "none"
	}
	return time.Duration(at - scenarioStart).String()
}
