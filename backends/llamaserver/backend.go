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
	"github.com/loadout-dev/loadout/internal/bounded"
	"github.com/loadout-dev/loadout/plugins"
)

// Version is the llamaserver backend's version, reported by Capabilities.
const Version = "0.1.0"

// Backend runs llama.cpp's llama-server. Options (ModelSpec.Options) are a
// JSON object with
//
//	model         the GGUF file (required; a relative path is taken from
//	              the working directory Loadout runs in)
//	mmproj        --mmproj: a multimodal projector GGUF (a vision model's),
//	              counted in the estimate unless --no-mmproj-offload is in
//	              extra_args (or LLAMA_ARG_MMPROJ_OFFLOAD=0 in env)
//	binary        the server executable (default llama-server, on PATH)
//	ctx_size      --ctx-size: the KV cache in tokens, shared by the slots
//	              (default: the model's training context)
//	n_gpu_layers  --n-gpu-layers: a number, "auto" or "all"
//	parallel      --parallel: the number of slots
//	flash_attn    --flash-attn: true, false, "on", "off" or "auto"
//	cache_type_k  --cache-type-k, e.g. "q8_0" (default f16)
//	cache_type_v  --cache-type-v
//	extra_args    more llama-server flags, one word per item
//	sleep_idle_seconds  --sleep-idle-seconds: the server may sleep (below)
//
// Sleep. llama-server (llama.cpp's tools/server README, "Sleeping on
// Idle") sleeps by itself after --sleep-idle-seconds without a task: it
// frees the model and its KV cache and keeps its process; any inference
// request wakes it, reloading the model from its file; GET /props says
// "is_sleeping". It has no call that sleeps at once. So a model with
// sleep_idle_seconds sleeps at level 2 only (FeatureSleepLevel2Only: the
// weights are dropped, not kept in host RAM): Sleep waits until /props
// says it sleeps, which an idle server does sleep_idle_seconds (and up to
// 1 s more, its loop's tick) after its last task; Wake sends POST
// /tokenize {"content": ""}, which waits for the reload, and then waits
// until /props says it is awake. A server also falls asleep by itself while
// the host counts it running (Residency then says asleep) and wakes on the
// next request, which waits for the reload. Without sleep_idle_seconds the
// model cannot sleep (plugins.ErrNotSupported). Router mode's
// /models/unload is not used: it ends the model's process, a stop.
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
	_ plugins.Backend           = (*Backend)(nil)
	_ plugins.Sleeper           = (*Backend)(nil)
	_ plugins.ResidencyReporter = (*Backend)(nil)
	_ io.Closer                 = (*Backend)(nil)
)

// New returns a Backend that logs to logger (nil: slog.Default()).
func New(logger *slog.Logger) *Backend {
	return &Backend{cmd: cmdbackend.New(logger)}
}

// Start implements plugins.Backend: it checks the options and the GGUF
// files (the model's, the projector's; a check that takes longer than
// cmdbackend.ModelFileLimit is an error), then runs llama-server and waits
// for /health.
func (b *Backend) Start(ctx context.Context, spec plugins.ModelSpec) (plugins.Started, error) {
	o, err := parseOptions(spec.Options)
	if err != nil {
		return plugins.Started{}, fmt.Errorf("model %q: %w", spec.Model, err)
	}
	// Bounded as the estimate is: a file on a stalled share would hold the
	// call past the host's deadline, and the host kills a plugin that
	// misses one, with every server it runs.
	if _, err := bounded.Call(ctx, cmdbackend.ModelFileLimit, "reading its model files", func() (struct{}, error) {
		for _, f := range o.files() {
			if err := checkGGUF(f); err != nil {
				return struct{}{}, err
			}
		}
		return struct{}{}, nil
	}); err != nil {
		return plugins.Started{}, fmt.Errorf("model %q: %w", spec.Model, err)
	}
	if _, err := exec.LookPath(o.Binary); err != nil {
		return plugins.Started{}, fmt.Errorf("model %q: llama-server executable %s: %w (install llama.cpp, or set the binary option)", spec.Model, o.Binary, unwrapExecError(err))
	}
	spec.Cmd = o.withAlias(spec.Model).commandLine()
	spec.CmdStop, spec.Proxy = "", ""
	if spec.CheckEndpoint == "" || spec.CheckEndpoint == "none" {
		spec.CheckEndpoint = "/health"
	}
	return b.cmd.StartServer(ctx, spec, o.sleepConfig())
}

// sleepConfig is how o's server sleeps (see Backend): at level 2 only, if
// sleep_idle_seconds is set.
func (o options) sleepConfig() cmdbackend.SleepConfig {
	if o.SleepIdleSeconds == 0 {
		return cmdbackend.SleepConfig{}
	}
	return llamaSleep
}

var llamaSleep = func() cmdbackend.SleepConfig {
	step := func(s string) cmdbackend.Step {
		st, err := cmdbackend.ParseStep(s)
		if err != nil {
			panic(err)
		}
		return st
	}
	props := step("GET /props")
	return cmdbackend.SleepConfig{
		Levels:     1 << (plugins.SleepLevel2 - 1),
		Wake:       []cmdbackend.Step{step(`POST /tokenize {"content": ""}`)},
		IsSleeping: &props,
	}
}()

// Sleep implements plugins.Sleeper at level 2 (see Backend): it waits,
// within timeout, until the idle server has freed its model.
func (b *Backend) Sleep(ctx context.Context, model string, level plugins.SleepLevel, timeout time.Duration) error {
	return b.cmd.Sleep(ctx, model, level, timeout)
}

// Wake implements plugins.Sleeper (see Backend): it has the server reload
// its model and returns once it is loaded, within timeout.
func (b *Backend) Wake(ctx context.Context, model string, timeout time.Duration) error {
	return b.cmd.Wake(ctx, model, timeout)
}

// Residency implements plugins.ResidencyReporter: stopped, asleep at level
// 2 (by Sleep or by itself, as /props says) or running. DeviceBytes and
// HostBytes are 0: the host measures the server by pid.
func (b *Backend) Residency(ctx context.Context, model string) (plugins.Residency, error) {
	return b.cmd.Residency(ctx, model)
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

// Estimate implements plugins.Backend from the GGUF files' metadata (see
// estimate), split evenly over the spec's devices. A read that takes
// longer than cmdbackend.ModelFileLimit (or the caller's deadline) is an
// error, left to finish on its own.
func (b *Backend) Estimate(ctx context.Context, spec plugins.ModelSpec) (plugins.Estimate, error) {
	o, err := parseOptions(spec.Options)
	if err != nil {
		return plugins.Estimate{}, fmt.Errorf("model %q: %w", spec.Model, err)
	}
	o.ProjectorOnCPU = !projectorOffloaded(o.ExtraArgs, spec.Env)
	e, err := bounded.Call(ctx, cmdbackend.ModelFileLimit, "reading its model file", func() (plugins.Estimate, error) {
		return estimate(o, len(spec.Devices))
	})
	if err != nil {
		return plugins.Estimate{}, fmt.Errorf("model %q: %w", spec.Model, err)
	}
	return e, nil
}

// estimate is the estimate for o's server (estimateMemory, from its GGUF
// file, and its projector's tensors, projectorBytes) split evenly over
// devices GPUs (one where devices is 0). Errors: a model or projector
// file that cannot be read or parsed, named.
func estimate(o options, devices int) (plugins.Estimate, error) {
	gf, err := readGGUF(o.Model)
	if err != nil {
		return plugins.Estimate{}, err
	}
	m, err := estimateMemory(gf, o)
	if err != nil {
		return plugins.Estimate{}, err
	}
	if m.Projector, err = projectorBytes(o); err != nil {
		return plugins.Estimate{}, err
	}
	n := uint64(max(1, devices))
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
	return plugins.Capabilities{Name: "llamaserver", Version: Version, Features: []string{plugins.FeatureEstimate,
		plugins.FeatureSleep, plugins.FeatureSleepLevel2, plugins.FeatureSleepLevel2Only, plugins.FeatureResidency}}, nil
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
	_, problems := readOptions(spec.Options)
	return problems, nil
}

// Close stops every server; plugins.Serve calls it on shutdown.
func (b *Backend) Close() error { return b.cmd.Close() }
