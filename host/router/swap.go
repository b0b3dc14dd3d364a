package router

import (
	"context"
	"time"

	"github.com/loadout-dev/loadout/host/gpu"
)

// The swap goroutine: what a StartSwap the run loop accepted does off the
// loop. It touches no loop state; everything it needs comes by value, and
// what happens comes back as events (a stopDone per evicted server, one
// swapDone at the end).

// freeMemoryWait bounds how long a swap waits for evicted models' memory to
// show as free in the driver before starting its target anyway.
const freeMemoryWait = 10 * time.Second

// eviction is one running server a swap stops, handed to the swap
// goroutine by value.
type eviction struct {
	model string
	gen   uint64
	inst  Instance
}

// doSwap runs on its own goroutine: stop the evicted servers in parallel
// (each reports its stop to the loop as it ends, so the table shows it
// stopped while the target still loads), start the target (unless it is
// already up), and report back.
func (r *Router) doSwap(sw *swap, mc ModelConfig, stops []eviction, ready Instance, inv gpu.Inventory, placement map[int]uint64) {
	started := time.Now()
	done := make(chan struct{}, len(stops))
	for _, ev := range stops {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), stopTimeout(mc))
			defer cancel()
			if err := ev.inst.Stop(ctx); err != nil {
				r.log.Warn("evicting model", "model", ev.model, "err", err)
			}
			select {
			case r.stopDones <- stopDone{model: ev.model, gen: ev.gen}:
			case <-r.done:
			}
			done <- struct{}{}
		}()
	}
	for range stops {
		<-done
	}
	// Drivers report freed memory late: wait until it is back (bounded)
	// rather than start into an out-of-memory, or sleep a fixed time.
	if inv != nil && len(stops) > 0 {
		for _, d := range gpu.SortedDevices(placement) {
			ctx, cancel := context.WithTimeout(r.procCtx, freeMemoryWait)
			if _, err := gpu.WaitFree(ctx, inv, d, placement[d]); err != nil {
				r.log.Warn("GPU memory not back after eviction; starting anyway", "model", sw.target, "gpu", d, "err", err)
			}
			cancel()
		}
	}
	res := swapDone{target: sw.target, evicted: sw.evict, inst: ready}
	if ready == nil {
		devices := make([]int, len(sw.devices))
		for i, d := range sw.devices {
			devices[i] = int(d)
		}
		inst, err := mc.Process.Start(r.procCtx, StartSpec{Devices: devices})
		switch {
		case err != nil && r.procCtx.Err() != nil:
			res.err = errStopped
		case err != nil:
			res.err = err
		default:
			res.inst = inst
		}
		if res.err == nil {
			r.log.Info("model loaded", "model", sw.target, "load_time", time.Since(started).Round(time.Millisecond))
		}
	}
	select {
	case r.swapDones <- res:
	case <-r.done:
		if res.inst != nil && res.inst != ready {
			_ = res.inst.Stop(context.Background())
		}
	}
}
