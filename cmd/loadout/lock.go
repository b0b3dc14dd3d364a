package main

import (
	"errors"
	"io/fs"
	"log/slog"

	"github.com/gofrs/flock"
)

// errLocked is takeLock's error: another process holds the lock.
var errLocked = errors.New("locked by another process")

// takeLock takes lock, an exclusive flock, without waiting: one Loadout
// at a time on what it guards (the job database, a trace file). Where it
// cannot be taken at all (a file system without flock) it logs unguarded
// with the lock's path and the error and returns nil: the caller runs
// unguarded, and lock.Unlock does nothing. A lock file that cannot be
// created (a missing or read-only directory) is not logged: opening what
// it guards says why. Errors: errLocked.
func takeLock(lock *flock.Flock, log *slog.Logger, unguarded string) error {
	ok, err := lock.TryLock()
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission):
		return nil
	case err != nil:
		log.Warn(unguarded, "lock", lock.Path(), "err", err)
		return nil
	case !ok:
		return errLocked
	}
	return nil
}
