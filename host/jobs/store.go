package jobs

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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
type Store struct {
	db  *sql.DB
	now func() time.Time
}

// OpenStore opens (creating it and its directory if needed) the SQLite
// file at path. Errors: the directory or file cannot be made or read, or
// the file is not a jobs database.
func OpenStore(path string) (*Store, error) {
	db, err := statedb.Open(path)
	if err != nil {
		return nil, fmt.Errorf("jobs %w", err)
	}
	if _, err := db.Exec(schema); err != nil {
		db.Close()
		return nil, fmt.Errorf("jobs database %s: %w", path, err)
	}
	return &Store{db: db, now: func() time.Time { return time.Now().UTC() }}, nil
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
// event; CreatedAt and UpdatedAt are set to now.
func (s *Store) Insert(ctx context.Context, t *Task) error {
	now := s.now()
	t.CreatedAt, t.UpdatedAt = now, now
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO tasks (id, name, workload, executor, priority, spec, state, created_at, updated_at, next_run_at, error)
		VALUES (?,?,?,?,?,?,?,?,?,?,?)`, t.ID, t.Spec.Name, t.Spec.Workload, t.Spec.Executor, t.Spec.Priority, t.SpecRaw,
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
// ErrConflict when the task is not in from.
func (s *Store) Transition(ctx context.Context, id string, from, to State, c Change) error {
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

const taskCols = `id, spec, state, created_at, updated_at, next_run_at, error, cancel_requested,
	(SELECT COUNT(*) FROM attempts a WHERE a.task_id = tasks.id)`

func scanTask(row interface{ Scan(...any) error }) (*Task, error) {
	var t Task
	var state string
	var created, updated, next int64
	if err := row.Scan(&t.ID, &t.SpecRaw, &state, &created, &updated, &next, &t.Error, &t.CancelRequested, &t.Attempts); err != nil {
		return nil, err
	}
	t.State, t.CreatedAt, t.UpdatedAt, t.NextRunAt = State(state), fromNanos(created), fromNanos(updated), fromNanos(next)
	spec, err := ParseSpec([]byte(t.SpecRaw))
	if err != nil {
		return nil, fmt.Errorf("jobs: stored spec of %s: %w", t.ID, err)
	}
	t.Spec, t.Name, t.Workload, t.Executor, t.Priority = spec, spec.Name, spec.Workload, spec.Executor, spec.Priority
	return &t, nil
}

// Get returns task id with its latest attempt. Errors: ErrNotFound.
func (s *Store) Get(ctx context.Context, id string) (*Task, error) {
	t, err := scanTask(s.db.QueryRowContext(ctx, "SELECT "+taskCols+" FROM tasks WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("jobs: %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return t, s.fillLatest(ctx, t)
}

func (s *Store) fillLatest(ctx context.Context, t *Task) error {
	if t.Attempts == 0 {
		return nil
	}
	as, err := s.attempts(ctx, "WHERE task_id = ? AND attempt_no = ?", t.ID, t.Attempts)
	if err != nil {
		return err
	}
	if len(as) == 1 {
		t.LatestAttempt = as[0]
	}
	return nil
}

// List returns the tasks in the given states (every task when none), in
// queue order: priority descending, then submission order. Each has its
// latest attempt.
func (s *Store) List(ctx context.Context, states ...State) ([]*Task, error) {
	q := "SELECT " + taskCols + " FROM tasks"
	var args []any
	if len(states) > 0 {
		q += " WHERE state IN (?" + strings.Repeat(",?", len(states)-1) + ")"
		for _, st := range states {
			args = append(args, string(st))
		}
	}
	rows, err := s.db.QueryContext(ctx, q+" ORDER BY priority DESC, seq", args...)
	if err != nil {
		return nil, err
	}
	var out []*Task
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, t := range out {
		if err := s.fillLatest(ctx, t); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Attempts returns task id's attempts, first first.
func (s *Store) Attempts(ctx context.Context, id string) ([]*Attempt, error) {
	return s.attempts(ctx, "WHERE task_id = ?", id)
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
		var a Attempt
		var kind, devices string
		var started, ended int64
		if err := rows.Scan(&a.TaskID, &a.No, &a.SubmissionID, &a.Status, &kind, &a.Message, &a.Handle, &devices, &started, &ended); err != nil {
			return nil, err
		}
		a.FailureKind, a.StartedAt, a.EndedAt = FailureKind(kind), fromNanos(started), fromNanos(ended)
		if devices != "" {
			if err := json.Unmarshal([]byte(devices), &a.Devices); err != nil {
				return nil, fmt.Errorf("jobs: attempt %s devices: %w", a.SubmissionID, err)
			}
		}
		out = append(out, &a)
	}
	return out, rows.Err()
}

// Events returns task id's history, oldest first.
func (s *Store) Events(ctx context.Context, id string) ([]Event, error) {
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
// with no task are absent).
func (s *Store) CountByState(ctx context.Context) (map[State]int, error) {
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
