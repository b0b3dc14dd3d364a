// Package bounded gives up on work that can hang rather than fail — a
// read of a file on a stalled disk or network share — after a limit, so
// that its caller answers in time: the cmd backend's VRAM estimate, which
// reads a model's GGUF file inside a plugin call whose missed deadline
// would kill the plugin with every server it runs, and serve's reads of
// model files at start and reload.
package bounded

import (
	"context"
	"fmt"
	"time"
)

// Call is f's result, or, when f has not returned after limit (or ctx is
// done first), an error saying that doing — a phrase such as "reading
// /models/x.gguf" — did not end in time. f, abandoned, runs on in its own
// goroutine and ends on its own; its result is dropped. Errors: f's, or
// the limit's.
func Call[T any](ctx context.Context, limit time.Duration, doing string, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("%s did not end in time (%s at most)", doing, limit)
	}
}
