// Command flaky is a test scheduler policy: a plain arrival-order scheduler
// that panics, deterministically, on every Nth event it receives. The soak
// (cmd/loadout/soak_test.go) and the fault suite (cmd/loadout/faults_test.go)
// build it to WebAssembly at test time with internal/wasmbuild and run it in
// the real binary, to hold DESIGN.md rule 7 under load: a panicking policy
// never hangs or crashes the host, the instance is discarded and
// re-instantiated, and the requests it held get a clear error.
//
// Settings:
//
//	{"panic_every": 100}   // panic on events 100, 200, ... (0 = never); 1% of events
//	{"loop_every": 50}     // loop forever on events 50, 100, ... (0 = never): the host's deadline must stop it
//
// The count is per instance: a fresh instance starts counting from zero, so
// the panics stay at the configured rate however often the host replaces it.
//
// What it does with a request, in order: an unknown model is refused (404);
// a request for a model this instance is loading waits on that swap; a ready
// model under its concurrency limit serves it at once; otherwise it asks the
// swapper for a plan and starts the swap unless that would evict a busy model
// or the host refuses the swap, in which case the request queues in arrival
// order and is retried on every swap done, serve done, unload and tick.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/loadout-dev/loadout/sdk"
)

func init() { sdk.RegisterScheduler(newScheduler) }

// main never runs in a WebAssembly reactor module.
func main() {}

type request struct {
	id    sdk.RequestID
	model string
}

type scheduler struct {
	fx         sdk.Effects
	panicEvery uint64
	loopEvery  uint64
	events     uint64
	swaps      map[string][]request // target -> callers waiting on the swap we started
	queue      []request            // arrival order
}

func newScheduler(fx sdk.Effects, raw []byte) (sdk.Scheduler, error) {
	var cfg struct {
		PanicEvery uint64 `json:"panic_every"`
		LoopEvery  uint64 `json:"loop_every"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("flaky settings: %w", err)
	}
	return &scheduler{fx: fx, panicEvery: cfg.PanicEvery, loopEvery: cfg.LoopEvery, swaps: map[string][]request{}}, nil
}

// event counts an event, panics on every panicEvery-th and loops forever
// on every loopEvery-th.
func (s *scheduler) event(name string) {
	s.events++
	if s.loopEvery > 0 && s.events%s.loopEvery == 0 {
		//lint:ignore SA5002 the point: the host's deadline must stop it
		for {
		}
	}
	if s.panicEvery > 0 && s.events%s.panicEvery == 0 {
		panic(fmt.Sprintf("flaky: deliberate panic in %s (event %d)", name, s.events))
	}
}

// try ends r (granted, failed or waiting on a swap) and reports true, or
// reports false when r must queue.
func (s *scheduler) try(r request) bool {
	if _, loading := s.swaps[r.model]; loading {
		s.swaps[r.model] = append(s.swaps[r.model], r)
		s.fx.SetQueuePosition(r.id, 0)
		return true
	}
	info, ok := s.fx.ModelState(r.model)
	if !ok {
		s.fx.GrantError(r.id, sdk.CodeModelNotFound, fmt.Sprintf("model %q not found", r.model))
		return true
	}
	if info.State == sdk.StateReady {
		if info.ConcurrencyLimit > 0 && info.InFlight >= info.ConcurrencyLimit {
			return false
		}
		s.fx.GrantServe(r.id, r.model)
		return true
	}
	plan, err := s.fx.Plan(r.model)
	if err != nil {
		s.fx.GrantError(r.id, sdk.CodeUnavailable, fmt.Sprintf("cannot load model %q: %v", r.model, err))
		return true
	}
	for _, m := range plan.Evict {
		if mi, ok := s.fx.ModelState(m); ok && mi.InFlight > 0 {
			return false
		}
	}
	switch err := s.fx.StartSwap(sdk.SwapRequest{Model: r.model, Evict: plan.Evict, Devices: plan.Devices}); {
	case err == nil:
		s.swaps[r.model] = []request{r}
		s.fx.SetQueuePosition(r.id, 0)
	case errors.Is(err, sdk.ErrModelBusy), errors.Is(err, sdk.ErrSwapActive), errors.Is(err, sdk.ErrDoesNotFit):
		return false // a swap of the host's (or of an earlier instance) is running: wait for it
	default:
		s.fx.GrantError(r.id, sdk.CodeInternal, fmt.Sprintf("starting a swap for model %q: %v", r.model, err))
	}
	return true
}

func (s *scheduler) enqueue(r request) {
	s.queue = append(s.queue, r)
	s.fx.SetQueuePosition(r.id, len(s.queue))
}

// drain retries every queued request in arrival order.
func (s *scheduler) drain() {
	kept := s.queue[:0]
	for _, r := range s.queue {
		if !s.try(r) {
			kept = append(kept, r)
		}
	}
	clear(s.queue[len(kept):])
	s.queue = kept
	for i, r := range s.queue {
		s.fx.SetQueuePosition(r.id, i+1)
	}
}

func (s *scheduler) OnRequest(ev sdk.RequestEvent) {
	s.event("on_request")
	r := request{id: ev.ID, model: ev.Model}
	if len(s.queue) > 0 || !s.try(r) { // arrival order: nobody overtakes the queue
		s.enqueue(r)
		s.drain()
	}
}

func (s *scheduler) OnSwapDone(ev sdk.SwapDoneEvent) {
	s.event("on_swap_done")
	waiters, ours := s.swaps[ev.Model]
	delete(s.swaps, ev.Model)
	if ours && ev.Err != "" {
		for _, w := range waiters {
			s.fx.GrantError(w.id, sdk.CodeSwapFailed, fmt.Sprintf("model %q failed to start: %s", ev.Model, ev.Err))
		}
		waiters = nil
	}
	for _, w := range waiters {
		if !s.try(w) {
			s.enqueue(w)
		}
	}
	s.drain()
}

func (s *scheduler) OnServeDone(sdk.ServeDoneEvent) {
	s.event("on_serve_done")
	s.drain()
}

func (s *scheduler) OnCancel(ev sdk.CancelEvent) {
	s.event("on_cancel")
	gone := func(r request) bool { return r.id == ev.ID }
	s.queue = slices.DeleteFunc(s.queue, gone)
	for m, ws := range s.swaps {
		s.swaps[m] = slices.DeleteFunc(ws, gone)
	}
}

func (s *scheduler) OnUnload(ev sdk.UnloadEvent) {
	s.event("on_unload")
	stop := ev.Models
	if ev.Reason == sdk.UnloadTTL {
		stop = nil
		for _, m := range ev.Models {
			info, ok := s.fx.ModelState(m)
			if ok && info.State == sdk.StateReady && info.InFlight == 0 && s.swaps[m] == nil &&
				!slices.ContainsFunc(s.queue, func(r request) bool { return r.model == m }) {
				stop = append(stop, m)
			}
		}
	} else {
		for _, m := range ev.Models {
			msg := fmt.Sprintf("model %q unloaded", m)
			for _, w := range s.swaps[m] {
				s.fx.GrantError(w.id, sdk.CodeUnavailable, msg)
			}
			delete(s.swaps, m)
			s.queue = slices.DeleteFunc(s.queue, func(r request) bool {
				if r.model == m {
					s.fx.GrantError(r.id, sdk.CodeUnavailable, msg)
					return true
				}
				return false
			})
		}
	}
	if len(stop) > 0 {
		if err := s.fx.StopProcesses(stop); err != nil {
			s.fx.Log(sdk.LevelWarn, fmt.Sprintf("unload %v: %v", stop, err))
		}
	}
	s.drain()
}

func (s *scheduler) OnTick(sdk.TickEvent) {
	s.event("on_tick")
	s.drain()
}

func (s *scheduler) OnShutdown(ev sdk.ShutdownEvent) {
	msg := "loadout is shutting down"
	for m, ws := range s.swaps {
		for _, w := range ws {
			s.fx.GrantError(w.id, sdk.CodeUnavailable, msg)
		}
		delete(s.swaps, m)
	}
	for _, r := range s.queue {
		s.fx.GrantError(r.id, sdk.CodeUnavailable, msg)
	}
	s.queue = nil
}
