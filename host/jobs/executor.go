package jobs

import (
	"context"
	"errors"
	"fmt"
)

// Executor statuses: Ray's job statuses (Ray Jobs REST API), which the
// local executor uses too.
const (
	StatusPending   = "PENDING"
	StatusRunning   = "RUNNING"
	StatusStopped   = "STOPPED"
	StatusSucceeded = "SUCCEEDED"
	StatusFailed    = "FAILED"
)

// Executor runs attempts somewhere: local processes or a Ray cluster. The
// runner calls it from one goroutine.
type Executor interface {
	// Capacity returns, per node, how many GPUs a job of spec could use
	// at all (Total: to refuse a gang that can never fit) and now (Free:
	// gang admission). It is called on the submit and admission paths and
	// must answer at once, from memory: a remote executor reads its
	// cluster in the background (RayExecutor). Errors: the executor cannot
	// be reached, or its capacity is not known (ErrCapacityUnknown): the
	// task waits, never refused, and the API shows the error.
	Capacity(ctx context.Context, spec Spec) (Capacity, error)
	// Start submits attempt a of t. It may set a.Handle, a.Devices and
	// a.Status. Errors: *StartError says how the runner treats it.
	Start(ctx context.Context, t *Task, a *Attempt) error
	// Poll returns the attempt's status. Found is false when the executor
	// has never heard of it (a submission lost in a crash).
	Poll(ctx context.Context, t *Task, a *Attempt) (Status, error)
	// Stop asks the attempt to stop; Poll later says STOPPED.
	Stop(ctx context.Context, t *Task, a *Attempt) error
	// Logs returns at most limit bytes of the attempt's output so far,
	// from byte from of the whole output (negative: its last limit
	// bytes); it need not set the chunk's SubmissionID. Errors: ErrNoLogs
	// (wrapped) when it has no output of the attempt.
	Logs(ctx context.Context, t *Task, a *Attempt, from, limit int64) (LogChunk, error)
	// Resume takes back what an attempt holds: after a restart, for a
	// running attempt (the local executor's GPU leases); and for a remote
	// executor's attempt at its admission, before its submission answers
	// (Ray's gang, counted against the cluster's capacity at once).
	Resume(t *Task, a *Attempt) error
	// Finish releases what a finished attempt held.
	Finish(t *Task, a *Attempt)
}

// Capacity is GPUs per node, one entry per node.
type Capacity struct {
	Total []int
	Free  []int
	// Why, when not empty, says what keeps Free short beyond the GPUs in
	// use (the local executor: why idle models cannot be evicted for the
	// job); a waiting task's error shows it.
	Why string
	// Held, for a job that does not fit now, names what holds the GPUs
	// it waits for, device by device: "GPU 0: model a (pinned); GPU 1:
	// job train-20260101-120000-ab12". A waiting task's error shows it.
	Held string
	// Stuck, when not empty, says why the job cannot be placed at all
	// while models that never leave on their own hold GPUs (pinned ones;
	// persistent ones without a TTL, for a job that may not evict idle
	// models): Submit warns with it.
	Stuck string
}

// fits reports whether nnodes nodes of nodes each have at least gpus.
func fits(nodes []int, nnodes, gpus int) bool {
	if gpus == 0 {
		return true
	}
	n := 0
	for _, g := range nodes {
		if g >= gpus {
			n++
		}
	}
	return n >= nnodes
}

// Status is an attempt's status as its executor reports it.
type Status struct {
	Found bool
	// Status is one of the Status* words.
	Status string
	// Message is the executor's message (Ray's message; the local exit
	// status).
	Message string
	// ErrorType is Ray's error_type (e.g. JOB_SUPERVISOR_ACTOR_START_TIMEOUT).
	ErrorType string
	// LogTail is the end of the job's output, for classifying a failure.
	LogTail string
}

// StartError is a failed Start: Kind says whether the runner retries
// (FailureInsufficientResources: back to PENDING_RESOURCES; Unreachable
// too) or fails the task.
type StartError struct {
	Kind FailureKind
	// Unreachable: the executor could not be reached; the attempt is
	// dropped and the task waits, saying why.
	Unreachable bool
	// NotReady: the executor was reached but answered that it cannot take
	// a submission now (Ray's dashboard answers HTTP 5xx, e.g. "No
	// available agent to submit job, please try again later" while its job
	// agent starts). Like Unreachable, the attempt is recorded and the
	// task waits and retries after a backoff: not a failure of the job.
	NotReady bool
	// Ambiguous: the submission was sent but its answer never came (no
	// answer in time, a connection reset while waiting for it), so the
	// executor may have taken it. The runner then submits no new attempt:
	// it keeps the task SUBMITTING and looks this attempt's submission id
	// up at the next status sync (Poll), adopting it when found and
	// submitting it again, under the same id, when not.
	Ambiguous bool
	Err       error
}

func (e *StartError) Error() string { return e.Err.Error() }
func (e *StartError) Unwrap() error { return e.Err }

// startFailure reads err as a StartError (a plain error is a
// RUNTIME_ERROR).
func startFailure(err error) *StartError {
	var se *StartError
	if errors.As(err, &se) {
		return se
	}
	return &StartError{Kind: FailureRuntimeError, Err: err}
}

// RefusedError is Submit's error for a task that can never run: more GPUs
// than the cluster or box has. The HTTP API answers 422.
type RefusedError struct{ Msg string }

func (e *RefusedError) Error() string { return "job refused: " + e.Msg }

func refuseIfNeverFits(spec Spec, c Capacity) error {
	if fits(c.Total, spec.NNodes, spec.GPUsPerNode) {
		return nil
	}
	return &RefusedError{fmt.Sprintf("it needs %d node(s) with %d GPU(s) each, but the %s executor's nodes have %v GPUs in all: it could never run",
		spec.NNodes, spec.GPUsPerNode, spec.Executor, c.Total)}
}
