package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/loadout-dev/loadout/host/backend"
	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/host/events"
	"github.com/loadout-dev/loadout/host/gpu"
	"github.com/loadout-dev/loadout/host/jobs"
	"github.com/loadout-dev/loadout/host/peers"
	"github.com/loadout-dev/loadout/host/policy"
	"github.com/loadout-dev/loadout/host/proxy"
	"github.com/loadout-dev/loadout/host/router"
	"github.com/loadout-dev/loadout/internal/bounded"
)

// reloader is serve's hot reload: on SIGHUP, POST /api/policies/reload or
// a change --watch saw, it re-reads the configuration and the policy
// modules and applies what changed without dropping a request. A new
// module is compiled and instantiated first; one that fails is refused,
// the old policies keep running, and the error is logged and shown in
// /api/policies. The switch itself is router.ReplacePolicies: requests
// the old scheduler held go to the new one in arrival order, requests in
// flight finish. Model changes go through router.UpdateModels: a removed
// model stops after its requests in flight, a changed one reloads once
// idle, and the proxy's catalog follows.
type reloader struct {
	ctx context.Context
	src configSource // the configuration's file and directory; neither for the embedded default
	// routerMode are serve's --models-dir and --models-preset, read again
	// on each reload.
	routerMode routerModeOptions
	listen     string
	rt         *policy.Runtime
	r          *router.Router
	log        *slog.Logger

	// For model changes: the backend launchers serve shares, the GPU
	// ledger (nil without GPUs), the plugins' logger, and the proxy whose
	// catalog follows the models (set once it exists).
	launchers map[string]*backend.PluginLauncher
	ledger    *gpu.Ledger
	pluginLog *slog.Logger
	proxy     *proxy.Server
	// For peer changes: the event bus peers publish their health on, the
	// running peers (nil: none), and how to stop their health checks
	// (swapped on a reload that changes peers:; serve calls it at exit).
	bus       *events.Bus
	peers     *peers.Set
	stopPeers func()

	mu sync.Mutex // one reload at a time; guards ident and models, and writes of cfg
	// cfg is the configuration in force: written under mu by a reload,
	// read without waiting for one (residency, for job admission).
	cfg atomic.Pointer[config.Config]
	// started is the configuration serve started with: what the settings
	// a reload does not apply (restartOnlyChanges) are in force from.
	started *config.Config
	ident   string                 // what the running policies were made from (policyIdentity)
	models  map[string]modelDigest // what each model was made from (modelDigests)
	current atomic.Pointer[policySet]
	status  atomic.Pointer[reloadStatus]
}

// reloadStatus is the outcome of the last reload, for /api/policies.
type reloadStatus struct {
	err      string
	reloaded time.Time
}

func newReloader(ctx context.Context, o serveOptions, cfg *config.Config, rt *policy.Runtime, r *router.Router, ps *policySet, log *slog.Logger) (*reloader, error) {
	rl := &reloader{ctx: ctx, src: o.config, routerMode: o.routerMode, listen: o.listen, rt: rt, r: r, log: log}
	rl.cfg.Store(cfg)
	rl.started = cfg
	var err error
	if rl.ident, err = policyIdentity(cfg); err != nil {
		return nil, err
	}
	if rl.models, err = modelDigests(cfg); err != nil {
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

// reload applies the configuration as it is now on disk: new or removed
// models, changed ones (restarted once idle with their new configuration),
// and changed policies. why names the
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
		if len(res.Restart) == 0 {
			rl.log.Info("reload: nothing changed", "trigger", why)
		}
		// A configuration fixed back to the running one: the refusal
		// before it is over.
		if st := rl.status.Load(); st.err != "" {
			rl.status.Store(&reloadStatus{reloaded: st.reloaded})
		}
		return res, nil
	}
	rl.log.Info("reloaded", "trigger", why, "changed", res.Changed, "scheduling_pause", time.Duration(res.PauseMS*float64(time.Millisecond)).Round(time.Microsecond))
	rl.status.Store(&reloadStatus{reloaded: time.Now()})
	return res, nil
}

func (rl *reloader) apply() (proxy.ReloadResult, error) {
	res := proxy.ReloadResult{Changed: []string{}}
	cfg, warnings, err := rl.load(hostOptions(rl.listen))
	if err != nil {
		return res, err
	}
	for _, w := range warnings {
		rl.log.Warn(w.String())
	}
	hostChanged := cfg.HostMemory != rl.cfg.Load().HostMemory
	keysChanged := !slices.Equal(cfg.APIKeys, rl.cfg.Load().APIKeys)
	if res.Restart = restartOnlyChanges(rl.started, cfg); len(res.Restart) > 0 {
		rl.log.Warn("reload: these settings changed and take effect when loadout serve restarts; a reload keeps the running ones", "settings", res.Restart)
	}
	// Compared without positions: a line that moved (an edit above the
	// peers) is no change; a peer configured as it was keeps its health.
	peersChanged := positionless(peerTable(cfg)) != positionless(peerTable(rl.cfg.Load()))
	models, err := modelDigests(cfg)
	if err != nil {
		return res, err
	}
	ident, err := policyIdentity(cfg)
	if err != nil {
		return res, err
	}
	added, removed, changed, updated := diffModels(rl.models, models)
	modelsChanged := len(added)+len(removed)+len(changed)+len(updated) > 0
	placed := cfg.Placement != rl.cfg.Load().Placement // the box's pack or spread
	if ident == rl.ident && !modelsChanged && !placed && !peersChanged && !hostChanged && !keysChanged {
		return res, nil
	}
	// Everything that can be checked is checked before anything changes:
	// the backends validate the models, the new policies compile.
	if err := validateModels(rl.ctx, cfg, rl.launchers, rl.pluginLog); err != nil {
		return res, err
	}
	var inv gpu.Inventory
	if rl.ledger != nil {
		inv = rl.ledger.Inventory()
	}
	if err := checkPlacement(cfg, inv, rl.ledger); err != nil {
		return res, err
	}
	ps, err := loadPolicies(rl.ctx, rl.rt, cfg)
	if err != nil {
		return res, err
	}
	if ident != rl.ident {
		// Settings only the policies understand (a model in two groups
		// for the group router) are checked before any model changes:
		// a reload is applied whole or not at all.
		if err := ps.checkInit(rl.ctx); err != nil {
			return res, err
		}
	}
	if modelsChanged {
		if err := rl.applyModels(cfg, models, added, changed, updated); err != nil {
			return res, err
		}
		res.Changed = append(res.Changed, "models")
		rl.log.Info("models reloaded", "added", added, "removed", removed, "changed", changed, "updated", updated)
	}
	if peersChanged {
		if err := rl.applyPeers(cfg); err != nil {
			return res, err
		}
		res.Changed = append(res.Changed, "peers")
	}
	if keysChanged && rl.proxy != nil {
		if err := rl.proxy.SetAPIKeys(cfg.APIKeys); err != nil {
			return res, err
		}
		res.Changed = append(res.Changed, "apiKeys") // a key removed is revoked at once
	}
	if rl.ledger != nil {
		rl.ledger.SetPlacement(gpuPlacement(cfg)) // for the loads to come
	}
	if placed {
		res.Changed = append(res.Changed, "placement")
	}
	if hostChanged {
		// Sleepers' memory is not available memory, but it is theirs
		// to keep: auto counts it in.
		var held uint64
		if hm, err := rl.r.HostMemory(); err == nil {
			held = hm.Sleepers
		}
		if err := rl.r.SetHostMemory(hostMemory(cfg, rl.log, held)); err != nil {
			return res, err
		}
		res.Changed = append(res.Changed, "hostMemory")
	}
	if ident == rl.ident {
		rl.cfg.Store(cfg)
		return res, nil
	}
	var rc router.Config
	ps.routerConfig(rl.ctx, &rc)
	pause, err := rl.r.ReplacePolicies(router.Policies{
		NewScheduler: rc.NewScheduler, NewSwapper: rc.NewSwapper,
		SchedulerName: rc.SchedulerName, SwapperName: rc.SwapperName,
	})
	if err != nil {
		if len(res.Changed) > 0 {
			rl.cfg.Store(cfg)
			return res, fmt.Errorf("the model changes were applied, but the new policies were refused: %w", err)
		}
		return res, err
	}
	old := rl.cfg.Load()
	rl.cfg.Store(cfg)
	rl.ident = ident
	rl.current.Store(ps)
	if !samePolicy(old.Routing.Scheduler, cfg.Routing.Scheduler) {
		res.Changed = append(res.Changed, "scheduler")
	}
	if !samePolicy(old.Routing.Router, cfg.Routing.Router) {
		res.Changed = append(res.Changed, "router")
	}
	if !slices.Contains(res.Changed, "scheduler") && !slices.Contains(res.Changed, "router") {
		res.Changed = append(res.Changed, "policy settings or modules") // same names; new bytes, settings, or model priorities and groups
	}
	res.PauseMS = float64(pause) / float64(time.Millisecond)
	return res, nil
}

// restartOnlyChanges names the top-level settings a reload does not
// apply (config.Config's fields tagged reload:"restart,KEY", by KEY) that
// differ between was (the configuration serve started with, whose values
// are in force) and now, in the fields' order. Compared without config
// positions: a line that moved is no change.
func restartOnlyChanges(was, now *config.Config) []string {
	var out []string
	a, b := reflect.ValueOf(was).Elem(), reflect.ValueOf(now).Elem()
	for _, f := range reflect.VisibleFields(a.Type()) {
		class, key, _ := strings.Cut(f.Tag.Get("reload"), ",")
		if class != "restart" {
			continue
		}
		if positionless(a.FieldByIndex(f.Index).Interface()) != positionless(b.FieldByIndex(f.Index).Interface()) {
			out = append(out, key)
		}
	}
	return out
}

// positionless is v as JSON without the configuration's positions (every
// "Pos" key dropped), for comparing what two readings of a file say.
func positionless(v any) string {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%#v", v)
	}
	var x any
	if json.Unmarshal(raw, &x) != nil {
		return string(raw)
	}
	var drop func(any)
	drop = func(x any) {
		switch t := x.(type) {
		case map[string]any:
			delete(t, "Pos")
			for _, v := range t {
				drop(v)
			}
		case []any:
			for _, v := range t {
				drop(v)
			}
		}
	}
	drop(x)
	out, _ := json.Marshal(x) // maps marshal with sorted keys
	return string(out)
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
			b, err := readInput(context.Background(), p.Wasm)
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

// load reads the configuration file (or the embedded default) with opts
// and the ports the running configuration gave its models
// (config.Options.Ports), so that a model that stays keeps its port and
// a new one takes another: a reload moves no port of a model it keeps.
func (rl *reloader) load(opts config.Options) (*config.Config, []config.Warning, error) {
	opts.Ports = map[string]int{}
	for id, m := range rl.cfg.Load().Models {
		if m.Port != 0 {
			opts.Ports[id] = m.Port
		}
	}
	return loadConfigWith(rl.ctx, rl.src, rl.routerMode, opts)
}

// modelDigest is what a model was made from, in two parts: restart, whose
// change restarts it once idle (its process: the backend's spec, VRAM,
// where it may run, whose replica it is, its sleep levels and weights),
// and live, whose change a reload hands over without a restart (the run
// loop's settings — priority, concurrency, pinning, group, TTL, unload
// timeout, evict, wake timeout, replica range — and the catalog's: name,
// description, aliases, listing, filters, timeouts, metadata,
// capabilities). An alias or a TTL added must not cost a cold load.
type modelDigest struct{ restart, live string }

// modelDigests is, for each model of cfg, its modelDigest. cfg is the
// configuration in force or about to be: serve's own at start, each
// reload's as it read the file (the ports of the models it keeps kept,
// a new one's free when it was read), so that a model's port, and so its
// digest, does not move between two readings.
func modelDigests(cfg *config.Config) (map[string]modelDigest, error) {
	out := map[string]modelDigest{}
	for _, id := range cfg.ModelIDs() {
		m := cfg.Models[id]
		spec, err := modelSpec(cfg, m)
		mc := modelConfig(cfg, m, uint64(max(m.VRAM, 0)))
		// How long a load may take to be ready bounds the next load, not
		// the running server: live (its new Process, applyModels).
		healthCheck := spec.HealthCheckTimeout
		spec.HealthCheckTimeout = 0
		restart := sha256.New()
		// A model's own replica number is not what it is made of: it is 1
		// with replicas and 0 without, and a reload from one replica to
		// two (or back) must restart none (README, "Replicas").
		fmt.Fprintf(restart, "%+v\x00%v\x00%d\x00%q\x00%d\x00%q\x00%v %v", spec, err, mc.VRAM,
			mc.ReplicaOf, mc.SleepLevels, mc.Weights, m.GPUs, m.Split)
		live, err := json.Marshal([]any{liveSettings(mc), m.Name, m.Description, m.Aliases, m.Unlisted, m.UseModelName,
			m.Filters, m.Timeouts, m.Metadata, m.Capabilities, m.IgnoreWebsockets, m.SendLoadingState, healthCheck})
		if err != nil {
			return nil, fmt.Errorf("model %s: %w", id, err)
		}
		out[id] = modelDigest{restart: hex.EncodeToString(restart.Sum(nil)), live: string(live)}
	}
	return out, nil
}

// liveSettings is mc's settings the run loop takes at a reload without a
// restart (router.UpdateModels).
func liveSettings(mc router.ModelConfig) router.ModelConfig {
	return router.ModelConfig{Priority: mc.Priority, ConcurrencyLimit: mc.ConcurrencyLimit, Pinned: mc.Pinned, Group: mc.Group,
		TTL: mc.TTL, StopTimeout: mc.StopTimeout, Evict: mc.Evict, WakeTimeout: mc.WakeTimeout,
		MinReplicas: mc.MinReplicas, MaxReplicas: mc.MaxReplicas}
}

// diffModels compares two sets of model digests: the ids only in now, only
// in was, in both with a different restart digest (changed: restarted once
// idle), and in both with only the live one different (updated: handed
// over as they run), each sorted.
func diffModels(was, now map[string]modelDigest) (added, removed, changed, updated []string) {
	for id, d := range now {
		old, ok := was[id]
		switch {
		case !ok:
			added = append(added, id)
		case old.restart != d.restart:
			changed = append(changed, id)
		case old.live != d.live:
			updated = append(updated, id)
		}
	}
	for id := range was {
		if _, ok := now[id]; !ok {
			removed = append(removed, id)
		}
	}
	for _, l := range [][]string{added, removed, changed, updated} {
		slices.Sort(l)
	}
	return added, removed, changed, updated
}

// applyModels hands the router the new model table (processes made for
// the added and changed models; the others keep theirs) and the proxy its
// catalog.
func (rl *reloader) applyModels(cfg *config.Config, digests map[string]modelDigest, added, changed, updated []string) error {
	// An updated model keeps its server, and gets a new Process for its
	// next start (what it is made of is the same; how long its load may
	// take may not be).
	build := append(append(slices.Clone(added), changed...), updated...)
	table, catalog, err := modelTable(rl.ctx, cfg, build, rl.launchers, rl.ledger, rl.pluginLog)
	if err != nil {
		return err
	}
	for _, id := range cfg.ModelIDs() {
		if _, ok := table[id]; !ok {
			// Not restarted: the router keeps its process and takes
			// its live settings.
			table[id] = liveSettings(modelConfig(cfg, cfg.Models[id], 0))
		}
	}
	for _, id := range updated {
		mc := liveSettings(table[id])
		mc.Process = table[id].Process
		table[id] = mc
	}
	if err := rl.r.UpdateModels(table, changed); err != nil {
		return err
	}
	if rl.proxy != nil {
		if err := rl.proxy.SetModels(catalog); err != nil {
			return err
		}
	}
	rl.models = digests
	return nil
}

// watch reloads when the configuration's files (those of its directory
// too, one added or removed among them) or its policy modules change on
// disk, until ctx ends: serve --watch. It watches their directories and,
// once events there settle (debounce), reloads if what the files hold
// has changed (fingerprint): editors and `cp` replace a file rather than
// write it, a Kubernetes ConfigMap volume swaps a symlinked directory
// (..data) under files whose own names see no event, and a file that is
// a symbolic link is edited where its target lies (that directory is
// watched too); an event for another file of a directory reloads
// nothing.
func (rl *reloader) watch(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("--watch: %w", err)
	}
	files := rl.watchedFiles()
	dirs := map[string]bool{}
	for _, f := range files {
		dirs[filepath.Dir(f)] = true
		// A symbolic link's target may be edited where it lies.
		if real, err := filepath.EvalSymlinks(f); err == nil {
			dirs[filepath.Dir(real)] = true
		}
	}
	if rl.src.dir != "" {
		d, err := filepath.Abs(rl.src.dir)
		if err != nil {
			w.Close()
			return fmt.Errorf("--watch: %w", err)
		}
		dirs[d] = true
	}
	if len(dirs) == 0 {
		w.Close()
		return errors.New("--watch: nothing to watch (the embedded default configuration and built-in policies)")
	}
	for d := range dirs {
		if err := w.Add(d); err != nil {
			w.Close()
			return fmt.Errorf("--watch: %s: %w", d, err)
		}
	}
	rl.log.Info("watching for changes", "files", files, "config_dir", rl.src.dir)
	// The first event reloads whatever the digest: a change made between
	// the load and this watch has no event of its own.
	last := ""
	go func() {
		defer w.Close()
		// A burst of events (an editor's truncate and write, a
		// ConfigMap's swap) is read once it has been quiet for settle —
		// but no later than maxSettle after its first event: the
		// directories watched may hold files written all the time (a
		// log beside the configuration), whose events would otherwise
		// put a reload off for as long as they go on.
		const settle, maxSettle = 250 * time.Millisecond, 2 * time.Second
		var timer <-chan time.Time
		var first time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-w.Events:
				if !ok {
					return
				}
				now := time.Now()
				if timer == nil {
					first = now
				}
				timer = time.After(min(settle, first.Add(maxSettle).Sub(now)))
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				rl.log.Warn("--watch", "err", err)
			case <-timer:
				timer = nil
				if fp := rl.fingerprint(); fp != last {
					last = fp
					_, _ = rl.reload("file changed")
				}
			}
		}
	}()
	return nil
}

// fingerprint is a digest of what the configuration's files and policy
// modules hold now: the files its source names (a --config-dir listed
// afresh) and the modules the running configuration names, each by name
// and content, or by the error reading it gave.
func (rl *reloader) fingerprint() string {
	h := sha256.New()
	files, err := bounded.Call(rl.ctx, inputLimit, "listing the configuration files", rl.src.files)
	if err != nil {
		fmt.Fprintf(h, "files: %v\n", err)
	}
	for _, f := range append(files, rl.watchedModules()...) {
		data, err := readInput(rl.ctx, f)
		fmt.Fprintf(h, "%s\x00%d\x00%v\x00", f, len(data), err)
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// watchedFiles are the configuration's files and the policy modules it
// names, as absolute paths.
func (rl *reloader) watchedFiles() []string {
	var out []string
	if rl.src.path != "" || rl.src.dir != "" { // else the embedded default or router-mode inputs
		for _, f := range rl.cfg.Load().Files {
			if abs, err := filepath.Abs(f); err == nil {
				out = append(out, abs)
			}
		}
	}
	return append(out, rl.watchedModules()...)
}

// watchedModules are the policy modules the running configuration names.
func (rl *reloader) watchedModules() []string {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	var out []string
	cfg := rl.cfg.Load()
	for _, p := range []config.Policy{cfg.Routing.Scheduler, cfg.Routing.Router} {
		if p.Wasm != "" {
			out = append(out, filepath.Clean(p.Wasm))
		}
	}
	return out
}

// applyPeers puts cfg's peers in place of the running ones: the new set's
// health checks start, the proxy forwards through it, and the old set's
// checks stop (a request already forwarded finishes on its peer).
func (rl *reloader) applyPeers(cfg *config.Config) error {
	set, stop, err := startPeers(rl.ctx, cfg, rl.peers, rl.bus, rl.log)
	if err != nil {
		return err
	}
	if rl.proxy != nil {
		rl.proxy.SetPeers(set)
	}
	rl.stopPeers()
	rl.peers, rl.stopPeers = set, stop
	rl.log.Info("peers reloaded", "peers", cfg.PeerIDs())
	return nil
}

// residency is jobs.LocalConfig.Residency over the configuration in
// force: whether model is pinned, in a persistent group, and its TTL.
func (rl *reloader) residency(model string) jobs.Residency {
	cfg := rl.cfg.Load()
	m := cfg.Models[model]
	if m == nil {
		return jobs.Residency{}
	}
	g := cfg.GroupOf(model)
	return jobs.Residency{Pinned: m.Pinned, Persistent: g != nil && g.Persistent, TTL: m.TTL}
}
