// Package statedb owns where Loadout's one SQLite state file lives and how
// it is opened. The job queue (host/jobs) and the activity log
// (host/activity) keep their tables in that same file, each through its own
// *sql.DB made here, so the path rule and the connection settings exist
// once. It knows nothing of the tables: each caller creates its own.
package statedb

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver, pure Go
)

// DefaultPath is where the state file lives when serve's --db is not given:
// $XDG_DATA_HOME/loadout/jobs.db, else ~/.local/share/loadout/jobs.db (the
// name it had when only the job queue used it). Error: no XDG_DATA_HOME
// and no home directory.
func DefaultPath() (string, error) {
	dir := os.Getenv("XDG_DATA_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("state database: no --db and no home directory: %w", err)
		}
		dir = filepath.Join(home, ".local", "share")
	}
	return filepath.Join(dir, "loadout", "jobs.db"), nil
}

// Open opens the SQLite file at path, creating it and its directory if
// needed, in WAL mode with synchronous=FULL (a committed write survives
// kill -9), a 5 s busy timeout (the other *sql.DB on the same file may
// hold the write lock) and foreign keys on. The pool has one connection:
// one writer per caller, readers few and short. Errors: the directory or
// file cannot be made or opened.
func Open(path string) (*sql.DB, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("state database: %w", err)
	}
	dsn := "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(5000)&_pragma=foreign_keys(ON)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("state database %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, fmt.Errorf("state database %s: %w", path, err)
	}
	return db, nil
}
