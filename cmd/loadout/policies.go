package main

import (
	"context"
	"fmt"

	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/host/policy"
	"github.com/loadout-dev/loadout/host/router"
	"github.com/loadout-dev/loadout/sdk"
)

// policySet is the run loop's two policies as a configuration names them,
// compiled, with their settings, and the fallbacks that replace each while
// it crash-loops (DESIGN.md rule 7): the scheduler by the built-in fifo,
// the router by the built-in group swapper over the config's groups. It is
// the one wiring of policies to a router, for serve and for simulate.
type policySet struct {
	rt                          *policy.Runtime
	cfg                         *config.Config
	sched, swap                 *policy.Module
	fallbackSched, fallbackSwap *policy.Module
	schedSettings, swapSettings []byte
	groupSettings               []byte

	// Scheduler and Swapper are the decorators the router's constructors
	// made, once the router is built (for /api/policies).
	Scheduler *policy.FallbackScheduler
	Swapper   *policy.FallbackSwapper
}

// loadPolicies compiles cfg's scheduler and router and their fallbacks.
// Errors: a policy that cannot be read or compiled, one of the wrong
// kind, settings that are not JSON.
func loadPolicies(ctx context.Context, rt *policy.Runtime, cfg *config.Config) (*policySet, error) {
	p := &policySet{rt: rt, cfg: cfg}
	var err error
	if p.sched, err = loadPolicy(ctx, rt, cfg.Routing.Scheduler, sdk.KindScheduler); err != nil {
		return nil, err
	}
	if p.swap, err = loadPolicy(ctx, rt, cfg.Routing.Router, sdk.KindSwapper); err != nil {
		return nil, err
	}
	if p.schedSettings, err = cfg.SchedulerSettingsJSON(); err != nil {
		return nil, err
	}
	if p.swapSettings, err = cfg.RouterSettingsJSON(); err != nil {
		return nil, err
	}
	// Both fallbacks are compiled now so a switch is quick.
	if p.fallbackSched, err = loadPolicy(ctx, rt, config.Policy{Use: config.SchedulerFIFO}, sdk.KindScheduler); err != nil {
		return nil, fmt.Errorf("fallback scheduler: %w", err)
	}
	if p.fallbackSwap, err = loadPolicy(ctx, rt, config.Policy{Use: config.RouterGroup}, sdk.KindSwapper); err != nil {
		return nil, fmt.Errorf("fallback router: %w", err)
	}
	if p.groupSettings, err = cfg.GroupSettingsJSON(); err != nil {
		return nil, err
	}
	return p, nil
}

// routerConfig sets the policies of rc: names and constructors that
// instantiate them with their settings behind the fallback decorators.
func (p *policySet) routerConfig(ctx context.Context, rc *router.Config) {
	rc.SchedulerName, rc.SwapperName = p.sched.Name, p.swap.Name
	rc.NewScheduler = func(fx sdk.Effects) (router.SchedulerPolicy, error) {
		s, err := p.rt.NewScheduler(ctx, p.sched, p.schedSettings, fx)
		if err != nil {
			return nil, p.cfg.Routing.Scheduler.InitError(err)
		}
		p.Scheduler = policy.NewFallbackScheduler(s, func() (*policy.Scheduler, error) {
			return p.rt.NewScheduler(ctx, p.fallbackSched, []byte("{}"), fx)
		}, policy.Backoff{})
		return p.Scheduler, nil
	}
	rc.NewSwapper = func(h sdk.Host) (router.SwapperPolicy, error) {
		s, err := p.rt.NewSwapper(ctx, p.swap, p.swapSettings, h)
		if err != nil {
			return nil, p.cfg.Routing.Router.InitError(err)
		}
		p.Swapper = policy.NewFallbackSwapper(s, func() (*policy.Swapper, error) {
			return p.rt.NewSwapper(ctx, p.fallbackSwap, p.groupSettings, h)
		}, policy.Backoff{})
		return p.Swapper, nil
	}
}
