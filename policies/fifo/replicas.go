package main

import (
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/loadout-dev/loadout/sdk"
)

// Replicas (issue 15; sdk.ReplicaSet): the host routes a request for a
// model with replicas to its ready replica with the fewest in flight, and
// each replica is a model to this scheduler. What fifo adds:
//
//   - a request blocked on a replica at its concurrency limit (or on one
//     that is not ready) is served on a ready sibling with a free slot, if
//     one has come up since the host routed it (serveOnSibling);
//   - when a request finds every ready replica of its model at its limit,
//     fifo starts one more replica, up to max_replicas, if it fits in the
//     free GPU memory without evicting anything (scaleOut): scaling out is
//     never worth a cold load of another model;
//   - once a replica is ready, fifo starts more until min_replicas run,
//     evicting idle models like any load would (fillMin);
//   - on every tick, a model with fewer than min_replicas running because
//     a replica crashed (or failed to start) starts it again, evicting
//     idle models if it must; one stopped for another reason (a reload
//     added or changed it, another model evicted it) starts again where
//     it fits without evicting; and a replica beyond min_replicas that has
//     served nothing for scale_in_after, with nothing queued for its
//     model, is stopped, the highest-numbered first, one per model per
//     tick (rescale).
//
// The sets are read from the host (sdk.ReadReplicas, one host call) only
// off the warm path — for a blocked or cold request, a finished swap and
// on ticks — and cached until a configuration reload's tick, since only a
// reload changes them. The first tick after a reload (or the first of all)
// asks about every model: where none has replicas, rescale reads nothing
// until the next reload.

// replicaSet returns the replica set of the model or replica name, or nil
// when it has none (max_replicas 1, or a host that knows no replicas).
func (s *scheduler) replicaSet(name string) *sdk.ReplicaSet {
	if set, ok := s.sets[name]; ok {
		return set
	}
	set, ok := sdk.ReadReplicas(s.fx, name)
	var p *sdk.ReplicaSet
	if ok && len(set.Replicas) > 1 {
		p = &set
	}
	if s.sets == nil {
		s.sets = map[string]*sdk.ReplicaSet{}
	}
	s.sets[name] = p
	return p
}

// serveOnSibling serves r on the ready replica of its model with the
// fewest requests in flight, among those under their limit that no swap
// evicts and that drain for no request before r (drained), and reports
// whether it did (r is then done with).
func (s *scheduler) serveOnSibling(r *request) bool {
	set := s.replicaSet(r.model)
	if set == nil {
		return false
	}
	best, bestInfo := "", sdk.ModelInfo{}
	for _, name := range set.Replicas {
		if name == r.model {
			continue
		}
		info, ok := s.fx.ModelState(name)
		if !ok || info.State != sdk.StateReady || info.InFlight >= concurrencyLimit(&info) || s.collides(name, nil) || s.drained(name, r) {
			continue
		}
		if best == "" || info.InFlight < bestInfo.InFlight {
			best, bestInfo = name, info
		}
	}
	if best == "" {
		return false
	}
	if s.fx.GrantServe(r.id, best) {
		s.served(best, r.id)
	}
	return true
}

// runningSibling is a replica of name's model, other than name, that is
// ready or being loaded by a swap of ours ("" if none, or no replicas):
// where the waiters of a replica's failed load go instead of failing.
func (s *scheduler) runningSibling(name string) string {
	set := s.replicaSet(name)
	if set == nil {
		return ""
	}
	for _, sib := range set.Replicas {
		if sib == name {
			continue
		}
		if s.active[sib] != nil {
			return sib
		}
		if info, ok := s.fx.ModelState(sib); ok && info.State == sdk.StateReady && !s.collides(sib, nil) {
			return sib
		}
	}
	return ""
}

// replicaCounts reads the state of each replica of set: how many run
// (starting or ready, or being loaded by a swap of ours), the first
// stopped or failed one that no swap of ours loads ("" if none), and the
// first failed one (crashed, or its last start failed).
func (s *scheduler) replicaCounts(set *sdk.ReplicaSet) (running int, stopped, failed string) {
	for _, name := range set.Replicas {
		info, ok := s.fx.ModelState(name)
		switch {
		case !ok:
		case s.active[name] != nil, info.State == sdk.StateStarting, info.State == sdk.StateReady:
			running++
		case info.State == sdk.StateStopped || info.State == sdk.StateFailed:
			if stopped == "" {
				stopped = name
			}
			if failed == "" && info.State == sdk.StateFailed {
				failed = name
			}
		}
	}
	return running, stopped, failed
}

// replicaKind says which replica scaleOut may start: any stopped or failed
// one, or only a failed one (a crash being repaired; one an operator or
// a scale-in stopped stays stopped).
type replicaKind uint8

const (
	anyStopped replicaKind = iota
	onlyFailed
)

// scaleOut starts one more replica of model's set, if fewer than its max
// run: without evictions unless evict (fillMin's loads may evict idle
// models, as any load; a scale-out for a queue may not). It reports
// whether a swap started.
func (s *scheduler) scaleOut(model string, evict bool, only replicaKind, why string) bool {
	set := s.replicaSet(model)
	if set == nil {
		return false
	}
	running, target, failed := s.replicaCounts(set)
	if only == onlyFailed {
		target = failed
	}
	if target == "" || running >= int(set.Max) {
		return false
	}
	plan, err := s.fx.Plan(target)
	if err == nil && slices.ContainsFunc(plan.Evict, func(m string) bool { return slices.Contains(set.Replicas, m) }) {
		// Room only by evicting another replica of the model: no gain.
		err = errors.New("it fits only by evicting another replica of " + set.Model + " (the router does not know replicas)")
	}
	if err != nil && evict {
		// min_replicas that cannot all be placed: say so, once per
		// attempt (after a load, or a crash), not on every request.
		s.fx.Log(sdk.LevelWarn, "model "+set.Model+": "+strconv.Itoa(running)+" of min_replicas "+strconv.FormatUint(uint64(set.Min), 10)+
			" running; replica "+target+" cannot be placed: "+err.Error())
	}
	if err != nil || (len(plan.Evict) > 0 && !evict) || s.collides(target, plan.Evict) || s.busy(plan.Evict) {
		return false
	}
	if err := s.fx.StartSwap(plan.SwapFor(target)); err != nil {
		s.fx.Log(sdk.LevelDebug, "replica "+target+" of model "+set.Model+" not started ("+why+"): "+err.Error())
		return false
	}
	s.active[target] = &swap{evict: slices.Clone(plan.Evict)}
	clear(s.blocked)
	s.fx.Log(sdk.LevelInfo, "scale out: model="+set.Model+" replica="+target+" running="+strconv.Itoa(running+1)+
		" max="+strconv.FormatUint(uint64(set.Max), 10)+" evict=["+strings.Join(plan.Evict, ",")+"] ("+why+")")
	return true
}

// fillMin starts replicas of model until min_replicas run (or one cannot
// start now; the next finished swap or tick tries again), evicting idle
// models for them when evict is set (see scaleOut).
func (s *scheduler) fillMin(model string, evict bool, only replicaKind) {
	set := s.replicaSet(model)
	if set == nil || set.Min <= 1 {
		return
	}
	for range set.Min {
		running, _, _ := s.replicaCounts(set)
		if running == 0 || running >= int(set.Min) || !s.scaleOut(model, evict, only, "min_replicas") {
			return
		}
	}
}

// rescale runs on every tick over the models with a replica running:
// one with fewer than min_replicas running (a replica crashed, or could
// not start before) starts more (fillMin); one with more and nothing
// queued stops its highest-numbered ready replica that has been idle for
// scale_in_after.
func (s *scheduler) rescale(now int64) {
	if s.rescaled == nil {
		s.rescaled = map[string]bool{}
	}
	done := s.rescaled
	clear(done)
	s.scaleInAt = 0
	// The running models, from a snapshot kept between ticks: through
	// Wasm only the models that changed since the last tick are decoded
	// (snapshot deltas), where RunningModels decoded every running model
	// on every tick — most of a tick's cost on a box of many models.
	if s.knowReplicas && s.noReplicas {
		return
	}
	sdk.ReadSnapshot(s.fx, &s.snap)
	if !s.knowReplicas && len(s.snap.Models) > 0 {
		// Once after each reload, ask every model: on a box where none
		// has replicas, the ticks that follow need not read anything.
		s.noReplicas, s.knowReplicas = true, true
		for i := range s.snap.Models {
			if s.replicaSet(s.snap.Models[i].Name) != nil {
				s.noReplicas = false
				break
			}
		}
		if s.noReplicas {
			return
		}
	}
	for i := range s.snap.Models {
		info := &s.snap.Models[i]
		if !info.State.Running() {
			continue
		}
		set := s.replicaSet(info.Name)
		if set == nil || done[set.Model] {
			continue
		}
		done[set.Model] = true
		if slices.ContainsFunc(s.queue, func(r request) bool { return slices.Contains(set.Replicas, r.model) }) {
			continue
		}
		running, _, _ := s.replicaCounts(set)
		if running < int(set.Min) {
			s.fillMin(set.Model, true, onlyFailed)
			if !s.unloaded[set.Model] { // an unload stops its replicas one by one
				// A stopped replica of a model running below min_replicas —
				// added or restarted by a configuration reload, or evicted
				// for another model — starts again where it fits as things
				// are: evicting for it could take back what was just
				// evicted for another model.
				s.fillMin(set.Model, false, anyStopped)
			}
			continue
		}
		if running == int(set.Min) || s.cfg.scaleInAfter <= 0 {
			continue
		}
		// Ticked on demand, the next look is at the first idle deadline,
		// and at the latest scale_in_after from now (ticks.go).
		s.scaleInAt = earliest(s.scaleInAt, now+s.cfg.scaleInAfter)
		for i := len(set.Replicas) - 1; i >= 0; i-- {
			name := set.Replicas[i]
			ri, ok := s.fx.ModelState(name)
			if ok && ri.State == sdk.StateReady && ri.InFlight == 0 && now-ri.LastUse < s.cfg.scaleInAfter {
				s.scaleInAt = min(s.scaleInAt, ri.LastUse+s.cfg.scaleInAfter)
			}
			if !ok || ri.State != sdk.StateReady || ri.InFlight > 0 || s.active[name] != nil || s.collides(name, nil) ||
				now-ri.LastUse < s.cfg.scaleInAfter {
				continue
			}
			if err := s.fx.StopProcesses([]string{name}); err != nil {
				s.fx.Log(sdk.LevelWarn, "scale in: stopping replica "+name+": "+err.Error())
			} else {
				s.fx.Log(sdk.LevelInfo, "scale in: model="+set.Model+" replica="+name+" running="+strconv.Itoa(running-1)+" min="+strconv.FormatUint(uint64(set.Min), 10))
			}
			break
		}
	}
}
