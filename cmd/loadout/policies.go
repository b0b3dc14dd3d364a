package main

import (
	"context"
	"errors"
	"fmt"
	"sync"

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
	schedSettings, swapSettings []byte
	// fallbacks compiles the fallback modules once: in the background
	// after the first crash of either policy (prefetch), or when a
	// fallback takes over, which waits for it.
	fallbacks     func() (fallbackModules, error)
	prefetch      sync.Once
	groupSettings []byte
	// backoff is how long a disabled policy waits to be tried again
	// (zero: policy.Backoff's defaults, serve's; a replay's is
	// sim.PolicyBackoff).
	backoff policy.Backoff

	// Scheduler and Swapper are the decorators the router's constructors
	// made, once the router is built (for /api/policies).
	Scheduler *policy.FallbackScheduler
	Swapper   *policy.FallbackSwapper
}

// fallbackModules are the compiled fallback policies.
type fallbackModules struct{ sched, swap *policy.Module }

// loadPolicies compiles cfg's scheduler and router, in parallel. Their
// fallbacks are compiled only once one of them crashes: a host whose
// policies do not fail holds no fallback's code (docs/BENCHMARKS.md, memory
// at idle). Errors: a policy
// that cannot be read or compiled, one of the wrong kind, settings that are
// not JSON; the scheduler's first when both fail.
func loadPolicies(ctx context.Context, rt *policy.Runtime, cfg *config.Config) (*policySet, error) {
	p := &policySet{rt: rt, cfg: cfg}
	var schedErr, swapErr error
	var wg sync.WaitGroup
	wg.Go(func() { p.sched, schedErr = loadPolicy(ctx, rt, cfg.Routing.Scheduler, sdk.KindScheduler) })
	wg.Go(func() { p.swap, swapErr = loadPolicy(ctx, rt, cfg.Routing.Router, sdk.KindSwapper) })
	wg.Wait()
	if err := errors.Join(schedErr, swapErr); err != nil {
		return nil, err
	}
	var err error
	if p.schedSettings, err = cfg.SchedulerSettingsJSON(); err != nil {
		return nil, err
	}
	if p.swapSettings, err = cfg.RouterSettingsJSON(); err != nil {
		return nil, err
	}
	if p.groupSettings, err = cfg.GroupSettingsJSON(); err != nil {
		return nil, err
	}
	// A fallback that is also the configured policy is that module.
	p.fallbacks = sync.OnceValues(func() (fallbackModules, error) {
		f := fallbackModules{sched: p.sched, swap: p.swap}
		var err error
		if cfg.Routing.Scheduler.Use != config.SchedulerFIFO {
			if f.sched, err = loadPolicy(ctx, rt, config.Policy{Use: config.SchedulerFIFO}, sdk.KindScheduler); err != nil {
				return f, fmt.Errorf("fallback scheduler: %w", err)
			}
			f.sched.Trim(ctx) // instantiated only if it ever takes over
		}
		if cfg.Routing.Router.Use != config.RouterGroup {
			if f.swap, err = loadPolicy(ctx, rt, config.Policy{Use: config.RouterGroup}, sdk.KindSwapper); err != nil {
				return f, fmt.Errorf("fallback router: %w", err)
			}
			f.swap.Trim(ctx)
		}
		return f, nil
	})
	p.sched.OnCrash, p.swap.OnCrash = p.prefetchFallbacks, p.prefetchFallbacks
	return p, nil
}

// checkInit makes one instance of each policy with its settings against
// an inert host of the configuration's models (newInertHost) and closes
// it: what serve's start would refuse (settings only the policy
// understands, such as a model in two groups for the group router) is
// found before anything changes. The error is at the setting's line
// (config.Policy.InitError).
func (p *policySet) checkInit(ctx context.Context) error {
	host := newInertHost(p.cfg)
	s, err := p.rt.NewScheduler(ctx, p.sched, p.schedSettings, host)
	if err != nil {
		return p.cfg.Routing.Scheduler.InitError(err)
	}
	_ = s.Close(ctx)
	sw, err := p.rt.NewSwapper(ctx, p.swap, p.swapSettings, host)
	if err != nil {
		return p.cfg.Routing.Router.InitError(err)
	}
	_ = sw.Close(ctx)
	return nil
}

// prefetchFallbacks starts compiling the fallbacks in the background, once:
// a policy that crashed once may crash-loop, and the fallback that then
// takes over should not wait for a compilation (seconds without a warm
// cache). It runs on the run loop and does not block.
func (p *policySet) prefetchFallbacks() {
	p.prefetch.Do(func() { go func() { _, _ = p.fallbacks() }() })
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
			f, err := p.fallbacks()
			if err != nil {
				return nil, err
			}
			return p.rt.NewScheduler(ctx, f.sched, []byte("{}"), fx)
		}, p.backoff)
		return p.Scheduler, nil
	}
	rc.NewSwapper = func(h sdk.Host) (router.SwapperPolicy, error) {
		s, err := p.rt.NewSwapper(ctx, p.swap, p.swapSettings, h)
		if err != nil {
			return nil, p.cfg.Routing.Router.InitError(err)
		}
		p.Swapper = policy.NewFallbackSwapper(s, func() (*policy.Swapper, error) {
			f, err := p.fallbacks()
			if err != nil {
				return nil, err
			}
			return p.rt.NewSwapper(ctx, f.swap, p.groupSettings, h)
		}, p.backoff)
		return p.Swapper, nil
	}
}
