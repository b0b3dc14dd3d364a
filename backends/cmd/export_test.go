package cmdbackend

import "time"

// SetStartProgressEvery sets how often a starting server is logged, for a
// test; the returned function restores it.
func SetStartProgressEvery(d time.Duration) (restore func()) {
	old := startProgressEvery
	startProgressEvery = d
	return func() { startProgressEvery = old }
}
