package router

import (
	"context"
	"fmt"
	"time"

	"github.com/loadout-dev/loadout/sdk"
)

// Policies are a scheduler and a swapper to run the loop with, as in
// Config: constructors bound to the router's Effects and read-only Host,
// and names for errors and logs.
type Policies struct {
	NewScheduler               func(fx sdk.Effects) (SchedulerPolicy, error)
	NewSwapper                 func(h sdk.Host) (SwapperPolicy, error)
	SchedulerName, SwapperName string
}

// closer is a policy that holds resources (a Wasm instance) to give back
// when it is replaced.
type closer interface{ Close(context.Context) error }

// ReplacePolicies swaps in new policies while requests flow (a hot reload:
// `serve --watch`, SIGHUP, POST /api/policies/reload). On the run loop,
// in one turn: the new swapper and scheduler are made (a constructor's
// error leaves the old ones in charge and is returned, nothing changed);
// then they take over, the plans cached from the old swapper are dropped,
// and every request the old scheduler held is handed to the new one as a
// fresh OnRequest, in arrival order. Requests in flight finish; their
// OnServeDone goes to the new scheduler, which must accept ids it never
// granted (the SDK's contract since a policy can be re-instantiated).
// The old policies are closed. It returns how long the loop was busy with
// the switch: the pause in scheduling. Errors: the constructors' (wrapped
// with the policy's name), ErrShuttingDown.
func (r *Router) ReplacePolicies(p Policies) (time.Duration, error) {
	var pause time.Duration
	var err error
	ran := false
	r.query(func() {
		ran = true
		start := time.Now()
		err = r.replacePolicies(p)
		pause = time.Since(start)
	})
	if !ran {
		return 0, ErrShuttingDown
	}
	return pause, err
}

// replacePolicies runs on the loop.
func (r *Router) replacePolicies(p Policies) error {
	l := &r.loop
	if l.shuttingDown {
		return ErrShuttingDown
	}
	sw, err := p.NewSwapper(readOnlyHost{l.fx})
	if err != nil {
		return fmt.Errorf("swapper %s: %w", p.SwapperName, err)
	}
	sched, err := p.NewScheduler(l.fx)
	if err != nil {
		closePolicy(sw)
		return fmt.Errorf("scheduler %s: %w", p.SchedulerName, err)
	}
	oldSched, oldSwap := l.sched, l.swapper
	l.sched, l.swapper = sched, sw
	l.schedHandover, _ = sched.(handover)
	l.swapHandover, _ = sw.(handover)
	l.purePlans = purePlanner(sw)
	clear(l.planCache)
	r.cfg.SchedulerName, r.cfg.SwapperName = p.SchedulerName, p.SwapperName
	r.log.Info("policies replaced", "scheduler", p.SchedulerName, "router", p.SwapperName)
	r.observer().PolicyHandedOver("scheduler")
	r.observer().PolicyHandedOver("swapper")
	r.revokeAll()
	r.reoffer()
	closePolicy(oldSched)
	closePolicy(oldSwap)
	return nil
}

func closePolicy(p any) {
	if c, ok := p.(closer); ok {
		_ = c.Close(context.Background())
	}
}
