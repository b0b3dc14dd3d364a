package activity

import (
	"context"
	"database/sql"
	"fmt"
)

// migrations bring the activity table from version i to i+1; the version
// a file is at is its row in schema_versions (component "activity"), so
// the job queue's tables in the same file are never touched. Append only:
// a file written by this Loadout must open in every later one.
var migrations = []string{
	// 1: the table, the arrival-time index for age pruning and time
	// ranges, and the per-model and per-client indexes for the filters.
	`CREATE TABLE activity (
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		request_id TEXT NOT NULL,
		model TEXT NOT NULL,
		client TEXT NOT NULL DEFAULT '',
		priority INTEGER NOT NULL DEFAULT 0,
		path TEXT NOT NULL DEFAULT '',
		status INTEGER NOT NULL,
		error TEXT NOT NULL DEFAULT '',
		queue_wait_s REAL NOT NULL DEFAULT 0,
		load_wait_s REAL NOT NULL DEFAULT 0,
		ttft_s REAL NOT NULL DEFAULT 0,
		prompt_tokens INTEGER NOT NULL DEFAULT 0,
		completion_tokens INTEGER NOT NULL DEFAULT 0,
		tokens_per_second REAL NOT NULL DEFAULT 0,
		duration_s REAL NOT NULL DEFAULT 0,
		started_at INTEGER NOT NULL
	);
	CREATE INDEX activity_started ON activity(started_at);
	CREATE INDEX activity_model ON activity(model, id);
	CREATE INDEX activity_client ON activity(client, id);`,
	// 2: the replica that served a request of a model with replicas.
	`ALTER TABLE activity ADD COLUMN replica TEXT NOT NULL DEFAULT '';`,
	// 3: whether the load a request waited on was a wake of its sleeping
	// model (1) rather than a cold load.
	`ALTER TABLE activity ADD COLUMN woke INTEGER NOT NULL DEFAULT 0;`,
}

// migrate applies the migrations db lacks, each in its own transaction.
// Error: the file's activity schema is newer than this binary's.
func migrate(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_versions (
		component TEXT PRIMARY KEY, version INTEGER NOT NULL)`); err != nil {
		return err
	}
	var v int
	err := db.QueryRowContext(ctx, `SELECT version FROM schema_versions WHERE component = 'activity'`).Scan(&v)
	if err != nil && err != sql.ErrNoRows {
		return err
	}
	if v > len(migrations) {
		return fmt.Errorf("activity schema version %d is newer than this Loadout's (%d)", v, len(migrations))
	}
	for ; v < len(migrations); v++ {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
			tx.Rollback()
			return fmt.Errorf("activity migration %d: %w", v+1, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_versions (component, version) VALUES ('activity', ?)
			ON CONFLICT (component) DO UPDATE SET version = excluded.version`, v+1); err != nil {
			tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	return nil
}
