package router

import (
	"context"
	"net/url"
	"time"
)

// StartSpec is what the run loop hands a Process when a swap starts it.
type StartSpec struct {
	// Devices are the GPU indices the model is placed on (nil: no placement,
	// CPU or whatever the backend decides). The backend exports them to the
	// model server as CUDA_VISIBLE_DEVICES.
	Devices []int
	// StopTimeout is the grace the instance's Stop gives the server
	// between asking it to exit and SIGKILL (the model's unloadTimeout);
	// 0: the backend's default (10 s).
	StopTimeout time.Duration
}

// Process is one model's server as the run loop drives it: the lowest seam
// between scheduling and real processes. Implementations: the backend-plugin
// process (plugin_process.go) and, in tests of this package only, an
// in-memory fake. Methods may be called from swap goroutines, never
// concurrently for the same model: the run loop serialises swaps per model.
type Process interface {
	// Start launches the model server and blocks until it is ready to serve,
	// it fails, or ctx ends. The error of a server that exits while starting
	// carries the tail of its stderr.
	Start(ctx context.Context, spec StartSpec) (Instance, error)
}

// Instance is one started, ready model server.
type Instance interface {
	// Upstream is the base URL granted requests are reverse-proxied to,
	// e.g. http://127.0.0.1:5801.
	Upstream() *url.URL
	// Exited is closed once the server has exited, whether Stop asked it to
	// or it crashed; Err then says why.
	Exited() <-chan struct{}
	// Err is the reason the server exited (nil after a clean Stop). Only
	// meaningful after Exited is closed.
	Err() error
	// Stop asks the server to exit (SIGTERM, then SIGKILL after the
	// backend's timeout, or the model's cmdStop) and blocks until it has
	// exited or ctx ends. Stopping an exited instance returns nil.
	Stop(ctx context.Context) error
}

// MemoryReporter is an Instance that can say what its server uses. The run
// loop asks every few seconds, off the loop, and the measured figure
// replaces the model's estimate in the lease ledger and in snapshots
// (Ollama's rule: measure once loaded).
type MemoryReporter interface {
	// Memory returns the server's process ids and the memory in bytes its
	// backend reports it using (0 when the backend cannot tell).
	Memory(ctx context.Context) (pids []int, bytes uint64, err error)
}
