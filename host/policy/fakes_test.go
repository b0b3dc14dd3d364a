package policy

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/loadout-dev/loadout/sdk"
)

// fakeEffects is a recording sdk.Effects: the lowest seam of this package.
// Models are kept in name order; Plan forwards to a Swapper when one is set.
type fakeEffects struct {
	models  []sdk.ModelInfo
	gpus    []sdk.GPUInfo
	host    sdk.HostMemoryInfo
	swapper *Swapper
	calls   []string // one line per effect, e.g. "grant_serve 1 a"
	logs    []string // "level: text"

	onGrant func() // called inside GrantServe, to test re-entrancy
}

func newFakeEffects(models ...sdk.ModelInfo) *fakeEffects {
	f := &fakeEffects{models: models, gpus: []sdk.GPUInfo{{Index: 0, Name: "fake", Total: 24 << 30, Free: 8 << 30, Leased: 16 << 30}}}
	slices.SortFunc(f.models, func(a, b sdk.ModelInfo) int { return strings.Compare(a.Name, b.Name) })
	return f
}

func model(name string, st sdk.ModelState) sdk.ModelInfo {
	return sdk.ModelInfo{Name: name, State: st, EstimatedVRAM: 4 << 30, Devices: []int32{0}}
}

func (f *fakeEffects) record(format string, args ...any) {
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

func (f *fakeEffects) find(name string) int {
	return slices.IndexFunc(f.models, func(m sdk.ModelInfo) bool { return m.Name == name })
}

func (f *fakeEffects) Log(level sdk.LogLevel, msg string) {
	f.logs = append(f.logs, fmt.Sprintf("%s: %s", slog.Level(level), msg))
}

func (f *fakeEffects) ModelState(name string) (sdk.ModelInfo, bool) {
	if i := f.find(name); i >= 0 {
		return f.models[i], true
	}
	return sdk.ModelInfo{}, false
}

func (f *fakeEffects) RunningModels() []sdk.ModelInfo {
	var l []sdk.ModelInfo
	for _, m := range f.models {
		if m.State.Running() {
			l = append(l, m)
		}
	}
	return l
}

func (f *fakeEffects) Snapshot() sdk.Snapshot {
	return sdk.Snapshot{Now: 42, Models: f.models, GPUs: f.gpus, Host: f.host}
}

func (f *fakeEffects) GrantServe(id sdk.RequestID, model string) bool {
	f.record("grant_serve %d %s", id, model)
	if f.onGrant != nil {
		f.onGrant()
	}
	return true
}

func (f *fakeEffects) GrantError(id sdk.RequestID, code sdk.ErrorCode, msg string) {
	f.record("grant_error %d %d %s", id, code, msg)
}

func (f *fakeEffects) StartSwap(s sdk.SwapRequest) error {
	if len(s.Modes) > 0 {
		f.record("start_swap %s evict=%v devices=%v modes=%v", s.Model, s.Evict, s.Devices, s.Modes)
	} else {
		f.record("start_swap %s evict=%v devices=%v", s.Model, s.Evict, s.Devices)
	}
	i := f.find(s.Model)
	if i < 0 {
		return sdk.ErrUnknownModel
	}
	f.models[i].State = sdk.StateStarting
	return nil
}

func (f *fakeEffects) StopProcesses(models []string) error {
	f.record("stop_processes %v", models)
	return nil
}

func (f *fakeEffects) SetQueuePosition(id sdk.RequestID, pos int) {
	f.record("set_queue_position %d %d", id, pos)
}

func (f *fakeEffects) Plan(target string) (sdk.Plan, error) {
	if f.swapper == nil {
		f.record("plan %s", target)
		return sdk.Plan{}, nil
	}
	var running []string
	for _, m := range f.models {
		if m.State.Running() && m.Name != target {
			running = append(running, m.Name)
		}
	}
	return f.swapper.Plan(sdk.PlanRequest{Now: 42, Target: target, Running: running})
}

// logRecorder is a slog.Handler that keeps every record as one line:
// "LEVEL msg key=value …".
type logRecorder struct {
	mu    *sync.Mutex
	lines *[]string
	attrs []slog.Attr
}

func newLogRecorder() (*slog.Logger, *logRecorder) {
	h := &logRecorder{mu: new(sync.Mutex), lines: new([]string)}
	return slog.New(h), h
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Level, r.Message)
	for _, a := range h.attrs {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
	}
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	h.mu.Lock()
	*h.lines = append(*h.lines, b.String())
	h.mu.Unlock()
	return nil
}

func (h *logRecorder) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &logRecorder{mu: h.mu, lines: h.lines, attrs: append(slices.Clone(h.attrs), attrs...)}
}

func (h *logRecorder) WithGroup(string) slog.Handler { return h }

// find returns the recorded lines containing every one of subs.
func (h *logRecorder) find(subs ...string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, l := range *h.lines {
		all := true
		for _, s := range subs {
			all = all && strings.Contains(l, s)
		}
		if all {
			out = append(out, l)
		}
	}
	return out
}
