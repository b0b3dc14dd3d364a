package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Config builds a Runner.
type Config struct {
	Store *Store
	// Executors by name ("local", "ray"). A spec naming one not here is
	// refused.
	Executors map[string]Executor
	// MaxRunning bounds the tasks with an attempt (SUBMITTING, SUBMITTED,
	// RUNNING) at once; 0 means 64.
	MaxRunning int
	// PollInterval is how often submitted attempts are polled (Ray's
	// status sync); default 2 s. The local executor also wakes the runner
	// when a job's process exits and when any lease in its GPU ledger
	// ends, so a queued job starts when its GPUs free, not at the next
	// poll.
	PollInterval time.Duration
	// RetryBackoff is the wait before an attempt that lacked resources is
	// retried; it doubles with each attempt up to MaxBackoff. Defaults
	// 5 s and 5 min.
	RetryBackoff, MaxBackoff time.Duration
	Logger                   *slog.Logger
	// OnTransition, when set, is called after every change of a task's
	// state is committed (QUEUED on submit included), from the runner's
	// goroutine or a Submit caller's: it must be safe for concurrent use
	// and must not block.
	OnTransition func(Transition)
}

// Transition is one committed change of a task's state, as
// Config.OnTransition receives it.
type Transition struct {
	TaskID   string `json:"id"`
	Workload string `json:"workload"`
	From     State  `json:"from,omitempty"` // empty on submit
	State    State  `json:"state"`
	// Attempt is the number of the task's latest attempt (0: none yet).
	Attempt int `json:"attempt"`
}

// Runner owns the queue: it admits waiting tasks whose gang fits, submits
// them, polls their attempts and retries the ones that lacked resources.
// All state changes but Submit's insert happen on its one goroutine (Run);
// the store is the only state.
type Runner struct {
	cfg     Config
	store   *Store
	log     *slog.Logger
	wake    chan struct{}
	cancels chan cancelReq
	// results carries what a remote executor's call, made on a goroutine
	// of its own, ended with, to be applied on Run's goroutine.
	results chan func(context.Context)
	// inflight: tasks with a remote call under way, "start" or "poll"
	// (Run's goroutine only).
	inflight map[string]string
	calls    sync.WaitGroup // remote calls and background loops under way
	// lastWriteErr is the last failed transition's error, logged once
	// (Run's goroutine only).
	lastWriteErr string

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change
	resumed chan struct{} // closed once Run has resumed the active attempts
}

type cancelReq struct {
	id   string
	done chan error
}

// NewRunner checks cfg and returns a runner; call Run.
func NewRunner(cfg Config) (*Runner, error) {
	if cfg.Store == nil || len(cfg.Executors) == 0 {
		return nil, errors.New("jobs: a store and at least one executor are required")
	}
	if cfg.MaxRunning <= 0 {
		cfg.MaxRunning = 64
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 2 * time.Second
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = 5 * time.Second
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 5 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Runner{cfg: cfg, store: cfg.Store, log: cfg.Logger, wake: make(chan struct{}, 1),
		cancels: make(chan cancelReq), changed: make(chan struct{}), resumed: make(chan struct{}),
		results: make(chan func(context.Context)), inflight: map[string]string{}}, nil
}

// Store returns the runner's store, for reads.
func (r *Runner) Store() *Store { return r.store }

// Wake makes the runner look at the queue and poll at once. It never
// blocks; executors call it when something they run ends.
func (r *Runner) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *Runner) notify() {
	r.mu.Lock()
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// Wait blocks until task id is in one of states, and returns it. Errors:
// ErrNotFound, ctx.Err() (with the state it was last in).
func (r *Runner) Wait(ctx context.Context, id string, states ...State) (*Task, error) {
	for {
		r.mu.Lock()
		ch := r.changed
		r.mu.Unlock()
		t, err := r.store.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		for _, s := range states {
			if t.State == s {
				return t, nil
			}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return t, fmt.Errorf("task %s is %s (%s): %w", id, t.State, t.Error, ctx.Err())
		}
	}
}

// newID makes a task id: <workload>-<yyyymmdd>-<hhmmss>-<4 hex> (UTC).
func newID(workload string, now time.Time) string {
	var b [2]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%s-%s", workload, now.UTC().Format("20060102-150405"), hex.EncodeToString(b[:]))
}

// Submit parses raw (YAML or JSON), refuses a task that can never fit and
// queues it. It makes no call to a remote executor (Ray's capacity is read
// in the background), so it answers at once whatever the cluster does.
// Errors: *FieldError (a bad field, an executor not configured),
// *RefusedError (more GPUs than the executor has); an executor that cannot
// be reached, or whose capacity is not known (ErrCapacityUnknown: a Ray
// cluster with no node reporting), does not refuse: the task waits and its
// Error says why.
func (r *Runner) Submit(ctx context.Context, raw []byte) (*Task, error) {
	spec, err := ParseSpec(raw)
	if err != nil {
		return nil, err
	}
	ex, ok := r.cfg.Executors[spec.Executor]
	if !ok {
		return nil, &FieldError{Field: "executor", Msg: fmt.Sprintf("%q is not configured on this Loadout", spec.Executor)}
	}
	t := &Task{Spec: spec, SpecRaw: string(raw), State: StateQueued}
	capacity, err := ex.Capacity(ctx, spec)
	var warnings []string
	if err != nil {
		t.Error = waitingFor(spec.Executor, err)
	} else if err := refuseIfNeverFits(spec, capacity); err != nil {
		return nil, err
	} else if capacity.Stuck != "" {
		warnings = append(warnings, "the job cannot be placed now: "+capacity.Stuck)
	}
	for range 5 { // an id collides only within the same second
		t.ID = newID(spec.Workload, time.Now())
		if err = r.store.Insert(ctx, t); err == nil {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	r.log.Info("job submitted", "task", t.ID, "executor", spec.Executor, "gpus", t.GPUs())
	for _, w := range warnings {
		r.log.Warn("job submitted but unplaceable while pinned or persistent models hold the GPUs", "task", t.ID, "why", w)
	}
	r.published(Transition{TaskID: t.ID, Workload: spec.Workload, State: StateQueued})
	r.notify()
	r.Wake()
	got, err := r.store.Get(ctx, t.ID)
	if got != nil {
		got.Warnings = warnings
	}
	return got, err
}

// Cancel cancels task id: a waiting task at once; a submitted one is
// stopped and becomes CANCELED when its executor says it stopped. Errors:
// ErrNotFound, ErrConflict for a finished task, ctx.Err().
func (r *Runner) Cancel(ctx context.Context, id string) error {
	req := cancelReq{id: id, done: make(chan error, 1)}
	select {
	case r.cancels <- req:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Logs returns the end of the latest attempt's output: its last
// MaxLogChunk bytes (LogsFrom). Errors: as LogsFrom's.
func (r *Runner) Logs(ctx context.Context, id string) (string, error) {
	c, err := r.LogsFrom(ctx, id, "", -1)
	return c.Text, err
}

// MaxLogChunk is the most bytes of output one LogsFrom answer holds.
const MaxLogChunk = 4 << 20

// ErrNoLogs: the attempt has no output to show (the task was never
// submitted, or its executor has no log of the attempt).
var ErrNoLogs = errors.New("no logs")

// LogChunk is a part of an attempt's output.
type LogChunk struct {
	// SubmissionID names the attempt.
	SubmissionID string
	// Text is the output's bytes [Start, Start+len(Text)).
	Text string
	// Start is the offset of Text's first byte in the output: the
	// number of bytes left out before it.
	Start int64
	// Size is the whole output's size so far; Size - Start - len(Text)
	// bytes are left out after Text.
	Size int64
}

// LogsFrom returns at most MaxLogChunk bytes of the output of task id's
// attempt submissionID ("": the latest), from byte from of the whole
// output (negative: its last MaxLogChunk bytes). Offsets are into the
// whole output, so a reader that follows it asks from where it stopped.
// Errors: ErrNotFound (no such task or attempt), ErrNoLogs (wrapped; no
// attempt yet, or no output of it), the executor's (Ray's dashboard
// unreachable: *RayUnreachableError).
func (r *Runner) LogsFrom(ctx context.Context, id, submissionID string, from int64) (LogChunk, error) {
	t, err := r.store.Get(ctx, id)
	if err != nil {
		return LogChunk{}, err
	}
	a := t.LatestAttempt
	if a == nil {
		return LogChunk{}, fmt.Errorf("task %s has not been submitted yet (%s): %w", id, t.State, ErrNoLogs)
	}
	if submissionID != "" && submissionID != a.SubmissionID {
		as, err := r.store.Attempts(ctx, id)
		if err != nil {
			return LogChunk{}, err
		}
		i := slices.IndexFunc(as, func(a *Attempt) bool { return a.SubmissionID == submissionID })
		if i < 0 {
			return LogChunk{}, fmt.Errorf("task %s has no attempt %s: %w", id, submissionID, ErrNotFound)
		}
		a = as[i]
	}
	ex, ok := r.cfg.Executors[t.Executor]
	if !ok {
		return LogChunk{}, fmt.Errorf("task %s: executor %q is not configured", id, t.Executor)
	}
	c, err := ex.Logs(ctx, t, a, from, MaxLogChunk)
	c.SubmissionID = a.SubmissionID
	return c, err
}

// chunk cuts out of text, the whole output so far, what LogsFrom asks:
// limit bytes from from (negative: the last limit bytes).
func chunk(text string, from, limit int64) LogChunk {
	size := int64(len(text))
	start := from
	if from < 0 {
		start = max(size-limit, 0)
	}
	start = min(start, size)
	end := min(start+limit, size)
	return LogChunk{Text: text[start:end], Start: start, Size: size}
}

// Resumed is closed once Run has taken back what the attempts of a
// previous run hold (their GPU leases): before it, a model may be placed on
// a running job's devices.
func (r *Runner) Resumed() <-chan struct{} { return r.resumed }

// Run resumes the attempts a previous run left (a restart, kill -9
// included) and then drives the queue until ctx ends.
//
// A remote executor's (Ray's) background loop runs on a goroutine of its
// own, and its Start, Poll and Stop calls are made on goroutines of their
// own, their results applied here: a cluster that hangs delays no other
// executor's task. Run returns once those goroutines have ended.
func (r *Runner) Run(ctx context.Context) error {
	defer r.calls.Wait()
	for _, ex := range r.cfg.Executors {
		if w, ok := ex.(watcher); ok {
			w.watch(r.Wake)
		}
		if rem, ok := ex.(remote); ok {
			r.calls.Go(func() { rem.background(ctx, r.Wake) })
		}
	}
	if err := r.resume(ctx); err != nil {
		return err
	}
	close(r.resumed)
	tick := time.NewTicker(r.cfg.PollInterval)
	defer tick.Stop()
	pollRemote := true
	for {
		r.step(ctx, pollRemote)
		pollRemote = false
		select {
		case <-ctx.Done():
			return nil
		case <-r.wake:
		case <-tick.C:
			pollRemote = true
		case f := <-r.results:
			f(ctx)
		case req := <-r.cancels:
			req.done <- r.cancel(ctx, req.id)
		}
	}
}

// remote is an Executor whose calls go over the network and may hang (a
// Ray dashboard): the runner calls its Start, Poll and Stop on goroutines
// of their own, polls it only at the status sync, and runs its background
// loop (capacity readings) beside Run.
type remote interface {
	// background runs until ctx ends, calling wake (it never blocks)
	// whenever a waiting task may now fit.
	background(ctx context.Context, wake func())
}

// isRemote reports whether ex is a remote executor.
func isRemote(ex Executor) bool {
	_, ok := ex.(remote)
	return ok
}

// goRemote makes call (of kind "start" or "poll") for task id on a
// goroutine of its own and has its result, apply, run on Run's goroutine;
// no other remote call for id is made meanwhile.
func (r *Runner) goRemote(ctx context.Context, id, kind string, call func() func(context.Context)) {
	r.inflight[id] = kind
	r.calls.Go(func() {
		apply := call()
		select {
		case r.results <- func(ctx context.Context) { delete(r.inflight, id); apply(ctx) }:
		case <-ctx.Done():
		}
	})
}

// waitingFor is a waiting task's error when its executor's capacity could
// not be had: "<executor> executor: <why>".
func waitingFor(executor string, err error) string {
	return fmt.Sprintf("%s executor: %v", executor, err)
}

// watcher is an Executor that can tell, beside its attempts' ends, when
// the queue is worth a look: the local executor, when GPUs are released.
type watcher interface {
	// watch has wake called (from any goroutine; it never blocks)
	// whenever a waiting task may now fit.
	watch(wake func())
}

// resume takes back what active attempts hold (local GPU leases), so no
// model is placed on a running job's devices.
func (r *Runner) resume(ctx context.Context) error {
	active, err := r.store.List(ctx, StateSubmitting, StateSubmitted, StateRunning)
	if err != nil {
		return err
	}
	for _, t := range active {
		if t.LatestAttempt == nil {
			continue
		}
		ex := r.cfg.Executors[t.Executor]
		if ex == nil {
			continue
		}
		if err := ex.Resume(t, t.LatestAttempt); err != nil {
			r.log.Warn("job resumed without its GPU lease", "task", t.ID, "err", err)
		}
		r.log.Info("job tracking resumed", "task", t.ID, "state", t.State, "submission_id", t.LatestAttempt.SubmissionID)
		if t.CancelRequested && !isRemote(ex) {
			// A cancel saved before the restart is carried out again:
			// the stop (SIGTERM, then SIGKILL after the grace) of the
			// run that took it ended with that run. A remote
			// executor's attempt is stopped again at its status sync
			// (step).
			if err := ex.Stop(ctx, t, t.LatestAttempt); err != nil {
				r.log.Warn("job stop failed", "task", t.ID, "submission_id", t.LatestAttempt.SubmissionID, "err", err)
			} else {
				r.log.Info("job cancel resumed: stopping it", "task", t.ID, "submission_id", t.LatestAttempt.SubmissionID)
			}
		}
	}
	return nil
}

func (r *Runner) transition(ctx context.Context, t *Task, to State, c Change) bool {
	if err := r.store.Transition(ctx, t.ID, t.State, to, c); err != nil {
		if ctx.Err() != nil {
			return false
		}
		if msg := err.Error(); msg != r.lastWriteErr { // once, not at every step
			r.lastWriteErr = msg
			r.log.Error("job transition failed", "task", t.ID, "from", t.State, "to", to, "err", err)
		}
		// A change that could not be written still shows on the task
		// (the store keeps it): let those who wait look again.
		r.notify()
		return false
	}
	if from := t.State; from != to {
		r.log.Info("job", "task", t.ID, "from", from, "to", to, "msg", c.Message)
		n := t.Attempts
		if c.Attempt != nil {
			n = max(n, c.Attempt.No)
		}
		r.published(Transition{TaskID: t.ID, Workload: t.Workload, From: from, State: to, Attempt: n})
	}
	t.State = to
	r.notify()
	return true
}

// published hands tr to Config.OnTransition, if set.
func (r *Runner) published(tr Transition) {
	if r.cfg.OnTransition != nil {
		r.cfg.OnTransition(tr)
	}
}

func strp(s string) *string { return &s }

// step polls every active attempt (a remote executor's only when
// pollRemote: at the status sync), then admits what fits.
func (r *Runner) step(ctx context.Context, pollRemote bool) {
	active, err := r.store.List(ctx, StateSubmitting, StateSubmitted, StateRunning)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Error("jobs: reading the queue", "err", err)
		}
		return
	}
	for _, t := range active {
		ex := r.cfg.Executors[t.Executor]
		if ex == nil || t.LatestAttempt == nil || r.inflight[t.ID] != "" {
			continue
		}
		if !isRemote(ex) {
			st, err := ex.Poll(ctx, t, t.LatestAttempt)
			r.sync(ctx, t, st, err)
			continue
		}
		if pollRemote {
			r.goRemote(ctx, t.ID, "poll", func() func(context.Context) {
				st, err := ex.Poll(ctx, t, t.LatestAttempt)
				var stopErr error
				if err == nil && st.Found && t.CancelRequested && (st.Status == StatusPending || st.Status == StatusRunning) {
					// A cancel is pending and the attempt still runs:
					// its stop failed or has not taken yet. Stop it
					// again, at every status sync until it has.
					stopErr = ex.Stop(ctx, t, t.LatestAttempt)
				}
				return func(ctx context.Context) {
					// The task may have moved meanwhile: apply the
					// status to it as it is now, if it is the same
					// attempt.
					now, gerr := r.store.Get(ctx, t.ID)
					if gerr != nil || !now.State.active() || now.LatestAttempt == nil ||
						now.LatestAttempt.SubmissionID != t.LatestAttempt.SubmissionID {
						return
					}
					r.sync(ctx, now, st, err)
					if stopErr != nil && now.State.active() {
						r.stopFailed(ctx, now, now.LatestAttempt, stopErr)
					}
				}
			})
		}
	}
	r.admit(ctx)
}

// sync moves t as the status of its latest attempt, st (or the error of
// polling it), says.
func (r *Runner) sync(ctx context.Context, t *Task, st Status, err error) {
	ex, a := r.cfg.Executors[t.Executor], t.LatestAttempt
	if ex == nil || a == nil {
		return
	}
	if err != nil {
		msg := fmt.Sprintf("%s executor unreachable: %v", t.Executor, err)
		if t.Error != msg {
			r.transition(ctx, t, t.State, Change{Error: &msg, Kind: "status", Message: msg})
		}
		return
	}
	if !st.Found {
		if t.State == StateSubmitting && t.CancelRequested {
			// Cancelled before the executor took it (a submission lost
			// in a crash, or one that got no answer): nothing to stop.
			a.Status, a.Message, a.EndedAt = StatusStopped, "never submitted: canceled", time.Now().UTC()
			ex.Finish(t, a)
			r.transition(ctx, t, StateCanceled, Change{Attempt: a, Error: strp("canceled"), Kind: "cancel",
				Message: "canceled before " + a.SubmissionID + " was submitted"})
			return
		}
		if t.State == StateSubmitting {
			// Lost between the write and the submission, or a
			// submission that got no answer and that the executor has
			// not taken: submit it again, under the same submission
			// id, so that a submission the executor takes late is
			// found, never run twice.
			r.start(ctx, t, ex, a)
			return
		}
		st = Status{Found: true, Status: StatusFailed, Message: "the executor has no record of " + a.SubmissionID + " (lost)"}
	}
	now := time.Now().UTC()
	if st.Status == a.Status && st.Message == a.Message && t.State != StateSubmitting {
		return
	}
	a.Status, a.Message = st.Status, st.Message
	switch st.Status {
	case StatusPending:
		r.transition(ctx, t, StateSubmitted, Change{Attempt: a, Kind: "status", Message: st.Status, Error: strp("")})
	case StatusRunning:
		r.transition(ctx, t, StateRunning, Change{Attempt: a, Message: "status " + st.Status, Error: strp("")})
	case StatusSucceeded:
		a.EndedAt = now
		ex.Finish(t, a)
		r.transition(ctx, t, StateSucceeded, Change{Attempt: a, Message: st.Message, Error: strp("")})
	case StatusStopped, StatusFailed:
		a.EndedAt = now
		ex.Finish(t, a)
		if t.CancelRequested {
			r.transition(ctx, t, StateCanceled, Change{Attempt: a, Message: "stopped on request", Error: strp("canceled")})
			return
		}
		a.FailureKind = Classify(st)
		if st.Status == StatusStopped && a.FailureKind == FailureUserError {
			a.FailureKind = FailureUnknown // stopped, not by us
		}
		if a.FailureKind == FailureInsufficientResources {
			r.retry(ctx, t, a, "lacked resources ("+st.Message+")")
			return
		}
		msg := fmt.Sprintf("%s: %s (%s)", a.SubmissionID, st.Message, a.FailureKind)
		r.transition(ctx, t, StateFailed, Change{Attempt: a, Message: msg, Error: &msg})
	}
}

// retry sends t back to PENDING_RESOURCES after a backoff that doubles
// with each attempt; why completes "attempt N …" (e.g. "lacked resources
// (…)").
func (r *Runner) retry(ctx context.Context, t *Task, a *Attempt, why string) {
	backoff := r.cfg.RetryBackoff
	for i := 1; i < a.No && backoff < r.cfg.MaxBackoff; i++ {
		backoff *= 2
	}
	backoff = min(backoff, r.cfg.MaxBackoff)
	next := time.Now().UTC().Add(backoff)
	msg := fmt.Sprintf("attempt %d %s; retrying after %s", a.No, why, backoff)
	r.transition(ctx, t, StatePendingResources, Change{Attempt: a, NextRunAt: &next, Error: &msg, Kind: "retry", Message: msg})
}

// admitPage is how many waiting tasks admit reads at a time.
var admitPage = 64

// admit submits waiting tasks in queue order while their gang fits. The
// first task of an executor that does not fit holds back the ones behind
// it that need GPUs (no small job overtakes a big one forever); a task
// that needs no GPU competes with none and is never held back (issue 25).
// It reads the queue a page at a time and stops once every executor is
// held back, or the most tasks run: a long queue behind a job that waits
// costs one page, and then only the pages of the tasks that need no GPU
// (Store.listNoGPU).
func (r *Runner) admit(ctx context.Context) {
	active, err := r.store.List(ctx, StateSubmitting, StateSubmitted, StateRunning)
	if err != nil {
		return
	}
	running := len(active)
	now := time.Now()
	blocked := map[string]bool{}
	var soonest time.Time
	defer func() {
		if !soonest.IsZero() {
			time.AfterFunc(time.Until(soonest), r.Wake)
		}
	}()
	// consider admits t if it may start now and its gang fits; it
	// reports false once the most tasks run.
	consider := func(t *Task) bool {
		if running >= r.cfg.MaxRunning {
			return false
		}
		if t.NextRunAt.After(now) {
			if soonest.IsZero() || t.NextRunAt.Before(soonest) {
				soonest = t.NextRunAt
			}
			return true
		}
		ex := r.cfg.Executors[t.Executor]
		if ex == nil || blocked[t.Executor] && t.GPUs() > 0 {
			return true
		}
		capacity, err := ex.Capacity(ctx, t.Spec)
		if err != nil {
			r.wait(ctx, t, waitingFor(t.Executor, err))
			blocked[t.Executor] = true
			return true
		}
		if err := refuseIfNeverFits(t.Spec, capacity); err != nil {
			// Queued while the capacity was not known (a Ray cluster
			// with no node yet); now it is, and the gang can never fit.
			msg := err.Error()
			r.transition(ctx, t, StateFailed, Change{Error: &msg, Message: msg})
			return true
		}
		if !fits(capacity.Free, t.Spec.NNodes, t.Spec.GPUsPerNode) {
			why := fmt.Sprintf("waiting for %d node(s) × %d GPU(s); free GPUs per node: %v", t.Spec.NNodes, t.Spec.GPUsPerNode, capacity.Free)
			if capacity.Why != "" {
				why += "; " + capacity.Why
			}
			if capacity.Held != "" {
				why += "; held by " + capacity.Held
			}
			r.wait(ctx, t, why)
			blocked[t.Executor] = true
			return true
		}
		a := &Attempt{TaskID: t.ID, No: t.Attempts + 1}
		a.SubmissionID = fmt.Sprintf("%s--a%02d", t.ID, a.No)
		// Submitting, it waits for nothing: its reason to wait (or a
		// retry's) goes.
		if !r.transition(ctx, t, StateSubmitting, Change{Attempt: a, Message: "submitting " + a.SubmissionID, Error: strp("")}) {
			return true
		}
		running++
		r.start(ctx, t, ex, a)
		return true
	}
	list := r.store.ListAfter
	var after *Task
	for {
		if len(blocked) >= len(r.cfg.Executors) {
			// Every executor holds back its GPU tasks: read on only
			// for the tasks that need no GPU.
			list = r.store.listNoGPU
		}
		waiting, err := list(ctx, after, admitPage, StateQueued, StatePendingResources)
		if err != nil {
			return
		}
		for i, t := range waiting {
			if !consider(t) {
				// The most tasks run: the waiting tasks of this page
				// say so (those further on are not read: a long queue
				// costs one page).
				why := fmt.Sprintf("waiting for a slot: %d task(s) have an attempt, the most at once (max running jobs %d: loadout serve --max-running-jobs)", running, r.cfg.MaxRunning)
				for _, t := range waiting[i:] {
					if !t.NextRunAt.After(now) {
						r.wait(ctx, t, why)
					}
				}
				return
			}
		}
		if len(waiting) < admitPage {
			return
		}
		after = waiting[len(waiting)-1]
	}
}

// wait keeps t waiting in PENDING_RESOURCES, saying why.
func (r *Runner) wait(ctx context.Context, t *Task, why string) {
	if t.State == StatePendingResources && t.Error == why {
		return
	}
	r.transition(ctx, t, StatePendingResources, Change{Error: &why, Message: why, Kind: "transition"})
}

// start submits attempt a of t (in SUBMITTING) to ex: at once, or, for a
// remote executor, on a goroutine of its own whose result is applied on
// Run's goroutine.
func (r *Runner) start(ctx context.Context, t *Task, ex Executor, a *Attempt) {
	a.StartedAt = time.Now().UTC()
	if !isRemote(ex) {
		r.started(ctx, t, ex, a, ex.Start(ctx, t, a))
		return
	}
	// The gang counts as taken from its admission on, not from the end of
	// its submission: the next task admitted in the same pass (before the
	// submission answers) must see it (Resume is that reservation; Finish
	// gives it back when the submission fails).
	if err := ex.Resume(t, a); err != nil {
		r.started(ctx, t, ex, a, err)
		return
	}
	r.goRemote(ctx, t.ID, "start", func() func(context.Context) {
		err := ex.Start(ctx, t, a)
		if err != nil && !startFailure(err).Ambiguous {
			ex.Finish(t, a)
		}
		return func(ctx context.Context) {
			now, gerr := r.store.Get(ctx, t.ID)
			if gerr != nil {
				r.log.Error("job submitted but not found again", "task", t.ID, "submission_id", a.SubmissionID, "err", gerr)
				return
			}
			r.started(ctx, now, ex, a, err)
			if err == nil && now.CancelRequested {
				// Cancelled while it was being submitted: stop it now.
				r.stop(ctx, now, ex, a)
			}
		}
	})
}

// started records how Start of attempt a of t (in SUBMITTING) ended.
func (r *Runner) started(ctx context.Context, t *Task, ex Executor, a *Attempt, err error) {
	if err == nil {
		if a.Status == "" {
			a.Status = StatusPending
		}
		to := StateSubmitted
		if a.Status == StatusRunning {
			to = StateRunning
		}
		r.transition(ctx, t, to, Change{Attempt: a, Kind: "transition", Message: "submitted as " + a.SubmissionID})
		return
	}
	se := startFailure(err)
	if se.Ambiguous {
		// The executor may have taken it: no new attempt. The task stays
		// SUBMITTING and its status sync looks this attempt up (sync):
		// found, it is adopted; not found, it is submitted again under
		// the same submission id; cancelled meanwhile, it is stopped.
		a.Message = "submit: " + err.Error()
		msg := fmt.Sprintf("the submission of %s got no answer (%v): it may have been taken; it is looked up before anything is submitted again", a.SubmissionID, err)
		r.transition(ctx, t, StateSubmitting, Change{Attempt: a, Error: &msg, Kind: "status", Message: msg})
		return
	}
	a.Status, a.Message, a.EndedAt = StatusFailed, "submit: "+err.Error(), time.Now().UTC()
	if t.CancelRequested {
		// Cancelled while it was being submitted, and the executor did
		// not take it: canceled, with no new attempt.
		a.FailureKind = se.Kind
		if se.Unreachable || se.NotReady {
			a.FailureKind = FailureUnknown
		}
		r.transition(ctx, t, StateCanceled, Change{Attempt: a, Error: strp("canceled"), Kind: "cancel",
			Message: "canceled while it was being submitted; " + a.SubmissionID + " was not taken: " + err.Error()})
		return
	}
	switch {
	case se.Unreachable:
		a.FailureKind = FailureUnknown
		r.retry(ctx, t, a, fmt.Sprintf("could not be submitted (%s executor unreachable: %v)", t.Executor, err))
	case se.NotReady:
		a.FailureKind = FailureUnknown
		r.retry(ctx, t, a, fmt.Sprintf("could not be submitted (%s executor cannot take it now: %v)", t.Executor, err))
	case se.Kind == FailureInsufficientResources:
		a.FailureKind = FailureInsufficientResources
		r.retry(ctx, t, a, "lacked resources ("+err.Error()+")")
	default:
		a.FailureKind = se.Kind
		msg := fmt.Sprintf("%s: %s (%s)", a.SubmissionID, a.Message, a.FailureKind)
		r.transition(ctx, t, StateFailed, Change{Attempt: a, Error: &msg, Message: msg})
	}
}

// cancel runs on the runner's goroutine.
func (r *Runner) cancel(ctx context.Context, id string) error {
	t, err := r.store.Get(ctx, id)
	if err != nil {
		return err
	}
	switch {
	case t.State.Terminal():
		return fmt.Errorf("task %s is already %s: %w", id, t.State, ErrConflict)
	case t.State.waiting():
		if !r.transition(ctx, t, StateCanceled, Change{Error: strp("canceled"), Kind: "cancel", Message: "canceled while waiting"}) {
			return fmt.Errorf("task %s: %w", id, ErrConflict)
		}
		return nil
	}
	ex := r.cfg.Executors[t.Executor]
	if !r.transition(ctx, t, t.State, Change{CancelRequested: ptrTrue(), Kind: "cancel", Message: "cancel requested; stopping " + t.LatestAttempt.SubmissionID}) {
		return fmt.Errorf("task %s: %w", id, ErrConflict)
	}
	t.CancelRequested = true
	if ex == nil {
		return nil
	}
	if !isRemote(ex) {
		if err := ex.Stop(ctx, t, t.LatestAttempt); err != nil {
			return err
		}
		r.Wake()
		return nil
	}
	// A task in SUBMITTING is stopped once its submission answers
	// (start), or, when the answer never came, once its status sync has
	// found it; one found running is stopped at every status sync until it
	// stops (step), so a stop that fails now is asked again.
	if t.State != StateSubmitting {
		r.stop(ctx, t, ex, t.LatestAttempt)
	}
	return nil
}

// stop asks a remote executor to stop attempt a of t on a goroutine of
// its own; a failure is recorded on t (stopFailed), and the next status
// sync that sees the attempt still run asks again (step).
func (r *Runner) stop(ctx context.Context, t *Task, ex Executor, a *Attempt) {
	r.calls.Go(func() {
		if err := ex.Stop(ctx, t, a); err != nil && ctx.Err() == nil {
			select {
			case r.results <- func(ctx context.Context) {
				if now, gerr := r.store.Get(ctx, t.ID); gerr == nil && now.State.active() {
					r.stopFailed(ctx, now, a, err)
				}
			}:
			case <-ctx.Done():
			}
		}
	})
}

// stopFailed records on t that stopping its attempt a failed: its error
// says so (an event and a log line when the failure is new, not at every
// try), until the attempt stops.
func (r *Runner) stopFailed(ctx context.Context, t *Task, a *Attempt, err error) {
	msg := fmt.Sprintf("cancel requested; stopping %s failed: %v; asked again at every status sync", a.SubmissionID, err)
	if t.Error == msg {
		return
	}
	r.log.Warn("job stop failed", "task", t.ID, "submission_id", a.SubmissionID, "err", err)
	r.transition(ctx, t, t.State, Change{Error: &msg, Kind: "cancel", Message: msg})
}

func ptrTrue() *bool { b := true; return &b }
