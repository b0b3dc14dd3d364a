// Package echopolicy is a small, well-behaved scheduler that exercises every
// effect and read of the ABI: it serves ready models, asks the swapper for a
// plan and starts a swap for the others, holds callers while they wait,
// reads the snapshot and the running set on every tick. It is built to Wasm
// by ../echo and run natively by the benchmarks for comparison.
package echopolicy

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/loadout-dev/loadout/sdk"
)

// Settings are the scheduler's JSON settings.
type Settings struct {
	FailInit string `json:"fail_init"` // init fails with this text
	Greeting string `json:"greeting"`  // logged at info by init, so tests see the settings arrive
}

// Scheduler is the echo scheduler.
type Scheduler struct {
	fx      sdk.Effects
	set     Settings
	waiting map[string][]sdk.RequestID // callers held per model, waiting on its swap
}

// New makes the scheduler.
func New(fx sdk.Effects, settings []byte) (sdk.Scheduler, error) {
	s := &Scheduler{fx: fx, waiting: map[string][]sdk.RequestID{}}
	if err := json.Unmarshal(settings, &s.set); err != nil {
		return nil, fmt.Errorf("echo: settings: %w", err)
	}
	if s.set.FailInit != "" {
		return nil, errors.New(s.set.FailInit)
	}
	if s.set.Greeting != "" {
		fx.Log(sdk.LevelInfo, s.set.Greeting)
	}
	return s, nil
}

// OnRequest serves a ready model, joins the swap loading it (the host's
// state says Starting once StartSwap succeeded), or plans and starts one.
func (s *Scheduler) OnRequest(ev sdk.RequestEvent) {
	info, ok := s.fx.ModelState(ev.Model)
	switch {
	case !ok:
		s.fx.GrantError(ev.ID, sdk.CodeModelNotFound, "no model "+ev.Model)
		return
	case info.State == sdk.StateReady:
		s.fx.GrantServe(ev.ID, ev.Model)
		return
	case info.State == sdk.StateStarting: // a swap is loading it: join
		s.hold(ev)
		return
	}
	p, err := s.fx.Plan(ev.Model)
	if err != nil {
		s.fx.GrantError(ev.ID, sdk.CodeUnavailable, "cannot place "+ev.Model+": "+err.Error())
		return
	}
	if err := s.fx.StartSwap(sdk.SwapRequest{Model: ev.Model, Evict: p.Evict, Devices: p.Devices}); err != nil {
		s.fx.GrantError(ev.ID, sdk.CodeUnavailable, "cannot start "+ev.Model+": "+err.Error())
		return
	}
	s.hold(ev)
}

func (s *Scheduler) hold(ev sdk.RequestEvent) {
	s.waiting[ev.Model] = append(s.waiting[ev.Model], ev.ID)
	s.fx.SetQueuePosition(ev.ID, 0)
}

// OnSwapDone serves or fails every caller waiting on the swap.
func (s *Scheduler) OnSwapDone(ev sdk.SwapDoneEvent) {
	ids := s.waiting[ev.Model]
	delete(s.waiting, ev.Model)
	for _, id := range ids {
		if ev.Err != "" {
			s.fx.GrantError(id, sdk.CodeSwapFailed, ev.Err)
		} else {
			s.fx.GrantServe(id, ev.Model)
		}
	}
}

// OnServeDone has nothing to do: nothing queues behind a busy model.
func (s *Scheduler) OnServeDone(sdk.ServeDoneEvent) {}

// OnCancel forgets the caller.
func (s *Scheduler) OnCancel(ev sdk.CancelEvent) {
	ids := s.waiting[ev.Model]
	if i := slices.Index(ids, ev.ID); i >= 0 {
		s.waiting[ev.Model] = slices.Delete(ids, i, i+1)
	}
}

// OnUnload stops the models.
func (s *Scheduler) OnUnload(ev sdk.UnloadEvent) {
	if err := s.fx.StopProcesses(ev.Models); err != nil {
		s.fx.Log(sdk.LevelWarn, "unload: "+err.Error())
	}
}

// OnTick reads the snapshot and the running set and logs what it saw.
func (s *Scheduler) OnTick(ev sdk.TickEvent) {
	snap := s.fx.Snapshot()
	running := s.fx.RunningModels()
	names := make([]string, len(running))
	for i, m := range running {
		names[i] = m.Name
	}
	s.fx.Log(sdk.LevelInfo, fmt.Sprintf("tick now=%d changed=%v models=%d gpus=%d running=%v",
		ev.Now, ev.Changed, len(snap.Models), len(snap.GPUs), names))
}

// OnShutdown fails every held caller.
func (s *Scheduler) OnShutdown(ev sdk.ShutdownEvent) {
	for model, ids := range s.waiting {
		for _, id := range ids {
			s.fx.GrantError(id, sdk.CodeUnavailable, "shutting down: "+ev.Reason)
		}
		delete(s.waiting, model)
	}
}
