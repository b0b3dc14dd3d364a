package policy

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/loadout-dev/loadout/sdk"
)

// BenchOptions configures Bench.
type BenchOptions struct {
	Events   int    // events per scenario; 0 means 10000
	Models   int    // models the fake host runs, all ready; 0 means 8
	Settings []byte // the policy's settings JSON; nil means "{}"
	// Swapper, a swapper module, answers a scheduler's plans; Bench
	// instantiates it with SwapperSettings against the same fake host. nil:
	// a native planner that makes room by evicting the first running model.
	Swapper         *Module
	SwapperSettings []byte // nil means "{}"
}

// BenchResult is the cost per event of each scenario Bench ran.
type BenchResult struct {
	Policy    string
	Kind      sdk.PolicyKind
	Models    int
	Scenarios []ScenarioResult
}

// ScenarioResult is the cost of one kind of event in one scenario, measured
// per call on the host (encoding, the Wasm call, the policy's host calls and
// decoding included).
type ScenarioResult struct {
	Name   string        // e.g. "on_request (ready model)"
	Events int           // calls measured
	Median time.Duration // 50th percentile
	P99    time.Duration // 99th percentile
	Mean   time.Duration
}

// Bench instantiates m against an in-process fake host with opts.Models
// ready models and drives it with synthetic events, timing each call. A
// scheduler gets on_request/on_serve_done pairs on ready models, then a
// queue-drain scenario: 16 callers for a stopped model (the first plans and
// starts a swap, the others join it), the swap's on_swap_done, and their
// on_serve_done. A swapper gets plan calls for a model that must evict one
// (by count; the fake GPU has room for it), on_swap_start, and the same
// plans with the GPU full, which a VRAM-aware swapper must evict for. A
// tenth of the events run first, unmeasured, as a warm-up. Any error from
// the policy ends the run.
func Bench(ctx context.Context, r *Runtime, m *Module, opts BenchOptions) (*BenchResult, error) {
	if opts.Events <= 0 {
		opts.Events = 10000
	}
	if opts.Models <= 0 {
		opts.Models = 8
	}
	if opts.Settings == nil {
		opts.Settings = []byte("{}")
	}
	h := newBenchHost(opts.Models)
	res := &BenchResult{Policy: m.Name, Kind: m.Kind, Models: opts.Models}
	switch m.Kind {
	case sdk.KindScheduler:
		if opts.Swapper != nil {
			sw, err := r.NewSwapper(ctx, opts.Swapper, opts.SwapperSettings, h)
			if err != nil {
				return nil, err
			}
			defer sw.Close(ctx)
			h.planner = sw
		}
		s, err := r.NewScheduler(ctx, m, opts.Settings, h)
		if err != nil {
			return nil, err
		}
		defer s.Close(ctx)
		b := &schedulerBench{s: s, h: h}
		if err := b.run(opts.Events/10, nil); err != nil {
			return nil, err
		}
		if err := b.run(opts.Events, res); err != nil {
			return nil, err
		}
	case sdk.KindSwapper:
		if opts.Swapper != nil {
			return nil, fmt.Errorf("policy %s: is a swapper; BenchOptions.Swapper is for benchmarking a scheduler", m.Name)
		}
		s, err := r.NewSwapper(ctx, m, opts.Settings, h)
		if err != nil {
			return nil, err
		}
		defer s.Close(ctx)
		if err := benchSwapper(s, h, opts.Events/10, nil); err != nil {
			return nil, err
		}
		if err := benchSwapper(s, h, opts.Events, res); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("policy %s: cannot bench a policy of kind %s", m.Name, m.Kind)
	}
	return res, nil
}

// timings collects call durations of one kind of event.
type timings struct {
	name string
	d    []time.Duration
}

func (t *timings) time(f func() error) error {
	start := time.Now()
	err := f()
	t.d = append(t.d, time.Since(start))
	return err
}

func (t *timings) result() ScenarioResult {
	d := slices.Clone(t.d)
	slices.Sort(d)
	r := ScenarioResult{Name: t.name, Events: len(d)}
	if len(d) == 0 {
		return r
	}
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	r.Median = d[len(d)/2]
	r.P99 = d[int(math.Ceil(0.99*float64(len(d))))-1]
	r.Mean = sum / time.Duration(len(d))
	return r
}

// drainBatch is the number of callers of the queue-drain scenario.
const drainBatch = 16

type schedulerBench struct {
	s  *Scheduler
	h  *benchHost
	id sdk.RequestID
}

// run drives n events of each scenario, appending results to res (nil: a
// warm-up).
func (b *schedulerBench) run(n int, res *BenchResult) error {
	h, s := b.h, b.s
	h.reset()
	req := &timings{name: "on_request (ready model)"}
	done := &timings{name: "on_serve_done"}
	for i := range n {
		b.id++
		h.now += int64(time.Millisecond)
		ev := sdk.RequestEvent{Now: h.now, ID: b.id, Model: h.models[i%h.ready].Name}
		h.pending[ev.ID] = ev.Model
		if err := req.time(func() error { return s.OnRequest(ev) }); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		if err := b.settle(done); err != nil {
			return err
		}
	}
	cold := h.models[h.ready].Name
	joins := &timings{name: fmt.Sprintf("on_request (model loading, %d callers)", drainBatch)}
	drain := &timings{name: fmt.Sprintf("on_swap_done (drains %d)", drainBatch)}
	for range max(n/drainBatch, 1) {
		h.reset()
		for range drainBatch {
			b.id++
			h.now += int64(time.Millisecond)
			ev := sdk.RequestEvent{Now: h.now, ID: b.id, Model: cold}
			h.pending[ev.ID] = ev.Model
			if err := joins.time(func() error { return s.OnRequest(ev) }); err != nil {
				return fmt.Errorf("bench: %w", err)
			}
		}
		if h.swaps > 0 {
			h.setState(cold, sdk.StateReady)
			ev := sdk.SwapDoneEvent{Now: h.now, Model: cold}
			if err := drain.time(func() error { return s.OnSwapDone(ev) }); err != nil {
				return fmt.Errorf("bench: %w", err)
			}
		}
		if err := b.settle(done); err != nil {
			return err
		}
	}
	if res != nil {
		for _, t := range []*timings{req, done, joins, drain} {
			if len(t.d) > 0 {
				res.Scenarios = append(res.Scenarios, t.result())
			}
		}
	}
	return nil
}

// settle ends every request the scheduler has granted (on_serve_done,
// timed) or still holds (on_cancel, untimed, as if the caller left), so that the next event finds
// an idle host.
func (b *schedulerBench) settle(done *timings) error {
	h, s := b.h, b.s
	for _, g := range h.granted {
		h.now += int64(time.Millisecond)
		h.setInFlight(g.model, -1)
		ev := sdk.ServeDoneEvent{Now: h.now, ID: g.id, Model: g.model}
		if err := done.time(func() error { return s.OnServeDone(ev) }); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
	}
	h.granted = h.granted[:0]
	for id, model := range h.pending {
		delete(h.pending, id)
		if err := s.OnCancel(sdk.CancelEvent{Now: h.now, ID: id, Model: model}); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
	}
	return nil
}

func benchSwapper(s *Swapper, h *benchHost, n int, res *BenchResult) error {
	plan := &timings{name: "plan (evicts 1)"}
	start := &timings{name: "on_swap_start"}
	full := &timings{name: "plan (GPU full)"}
	target := h.models[h.ready].Name
	running := h.runningNames(target)
	for i := range n {
		h.now += int64(time.Millisecond)
		q := sdk.PlanRequest{Now: h.now, Target: target, Running: running}
		var p sdk.Plan
		if err := plan.time(func() (err error) { p, err = s.Plan(q); return err }); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
		if i%10 == 0 {
			ev := sdk.SwapStartEvent{Now: h.now, Target: target, Running: running, Evict: p.Evict, Devices: p.Devices}
			if err := start.time(func() error { return s.OnSwapStart(ev) }); err != nil {
				return fmt.Errorf("bench: %w", err)
			}
		}
	}
	// The same plans with the GPU full, as a VRAM-aware swapper sees it:
	// it must evict. (Above, the fake GPU has room for the target — and
	// past 20 models its free figure wraps — so such a swapper evicts
	// nothing there; a count-based one evicts 1 either way.)
	saved := h.gpus[0]
	h.gpus[0].Free, h.gpus[0].Leased = 0, h.gpus[0].Total
	defer func() { h.gpus[0] = saved }()
	for range n {
		h.now += int64(time.Millisecond)
		q := sdk.PlanRequest{Now: h.now, Target: target, Running: running}
		if err := full.time(func() (err error) { _, err = s.Plan(q); return err }); err != nil {
			return fmt.Errorf("bench: GPU full: %w", err)
		}
	}
	if res != nil {
		res.Scenarios = append(res.Scenarios, plan.result(), start.result(), full.result())
	}
	return nil
}

// planner answers plans: a *Swapper, or a native swapper in benchmarks.
type planner interface {
	Plan(q sdk.PlanRequest) (sdk.Plan, error)
}

type benchGrant struct {
	id    sdk.RequestID
	model string
}

// benchHost is the in-process fake host of Bench and the benchmarks: ready
// models m00…, one stopped model "cold" after them, and one GPU. It keeps
// just enough state for the scenarios and allocates nothing per call once
// warm. It is an sdk.Effects.
type benchHost struct {
	models  []sdk.ModelInfo // the first `ready` are ready, then cold
	ready   int
	index   map[string]int
	gpus    []sdk.GPUInfo
	planner planner // nil: evict the first running model
	now     int64

	frozen  bool                     // StartSwap and StopProcesses change no state
	pending map[sdk.RequestID]string // requests sent and not yet granted or failed
	granted []benchGrant
	swaps   int // StartSwap calls since reset
	held    int // SetQueuePosition calls
	errors  int // GrantError calls
	logs    int

	runBuf   []sdk.ModelInfo
	namesBuf []string
}

func newBenchHost(models int) *benchHost {
	h := &benchHost{ready: models, index: map[string]int{}, pending: map[sdk.RequestID]string{}, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()}
	for i := range models + 1 {
		name := "m" + strconv.Itoa(i/10) + strconv.Itoa(i%10)
		if i == models {
			name = "cold"
		}
		h.index[name] = i
		h.models = append(h.models, sdk.ModelInfo{
			Name:          name,
			EstimatedVRAM: 4 << 30,
			Devices:       []int32{0},
		})
	}
	h.gpus = []sdk.GPUInfo{{Index: 0, Name: "bench GPU", Total: 80 << 30, Free: 80<<30 - uint64(models)*(4<<30), Leased: uint64(models) * (4 << 30)}}
	h.reset()
	return h
}

// reset makes the first `ready` models ready and idle and cold stopped.
func (h *benchHost) reset() {
	for i := range h.models {
		h.models[i].State = sdk.StateReady
		h.models[i].InFlight = 0
	}
	h.models[h.ready].State = sdk.StateStopped
	h.swaps = 0
}

func (h *benchHost) setState(model string, st sdk.ModelState) {
	if i, ok := h.index[model]; ok {
		h.models[i].State = st
	}
}

func (h *benchHost) setInFlight(model string, delta int) {
	if i, ok := h.index[model]; ok {
		h.models[i].InFlight = uint32(int(h.models[i].InFlight) + delta)
	}
}

// runningNames returns the running models but target, sorted (models are
// named in order), in a reused slice.
func (h *benchHost) runningNames(target string) []string {
	h.namesBuf = h.namesBuf[:0]
	for i := range h.models {
		if h.models[i].State.Running() && h.models[i].Name != target {
			h.namesBuf = append(h.namesBuf, h.models[i].Name)
		}
	}
	return h.namesBuf
}

func (h *benchHost) Log(sdk.LogLevel, string) { h.logs++ }

func (h *benchHost) ModelState(model string) (sdk.ModelInfo, bool) {
	i, ok := h.index[model]
	if !ok {
		return sdk.ModelInfo{}, false
	}
	return h.models[i], true
}

func (h *benchHost) RunningModels() []sdk.ModelInfo {
	h.runBuf = h.runBuf[:0]
	for i := range h.models {
		if h.models[i].State.Running() {
			h.runBuf = append(h.runBuf, h.models[i])
		}
	}
	return h.runBuf
}

func (h *benchHost) Snapshot() sdk.Snapshot {
	return sdk.Snapshot{Now: h.now, Models: h.models, GPUs: h.gpus}
}

func (h *benchHost) GrantServe(id sdk.RequestID, model string) bool {
	i, ok := h.index[model]
	if !ok || h.models[i].State != sdk.StateReady {
		return false
	}
	h.models[i].InFlight++
	h.models[i].LastUse = h.now
	delete(h.pending, id)
	h.granted = append(h.granted, benchGrant{id, model})
	return true
}

func (h *benchHost) GrantError(id sdk.RequestID, _ sdk.ErrorCode, _ string) {
	delete(h.pending, id)
	h.errors++
}

func (h *benchHost) StartSwap(s sdk.SwapRequest) error {
	if _, ok := h.index[s.Model]; !ok {
		return sdk.ErrUnknownModel
	}
	h.swaps++
	if !h.frozen {
		for _, m := range s.Evict {
			h.setState(m, sdk.StateStopped)
		}
		h.setState(s.Model, sdk.StateStarting)
	}
	return nil
}

func (h *benchHost) StopProcesses(models []string) error {
	if !h.frozen {
		for _, m := range models {
			h.setState(m, sdk.StateStopped)
		}
	}
	return nil
}

func (h *benchHost) SetQueuePosition(sdk.RequestID, int) { h.held++ }

func (h *benchHost) Plan(target string) (sdk.Plan, error) {
	q := sdk.PlanRequest{Now: h.now, Target: target, Running: h.runningNames(target)}
	if h.planner != nil {
		return h.planner.Plan(q)
	}
	if len(q.Running) == 0 {
		return sdk.Plan{}, nil
	}
	return sdk.Plan{Evict: q.Running[:1]}, nil
}
