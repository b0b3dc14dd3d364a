package jobs

import "time"

// State is a task's place in the state machine (see the package comment).
type State string

// The task states, in order.
const (
	StateQueued           State = "QUEUED"
	StatePendingResources State = "PENDING_RESOURCES"
	StateSubmitting       State = "SUBMITTING"
	StateSubmitted        State = "SUBMITTED"
	StateRunning          State = "RUNNING"
	StateSucceeded        State = "SUCCEEDED"
	StateFailed           State = "FAILED"
	StateCanceled         State = "CANCELED"
)

// States lists every state in state-machine order.
var States = []State{StateQueued, StatePendingResources, StateSubmitting, StateSubmitted,
	StateRunning, StateSucceeded, StateFailed, StateCanceled}

// Terminal reports whether s is final: SUCCEEDED, FAILED or CANCELED.
func (s State) Terminal() bool {
	return s == StateSucceeded || s == StateFailed || s == StateCanceled
}

// waiting reports whether a task in s waits for admission.
func (s State) waiting() bool { return s == StateQueued || s == StatePendingResources }

// active reports whether a task in s has an attempt an executor may run.
func (s State) active() bool {
	return s == StateSubmitting || s == StateSubmitted || s == StateRunning
}

// FailureKind classifies why an attempt failed (classify.go).
type FailureKind string

// The failure kinds. Only FailureInsufficientResources is retried.
const (
	FailureNone                  FailureKind = ""
	FailureInsufficientResources FailureKind = "INSUFFICIENT_RESOURCES"
	FailureUserError             FailureKind = "USER_ERROR"
	FailureRuntimeError          FailureKind = "RUNTIME_ERROR"
	FailureUnknown               FailureKind = "UNKNOWN"
)

// Task is one submitted job and where it stands. Times are UTC.
type Task struct {
	ID       string `json:"id"`       // <workload>-<yyyymmdd>-<hhmmss>-<4 hex>
	Name     string `json:"name"`     // the spec's name
	Workload string `json:"workload"` // the spec's workload
	Executor string `json:"executor"` // "local" or "ray"
	Priority int    `json:"priority"` // higher first; FIFO within a priority
	// SpecRaw is the job spec exactly as submitted (YAML or JSON).
	SpecRaw string `json:"spec"`
	// Spec is SpecRaw parsed, with the defaults applied.
	Spec      Spec      `json:"job"`
	State     State     `json:"state"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// NextRunAt is when a waiting task is next considered (after a retry's
	// backoff); zero: at once.
	NextRunAt time.Time `json:"next_run_at,omitzero"`
	// Error says why the task failed, or why it waits (e.g. "Ray
	// unreachable"); empty otherwise.
	Error string `json:"error,omitempty"`
	// Warnings are Submit's, on its answer only (not stored): e.g. that
	// pinned or persistent models hold the GPUs the task needs, so it
	// waits until they are unloaded.
	Warnings []string `json:"warnings,omitempty"`
	// CancelRequested is set by a cancel of a task with a running attempt,
	// until the executor has stopped it.
	CancelRequested bool `json:"cancel_requested,omitempty"`
	// Attempts is the number of attempts; LatestAttempt the last one.
	Attempts      int      `json:"attempts"`
	LatestAttempt *Attempt `json:"latest_attempt,omitempty"`

	seq int64 // its place in submission order (the store's)
}

// GPUs is the task's gang: nnodes × gpus_per_node.
func (t *Task) GPUs() int { return t.Spec.NNodes * t.Spec.GPUsPerNode }

// Attempt is one submission of a task to its executor.
type Attempt struct {
	TaskID string `json:"task_id"`
	No     int    `json:"attempt_no"` // 1, 2, …
	// SubmissionID is <task_id>--a01, --a02, …: the Ray submission id, and
	// the name of the local attempt's log file.
	SubmissionID string `json:"submission_id"`
	// Status is the executor's own status (Ray's PENDING, RUNNING, …; the
	// local executor's the same words), empty before submission.
	Status      string      `json:"status,omitempty"`
	FailureKind FailureKind `json:"failure_kind,omitempty"`
	Message     string      `json:"message,omitempty"`
	// Handle is the executor's record of the attempt (JSON: local pid and
	// devices), kept so a restarted Loadout finds it again.
	Handle    string    `json:"-"`
	Devices   []int     `json:"devices,omitempty"` // local GPUs leased
	StartedAt time.Time `json:"started_at,omitzero"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
}

// Event is one line of a task's history: a transition, a submission, a
// status sync or a retry.
type Event struct {
	TaskID  string    `json:"task_id"`
	At      time.Time `json:"at"`
	Kind    string    `json:"kind"` // "transition", "submit", "status", "retry", "cancel"
	From    State     `json:"from,omitempty"`
	To      State     `json:"to,omitempty"`
	Message string    `json:"message,omitempty"`
}
