package llamaserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"time"

	cmdbackend "github.com/loadout-dev/loadout/backends/cmd"
	"github.com/loadout-dev/loadout/plugins"
)

// Version is the llamaserver backend's version, reported by Capabilities.
const Version = "0.1.0"

// Backend runs llama.cpp's llama-server. Options (ModelSpec.Options) are a
// JSON object with
//
//	model         the GGUF file (required; a relative path is taken from
//	              the working directory Loadout runs in)
//	binary        the server executable (default llama-server, on PATH)
//	ctx_size      --ctx-size: the KV cache in tokens, shared by the slots
//	              (default: the model's training context)
//	n_gpu_layers  --n-gpu-layers: a number, "auto" or "all"
//	parallel      --parallel: the number of slots
//	flash_attn    --flash-attn: true, false, "on", "off" or "auto"
//	cache_type_k  --cache-type-k, e.g. "q8_0" (default f16)
//	cache_type_v  --cache-type-v
//	extra_args    more llama-server flags, one word per item
//
// The server listens on 127.0.0.1 at ModelSpec.Port and is ready once
// /health answers 200 (llama-server answers 503 while it loads); Cmd, Proxy
// and CmdStop are ignored, and a CheckEndpoint other than "" or "none"
// replaces /health. Env, Devices (CUDA_VISIBLE_DEVICES) and
// HealthCheckTimeout apply as in the cmd backend. Close stops every server.
type Backend struct {
	cmd *cmdbackend.Backend
}

var (
	_ plugins.Backend = (*Backend)(nil)
	_ io.Closer       = (*Backend)(nil)
)

// New returns a Backend that logs to logger (nil: slog.Default()).
func New(logger *slog.Logger) *Backend {
	return &Backend{cmd: cmdbackend.New(logger)}
}

// Start implements plugins.Backend: it checks the options and the GGUF file,
// then runs llama-server and waits for /health.
func (b *Backend) Start(ctx context.Context, spec plugins.ModelSpec) (plugins.Started, error) {
	o, err := parseOptions(spec.Options)
	if err != nil {
		return plugins.Started{}, fmt.Errorf("model %q: %w", spec.Model, err)
	}
	if err := checkGGUF(o.Model); err != nil {
		return plugins.Started{}, fmt.Errorf("model %q: %w", spec.Model, err)
	}
	if _, err := exec.LookPath(o.Binary); err != nil {
		return plugins.Started{}, fmt.Errorf("model %q: llama-server executable %s: %w (install llama.cpp, or set the binary option)", spec.Model, o.Binary, unwrapExecError(err))
	}
	spec.Cmd = o.commandLine()
	spec.CmdStop, spec.Proxy = "", ""
	if spec.CheckEndpoint == "" || spec.CheckEndpoint == "none" {
		spec.CheckEndpoint = "/health"
	}
	return b.cmd.StartServer(ctx, spec, cmdbackend.SleepConfig{})
}

// unwrapExecError drops the *exec.Error's repetition of the name.
func unwrapExecError(err error) error {
	var ee *exec.Error
	if errors.As(err, &ee) {
		return ee.Err
	}
	return err
}

// Stop implements plugins.Backend.
func (b *Backend) Stop(ctx context.Context, model string, timeout time.Duration) error {
	return b.cmd.Stop(ctx, model, timeout)
}

// Health implements plugins.Backend.
func (b *Backend) Health(ctx context.Context, model string) (plugins.Health, error) {
	return b.cmd.Health(ctx, model)
}

// Estimate implements plugins.Backend from the GGUF file's metadata (see
// estimateMemory), split evenly over the spec's devices.
func (b *Backend) Estimate(_ context.Context, spec plugins.ModelSpec) (plugins.Estimate, error) {
	o, err := parseOptions(spec.Options)
	if err != nil {
		return plugins.Estimate{}, fmt.Errorf("model %q: %w", spec.Model, err)
	}
	gf, err := readGGUF(o.Model)
	if err != nil {
		return plugins.Estimate{}, fmt.Errorf("model %q: %w", spec.Model, err)
	}
	m, err := estimateMemory(gf, o)
	if err != nil {
		return plugins.Estimate{}, fmt.Errorf("model %q: %w", spec.Model, err)
	}
	n := uint64(max(1, len(spec.Devices)))
	per := make([]uint64, n)
	for i := range per {
		per[i] = (m.total() + n - 1) / n
	}
	return plugins.Estimate{Known: true, BytesPerDevice: per}, nil
}

// Stats implements plugins.Backend: the server's pids; the host measures
// its device memory by pid.
func (b *Backend) Stats(ctx context.Context, model string) (plugins.Stats, error) {
	return b.cmd.Stats(ctx, model)
}

// Capabilities implements plugins.Backend.
func (b *Backend) Capabilities(context.Context) (plugins.Capabilities, error) {
	return plugins.Capabilities{Name: "llamaserver", Version: Version, Features: []string{plugins.FeatureEstimate}}, nil
}

// Wait implements plugins.Backend.
func (b *Backend) Wait(ctx context.Context, model string) (plugins.Exit, error) {
	return b.cmd.Wait(ctx, model)
}

// Validate implements plugins.Backend: the options as Start reads them
// (see Backend), without looking at the model file or the binary; the
// package function Validate also reads the GGUF file. A problem's message
// names the option.
func (b *Backend) Validate(_ context.Context, spec plugins.ModelSpec) ([]plugins.Problem, error) {
	if _, err := parseOptions(spec.Options); err != nil {
		return []plugins.Problem{{Message: err.Error()}}, nil
	}
	return nil, nil
}

// Close stops every server; plugins.Serve calls it on shutdown.
func (b *Backend) Close() error { return b.cmd.Close() }
