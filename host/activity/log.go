package activity

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loadout-dev/loadout/host/proxy"
	"github.com/loadout-dev/loadout/host/statedb"
)

// Defaults of Options, used where a field is zero.
const (
	DefaultMaxAge        = 7 * 24 * time.Hour
	DefaultMaxRows       = 100_000
	DefaultBuffer        = 4096
	DefaultPruneInterval = time.Minute
)

// maxBatch is the most summaries one insert transaction writes;
// pruneBatch the most rows one DELETE removes, so neither holds the
// file's write lock (shared with the job queue) for long.
const (
	maxBatch   = 256
	pruneBatch = 5000
)

// Options tune a Log. Zero fields take the defaults above; a negative
// MaxAge or MaxRows turns that limit off.
type Options struct {
	MaxAge        time.Duration // rows that arrived longer ago are pruned
	MaxRows       int           // rows beyond the newest MaxRows are pruned
	Buffer        int           // summaries waiting to be written; more are dropped
	PruneInterval time.Duration // how often the writer prunes
	Logger        *slog.Logger  // nil: slog.Default()
}

// Log is the activity log on one state file. Make it with Open; Record,
// Query and Flush are safe for concurrent use.
type Log struct {
	db      *sql.DB
	opt     Options
	log     *slog.Logger
	now     func() time.Time
	ch      chan proxy.RequestSummary
	flushes chan chan struct{}
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	dropped *prometheus.CounterVec
}

var _ proxy.ActivityLog = (*Log)(nil)

// Open opens (creating it if needed) the state file at path, brings its
// activity table to the current schema and starts the writer. Errors: the
// file cannot be opened, or its activity schema is newer than this
// Loadout knows.
func Open(path string, opt Options) (*Log, error) {
	if opt.MaxAge == 0 {
		opt.MaxAge = DefaultMaxAge
	}
	if opt.MaxRows == 0 {
		opt.MaxRows = DefaultMaxRows
	}
	if opt.Buffer <= 0 {
		opt.Buffer = DefaultBuffer
	}
	if opt.PruneInterval <= 0 {
		opt.PruneInterval = DefaultPruneInterval
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	db, err := statedb.Open(path)
	if err != nil {
		return nil, fmt.Errorf("activity %w", err)
	}
	if err := migrate(context.Background(), db); err != nil {
		db.Close()
		return nil, fmt.Errorf("activity log %s: %w", path, err)
	}
	l := &Log{
		db: db, opt: opt, log: opt.Logger, now: time.Now,
		ch:      make(chan proxy.RequestSummary, opt.Buffer),
		flushes: make(chan chan struct{}),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadout_activity_dropped_total",
			Help: "Model request summaries the activity log did not keep, by reason: full (its write buffer was full) or write_error (the database refused the batch).",
		}, []string{"reason"}),
	}
	l.dropped.WithLabelValues("full")
	l.dropped.WithLabelValues("write_error")
	go l.run()
	return l, nil
}

// Register adds the log's series (loadout_activity_dropped_total) to reg,
// the registry /metrics serves.
func (l *Log) Register(reg prometheus.Registerer) error { return reg.Register(l.dropped) }

// Record offers one request's summary to the writer; it never blocks.
// When the buffer is full (the disk is slower than the traffic) the
// summary is dropped and counted. It is proxy.Config.OnRequest.
func (l *Log) Record(s proxy.RequestSummary) {
	select {
	case l.ch <- s:
	default:
		l.dropped.WithLabelValues("full").Inc()
	}
}

// Flush waits until every summary recorded before it is written, or ctx
// ends. Errors: ctx.Err(), or ErrClosed.
func (l *Log) Flush(ctx context.Context) error {
	f := make(chan struct{})
	select {
	case l.flushes <- f:
	case <-l.done:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-f:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ErrClosed is Flush's error once the log is closed.
var ErrClosed = errors.New("activity log is closed")

// Close writes what is buffered, stops the writer and closes the
// database. Summaries recorded after it are dropped. Later calls return
// nil.
func (l *Log) Close() error {
	var err error
	l.once.Do(func() {
		close(l.stop)
		<-l.done
		err = l.db.Close()
	})
	return err
}

// run is the writer: the only goroutine that writes the table.
func (l *Log) run() {
	defer close(l.done)
	prune := time.NewTicker(l.opt.PruneInterval)
	defer prune.Stop()
	l.prune(context.Background()) // what an earlier run left beyond the limits
	batch := make([]proxy.RequestSummary, 0, maxBatch)
	// drain writes every summary waiting now, in batches.
	drain := func() {
		for {
			for len(batch) < maxBatch {
				select {
				case s := <-l.ch:
					batch = append(batch, s)
					continue
				default:
				}
				break
			}
			if len(batch) == 0 {
				return
			}
			l.insert(batch)
			batch = batch[:0]
		}
	}
	for {
		select {
		case s := <-l.ch:
			batch = append(batch, s)
			drain()
		case f := <-l.flushes:
			drain()
			close(f)
		case <-prune.C:
			l.prune(context.Background())
		case <-l.stop:
			drain()
			return
		}
	}
}

// insert writes batch in one transaction; on failure the batch is dropped,
// counted and logged.
func (l *Log) insert(batch []proxy.RequestSummary) {
	if err := l.insertBatch(context.Background(), batch); err != nil {
		l.dropped.WithLabelValues("write_error").Add(float64(len(batch)))
		l.log.Warn("activity log: batch not written", "rows", len(batch), "err", err)
	}
}

func (l *Log) insertBatch(ctx context.Context, batch []proxy.RequestSummary) error {
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO activity (request_id, model, client, priority, path, status, error,
		queue_wait_s, load_wait_s, ttft_s, prompt_tokens, completion_tokens, tokens_per_second, duration_s, started_at, replica, woke)
		VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`)
	if err != nil {
		return err
	}
	defer stmt.Close()
	for _, s := range batch {
		if _, err := stmt.ExecContext(ctx, s.ID, s.Model, s.Client, s.Priority, s.Path, s.Status, s.Error,
			s.QueueWait, s.LoadWait, s.TTFT, s.PromptTokens, s.CompletionTokens, s.TokensPerSecond, s.Duration,
			s.Time.UnixNano(), s.Replica, s.Woke); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// Prune removes the rows past the retention limits now: those that
// arrived more than MaxAge ago, and those beyond the newest MaxRows. It
// deletes in batches of at most pruneBatch rows, each its own statement.
// The writer calls it every PruneInterval; it returns how many rows went.
func (l *Log) Prune(ctx context.Context) (int64, error) {
	var total int64
	del := func(where string, arg int64) error {
		for {
			res, err := l.db.ExecContext(ctx, `DELETE FROM activity WHERE id IN
				(SELECT id FROM activity WHERE `+where+` ORDER BY id LIMIT ?)`, arg, pruneBatch)
			if err != nil {
				return err
			}
			n, _ := res.RowsAffected()
			total += n
			if n < pruneBatch {
				return nil
			}
		}
	}
	if l.opt.MaxAge > 0 {
		if err := del("started_at < ?", l.now().Add(-l.opt.MaxAge).UnixNano()); err != nil {
			return total, err
		}
	}
	if l.opt.MaxRows > 0 {
		var keepFrom int64
		err := l.db.QueryRowContext(ctx, `SELECT id FROM activity ORDER BY id DESC LIMIT 1 OFFSET ?`, l.opt.MaxRows-1).Scan(&keepFrom)
		switch {
		case errors.Is(err, sql.ErrNoRows): // fewer rows than the limit
		case err != nil:
			return total, err
		default:
			if err := del("id < ?", keepFrom); err != nil {
				return total, err
			}
		}
	}
	return total, nil
}

func (l *Log) prune(ctx context.Context) {
	n, err := l.Prune(ctx)
	switch {
	case err != nil:
		l.log.Warn("activity log: pruning failed", "err", err)
	case n > 0:
		l.log.Debug("activity log pruned", "rows", n)
	}
}

// Query returns the rows f selects, newest first (proxy.ActivityLog).
// A Limit outside 1 to proxy.MaxActivityLimit+1 is taken as
// proxy.MaxActivityLimit+1. Errors: the database cannot be read.
func (l *Log) Query(ctx context.Context, f proxy.ActivityFilter) ([]proxy.ActivityRecord, error) {
	var where []string
	var args []any
	cond := func(c string, a any) { where = append(where, c); args = append(args, a) }
	if f.Model != "" {
		cond("model = ?", f.Model)
	}
	if f.Client != "" {
		cond("client = ?", f.Client)
	}
	if f.MinStatus != 0 {
		cond("status >= ?", f.MinStatus)
	}
	if f.MaxStatus != 0 {
		cond("status <= ?", f.MaxStatus)
	}
	if !f.Since.IsZero() {
		cond("started_at >= ?", f.Since.UnixNano())
	}
	if !f.Until.IsZero() {
		cond("started_at < ?", f.Until.UnixNano())
	}
	if f.BeforeID > 0 {
		cond("id < ?", f.BeforeID)
	}
	limit := f.Limit
	if limit < 1 || limit > proxy.MaxActivityLimit+1 {
		limit = proxy.MaxActivityLimit + 1
	}
	q := `SELECT id, request_id, model, client, priority, path, status, error, queue_wait_s, load_wait_s, ttft_s,
		prompt_tokens, completion_tokens, tokens_per_second, duration_s, started_at, replica, woke FROM activity`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY id DESC LIMIT ?"
	args = append(args, limit)
	rows, err := l.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("activity log: %w", err)
	}
	defer rows.Close()
	var out []proxy.ActivityRecord
	for rows.Next() {
		var r proxy.ActivityRecord
		var started int64
		s := &r.RequestSummary
		if err := rows.Scan(&r.RowID, &s.ID, &s.Model, &s.Client, &s.Priority, &s.Path, &s.Status, &s.Error,
			&s.QueueWait, &s.LoadWait, &s.TTFT, &s.PromptTokens, &s.CompletionTokens, &s.TokensPerSecond,
			&s.Duration, &started, &s.Replica, &s.Woke); err != nil {
			return nil, fmt.Errorf("activity log: %w", err)
		}
		s.Time = time.Unix(0, started).UTC()
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("activity log: %w", err)
	}
	return out, nil
}
