package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/host/policy"
	"github.com/loadout-dev/loadout/host/proxy"
	"github.com/loadout-dev/loadout/host/router"
)

// reloader is serve's hot reload: on SIGHUP, POST /api/policies/reload or
// a change --watch saw, it re-reads the configuration and the policy
// modules and applies what changed without dropping a request. A new
// module is compiled and instantiated first; one that fails is refused,
// the old policies keep running, and the error is logged and shown in
// /api/policies. The switch itself is router.ReplacePolicies: requests
// the old scheduler held go to the new one in arrival order, requests in
// flight finish.
type reloader struct {
	ctx    context.Context
	path   string // the configuration file; "" for the embedded default
	listen string
	rt     *policy.Runtime
	r      *router.Router
	log    *slog.Logger

	mu      sync.Mutex // one reload at a time; guards cfg and ident
	cfg     *config.Config
	ident   string // what the running policies were made from (policyIdentity)
	models  string // what the models were made from (modelsIdentity)
	current atomic.Pointer[policySet]
	status  atomic.Pointer[reloadStatus]
}

// reloadStatus is the outcome of the last reload, for /api/policies.
type reloadStatus struct {
	err      string
	reloaded time.Time
}

func newReloader(ctx context.Context, o serveOptions, cfg *config.Config, rt *policy.Runtime, r *router.Router, ps *policySet, log *slog.Logger) (*reloader, error) {
	rl := &reloader{ctx: ctx, path: o.configPath, listen: o.listen, rt: rt, r: r, log: log, cfg: cfg}
	var err error
	if rl.ident, err = policyIdentity(cfg); err != nil {
		return nil, err
	}
	if rl.models, err = rl.modelsIdentity(); err != nil {
		return nil, err
	}
	rl.current.Store(ps)
	rl.status.Store(&reloadStatus{})
	return rl, nil
}

// policies is the policy set in charge; safe from any goroutine (its
// decorators are read on the run loop only).
func (rl *reloader) policies() *policySet { return rl.current.Load() }

// decorate adds the last reload's outcome to a policy's status.
func (rl *reloader) decorate(pi proxy.PolicyInfo) proxy.PolicyInfo {
	st := rl.status.Load()
	pi.ReloadError, pi.Reloaded = st.err, st.reloaded
	return pi
}

// reload applies the configuration as it is now on disk. why names the
// trigger for the log. Errors leave everything as it was.
func (rl *reloader) reload(why string) (proxy.ReloadResult, error) {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	res, err := rl.apply()
	if err != nil {
		rl.log.Error("reload refused; the running policies keep serving", "trigger", why, "err", err)
		rl.status.Store(&reloadStatus{err: err.Error(), reloaded: rl.status.Load().reloaded})
		return res, err
	}
	if len(res.Changed) == 0 {
		rl.log.Info("reload: nothing changed", "trigger", why)
		return res, nil
	}
	rl.log.Info("reloaded", "trigger", why, "changed", res.Changed, "scheduling_pause", time.Duration(res.PauseMS*float64(time.Millisecond)).Round(time.Microsecond))
	rl.status.Store(&reloadStatus{reloaded: time.Now()})
	return res, nil
}

func (rl *reloader) apply() (proxy.ReloadResult, error) {
	res := proxy.ReloadResult{Changed: []string{}}
	cfg, warnings, err := loadConfig(rl.path, rl.listen)
	if err != nil {
		return res, err
	}
	for _, w := range warnings {
		rl.log.Warn(w.String())
	}
	models, err := rl.modelsIdentity()
	if err != nil {
		return res, err
	}
	if models != rl.models {
		return res, errors.New("the models changed; a model change needs a restart of loadout serve (the policies were not reloaded either)")
	}
	ident, err := policyIdentity(cfg)
	if err != nil {
		return res, err
	}
	if ident == rl.ident {
		return res, nil
	}
	ps, err := loadPolicies(rl.ctx, rl.rt, cfg)
	if err != nil {
		return res, err
	}
	var rc router.Config
	ps.routerConfig(rl.ctx, &rc)
	pause, err := rl.r.ReplacePolicies(router.Policies{
		NewScheduler: rc.NewScheduler, NewSwapper: rc.NewSwapper,
		SchedulerName: rc.SchedulerName, SwapperName: rc.SwapperName,
	})
	if err != nil {
		return res, err
	}
	old := rl.cfg
	rl.cfg, rl.ident = cfg, ident
	rl.current.Store(ps)
	if !samePolicy(old.Routing.Scheduler, cfg.Routing.Scheduler) {
		res.Changed = append(res.Changed, "scheduler")
	}
	if !samePolicy(old.Routing.Router, cfg.Routing.Router) {
		res.Changed = append(res.Changed, "router")
	}
	if len(res.Changed) == 0 {
		res.Changed = append(res.Changed, "policy modules") // same names, new bytes
	}
	res.PauseMS = float64(pause) / float64(time.Millisecond)
	return res, nil
}

func samePolicy(a, b config.Policy) bool {
	return a.Use == b.Use && a.Wasm == b.Wasm && string(a.Settings) == string(b.Settings)
}

// policyIdentity is a digest of everything the run loop's policies are
// made from: which policies, their module bytes and their settings as the
// policies receive them. Errors: a module file that cannot be read.
func policyIdentity(cfg *config.Config) (string, error) {
	h := sha256.New()
	for _, p := range []config.Policy{cfg.Routing.Scheduler, cfg.Routing.Router} {
		fmt.Fprintf(h, "use=%q wasm=%q\n", p.Use, p.Wasm)
		if p.Wasm != "" {
			b, err := os.ReadFile(p.Wasm)
			if err != nil {
				return "", fmt.Errorf("policy module: %w", err)
			}
			h.Write(b)
		}
	}
	for _, settings := range []func() ([]byte, error){cfg.SchedulerSettingsJSON, cfg.RouterSettingsJSON} {
		b, err := settings()
		if err != nil {
			return "", err
		}
		h.Write(b)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// modelsIdentity is a digest of the models as the configuration file
// describes them (ids, specs, run-loop settings, groups). The file is read
// without asking which ports are free: serve's own configuration skips
// ports taken, and the running models take some.
func (rl *reloader) modelsIdentity() (string, error) {
	var cfg *config.Config
	var err error
	opts := config.Options{Listen: rl.listen}
	if rl.path == "" {
		cfg, _, err = config.ParseWith("embedded default config", config.DefaultYAML(), opts)
	} else {
		cfg, _, err = config.LoadWith(rl.path, opts)
	}
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, id := range cfg.ModelIDs() {
		m := cfg.Models[id]
		spec, err := modelSpec(cfg, m)
		fmt.Fprintf(h, "%s\x00%+v\x00%v\x00%+v\x00%d\x00", id, spec, err, modelConfig(cfg, m, uint64(max(m.VRAM, 0))), len(m.Aliases))
		for _, a := range m.Aliases {
			fmt.Fprintf(h, "%s\x00", a)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// watch reloads when the configuration file or a policy module changes
// on disk, until ctx ends: serve --watch. It watches the files'
// directories (editors and `cp` often replace a file rather than write
// it) and waits for writes to settle (debounce) before reloading.
func (rl *reloader) watch(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("--watch: %w", err)
	}
	files := rl.watchedFiles()
	if len(files) == 0 {
		w.Close()
		return errors.New("--watch: nothing to watch (the embedded default configuration and built-in policies)")
	}
	dirs := map[string]bool{}
	for _, f := range files {
		dirs[filepath.Dir(f)] = true
	}
	for d := range dirs {
		if err := w.Add(d); err != nil {
			w.Close()
			return fmt.Errorf("--watch: %s: %w", d, err)
		}
	}
	rl.log.Info("watching for changes", "files", files)
	go func() {
		defer w.Close()
		const settle = 250 * time.Millisecond
		var timer <-chan time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if slices.Contains(rl.watchedFiles(), filepath.Clean(ev.Name)) && ev.Op&(fsnotify.Write|fsnotify.Create|fsnotify.Rename) != 0 {
					timer = time.After(settle)
				}
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				rl.log.Warn("--watch", "err", err)
			case <-timer:
				timer = nil
				_, _ = rl.reload("file changed")
			}
		}
	}()
	return nil
}

// watchedFiles are the configuration file and the policy modules it
// names, as absolute paths.
func (rl *reloader) watchedFiles() []string {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	var out []string
	if rl.path != "" {
		if abs, err := filepath.Abs(rl.path); err == nil {
			out = append(out, abs)
		}
	}
	for _, p := range []config.Policy{rl.cfg.Routing.Scheduler, rl.cfg.Routing.Router} {
		if p.Wasm != "" {
			out = append(out, filepath.Clean(p.Wasm))
		}
	}
	return out
}
