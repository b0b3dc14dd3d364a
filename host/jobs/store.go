package jobs

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/loadout-dev/loadout/host/statedb"
)

// Store errors.
var (
	// ErrNotFound: no task with that id.
	ErrNotFound = errors.New("no such task")
	// ErrConflict: a compare-and-set transition found the task in another
	// state than expected (someone else moved it first).
	ErrConflict = errors.New("task is not in the expected state")
)

const schema = `
CREATE TABLE IF NOT EXISTS tasks (
	seq INTEGER PRIMARY KEY AUTOINCREMENT,
	id TEXT NOT NULL UNIQUE,
	name TEXT NOT NULL,
	workload TEXT NOT NULL,
	executor TEXT NOT NULL,
	priority INTEGER NOT NULL,
	spec TEXT NOT NULL,
	job TEXT NOT NULL DEFAULT '',
	state TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	updated_at INTEGER NOT NULL,
	next_run_at INTEGER NOT NULL DEFAULT 0,
	error TEXT NOT NULL DEFAULT '',
	cancel_requested INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS tasks_state ON tasks(state);
CREATE TABLE IF NOT EXISTS attempts (
	task_id TEXT NOT NULL REFERENCES tasks(id),
	attempt_no INTEGER NOT NULL,
	submission_id TEXT NOT NULL UNIQUE,
	status TEXT NOT NULL DEFAULT '',
	failure_kind TEXT NOT NULL DEFAULT '',
	message TEXT NOT NULL DEFAULT '',
	handle TEXT NOT NULL DEFAULT '',
	devices TEXT NOT NULL DEFAULT '',
	started_at INTEGER NOT NULL DEFAULT 0,
	ended_at INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (task_id, attempt_no)
);
CREATE TABLE IF NOT EXISTS events (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	task_id TEXT NOT NULL,
	at INTEGER NOT NULL,
	kind TEXT NOT NULL,
	from_state TEXT NOT NULL DEFAULT '',
	to_state TEXT NOT NULL DEFAULT '',
	message TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS events_task ON events(task_id, id);
`

// Store keeps tasks, attempts and events in one SQLite file (WAL mode,
// synchronous=FULL, so a committed write survives kill -9 of Loadout). It
// is safe for concurrent use; writes are serialised by SQLite.
//
// Every error but ErrNotFound and ErrConflict is a *StoreError naming the
// file. A write that fails (a full disk, a damaged page) is kept in
// memory: until a later write succeeds, reads of the task it was for show
// it in their Error, and reads of every other unfinished task say the
// database cannot be written.
type Store struct {
	db   *sql.DB
	now  func() time.Time
	path string

	mu       sync.Mutex
	unsaved  map[string]string // task id → the change that could not be written
	writeErr error             // the last write's failure; nil once one succeeds
}

// StoreError is a failure of the jobs database: Path is its file, Err
// SQLite's error (e.g. "database disk image is malformed", "database or
// disk is full").
type StoreError struct {
	Path string
	Err  error
}

func (e *StoreError) Error() string { return "jobs database " + e.Path + ": " + e.Err.Error() }
func (e *StoreError) Unwrap() error { return e.Err }

// wrap makes err a *StoreError naming the file (ErrNotFound, ErrConflict,
// a cancelled context and nil are returned as they are).
func (s *Store) wrap(err error) error {
	var se *StoreError
	if err == nil || errors.Is(err, ErrNotFound) || errors.Is(err, ErrConflict) || errors.Is(err, context.Canceled) || errors.As(err, &se) {
		return err
	}
	return &StoreError{Path: s.path, Err: err}
}

// wrote records how a write for task id ended: a failure is kept (see
// Store) as what says "change"; a success forgets id's failure and the
// store's.
func (s *Store) wrote(id, change string, err error) error {
	err = s.wrap(err)
	var se *StoreError
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err == nil:
		delete(s.unsaved, id)
		s.writeErr = nil
	case errors.As(err, &se):
		s.writeErr = err
		if id != "" {
			s.unsaved[id] = change + " could not be saved (" + err.Error() + ")"
		}
	}
	return err
}

// overlay adds to t's Error what could not be written (see Store).
func (s *Store) overlay(t *Task) {
	s.mu.Lock()
	defer s.mu.Unlock()
	msg, ok := s.unsaved[t.ID]
	if !ok {
		if s.writeErr == nil || t.State.Terminal() {
			return
		}
		msg = "changes may not be saved: " + s.writeErr.Error()
	}
	if t.Error != "" {
		msg += "; " + t.Error
	}
	t.Error = msg
}

// OpenStore opens (creating it and its directory if needed) the SQLite
// file at path. Errors: the directory or file cannot be made or read, or
// the file is not a jobs database.
func OpenStore(path string) (*Store, error) {
	db, err := statedb.Open(path)
	if err != nil {
		return nil, fmt.Errorf("jobs %w", err)
	}
	if err := migrate(db); err != nil {
		db.Close()
		return nil, fmt.Errorf("jobs database %s: %w", path, err)
	}
	return &Store{db: db, now: func() time.Time { return time.Now().UTC() }, path: path, unsaved: map[string]string{}}, nil
}

// migrate creates the tables, and adds to a database made by an earlier
// Loadout the columns it lacks: tasks.job (the parsed spec; its rows keep
// ” and are parsed from their spec when read).
func migrate(db *sql.DB) error {
	if _, err := db.Exec(schema); err != nil {
		return err
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM pragma_table_info('tasks') WHERE name = 'job'").Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		_, err := db.Exec("ALTER TABLE tasks ADD COLUMN job TEXT NOT NULL DEFAULT ''")
		return err
	}
	return nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// Insert adds t (its ID, Spec, SpecRaw and State set) with a "submit"
// event; CreatedAt and UpdatedAt are set to now. Spec is kept beside
// SpecRaw (as JSON), so reading a task does not parse its YAML again: the
// spec as parsed at submission, defaults included, is the task's for good.
// Errors: *StoreError.
func (s *Store) Insert(ctx context.Context, t *Task) error {
	return s.wrote("", "", s.insert(ctx, t))
}

func (s *Store) insert(ctx context.Context, t *Task) error {
	now := s.now()
	t.CreatedAt, t.UpdatedAt = now, now
	job, err := json.Marshal(t.Spec)
	if err != nil {
		return fmt.Errorf("jobs: insert %s: %w", t.ID, err)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO tasks (id, name, workload, executor, priority, spec, job, state, created_at, updated_at, next_run_at, error)
		VALUES (?,?,?,?,?,?,?,?,?,?,?,?)`, t.ID, t.Spec.Name, t.Spec.Workload, t.Spec.Executor, t.Spec.Priority, t.SpecRaw, string(job),
		string(t.State), nanos(now), nanos(now), nanos(t.NextRunAt), t.Error); err != nil {
		return fmt.Errorf("jobs: insert %s: %w", t.ID, err)
	}
	if err := addEvent(ctx, tx, Event{TaskID: t.ID, At: now, Kind: "submit", To: t.State, Message: t.Error}); err != nil {
		return err
	}
	return tx.Commit()
}

func addEvent(ctx context.Context, tx *sql.Tx, e Event) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO events (task_id, at, kind, from_state, to_state, message) VALUES (?,?,?,?,?,?)`,
		e.TaskID, nanos(e.At), e.Kind, string(e.From), string(e.To), e.Message)
	if err != nil {
		return fmt.Errorf("jobs: event for %s: %w", e.TaskID, err)
	}
	return nil
}

// Change is what Transition writes besides the state. Nil fields are left
// as they are.
type Change struct {
	Error           *string
	NextRunAt       *time.Time
	CancelRequested *bool
	// Attempt, when set, is inserted or replaced (by task id and number)
	// in the same transaction.
	Attempt *Attempt
	// Kind and Message are the event's; Kind defaults to "transition".
	Kind, Message string
}

// Transition moves task id from state from to state to (to may equal
// from: a change of fields only, recorded as an event of Kind), applying
// c, all in one transaction with its event. Errors: ErrNotFound,
// ErrConflict when the task is not in from, *StoreError (kept, see Store).
func (s *Store) Transition(ctx context.Context, id string, from, to State, c Change) error {
	change := fmt.Sprintf("the change %s → %s", from, to)
	if c.Message != "" {
		change += " (" + c.Message + ")"
	}
	return s.wrote(id, change, s.transition(ctx, id, from, to, c))
}

func (s *Store) transition(ctx context.Context, id string, from, to State, c Change) error {
	now := s.now()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	sets := []string{"state = ?", "updated_at = ?"}
	args := []any{string(to), nanos(now)}
	if c.Error != nil {
		sets, args = append(sets, "error = ?"), append(args, *c.Error)
	}
	if c.NextRunAt != nil {
		sets, args = append(sets, "next_run_at = ?"), append(args, nanos(*c.NextRunAt))
	}
	if c.CancelRequested != nil {
		sets, args = append(sets, "cancel_requested = ?"), append(args, *c.CancelRequested)
	}
	args = append(args, id, string(from))
	res, err := tx.ExecContext(ctx, "UPDATE tasks SET "+strings.Join(sets, ", ")+" WHERE id = ? AND state = ?", args...)
	if err != nil {
		return fmt.Errorf("jobs: update %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		var st string
		if err := tx.QueryRowContext(ctx, "SELECT state FROM tasks WHERE id = ?", id).Scan(&st); errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("jobs: %s: %w", id, ErrNotFound)
		}
		return fmt.Errorf("jobs: %s is %s, not %s: %w", id, st, from, ErrConflict)
	}
	if c.Attempt != nil {
		if err := putAttempt(ctx, tx, c.Attempt); err != nil {
			return err
		}
	}
	kind := c.Kind
	if kind == "" {
		kind = "transition"
	}
	ev := Event{TaskID: id, At: now, Kind: kind, Message: c.Message}
	if from != to || kind == "transition" {
		ev.From, ev.To = from, to
	}
	if err := addEvent(ctx, tx, ev); err != nil {
		return err
	}
	return tx.Commit()
}

func putAttempt(ctx context.Context, tx *sql.Tx, a *Attempt) error {
	devices := ""
	if len(a.Devices) > 0 {
		b, _ := json.Marshal(a.Devices)
		devices = string(b)
	}
	_, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO attempts (task_id, attempt_no, submission_id, status, failure_kind, message, handle, devices, started_at, ended_at)
		VALUES (?,?,?,?,?,?,?,?,?,?)`, a.TaskID, a.No, a.SubmissionID, a.Status, string(a.FailureKind), a.Message, a.Handle, devices,
		nanos(a.StartedAt), nanos(a.EndedAt))
	if err != nil {
		return fmt.Errorf("jobs: attempt %s: %w", a.SubmissionID, err)
	}
	return nil
}

// taskQuery selects tasks with their latest attempt (attempt numbers run
// 1, 2, … so the latest is the highest, found through the attempts' primary
// key): one query, whatever the number of tasks.
const taskQuery = `SELECT t.seq, t.id, t.spec, t.job, t.state, t.created_at, t.updated_at, t.next_run_at, t.error, t.cancel_requested,
	la.task_id, la.attempt_no, la.submission_id, la.status, la.failure_kind, la.message, la.handle, la.devices, la.started_at, la.ended_at
	FROM tasks t LEFT JOIN attempts la ON la.task_id = t.id
		AND la.attempt_no = (SELECT MAX(attempt_no) FROM attempts WHERE task_id = t.id)`

func scanTask(row interface{ Scan(...any) error }) (*Task, error) {
	var t Task
	var state, job string
	var created, updated, next int64
	var a attemptRow
	if err := row.Scan(append([]any{&t.seq, &t.ID, &t.SpecRaw, &job, &state, &created, &updated, &next, &t.Error, &t.CancelRequested}, a.dest()...)...); err != nil {
		return nil, err
	}
	t.State, t.CreatedAt, t.UpdatedAt, t.NextRunAt = State(state), fromNanos(created), fromNanos(updated), fromNanos(next)
	var spec Spec
	if job != "" {
		if err := json.Unmarshal([]byte(job), &spec); err != nil {
			return nil, fmt.Errorf("jobs: stored job of %s: %w", t.ID, err)
		}
	} else { // a task stored before the job column existed
		var err error
		if spec, err = ParseSpec([]byte(t.SpecRaw)); err != nil {
			return nil, fmt.Errorf("jobs: stored spec of %s: %w", t.ID, err)
		}
	}
	t.Spec, t.Name, t.Workload, t.Executor, t.Priority = spec, spec.Name, spec.Workload, spec.Executor, spec.Priority
	latest, err := a.attempt()
	if err != nil {
		return nil, err
	}
	if latest != nil {
		t.LatestAttempt, t.Attempts = latest, latest.No
	}
	return &t, nil
}

// Get returns task id with its latest attempt. Errors: ErrNotFound,
// *StoreError.
func (s *Store) Get(ctx context.Context, id string) (*Task, error) {
	t, err := scanTask(s.db.QueryRowContext(ctx, taskQuery+" WHERE t.id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("jobs: %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, s.wrap(err)
	}
	s.overlay(t)
	return t, nil
}

// List returns the tasks in the given states (every task when none), in
// queue order: priority descending, then submission order. Each has its
// latest attempt.
func (s *Store) List(ctx context.Context, states ...State) ([]*Task, error) {
	return s.ListAfter(ctx, nil, 0, states...)
}

// ListAfter is List from the task after after (a task List or ListAfter
// returned; nil: from the first), at most limit tasks (0: all): the queue
// read a page at a time. A task's place in the queue never changes, so
// pages neither skip nor repeat a task whose state changes in between.
// Errors: *StoreError.
func (s *Store) ListAfter(ctx context.Context, after *Task, limit int, states ...State) ([]*Task, error) {
	return s.listPage(ctx, after, limit, false, states...)
}

// listNoGPU is ListAfter of the tasks whose spec needs no GPU
// (gpus_per_node 0): the runner's admission reads them past the tasks
// that wait for GPUs.
func (s *Store) listNoGPU(ctx context.Context, after *Task, limit int, states ...State) ([]*Task, error) {
	return s.listPage(ctx, after, limit, true, states...)
}

func (s *Store) listPage(ctx context.Context, after *Task, limit int, noGPU bool, states ...State) ([]*Task, error) {
	ts, err := s.listAfter(ctx, after, limit, noGPU, states...)
	if err != nil {
		return nil, s.wrap(err)
	}
	for _, t := range ts {
		s.overlay(t)
	}
	return ts, nil
}

func (s *Store) listAfter(ctx context.Context, after *Task, limit int, noGPU bool, states ...State) ([]*Task, error) {
	var where []string
	var args []any
	if noGPU {
		where = append(where, "json_extract(t.job, '$.gpus_per_node') = 0")
	}
	if len(states) > 0 {
		where = append(where, "t.state IN (?"+strings.Repeat(",?", len(states)-1)+")")
		for _, st := range states {
			args = append(args, string(st))
		}
	}
	if after != nil {
		where = append(where, "(t.priority < ? OR t.priority = ? AND t.seq > ?)")
		args = append(args, after.Priority, after.Priority, after.seq)
	}
	q := taskQuery
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY t.priority DESC, t.seq"
	if limit > 0 {
		q += " LIMIT ?"
		args = append(args, limit)
	}
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*Task
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// Attempts returns task id's attempts, first first. Errors: *StoreError.
func (s *Store) Attempts(ctx context.Context, id string) ([]*Attempt, error) {
	as, err := s.attempts(ctx, "WHERE task_id = ?", id)
	return as, s.wrap(err)
}

func (s *Store) attempts(ctx context.Context, where string, args ...any) ([]*Attempt, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT task_id, attempt_no, submission_id, status, failure_kind, message, handle, devices, started_at, ended_at
		FROM attempts `+where+" ORDER BY attempt_no", args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*Attempt
	for rows.Next() {
		var r attemptRow
		if err := rows.Scan(r.dest()...); err != nil {
			return nil, err
		}
		a, err := r.attempt()
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// attemptRow scans an attempt's columns (task_id, attempt_no,
// submission_id, status, failure_kind, message, handle, devices,
// started_at, ended_at), which are all NULL when a task has no attempt
// (taskQuery's LEFT JOIN).
type attemptRow struct {
	taskID, submissionID, status, kind, message, handle, devices sql.NullString
	no, started, ended                                           sql.NullInt64
}

func (r *attemptRow) dest() []any {
	return []any{&r.taskID, &r.no, &r.submissionID, &r.status, &r.kind, &r.message, &r.handle, &r.devices, &r.started, &r.ended}
}

// attempt returns the attempt scanned, nil for NULLs.
func (r *attemptRow) attempt() (*Attempt, error) {
	if !r.no.Valid {
		return nil, nil
	}
	a := &Attempt{TaskID: r.taskID.String, No: int(r.no.Int64), SubmissionID: r.submissionID.String, Status: r.status.String,
		FailureKind: FailureKind(r.kind.String), Message: r.message.String, Handle: r.handle.String,
		StartedAt: fromNanos(r.started.Int64), EndedAt: fromNanos(r.ended.Int64)}
	if r.devices.String != "" {
		if err := json.Unmarshal([]byte(r.devices.String), &a.Devices); err != nil {
			return nil, fmt.Errorf("jobs: attempt %s devices: %w", a.SubmissionID, err)
		}
	}
	return a, nil
}

// Events returns task id's history, oldest first. Errors: *StoreError.
func (s *Store) Events(ctx context.Context, id string) ([]Event, error) {
	evs, err := s.events(ctx, id)
	return evs, s.wrap(err)
}

func (s *Store) events(ctx context.Context, id string) ([]Event, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT task_id, at, kind, from_state, to_state, message FROM events WHERE task_id = ? ORDER BY id", id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var e Event
		var at int64
		var from, to string
		if err := rows.Scan(&e.TaskID, &at, &e.Kind, &from, &to, &e.Message); err != nil {
			return nil, err
		}
		e.At, e.From, e.To = fromNanos(at), State(from), State(to)
		out = append(out, e)
	}
	return out, rows.Err()
}

// CountByState returns how many tasks are in each state (one query; states
// with no task are absent). Errors: *StoreError.
func (s *Store) CountByState(ctx context.Context) (map[State]int, error) {
	m, err := s.countByState(ctx)
	return m, s.wrap(err)
}

func (s *Store) countByState(ctx context.Context) (map[State]int, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT state, COUNT(*) FROM tasks GROUP BY state")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[State]int{}
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return nil, err
		}
		out[State(st)] = n
	}
	return out, rows.Err()
}
