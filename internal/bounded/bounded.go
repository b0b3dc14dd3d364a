// Package bounded gives up on work that can hang rather than fail — a
// read of a file on a stalled disk or network share — after a limit, so
// that its caller answers in time: the cmd backend's VRAM estimate, which
// reads a model's GGUF file inside a plugin call whose missed deadline
// would kill the plugin with every server it runs, serve's reads of model
// files at start and reload, and of the operator's own inputs (the
// configuration files, the policy modules they name, llama-server's
// router-mode inputs).
package bounded

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Call is f's result, or, when f has not returned after limit (or before
// ctx's deadline, when that comes first), an error saying that doing — a
// phrase such as "reading /models/x.gguf" — did not end in time, with the
// bound it had. f, abandoned, runs on in its own goroutine and ends on its
// own; its result is dropped. Errors: f's; the bound's; or, when ctx is
// cancelled first, doing with ctx's cause.
func Call[T any](ctx context.Context, limit time.Duration, doing string, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) < limit {
		limit = max(time.Until(d), 0)
	}
	done := make(chan result, 1)
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	var zero T
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return zero, fmt.Errorf("%s: %w", doing, context.Cause(ctx))
		}
	case <-timer.C:
	}
	return zero, fmt.Errorf("%s did not end in time (%s at most)", doing, limit.Round(time.Millisecond))
}
