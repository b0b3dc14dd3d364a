package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Backend starts, watches and stops model servers. One value may manage many
// models at once, keyed by ModelSpec.Model; its methods are called
// concurrently. Every method that names a model returns an error wrapping
// ErrUnknownModel for a model it never started.
//
// The host's *Client implements Backend over gRPC, so code written against
// Backend runs in-process in tests and across the plugin boundary in
// production.
type Backend interface {
	// Start launches the model server and returns once it is ready: its
	// check endpoint answered 2xx within spec.HealthCheckTimeout. An error
	// wrapping ErrAlreadyRunning means the model is already running. The
	// error of a server that exited while starting carries the tail of its
	// stderr. When ctx ends first, the server is killed and ctx's error is
	// returned.
	Start(ctx context.Context, spec ModelSpec) (Started, error)
	// Stop asks the model server to exit (SIGTERM, or spec.CmdStop), kills
	// it after timeout (<= 0: the backend's default) and returns once it
	// has exited. Stopping a server that has already exited returns nil.
	Stop(ctx context.Context, model string, timeout time.Duration) error
	// Health reports the model server's state; a ready server also answered
	// its check endpoint just now.
	Health(ctx context.Context, model string) (Health, error)
	// Estimate predicts the model's memory use before it is started.
	Estimate(ctx context.Context, spec ModelSpec) (Estimate, error)
	// Stats reports the server's pids and measured memory.
	Stats(ctx context.Context, model string) (Stats, error)
	// Capabilities names the backend and what it supports.
	Capabilities(ctx context.Context) (Capabilities, error)
	// Wait blocks until the model server has exited (returning at once if
	// it already has) or ctx ends, and says how it exited.
	Wait(ctx context.Context, model string) (Exit, error)
	// Validate checks spec, its Options above all, without starting
	// anything or reading the model's files, and returns what is wrong with
	// it: nil when Start would accept it. The error is for a call that
	// could not be made, never for an invalid spec. A *Client talking to a
	// plugin built before Validate existed returns nil, nil.
	Validate(ctx context.Context, spec ModelSpec) ([]Problem, error)
}

// Problem is one thing wrong with a ModelSpec, as Validate reports it.
type Problem struct {
	// Option is the key under the model's options the problem is about,
	// e.g. "tokens_per_second"; empty when it is about the options as a
	// whole or another part of the spec.
	Option string
	// Message says what is wrong and, where it can, what is wanted.
	Message string
}

// String formats the problem as "option: message", or the message alone.
func (p Problem) String() string {
	if p.Option == "" {
		return p.Message
	}
	return p.Option + ": " + p.Message
}

// ProblemsError joins problems into one error, one String a line, for a
// Start refusing a spec Validate reports problems with; nil when there are
// none.
func ProblemsError(problems []Problem) error {
	if len(problems) == 0 {
		return nil
	}
	lines := make([]string, len(problems))
	for i, p := range problems {
		lines[i] = p.String()
	}
	return errors.New(strings.Join(lines, "; "))
}

// Errors a Backend returns, wrapped; they survive the gRPC boundary, so
// errors.Is works on what a *Client returns.
var (
	// ErrUnknownModel: the backend never started the named model.
	ErrUnknownModel = errors.New("unknown model")
	// ErrAlreadyRunning: Start was called for a model that is running.
	ErrAlreadyRunning = errors.New("model already running")
	// ErrPluginExited: the plugin process exited (or could not be
	// reached), so the call could not complete. Only a *Client returns it.
	ErrPluginExited = errors.New("backend plugin exited")
	// ErrNotSupported: the backend cannot do what was asked (Sleep at a
	// level it lacks, Wake, Residency), or its plugin speaks a protocol
	// version older than the call (a version 1 plugin asked to Sleep).
	// On the wire it is gRPC's UNIMPLEMENTED, which a plugin built before
	// the call existed answers by itself.
	ErrNotSupported = errors.New("not supported by this backend")
	// ErrNotRunning: Sleep was asked of a model whose server is not
	// running (starting, stopping, exited). FAILED_PRECONDITION on the
	// wire.
	ErrNotRunning = errors.New("model server not running")
)

// ModelSpec is everything a backend needs to run one model server.
type ModelSpec struct {
	// Model is the model id, unique within the host.
	Model string
	// Cmd is the server's command line, split into words as a POSIX shell
	// would (quotes and backslashes, no expansion). ${PORT} and ${MODEL_ID}
	// are substituted.
	Cmd string
	// CmdStop, if set, is run to stop the server instead of sending
	// SIGTERM; ${PID} is substituted with the server's pid.
	CmdStop string
	// Proxy is the upstream base URL; empty means http://127.0.0.1:${PORT}.
	Proxy string
	// CheckEndpoint is the path that answers 2xx once the server is ready;
	// empty means /health and "none" skips the check.
	CheckEndpoint string
	// Env entries (KEY=VALUE) are added to the plugin's own environment.
	Env []string
	// Port is the TCP port the server listens on; 0 lets the backend pick a
	// free loopback port.
	Port int
	// Devices are GPU indices, exported to the server as
	// CUDA_VISIBLE_DEVICES; nil leaves that variable as it is.
	Devices []int
	// HealthCheckTimeout bounds Start's wait for readiness; 0 means the
	// backend's default. On the wire it travels in seconds.
	HealthCheckTimeout time.Duration
	// Options are backend-specific settings, a JSON object (or nil).
	Options json.RawMessage
}

// Started is what Start returns for a ready server.
type Started struct {
	// Upstream is the base URL requests are proxied to,
	// e.g. http://127.0.0.1:5801.
	Upstream string
	// Pids are the server's process ids.
	Pids []int
}

// State is where a model server is in its life.
type State string

// The states of a model server, in order.
const (
	StateStarting State = "starting"
	StateReady    State = "ready"
	StateStopping State = "stopping"
	StateExited   State = "exited"
)

// Health is a model server's state as Health reports it.
type Health struct {
	// Ready is true when the server is up and answered its check endpoint.
	Ready bool
	// State is where the server is in its life.
	State State
	// Message says why the server is not ready, if it is not.
	Message string
}

// Estimate is a backend's prediction of a model's memory use.
type Estimate struct {
	// Known is false when the backend cannot estimate; BytesPerDevice is
	// then nil.
	Known bool
	// BytesPerDevice[i] is the memory in bytes the model will take on
	// spec.Devices[i]; one entry when spec.Devices is empty.
	BytesPerDevice []uint64
}

// Stats are a running server's measured figures.
type Stats struct {
	// Pids are the process ids of the server's whole process group.
	Pids []int
	// MemoryBytes is the device memory the server uses over all its
	// devices, in bytes; 0 when the backend cannot tell (the host then
	// measures by pid).
	MemoryBytes uint64
}

// Features a backend may list in Capabilities.
const (
	// FeatureEstimate: Estimate returns Known estimates.
	FeatureEstimate = "estimate"
	// FeatureMeasuredMemory: Stats reports MemoryBytes.
	FeatureMeasuredMemory = "measured_memory"
)

// Features of protocol version 2: a plugin lists those it implements, and
// answers the calls it does not list with ErrNotSupported.
const (
	// FeatureSleep: Sleep at SleepLevel1, and Wake (Sleeper).
	FeatureSleep = "sleep"
	// FeatureSleepLevel2: Sleep at SleepLevel2 too.
	FeatureSleepLevel2 = "sleep_level_2"
	// FeatureResidency: Residency (ResidencyReporter).
	FeatureResidency = "residency"
	// FeatureSleepLevel2Only: listed with FeatureSleep and
	// FeatureSleepLevel2 by a backend whose servers can sleep at
	// SleepLevel2 but not at SleepLevel1 (llama-server's sleep frees the
	// model and reloads it from its file, keeping no copy in host RAM);
	// Sleep at SleepLevel1 answers ErrNotSupported. A host that does not
	// know it asks for level 1, is refused, and stops the model, as it
	// would for a backend that cannot sleep.
	FeatureSleepLevel2Only = "sleep_level_2_only"
)

// Capabilities name a backend and what it supports.
type Capabilities struct {
	// Name of the backend, e.g. "cmd" or "sim".
	Name string
	// Version of the backend, free-form.
	Version string
	// Features the backend supports: FeatureEstimate, FeatureMeasuredMemory
	// or backend-specific names.
	Features []string
}

// Exit says how a model server exited.
type Exit struct {
	// Code is the exit status, -1 when a signal ended the process.
	Code int
	// Signal names the signal that ended the process, e.g. "killed";
	// empty when it exited by itself.
	Signal string
	// Requested is true when Stop (or the plugin's shutdown) asked for it.
	Requested bool
	// StderrTail is the last lines (at most 4 KiB) of the server's stderr.
	StderrTail string
}

// Err is nil for a requested exit and otherwise an error that says how the
// server exited, with its stderr tail.
func (e Exit) Err() error {
	if e.Requested {
		return nil
	}
	how := fmt.Sprintf("exit status %d", e.Code)
	if e.Signal != "" {
		how = "signal: " + e.Signal
	}
	if e.StderrTail == "" {
		return fmt.Errorf("model server exited unexpectedly (%s)", how)
	}
	return fmt.Errorf("model server exited unexpectedly (%s); stderr tail:\n%s", how, e.StderrTail)
}

// SleepLevel is how deeply a model server sleeps, with the semantics of
// vLLM's sleep mode.
type SleepLevel int

const (
	// SleepLevel1 offloads the weights to host RAM and discards the KV
	// cache; a wake copies the weights back (vLLM: well under a second
	// where a cold start takes tens of seconds).
	SleepLevel1 SleepLevel = 1
	// SleepLevel2 discards the weights and the KV cache and keeps the
	// process with its compiled state; a wake reloads the weights from
	// disk, still faster than a cold start.
	SleepLevel2 SleepLevel = 2
)

// Sleeper is what a Backend implements, beside Backend, when its model
// servers can sleep: protocol version 2, announced by FeatureSleep (and
// FeatureSleepLevel2). A Backend that does not implement it is served at
// version 2 all the same, answering ErrNotSupported; the host then stops
// its models instead of putting them to sleep.
type Sleeper interface {
	// Sleep releases the running model server's GPU memory at level and
	// keeps its process; it returns once the memory is released, within
	// timeout (<= 0: the backend's default). Errors wrap ErrUnknownModel,
	// ErrNotRunning, or ErrNotSupported for a level the backend lacks.
	Sleep(ctx context.Context, model string, level SleepLevel, timeout time.Duration) error
	// Wake brings a sleeping model server back and returns once it is
	// ready again (its check endpoint answered 2xx), within timeout (<= 0:
	// the backend's default). Waking a running server returns nil. Errors
	// wrap ErrUnknownModel.
	Wake(ctx context.Context, model string, timeout time.Duration) error
}

// ResidencyState is where a model's weights are.
type ResidencyState string

// The residencies of a model.
const (
	// ResidencyRunning: weights in GPU memory; the server serves.
	ResidencyRunning ResidencyState = "running"
	// ResidencyAsleep: the process lives; its GPU memory is released.
	ResidencyAsleep ResidencyState = "asleep"
	// ResidencyStopped: no process.
	ResidencyStopped ResidencyState = "stopped"
)

// Residency is a model's residency and the memory it holds in each place,
// as measured when Residency was called.
type Residency struct {
	// State is where the weights are.
	State ResidencyState
	// Level is the sleep level of an asleep model, else 0.
	Level SleepLevel
	// DeviceBytes is the GPU memory the server holds over all its
	// devices, in bytes; 0 when asleep or unknown.
	DeviceBytes uint64
	// HostBytes is the host RAM, in bytes, that a model asleep holds
	// because it sleeps: at level 1 the weights copied there (and the
	// process beside them), at level 2 the process's own overhead. 0 when
	// running, stopped or unknown (the host then measures the server's
	// processes by pid).
	HostBytes uint64
}

// ResidencyReporter is what a Backend implements, beside Backend, to report
// a model's residency: protocol version 2, announced by FeatureResidency.
type ResidencyReporter interface {
	// Residency reports model's residency now. Errors wrap
	// ErrUnknownModel.
	Residency(ctx context.Context, model string) (Residency, error)
}
