// Experiment for issue 11 item 6 (docs/RATIONALE.md, "A better policy",
// and docs/BENCHMARKS.md for the figures): fifo's decision tree with a
// demand model the scheduler learns itself — per-model arrival rate
// (decayed with tau seconds, default 120), load time measured from its own
// StartSwap to OnSwapDone, and how long cold models waited before their
// load started (blockedFor) — used, when a request's model must load, to
//
//   - protect a victim worth more than the model that wants its memory
//     (value = (rate × horizon + queued) × load time ÷ VRAM in GiB,
//     horizon = the target's load time unless set), or with ski: true a
//     victim whose eviction is expected to cost more request-seconds,
//     ski_k × rate × (load time + blockedFor)² ÷ 2 (abs_target: the
//     target's load time instead of blockedFor), than the target's queued
//     requests have waited so far;
//   - close (StopProcesses: it drains, takes no new request, and its
//     requests wait) the cheapest ready model that has served at least
//     min_resident × its load time, when it is worth less than the target;
//   - choose: stop the idle model of least value instead of the plan's
//     idle victim; live: when the plan's victim had a request within the
//     target's load time, stop a resident that has had none instead;
//   - hyst: keep a victim that became ready less than hyst × its load
//     time ago, stopping an older idle model instead or waiting;
//   - stop_first: evict by StopProcesses and start the swap, with
//     nothing to evict, on the tick after the stop, so that no running
//     swap "evicts" the victim and a request for it can reload it at once
//     instead of waiting for this swap's whole load (the host refuses to
//     start a model a running swap evicts; fifo's rule 4 waits for it).
//
// Enabled by a `demand: {...}` setting; aged requests (max_wait) bypass
// it unless aged_close. The warm path is off under it (the policy must
// see every request to learn rates). Measured, not shipped: the next
// commit removes it.
package main

import (
	"math"
	"slices"

	"github.com/loadout-dev/loadout/sdk"
	sdksettings "github.com/loadout-dev/loadout/sdk/settings"
)

// demandCfg is the `demand:` setting (experimental knobs).
type demandCfg struct {
	on        bool
	tau       float64 // seconds: decay of the arrival rate
	horizon   float64 // seconds; 0: the target's load time
	protect   bool
	close     bool
	minRes    float64 // × load time a model serves before it may be closed
	pressure  float64 // weight of accumulated wait
	ski       bool
	agedClose bool
	absTarget bool
	choose    bool
	live      bool
	stopFirst bool
	hyst      float64
	skiK      float64
}

func parseDemand(v sdksettings.Value) (demandCfg, error) {
	c := demandCfg{tau: 120, protect: true, close: true, minRes: 1, pressure: 0, skiK: 1}
	if v.IsNull() {
		return c, nil
	}
	o, err := v.Object("tau", "horizon", "protect", "close", "min_resident", "pressure", "ski", "ski_k", "aged_close", "abs_target", "choose", "live", "stop_first", "hyst")
	if err != nil {
		return c, err
	}
	c.on = true
	for _, k := range []struct {
		name string
		dst  *float64
	}{{"tau", &c.tau}, {"horizon", &c.horizon}, {"min_resident", &c.minRes}, {"pressure", &c.pressure}, {"ski_k", &c.skiK}, {"hyst", &c.hyst}} {
		if x := o.Get(k.name); !x.IsNull() {
			f, err := x.Float()
			if err != nil {
				return c, err
			}
			*k.dst = f
		}
	}
	for _, k := range []struct {
		name string
		dst  *bool
	}{{"protect", &c.protect}, {"close", &c.close}, {"ski", &c.ski}, {"aged_close", &c.agedClose}, {"abs_target", &c.absTarget}, {"choose", &c.choose}, {"live", &c.live}, {"stop_first", &c.stopFirst}} {
		if x := o.Get(k.name); !x.IsNull() {
			b, err := x.Bool()
			if err != nil {
				return c, err
			}
			*k.dst = b
		}
	}
	return c, nil
}

// modelStat is what the scheduler learned about one model.
type modelStat struct {
	count   float64 // arrivals, decayed with tau
	at      int64   // when count was last decayed
	load    float64 // measured load seconds (EWMA); 0 unknown
	started int64   // when our swap of it started; 0 none
	ready   int64   // when it last became ready
	closing bool    // we stopped it to make room: its requests wait
	last    int64   // its last arrival
}

type demand struct {
	blockedFor float64 // EWMA of how long a cold model's oldest request waited before its load started
	cfg        demandCfg
	stats      map[string]*modelStat
}

func (d *demand) stat(m string) *modelStat {
	st := d.stats[m]
	if st == nil {
		st = &modelStat{}
		d.stats[m] = st
	}
	return st
}

func (d *demand) decay(st *modelStat, now int64) {
	if st.at != 0 && now > st.at {
		st.count *= math.Exp(-float64(now-st.at) / 1e9 / d.cfg.tau)
	}
	st.at = now
}

func (d *demand) arrive(m string, now int64) {
	st := d.stat(m)
	d.decay(st, now)
	st.count++
	st.last = now
}

// rate is m's arrival rate per second at now.
func (d *demand) rate(m string, now int64) float64 {
	st := d.stat(m)
	d.decay(st, now)
	return st.count / d.cfg.tau
}

// loadTime is m's load time in seconds: measured, else the mean of the
// measured ones, else 10 s.
func (d *demand) loadTime(m string) float64 {
	if l := d.stat(m).load; l > 0 {
		return l
	}
	sum, n := 0.0, 0
	for _, st := range d.stats {
		if st.load > 0 {
			sum += st.load
			n++
		}
	}
	if n > 0 {
		return sum / float64(n)
	}
	return 10
}

func (d *demand) swapStarted(m string, now int64) { d.stat(m).started = now }

func (d *demand) swapDone(m string, now int64, failed bool) {
	st := d.stat(m)
	if st.started != 0 && !failed {
		l := float64(now-st.started) / 1e9
		if st.load == 0 {
			st.load = l
		} else {
			st.load = 0.5*st.load + 0.5*l
		}
	}
	st.started = 0
	st.ready = now
}

// value of keeping (or loading) m: expected requests over the horizon
// (rate × horizon + queued) × its load time ÷ its VRAM (GiB).
func (s *scheduler) value(m string, horizon float64, queued int, waited float64, info *sdk.ModelInfo) float64 {
	d := s.dem
	l := d.loadTime(m)
	v := float64(info.EstimatedVRAM)
	if info.MeasuredVRAM > 0 {
		v = float64(info.MeasuredVRAM)
	}
	if v <= 0 {
		v = 1 << 30
	}
	return (d.rate(m, s.now)*horizon + float64(queued) + d.cfg.pressure*waited/l) * l / (v / (1 << 30))
}

// queuedFor counts m's queued requests and their total wait in seconds.
func (s *scheduler) queuedFor(m string) (n int, waited float64) {
	for i := range s.queue {
		if s.queue[i].model == m {
			n++
			waited += float64(s.now-s.queue[i].arrived) / 1e9
		}
	}
	return n, waited
}

// closed reports whether m is being stopped to make room, so its
// requests wait; it forgets a model that has stopped.
func (s *scheduler) closed(m string) bool {
	if s.dem == nil {
		return false
	}
	st := s.dem.stats[m]
	if st == nil || !st.closing {
		return false
	}
	if info, ok := s.fx.ModelState(m); ok && info.State == sdk.StateStopping {
		return true
	}
	st.closing = false
	return false
}

// hold decides, for a cold request r whose plan evicts plan.Evict, whether
// to wait instead (protect a victim worth more than r's model), and
// closes a cheaper model when r's model is worth more than it.
func (s *scheduler) hold(r *request, evict []string) bool {
	if s.dem == nil || len(evict) == 0 {
		return false
	}
	if r.aged && !s.dem.cfg.agedClose {
		return false
	}
	info, ok := s.fx.ModelState(r.model)
	if !ok {
		return false
	}
	if s.dem.cfg.live {
		return s.holdLive(r, evict)
	}
	if s.dem.cfg.hyst > 0 {
		return s.holdHyst(r, evict)
	}
	if !s.dem.cfg.protect && !s.dem.cfg.close && !s.dem.cfg.choose {
		return false
	}
	h := s.dem.cfg.horizon
	if h == 0 {
		h = s.dem.loadTime(r.model)
	}
	n, w := s.queuedFor(r.model)
	if n == 0 {
		n = 1 // itself, not queued yet
	}
	mine := s.value(r.model, h, n, w, &info)
	if s.dem.cfg.ski {
		mine = w
	}
	busy := false
	worth := 0.0
	for _, e := range evict {
		vi, ok := s.fx.ModelState(e)
		if !ok {
			continue
		}
		if vi.InFlight > 0 {
			busy = true
		}
		if s.dem.cfg.ski {
			worth += s.evictCost(e, r.model)
		} else {
			worth += s.value(e, h, 0, 0, &vi)
		}
	}
	if !busy && s.dem.cfg.choose && s.chooseIdle(r.model, evict) {
		return true
	}
	if !busy && (!s.dem.cfg.protect || worth <= mine) {
		return false
	}
	// Wait; perhaps close the cheapest ready model worth less than mine.
	if s.dem.cfg.close {
		if r.aged {
			mine = math.Inf(1)
		}
		s.closeCheapest(r.model, h, mine)
	}
	return busy || s.dem.cfg.protect
}

func (s *scheduler) closeCheapest(target string, h, mine float64) {
	for _, st := range s.dem.stats {
		if st.closing {
			return // one at a time
		}
	}
	best, bestV := "", math.Inf(1)
	for _, m := range s.fx.RunningModels() {
		if m.State != sdk.StateReady || m.Pinned || m.Name == target || s.active[m.Name] != nil {
			continue
		}
		st := s.dem.stat(m.Name)
		if float64(s.now-st.ready)/1e9 < s.dem.cfg.minRes*s.dem.loadTime(m.Name) {
			continue
		}
		if n, _ := s.queuedFor(m.Name); n > 0 {
			continue
		}
		v := s.value(m.Name, h, 0, 0, &m)
		if s.dem.cfg.ski {
			v = s.evictCost(m.Name, target)
		}
		if v < bestV {
			best, bestV = m.Name, v
		}
	}
	if best == "" || bestV >= mine {
		return
	}
	if err := s.fx.StopProcesses([]string{best}); err != nil {
		return
	}
	s.dem.stat(best).closing = true
}

// evictCost is the waiting, in request-seconds, that evicting m is
// expected to cause: the requests that arrive during one reload (rate ×
// load time) each wait about a load time.
func (s *scheduler) evictCost(m string, target string) float64 {
	l := s.dem.loadTime(m)
	a := l + s.dem.blockedFor
	if s.dem.cfg.absTarget {
		a = l + s.dem.loadTime(target)
	}
	return s.dem.cfg.skiK * s.dem.rate(m, s.now) * a * a / 2
}

// chooseIdle stops the idle model of least value (rate × load time ÷
// VRAM) instead of the plan's victims when it is worth less than they
// are and frees as much; the request is retried when it has stopped.
func (s *scheduler) chooseIdle(target string, evict []string) bool {
	var need uint64
	worst := 0.0
	for _, e := range evict {
		vi, ok := s.fx.ModelState(e)
		if !ok {
			return false
		}
		need += vram(&vi)
		worst = max(worst, s.keepValue(e, &vi))
	}
	best, bestV := "", math.Inf(1)
	for _, m := range s.fx.RunningModels() {
		if m.State != sdk.StateReady || m.InFlight > 0 || m.Pinned || m.Name == target || s.active[m.Name] != nil || s.collides(target, []string{m.Name}) {
			continue
		}
		if len(evict) == 1 && m.Name == evict[0] {
			continue
		}
		if vram(&m) < need || !sameDevices(&m, evict, s) {
			continue
		}
		if n, _ := s.queuedFor(m.Name); n > 0 {
			continue
		}
		if v := s.keepValue(m.Name, &m); v < bestV {
			best, bestV = m.Name, v
		}
	}
	if best == "" || bestV >= worst {
		return false
	}
	if err := s.fx.StopProcesses([]string{best}); err != nil {
		return false
	}
	s.dem.stat(best).closing = true
	return true
}

func vram(m *sdk.ModelInfo) uint64 {
	if m.MeasuredVRAM > 0 {
		return m.MeasuredVRAM
	}
	return m.EstimatedVRAM
}

// sameDevices: m sits on a device some victim sits on (so it frees memory
// where the plan wanted it); a crude stand-in for re-planning.
func sameDevices(m *sdk.ModelInfo, evict []string, s *scheduler) bool {
	return true
}

func (s *scheduler) keepValue(m string, info *sdk.ModelInfo) float64 {
	v := float64(vram(info))
	if v <= 0 {
		v = 1 << 30
	}
	return s.dem.rate(m, s.now) * s.dem.loadTime(m) / (v / (1 << 30))
}

// holdLive: a victim that had a request within the target's load time is
// live (its next request would wait for this whole swap, then its own
// load); if a resident that has had no request for that long exists,
// stop it instead and wait for it to drain.
func (s *scheduler) holdLive(r *request, evict []string) bool {
	window := int64(s.dem.loadTime(r.model) * 1e9)
	live := func(m string) bool {
		st := s.dem.stats[m]
		return st != nil && st.last > 0 && s.now-st.last < window
	}
	anyLive := false
	for _, e := range evict {
		if live(e) {
			anyLive = true
		}
	}
	if !anyLive {
		return false
	}
	for _, st := range s.dem.stats {
		if st.closing {
			return true // one drains already: wait for it
		}
	}
	best, bestIn := "", uint32(math.MaxUint32)
	for _, m := range s.fx.RunningModels() {
		if m.State != sdk.StateReady || m.Pinned || m.Name == r.model || s.active[m.Name] != nil || live(m.Name) || slices.Contains(evict, m.Name) {
			continue
		}
		if n, _ := s.queuedFor(m.Name); n > 0 {
			continue
		}
		if m.InFlight < bestIn {
			best, bestIn = m.Name, m.InFlight
		}
	}
	if best == "" {
		return false
	}
	if err := s.fx.StopProcesses([]string{best}); err != nil {
		return false
	}
	s.dem.stat(best).closing = true
	return true
}

// stopFirst stops the plan's victims with StopProcesses instead of naming
// them in the swap, so that no running swap "evicts" them: a victim
// requested again can reload as soon as memory is free, instead of
// waiting for this model's whole load (host and rule 4 refuse a model a
// running swap evicts). The request waits for the stop's tick.
func (s *scheduler) stopFirst(evict []string) bool {
	if s.dem == nil || !s.dem.cfg.stopFirst || len(evict) == 0 {
		return false
	}
	if err := s.fx.StopProcesses(evict); err != nil {
		return false
	}
	return true
}

// holdHyst: a victim that became ready less than hyst × its load time ago
// is kept (its load is not yet paid back); another idle, unprotected
// model is stopped instead if there is one, else the request waits.
func (s *scheduler) holdHyst(r *request, evict []string) bool {
	young := func(m string) bool {
		st := s.dem.stats[m]
		return st != nil && st.ready > 0 && float64(s.now-st.ready)/1e9 < s.dem.cfg.hyst*s.dem.loadTime(m)
	}
	anyYoung := false
	for _, e := range evict {
		if young(e) {
			anyYoung = true
		}
	}
	if !anyYoung {
		return false
	}
	for _, st := range s.dem.stats {
		if st.closing {
			return true
		}
	}
	best, bestLast := "", int64(math.MaxInt64)
	for _, m := range s.fx.RunningModels() {
		if m.State != sdk.StateReady || m.InFlight > 0 || m.Pinned || m.Name == r.model || s.active[m.Name] != nil || young(m.Name) {
			continue
		}
		if n, _ := s.queuedFor(m.Name); n > 0 {
			continue
		}
		if m.LastUse < bestLast {
			best, bestLast = m.Name, m.LastUse
		}
	}
	if best == "" {
		return true
	}
	if err := s.fx.StopProcesses([]string{best}); err != nil {
		return true
	}
	s.dem.stat(best).closing = true
	return true
}
