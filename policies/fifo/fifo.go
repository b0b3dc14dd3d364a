package main

import (
	"cmp"
	"errors"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/loadout-dev/loadout/sdk"
	sdksettings "github.com/loadout-dev/loadout/sdk/settings"
)

// request is one caller the scheduler holds: queued, or waiting on a swap.
type request struct {
	id       sdk.RequestID
	model    string
	priority int32
	arrived  int64  // Now of its OnRequest
	seq      uint64 // arrival order
	aged     bool   // queued longer than max_wait: goes first
	pos      int    // last queue position sent; 0 none yet or waiting on a swap
}

// swap is a swap this scheduler started and the callers waiting on it.
type swap struct {
	evict   []string
	waiters []request
}

// scheduler is the FIFO scheduler. All its state is touched only by the
// host's run loop, one event at a time.
type scheduler struct {
	fx      sdk.Effects
	cfg     settings
	active  map[string]*swap // by target
	queue   []request        // sorted by before()
	seq     uint64
	agingAt int64 // Now from which some queued request may have aged

	// blocked caches, within one drain, the models whose requests were
	// found blocked; see drain.
	blocked map[string]bool
	// awaited are the models a queued request waits to evict, some of
	// them busy (5), each with the first such request in queue order:
	// once that request
	// has waited drain_after, a request for the model that comes after it
	// in queue order is queued behind it, not served at once (3), so that
	// the model's new requests cannot keep it busy for ever while the
	// request that needs it gone waits (llama-swap's group lock does the
	// same at once). Rebuilt by every full drain.
	awaited map[string]request
	// holds are, per awaited model, what its drain_after counts from
	// (hold); kept across the drains that rebuild awaited, forgotten
	// once the model is awaited no longer.
	holds map[string]*hold
	now   int64 // the Now of the event being handled (age)
	// Scratch of a drain under load_order: queued_wait (see visitOrder):
	// each model's total queued wait, the visiting order, and which
	// requests were handled.
	waited  map[string]int64
	order   []int
	handled []bool

	// admitter is the host's warm path (fx, when it offers one); see
	// admit. servedLimit is the concurrency limit of the model decide
	// last served at once (3).
	admitter    sdk.Admitter
	servedLimit uint32
	// admitted are the models fifo handed a warm path since it last took
	// it back itself (await); the host may have taken one back already.
	admitted map[string]bool

	// sets caches the replica sets read from the host by model or replica
	// name (nil: none), until a reload's tick, which names every model
	// (OnTick; replicas.go).
	sets map[string]*sdk.ReplicaSet
	// rescaled is rescale's scratch: the models it has looked at, and
	// snap its view of every model (sorted by name, as RunningModels),
	// updated in place by each read.
	rescaled map[string]bool
	snap     sdk.Snapshot
	// noReplicas: no model has replicas, as every model was asked
	// (knowReplicas) since the last reload; rescale has nothing to do.
	noReplicas, knowReplicas bool
	// unloaded are the models with replicas an unload stopped (an
	// operator's, a TTL's, a reload's removal): rescale starts none of
	// their stopped replicas until a request for the model comes.
	unloaded map[string]bool

	// ticker is the host's ticks on demand (fx, when it offers them; nil
	// once it refused); onDemand says fifo has asked, and tickAt is the
	// tick it asked for, 0 none (ticks.go).
	ticker   sdk.TickRequester
	onDemand bool
	tickAt   int64
	// scaleInAt is, from the last rescale, when a replica may next be
	// scaled in; 0 none.
	scaleInAt int64
}

// New makes the FIFO scheduler from its settings JSON; it is the factory
// registered with sdk.RegisterScheduler. Errors name the offending setting.
func New(fx sdk.Effects, rawSettings []byte) (sdk.Scheduler, error) {
	cfg, err := parseSettings(rawSettings)
	if err != nil {
		return nil, err
	}
	admitter, _ := fx.(sdk.Admitter)
	ticker, _ := fx.(sdk.TickRequester)
	return &scheduler{
		fx:       fx,
		admitter: admitter,
		ticker:   ticker,
		cfg:      cfg,
		active:   make(map[string]*swap),
		agingAt:  math.MaxInt64,
		blocked:  make(map[string]bool),
		awaited:  make(map[string]request),
		holds:    make(map[string]*hold),
		waited:   make(map[string]int64),
	}, nil
}

// verdict is what the decision tree did with a request.
type verdict uint8

const (
	handled verdict = iota // failed, joined a swap or started one
	served                 // granted at once: the model was ready (3)
	blocked                // must wait in the queue
)

// OnRequest runs the decision tree for a new caller and queues it if it is
// blocked.
func (s *scheduler) OnRequest(ev sdk.RequestEvent) {
	s.age(ev.Now)
	prio := ev.Priority
	if prio == 0 {
		prio = s.cfg.priority[ev.Model]
	}
	s.seq++
	if len(s.unloaded) > 0 {
		if set := s.replicaSet(ev.Model); set != nil {
			delete(s.unloaded, set.Model)
		}
	}
	r := request{id: ev.ID, model: ev.Model, priority: prio, arrived: ev.Now, seq: s.seq}
	switch s.decide(&r) {
	case blocked:
		if !s.enqueue(r) {
			s.unawait(r.id)
		}
	case served:
		s.admit(r.model)
	}
}

// admit hands the host the warm path of a model whose request was just
// served at once (3): while the model stays ready, nothing loads or
// evicts it, nothing is queued for it and it is under its concurrency
// limit, step (3) would serve every request for it, so the host may do
// it without calling the policy. The host takes the shortcut back on any
// change this policy must see; the next request served at once asks
// again. A host without the warm path (no sdk.Admitter) calls the policy
// for every request, as before.
func (s *scheduler) admit(model string) {
	if s.admitter == nil || slices.ContainsFunc(s.queue, func(r request) bool { return r.model == model }) {
		return
	}
	if _, ok := s.awaited[model]; ok {
		return // its requests queue behind the one waiting to evict it
	}
	switch err := s.admitter.Admit(model, s.servedLimit, 0); {
	case err == nil:
		if s.admitted == nil {
			s.admitted = map[string]bool{}
		}
		s.admitted[model] = true
	case errors.Is(err, sdk.ErrNotAllowed):
		s.admitter = nil // this host has no warm path: stop asking
	case err != nil:
		s.fx.Log(sdk.LevelWarn, "warm path for model "+model+" refused: "+err.Error())
	}
}

// decide is the decision tree for one request, new or queued. It never
// queues: a blocked request is the caller's to keep.
func (s *scheduler) decide(r *request) verdict {
	// (2) Join the swap already loading this model. Checked before (1): a
	// model we started a swap for is known, and a join then costs no host
	// call besides its queue position (draining a long queue is mostly
	// joins).
	if sw := s.active[r.model]; sw != nil {
		s.wait(sw, r)
		return handled
	}
	// (1) Unknown model.
	info, ok := s.fx.ModelState(r.model)
	if !ok {
		s.fx.GrantError(r.id, sdk.CodeModelNotFound, "model "+strconv.Quote(r.model)+" not found")
		return handled
	}
	// (3) A ready model is served at once, or queued for a free slot when
	// it is at its concurrency limit; a running swap that evicts it blocks
	// it as in (4). The swapper is not asked: nothing needs to load, and a
	// failing swapper must not take down models that are ready.
	if info.State == sdk.StateReady {
		if s.drained(r.model, r) {
			// Behind the request waiting to evict it (5); another
			// replica of its model may take it.
			if s.serveOnSibling(r) {
				return handled
			}
			return blocked
		}
		if s.collides(r.model, nil) || !s.grant(r, &info) {
			// Another replica of the model may take it, or be started
			// for it (replicas.go).
			if s.serveOnSibling(r) {
				return handled
			}
			s.scaleOut(r.model, false, anyStopped, "every ready replica at its limit")
			return blocked
		}
		s.servedLimit = concurrencyLimit(&info)
		return served
	}
	if s.serveOnSibling(r) { // a ready replica of the model needs no load
		return handled
	}
	plan, err := s.fx.Plan(r.model)
	if errors.Is(err, sdk.ErrHeldByJob) {
		// (6) It would load but for the GPU jobs holding the memory: wait
		// for the tick that follows a job's end.
		return blocked
	}
	if err != nil {
		// The swapper cannot place the model (e.g. it does not fit even
		// with everything evictable evicted) or failed; the host adds its
		// reason to the message.
		s.fx.GrantError(r.id, sdk.CodeUnavailable, "cannot load model "+strconv.Quote(r.model)+": "+err.Error())
		return handled
	}
	// (4) Collides with a running swap; (5) would evict a busy model.
	if s.collides(r.model, plan.Evict) {
		return blocked
	}
	if s.busy(plan.Evict) {
		// Every victim waits for it, the idle ones too: one that served
		// new requests would be busy again when the others go idle.
		s.await(plan.Evict, r)
		return blocked
	}
	// (6) Start a swap and wait on it.
	switch err := s.fx.StartSwap(plan.SwapFor(r.model)); {
	case err == nil:
	case sdk.NotNow(err):
		// The host knows of a load or a request we do not (e.g. from before
		// this instance), or GPU jobs hold the memory for now: wait for
		// the SwapDone, ServeDone or tick that drains the queue.
		return blocked
	case errors.Is(err, sdk.ErrUnknownModel):
		s.fx.GrantError(r.id, sdk.CodeModelNotFound, "model "+strconv.Quote(r.model)+" not found")
		return handled
	case errors.Is(err, sdk.ErrDoesNotFit):
		// The host's ledger refused the plan: the swapper's view of free
		// memory disagreed with it (a router that weighs no memory, as
		// group does, plans no eviction for memory at all). Where the
		// model needs more than every GPU holds, that is "never" (507,
		// which clients do not retry); else "not now".
		if need, total, ok := s.tooLarge(r.model); ok {
			s.fx.GrantError(r.id, sdk.CodeTooLarge, "model "+strconv.Quote(r.model)+" needs "+sdksettings.FormatSize(need, " ")+
				" of GPU memory; the box's GPUs hold "+sdksettings.FormatSize(total, " ")+" together: it can never load")
			return handled
		}
		s.fx.GrantError(r.id, sdk.CodeUnavailable, "model "+strconv.Quote(r.model)+" cannot be placed now: the host's GPU accounting refused the router policy's plan (the server's log says what it lacked)")
		return handled
	default:
		s.fx.GrantError(r.id, sdk.CodeInternal, "starting a swap for model "+strconv.Quote(r.model)+": "+err.Error())
		return handled
	}
	sw := &swap{evict: slices.Clone(plan.Evict)}
	s.active[r.model] = sw
	clear(s.blocked) // a new swap changes what collides
	s.fx.Log(sdk.LevelInfo, "swap started: model="+r.model+" evict=["+strings.Join(plan.Evict, ",")+
		"] request_id="+strconv.FormatUint(uint64(r.id), 10))
	s.wait(sw, r)
	// A model that runs min_replicas loads them together, not one load
	// time after another.
	s.fillMin(r.model, true, anyStopped)
	return handled
}

// wait adds r to the swap's waiters and tells it so (position 0).
func (s *scheduler) wait(sw *swap, r *request) {
	r.pos = 0
	sw.waiters = append(sw.waiters, *r)
	s.fx.SetQueuePosition(r.id, 0)
}

// grant serves r unless its model is at its concurrency limit, and
// reports whether r is done with: false means the model is at its limit
// and r must wait in the queue for a free slot. info is the model's state;
// its InFlight is counted up on a grant, so one ModelState read serves
// many grants within one event.
func (s *scheduler) grant(r *request, info *sdk.ModelInfo) bool {
	if info.InFlight >= concurrencyLimit(info) {
		return false
	}
	if s.fx.GrantServe(r.id, r.model) {
		info.InFlight++
		s.served(r.model, r.id)
	}
	return true
}

// concurrencyLimit is the most requests the model serves at once: its
// configured concurrencyLimit, else defaultConcurrencyLimit.
func concurrencyLimit(info *sdk.ModelInfo) uint32 {
	if info.ConcurrencyLimit == 0 {
		return defaultConcurrencyLimit
	}
	return info.ConcurrencyLimit
}

// collides reports whether a swap of target evicting evict would collide
// with a running swap of another model: it would evict that swap's target,
// that swap is evicting target, or both would evict the same model. A
// swap is evicting a model of its evict list until the model's stop ends
// (it is Stopping until then); once stopped the model is the swap's no
// longer, and may load again while the swap loads its target, as the
// host allows.
func (s *scheduler) collides(target string, evict []string) bool {
	for t, sw := range s.active {
		if t == target {
			continue
		}
		if slices.Contains(evict, t) || s.evicting(sw, target) {
			return true
		}
		for _, e := range evict {
			if s.evicting(sw, e) {
				return true
			}
		}
	}
	return false
}

// evicting reports whether sw is evicting model: it is one of sw's
// victims and still stopping — or, with reload_evicted: after_swap, one
// of its victims at all.
func (s *scheduler) evicting(sw *swap, model string) bool {
	if !slices.Contains(sw.evict, model) {
		return false
	}
	if s.cfg.afterSwap {
		return true
	}
	info, ok := s.fx.ModelState(model)
	return ok && info.State == sdk.StateStopping
}

// busy reports whether any of models has requests in flight. It reads the
// host's count, which survives a re-instantiation of this policy.
func (s *scheduler) busy(models []string) bool {
	for _, m := range models {
		if info, ok := s.fx.ModelState(m); ok && info.InFlight > 0 {
			return true
		}
	}
	return false
}

// await records that r waits to evict models (awaited: its plan's
// victims, some busy), unless a request before it in queue order already
// does, and takes back their warm paths: their next requests come to the
// policy, and queue once r has waited drain_after.
func (s *scheduler) await(models []string, r *request) {
	for _, m := range models {
		if w, ok := s.awaited[m]; ok && !before(r, &w) {
			continue
		}
		s.awaited[m] = *r
		if s.holds[m] == nil {
			h := &hold{fresh: map[sdk.RequestID]bool{}}
			if info, ok := s.fx.ModelState(m); ok {
				h.old = info.InFlight
			}
			s.holds[m] = h
		}
		if s.admitted[m] {
			delete(s.admitted, m)
			_ = s.admitter.Admit(m, 0, 0) // revoke; an error says the host did already
		}
	}
}

// drained reports whether model takes no new request r: a request
// before r in queue order waits to evict it (awaited), and the model's
// new requests have kept it busy for drain_after (hold) — at once
// where drain_after is 0.
func (s *scheduler) drained(model string, r *request) bool {
	w, ok := s.awaited[model]
	if !ok || before(r, &w) {
		return false
	}
	if s.cfg.drainAfter == 0 {
		return true
	}
	h := s.holds[model]
	return h != nil && h.old == 0 && s.now-max(w.arrived, h.oldDone) >= s.cfg.drainAfter
}

// hold is what an awaited model's drain_after counts from. The requests
// it was serving when a queued request began to wait to evict it (old)
// would have kept it busy as long had nothing else come; what keeps the
// waiting request from its swap beyond them is the requests the model
// took since (fresh). So drain_after counts from when the last of the old
// ones ended (oldDone), or from the waiting request's arrival if later:
// a model finishing one long request while short ones come and go is not
// drained for them, and one that two users keep busy back to back is,
// drain_after after its old requests end.
type hold struct {
	old     uint32                 // requests in flight from before the wait, not yet done
	oldDone int64                  // when the last of them ended (Unix ns); 0 while some are in flight
	fresh   map[sdk.RequestID]bool // requests fifo granted it since, not yet done
}

// served notes a request granted on model (grant, serveOnSibling): while
// the model is awaited, it is one of the fresh requests that keep it busy
// (hold).
func (s *scheduler) served(model string, id sdk.RequestID) {
	if h := s.holds[model]; h != nil {
		h.fresh[id] = true
	}
}

// done notes that request id on model ended (hold): a fresh one is
// forgotten; any other was in flight before the wait, and the last of
// those starts drain_after's count.
func (s *scheduler) done(model string, id sdk.RequestID, now int64) {
	h := s.holds[model]
	switch {
	case h == nil:
	case h.fresh[id]:
		delete(h.fresh, id)
	case h.old > 0:
		if h.old--; h.old == 0 {
			h.oldDone = now
		}
	}
}

// unawait forgets what request id waited to evict (it left the queue
// other than by a drain, which rebuilds awaited).
func (s *scheduler) unawait(id sdk.RequestID) {
	maps.DeleteFunc(s.awaited, func(_ string, w request) bool { return w.id == id })
	s.forgetHolds()
}

// forgetHolds forgets the holds of models no longer awaited.
func (s *scheduler) forgetHolds() {
	maps.DeleteFunc(s.holds, func(m string, _ *hold) bool { _, ok := s.awaited[m]; return !ok })
}

// before is the queue order: aged requests first, in arrival order; then
// higher priority first, ties in arrival order.
func before(a, b *request) bool {
	if a.aged != b.aged {
		return a.aged
	}
	if !a.aged && a.priority != b.priority {
		return a.priority > b.priority
	}
	return a.seq < b.seq
}

// enqueue queues a new blocked request in order, or refuses it when the
// queue is full (false).
func (s *scheduler) enqueue(r request) bool {
	if s.cfg.maxQueue > 0 && len(s.queue) >= s.cfg.maxQueue {
		s.fx.GrantError(r.id, sdk.CodeQueueFull,
			"the queue is full ("+strconv.Itoa(len(s.queue))+" requests waiting)")
		return false
	}
	i := sort.Search(len(s.queue), func(i int) bool { return before(&r, &s.queue[i]) })
	s.queue = slices.Insert(s.queue, i, r)
	if s.cfg.maxWait > 0 {
		s.agingAt = min(s.agingAt, r.arrived+s.cfg.maxWait+1)
		s.wantTick(clampTick(r.arrived, s.agingAt))
	}
	s.sendPositions(i)
	return true
}

// age marks the requests queued longer than max_wait at now and re-sorts
// the queue if any aged.
func (s *scheduler) age(now int64) {
	s.now = now
	if s.cfg.maxWait <= 0 || now < s.agingAt {
		return
	}
	next, changed := int64(math.MaxInt64), false
	for i := range s.queue {
		r := &s.queue[i]
		switch {
		case r.aged:
		case now-r.arrived > s.cfg.maxWait:
			r.aged, changed = true, true
		default:
			next = min(next, r.arrived+s.cfg.maxWait+1)
		}
	}
	s.agingAt = next
	if changed {
		slices.SortStableFunc(s.queue, func(a, b request) int {
			if before(&a, &b) {
				return -1
			}
			if before(&b, &a) {
				return 1
			}
			return 0
		})
		s.sendPositions(0)
	}
}

// sendPositions tells every queued request from index from on whose
// position changed its new one (1-based). Positions before from are known
// not to have changed.
func (s *scheduler) sendPositions(from int) {
	for i := from; i < len(s.queue); i++ {
		r := &s.queue[i]
		if r.pos != i+1 {
			r.pos = i + 1
			s.fx.SetQueuePosition(r.id, r.pos)
		}
	}
}

// drain runs the decision tree again for every queued request at now, in
// queue order (under load_order: queued_wait, in visitOrder's order);
// those still blocked keep their places.
//
// Within one drain, a model whose request was blocked stays blocked for
// the rest of the drain unless a swap starts: grants only add requests in
// flight, which can only block more. So later requests for that model skip
// the tree (and its host calls); draining a long queue costs a map lookup
// per request that cannot move.
func (s *scheduler) drain(now int64) { s.drainFor(now, "") }

// drainFor is drain for the requests of model and its replicas only, or
// for every request when model is "". It is what a ServeDone that leaves
// model busy calls: a slot of it freed, and nothing else changed that
// decides another model's request (no model went idle, no memory was
// freed, no swap started or ended), so the others would be blocked again
// as before — each a plan, on a box with many models and a long queue.
// They keep their places as blocked requests do; if a request of model
// starts a swap (a replica scaling out), the drain goes on over them all.
func (s *scheduler) drainFor(now int64, model string) {
	if model == "" {
		clear(s.awaited) // the requests still waiting to evict say so again
		defer s.forgetHolds()
	}
	if len(s.queue) == 0 {
		return
	}
	clear(s.blocked)
	if model != "" {
		set := s.replicaSet(model)
		for i := range s.queue {
			m := s.queue[i].model
			if m != model && (set == nil || !slices.Contains(set.Replicas, m)) {
				s.blocked[m] = true
			}
		}
	}
	var kept []request
	if s.cfg.loadOrder == byArrival {
		// In queue order, compacting as it goes: the hot path.
		kept = s.queue[:0]
		for i := range s.queue {
			r := s.queue[i]
			if s.blocked[r.model] {
				kept = append(kept, r)
				continue
			}
			if s.decide(&r) == blocked {
				s.blocked[r.model] = true
				kept = append(kept, r)
			}
		}
	} else {
		s.visitOrder(now)
		s.handled = s.handled[:0]
		for range s.queue {
			s.handled = append(s.handled, false)
		}
		for _, i := range s.order {
			r := s.queue[i]
			if s.blocked[r.model] {
				continue
			}
			if s.decide(&r) == blocked {
				s.blocked[r.model] = true
			} else {
				s.handled[i] = true
			}
		}
		kept = s.queue[:0]
		for i := range s.queue {
			if !s.handled[i] {
				kept = append(kept, s.queue[i])
			}
		}
	}
	clear(s.queue[len(kept):])
	s.queue = kept
	clear(s.blocked)
	s.sendPositions(0)
}

// visitOrder sets s.order to the positions in the queue in the order a
// drain at now tries them under load_order: queued_wait (under arrival,
// the default, a drain goes through the queue in order without it): aged
// requests first, then the others; within each, the requests of the model
// whose queued requests (aged or not) have waited longest in total so far,
// then the next such model's; ties keep queue order. So when room frees
// up, the model whose requests have accumulated the most waiting — the one
// a load relieves most — loads first, rather than the model of the oldest
// single request: a ski-rental rule that buys (loads) where renting
// (waiting) has cost most. Aging still bounds every request's wait: an
// aged request goes first.
func (s *scheduler) visitOrder(now int64) {
	s.order = s.order[:0]
	for i := range s.queue {
		s.order = append(s.order, i)
	}
	clear(s.waited)
	for i := range s.queue {
		r := &s.queue[i]
		s.waited[r.model] += now - r.arrived
	}
	slices.SortStableFunc(s.order, func(a, b int) int {
		ra, rb := &s.queue[a], &s.queue[b]
		if ra.aged != rb.aged {
			if ra.aged {
				return -1
			}
			return 1
		}
		return cmp.Compare(s.waited[rb.model], s.waited[ra.model])
	})
}

// OnSwapDone serves (or fails) every caller waiting on the swap, then
// drains the queue.
func (s *scheduler) OnSwapDone(ev sdk.SwapDoneEvent) {
	s.age(ev.Now)
	if sw := s.active[ev.Model]; sw != nil {
		delete(s.active, ev.Model)
		s.finish(ev, sw.waiters)
	}
	if ev.Err == "" {
		s.fillMin(ev.Model, true, anyStopped)
		if set := s.replicaSet(ev.Model); set != nil && s.cfg.scaleInAfter > 0 && len(set.Replicas) > int(set.Min) {
			s.wantTick(clampTick(ev.Now, ev.Now+s.cfg.scaleInAfter)) // a replica beyond the minimum may now be scaled in
		}
	}
	// Drain even for a swap we did not start (before a re-instantiation,
	// or one whose callers an unload failed): requests may have queued
	// behind it.
	s.drain(ev.Now)
}

// finish ends the callers that waited on a finished swap.
func (s *scheduler) finish(ev sdk.SwapDoneEvent, waiters []request) {
	if ev.Err != "" {
		if sib := s.runningSibling(ev.Model); sib != "" {
			// Another replica of the model is ready or loading: the
			// waiters go to it, as if the host had routed them there.
			for _, w := range waiters {
				w.model = sib
				if sw := s.active[sib]; sw != nil {
					s.wait(sw, &w)
				} else {
					s.enqueue(w) // the drain that follows serves it there
				}
			}
			return
		}
		msg := "model " + strconv.Quote(ev.Model) + " failed to start: " + ev.Err
		if set := s.replicaSet(ev.Model); set != nil && set.Model != ev.Model {
			// Clients know the model, not its replicas.
			msg = "model " + strconv.Quote(set.Model) + " failed to start (its replica " + ev.Model + "): " + ev.Err
		}
		for _, w := range waiters {
			s.fx.GrantError(w.id, sdk.CodeSwapFailed, msg)
		}
		return
	}
	info, ok := s.fx.ModelState(ev.Model)
	if !ok || info.State != sdk.StateReady {
		// Stopped again before we saw it ready (an unload raced the load):
		// the callers go through the decision tree once more.
		for _, w := range waiters {
			if s.decide(&w) == blocked {
				s.requeue(w)
			}
		}
		return
	}
	// Waiters beyond the model's concurrency limit wait in the queue for
	// a free slot.
	var over []request
	for _, w := range waiters {
		if !s.grant(&w, &info) {
			over = append(over, w)
		}
	}
	s.requeue(over...)
}

// requeue puts requests that were already accepted back in the queue, in
// order, regardless of max_queue: they were admitted when they joined a
// swap, and a bound reached since then must not refuse them.
func (s *scheduler) requeue(rs ...request) {
	if len(rs) == 0 {
		return
	}
	from := len(s.queue)
	for _, r := range rs {
		i := sort.Search(len(s.queue), func(i int) bool { return before(&r, &s.queue[i]) })
		s.queue = slices.Insert(s.queue, i, r)
		from = min(from, i)
	}
	s.sendPositions(from)
}

// OnServeDone drains the queue when the model has become idle (requests
// that would have evicted it may now proceed), and only the model's own
// requests (drainFor) when it is still busy with a free slot under its
// concurrency limit that a queued request wants (one for it or for
// another replica of its model).
func (s *scheduler) OnServeDone(ev sdk.ServeDoneEvent) {
	s.age(ev.Now)
	s.done(ev.Model, ev.ID, ev.Now)
	if len(s.queue) == 0 {
		return // nothing to drain: spare the host read
	}
	info, ok := s.fx.ModelState(ev.Model)
	switch {
	case !ok || info.InFlight == 0:
		s.drain(ev.Now) // it may be evicted now: any request may move
	case info.InFlight < concurrencyLimit(&info) && s.wanted(ev.Model):
		s.drainFor(ev.Now, ev.Model) // a slot of it, nothing else
	}
}

// wanted reports whether a queued request could take a free slot of
// model: one for it, or for another replica of its model (it may be
// served here, replicas.go).
func (s *scheduler) wanted(model string) bool {
	if slices.ContainsFunc(s.queue, func(r request) bool { return r.model == model }) {
		return true
	}
	set := s.replicaSet(model)
	return set != nil && slices.ContainsFunc(s.queue, func(r request) bool { return slices.Contains(set.Replicas, r.model) })
}

// OnCancel forgets a caller that left. It never starts a swap; a swap whose
// callers all left completes with nobody to serve.
func (s *scheduler) OnCancel(ev sdk.CancelEvent) {
	s.age(ev.Now)
	if i := slices.IndexFunc(s.queue, func(r request) bool { return r.id == ev.ID }); i >= 0 {
		s.queue = slices.Delete(s.queue, i, i+1)
		s.sendPositions(i)
		if len(s.awaited) > 0 {
			s.unawait(ev.ID)
			s.drain(ev.Now) // the requests queued behind it may be served now
		}
		return
	}
	if sw := s.active[ev.Model]; sw != nil && removeWaiter(sw, ev.ID) {
		return
	}
	for _, sw := range s.active {
		if removeWaiter(sw, ev.ID) {
			return
		}
	}
}

func removeWaiter(sw *swap, id sdk.RequestID) bool {
	i := slices.IndexFunc(sw.waiters, func(r request) bool { return r.id == id })
	if i < 0 {
		return false
	}
	sw.waiters = slices.Delete(sw.waiters, i, i+1)
	return true
}

// OnUnload handles an operator's unload (fail the models' callers, stop
// the models; the host drains busy ones first) and a ttl unload (stop only idle models nobody
// waits for).
func (s *scheduler) OnUnload(ev sdk.UnloadEvent) {
	s.age(ev.Now)
	for _, m := range ev.Models {
		if set := s.replicaSet(m); set != nil {
			if s.unloaded == nil {
				s.unloaded = map[string]bool{}
			}
			s.unloaded[set.Model] = true
		}
	}
	if ev.Reason == sdk.UnloadTTL {
		s.unloadIdle(ev.Models)
		return
	}
	unloading := make(map[string]bool, len(ev.Models))
	for _, m := range ev.Models {
		unloading[m] = true
		if sw := s.active[m]; sw != nil {
			// The host's swap goes on; its SwapDone finds no entry.
			delete(s.active, m)
			for _, w := range sw.waiters {
				s.fx.GrantError(w.id, sdk.CodeUnavailable, "model "+strconv.Quote(m)+" unloaded")
			}
		}
	}
	kept := s.queue[:0]
	for _, r := range s.queue {
		if unloading[r.model] {
			s.fx.GrantError(r.id, sdk.CodeUnavailable, "model "+strconv.Quote(r.model)+" unloaded")
			continue
		}
		kept = append(kept, r)
	}
	clear(s.queue[len(kept):])
	s.queue = kept
	if len(ev.Models) > 0 {
		if err := s.fx.StopProcesses(ev.Models); err != nil {
			s.fx.Log(sdk.LevelWarn, "unload: stopping ["+strings.Join(ev.Models, ",")+"]: "+err.Error())
		}
	}
	s.sendPositions(0)
	s.drain(ev.Now)
}

// unloadIdle stops the models that are ready, idle, not loading and not
// wanted by a queued request.
func (s *scheduler) unloadIdle(models []string) {
	var stop []string
	for _, m := range models {
		info, ok := s.fx.ModelState(m)
		if !ok || info.State != sdk.StateReady || info.InFlight > 0 || s.active[m] != nil {
			continue
		}
		if slices.ContainsFunc(s.queue, func(r request) bool { return r.model == m }) {
			continue
		}
		stop = append(stop, m)
	}
	if len(stop) == 0 {
		return
	}
	if err := s.fx.StopProcesses(stop); err != nil {
		s.fx.Log(sdk.LevelWarn, "ttl unload: stopping ["+strings.Join(stop, ",")+"]: "+err.Error())
	}
}

// OnTick re-orders the queue for aging and drains it: a model that crashed
// or finished stopping may unblock requests.
func (s *scheduler) OnTick(ev sdk.TickEvent) {
	s.tickUsed(ev.Now)
	s.age(ev.Now)
	// Only a reload changes a replica set, and a reload names every
	// model: at least as many as rescale's snapshot held before it (the
	// models it removed are named too). Then forget every set. A tick
	// that names fewer (a stop names one) changed none: forgetting the
	// sets of the models it named re-read, on a box that swaps all day,
	// the set of nearly every model at its next request.
	if len(ev.Changed) > 0 && len(ev.Changed) >= len(s.snap.Models) {
		clear(s.sets)
		s.knowReplicas = false
	}
	s.drain(ev.Now)
	s.rescale(ev.Now)
	s.wantTick(clampTick(ev.Now, earliest(s.nextAging(), s.scaleInAt)))
}

// OnShutdown fails every caller still held.
func (s *scheduler) OnShutdown(ev sdk.ShutdownEvent) {
	msg := "loadout is shutting down"
	if ev.Reason != "" {
		msg += ": " + ev.Reason
	}
	targets := make([]string, 0, len(s.active))
	for t := range s.active {
		targets = append(targets, t)
	}
	slices.Sort(targets)
	for _, t := range targets {
		for _, w := range s.active[t].waiters {
			s.fx.GrantError(w.id, sdk.CodeUnavailable, msg)
		}
		delete(s.active, t)
	}
	for _, r := range s.queue {
		s.fx.GrantError(r.id, sdk.CodeUnavailable, msg)
	}
	s.queue = nil
}

// tooLarge reports whether model needs more GPU memory than every GPU of
// the box holds together (its VRAM figure against the GPUs' totals), with
// both in bytes: no eviction can ever make room for it.
func (s *scheduler) tooLarge(model string) (need, total uint64, ok bool) {
	info, found := s.fx.ModelState(model)
	if !found || info.EstimatedVRAM == 0 {
		return 0, 0, false
	}
	snap := s.fx.Snapshot()
	for _, g := range snap.GPUs {
		total += g.Total
	}
	return info.EstimatedVRAM, total, len(snap.GPUs) > 0 && info.EstimatedVRAM > total
}
