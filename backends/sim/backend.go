package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	cmdbackend "github.com/loadout-dev/loadout/backends/cmd"
	simserver "github.com/loadout-dev/loadout/backends/sim/server"
	"github.com/loadout-dev/loadout/plugins"
)

// Version is the sim backend's version, reported by Capabilities.
const Version = "0.1.0"

// Backend runs simulated model servers. Options (ModelSpec.Options) are a
// JSON object with any of
//
//	load_time           duration string, e.g. "2s"
//	vram                bytes (number) or a size string, e.g. "8GiB"
//	ttft                duration string
//	prefill_tokens_per_second  number (0: the prefill is ttft alone)
//	tokens_per_second   number
//	max_batch           integer
//	seed                integer
//	crash_after_tokens  integer: the server exits abruptly after that many
//	                    tokens in total
//	wake_time           duration string: a wake from a level 1 sleep
//	wake_time_level_2   duration string: a wake from a level 2 sleep
//	                    (default: load_time)
//	host_bytes          bytes or a size string: host memory the process
//	                    holds beside its weights while asleep
//	sleep_fails         boolean: every sleep is refused (500)
//	wake_hangs          boolean: every wake hangs
//
// The servers sleep and wake at both levels (plugins.Sleeper) through the
// sim server's copy of vLLM's API (POST /sleep?level=N, POST /wake_up, GET
// /is_sleeping): asleep, a server reports no device memory, answers 503 to
// inference, and holds host memory as the server's /sim/stats says (VRAM
// plus host_bytes at level 1, host_bytes at level 2), which Residency
// reports.
//
// ModelSpec.Cmd and CheckEndpoint are ignored; Env, Port, Devices and
// HealthCheckTimeout apply as in the cmd backend. Close stops every server.
type Backend struct {
	argv []string
	cmd  *cmdbackend.Backend

	mu        sync.Mutex
	upstreams map[string]string // by model id
}

var (
	_ plugins.Backend           = (*Backend)(nil)
	_ plugins.Sleeper           = (*Backend)(nil)
	_ plugins.ResidencyReporter = (*Backend)(nil)
	_ io.Closer                 = (*Backend)(nil)
)

// New returns a Backend whose servers run argv followed by sim-server flags;
// argv is the command that runs simserver, e.g.
// []string{os.Executable(), "sim-server"}. logger nil means slog.Default().
func New(argv []string, logger *slog.Logger) *Backend {
	return &Backend{
		argv:      append([]string(nil), argv...),
		cmd:       cmdbackend.New(logger),
		upstreams: make(map[string]string),
	}
}

// Start implements plugins.Backend.
func (b *Backend) Start(ctx context.Context, spec plugins.ModelSpec) (plugins.Started, error) {
	flags, _, problems := parseOptions(spec.Options)
	if problems != nil {
		return plugins.Started{}, fmt.Errorf("model %q: sim options: %w", spec.Model, plugins.ProblemsError(problems))
	}
	words := append(append([]string(nil), b.argv...), "--host", "127.0.0.1", "--model", spec.Model)
	words = append(words, flags...)
	quoted := make([]string, len(words))
	for i, w := range words {
		quoted[i] = shellQuote(w)
	}
	spec.Cmd = strings.Join(quoted, " ") + " --port ${PORT}"
	spec.CmdStop, spec.Proxy, spec.CheckEndpoint = "", "", "/health"
	st, err := b.cmd.StartServer(ctx, spec, simSleep)
	if err != nil {
		return st, err
	}
	b.mu.Lock()
	b.upstreams[spec.Model] = st.Upstream
	b.mu.Unlock()
	return st, nil
}

// simSleep is how a sim server sleeps: vLLM's API, which it copies.
var simSleep = func() cmdbackend.SleepConfig {
	step := func(s string) cmdbackend.Step {
		st, err := cmdbackend.ParseStep(s)
		if err != nil {
			panic(err)
		}
		return st
	}
	isSleeping := step("GET /is_sleeping")
	return cmdbackend.SleepConfig{
		Levels:     1 | 2,
		Sleep:      []cmdbackend.Step{step("POST /sleep?level=${level}")},
		Wake:       []cmdbackend.Step{step("POST /wake_up")},
		IsSleeping: &isSleeping,
	}
}()

// Sleep implements plugins.Sleeper (see cmdbackend.Backend.Sleep): the
// server releases its device memory at once, or refuses with sleep_fails.
func (b *Backend) Sleep(ctx context.Context, model string, level plugins.SleepLevel, timeout time.Duration) error {
	return b.cmd.Sleep(ctx, model, level, timeout)
}

// Wake implements plugins.Sleeper (see cmdbackend.Backend.Wake): it takes
// the server's wake_time (level 1) or wake_time_level_2, or hangs until
// timeout with wake_hangs.
func (b *Backend) Wake(ctx context.Context, model string, timeout time.Duration) error {
	return b.cmd.Wake(ctx, model, timeout)
}

// Residency implements plugins.ResidencyReporter: the cmd backend's
// record, with DeviceBytes and HostBytes from the server's /sim/stats.
func (b *Backend) Residency(ctx context.Context, model string) (plugins.Residency, error) {
	r, err := b.cmd.Residency(ctx, model)
	if err != nil || r.State == plugins.ResidencyStopped {
		return r, err
	}
	sctx, cancel := context.WithTimeout(ctx, statsTimeout)
	defer cancel()
	st, err := b.simStats(sctx, model)
	if err != nil {
		return r, nil // the record alone: memory unknown
	}
	r.DeviceBytes, r.HostBytes = st.VRAMBytes, st.HostBytes
	return r, nil
}

// statsTimeout bounds Stats' and Residency's ask of /sim/stats, well
// inside plugins.CallLimits.Quick: a hung (SIGSTOPped) server leaves its
// memory unknown, and the plugin answers in time, so the host does not
// kill it — and every other model it runs — for the one server's hang.
const statsTimeout = 2 * time.Second

// simStats is the part of the server's GET /sim/stats the backend reads.
type simStats struct {
	VRAMBytes uint64 `json:"vram_bytes"`
	HostBytes uint64 `json:"host_bytes"`
}

func (b *Backend) simStats(ctx context.Context, model string) (simStats, error) {
	var body simStats
	b.mu.Lock()
	upstream := b.upstreams[model]
	b.mu.Unlock()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, upstream+"/sim/stats", nil)
	if err != nil {
		return body, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return body, fmt.Errorf("model %q: stats: %w", model, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return body, fmt.Errorf("model %q: stats: %w", model, err)
	}
	return body, nil
}

// Stop implements plugins.Backend.
func (b *Backend) Stop(ctx context.Context, model string, timeout time.Duration) error {
	return b.cmd.Stop(ctx, model, timeout)
}

// Health implements plugins.Backend.
func (b *Backend) Health(ctx context.Context, model string) (plugins.Health, error) {
	return b.cmd.Health(ctx, model)
}

// Estimate implements plugins.Backend: the options' vram, split evenly over
// the spec's devices.
func (b *Backend) Estimate(_ context.Context, spec plugins.ModelSpec) (plugins.Estimate, error) {
	_, opts, problems := parseOptions(spec.Options)
	if problems != nil {
		return plugins.Estimate{}, fmt.Errorf("model %q: sim options: %w", spec.Model, plugins.ProblemsError(problems))
	}
	n := max(1, len(spec.Devices))
	per := make([]uint64, n)
	for i := range per {
		per[i] = uint64(opts.VRAM) / uint64(n)
	}
	return plugins.Estimate{Known: true, BytesPerDevice: per}, nil
}

// Stats implements plugins.Backend: the process group's pids and the VRAM
// footprint the server reports at /sim/stats. A server that does not
// answer within statsTimeout fails the call with its error (the host
// skips that measurement) instead of holding it to the host's deadline.
func (b *Backend) Stats(ctx context.Context, model string) (plugins.Stats, error) {
	st, err := b.cmd.Stats(ctx, model)
	if err != nil || len(st.Pids) == 0 {
		return st, err
	}
	sctx, cancel := context.WithTimeout(ctx, statsTimeout)
	defer cancel()
	body, err := b.simStats(sctx, model)
	if err != nil {
		return st, err
	}
	st.MemoryBytes = body.VRAMBytes
	return st, nil
}

// Capabilities implements plugins.Backend.
func (b *Backend) Capabilities(context.Context) (plugins.Capabilities, error) {
	return plugins.Capabilities{
		Name:    "sim",
		Version: Version,
		Features: []string{plugins.FeatureEstimate, plugins.FeatureMeasuredMemory,
			plugins.FeatureSleep, plugins.FeatureSleepLevel2, plugins.FeatureResidency},
	}, nil
}

// Wait implements plugins.Backend.
func (b *Backend) Wait(ctx context.Context, model string) (plugins.Exit, error) {
	return b.cmd.Wait(ctx, model)
}

// Validate implements plugins.Backend: each option is checked as the
// sim server will check it (see Backend for the options).
func (b *Backend) Validate(_ context.Context, spec plugins.ModelSpec) ([]plugins.Problem, error) {
	_, _, problems := parseOptions(spec.Options)
	return problems, nil
}

// Close stops every server; plugins.Serve calls it on shutdown.
func (b *Backend) Close() error { return b.cmd.Close() }

// ParseOptions checks a model's sim options (the JSON object Backend
// documents) as Start does and returns them as the server's Options with
// defaults applied, or the problems, each naming its option. `loadout
// simulate` reads a model's timing with it, so the replay and the server
// process read the same options the same way.
func ParseOptions(raw json.RawMessage) (simserver.Options, []plugins.Problem) {
	_, opts, problems := parseOptions(raw)
	return opts, problems
}

// optionKey is what an option name may look like.
var optionKey = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// parseOptions turns the JSON options into sim-server flags, checked by the
// server's own parser (simserver.ParseFlags) one option at a time, so that a
// problem names its option; it returns the flags and the parsed options, or
// the problems (nil when there are none).
func parseOptions(raw json.RawMessage) ([]string, simserver.Options, []plugins.Problem) {
	var m map[string]any
	if len(bytes.TrimSpace(raw)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&m); err != nil {
			return nil, simserver.Options{}, []plugins.Problem{{Message: fmt.Sprintf("want a JSON object: %v", err)}}
		}
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var flags []string
	var problems []plugins.Problem
	for _, k := range keys {
		if !optionKey.MatchString(k) || k == "host" || k == "port" || k == "model" {
			problems = append(problems, plugins.Problem{Option: k, Message: "unknown option (see the sim backend's options)"})
			continue
		}
		var v string
		switch x := m[k].(type) {
		case string:
			v = x
		case json.Number:
			v = x.String()
		case bool:
			v = strconv.FormatBool(x)
		default:
			problems = append(problems, plugins.Problem{Option: k, Message: "want a string, a number or a boolean"})
			continue
		}
		flag := "--" + strings.ReplaceAll(k, "_", "-") + "=" + v
		if _, err := simserver.ParseFlags([]string{flag}); err != nil {
			problems = append(problems, plugins.Problem{Option: k, Message: flagError(err, k)})
			continue
		}
		flags = append(flags, flag)
	}
	if problems != nil {
		return nil, simserver.Options{}, problems
	}
	opts, err := simserver.ParseFlags(flags)
	if err != nil {
		return nil, simserver.Options{}, []plugins.Problem{{Message: flagError(err, "")}}
	}
	return flags, opts, nil
}

// flagError rewords a simserver.ParseFlags error for the option k: without
// the "sim-server: " prefix, an unknown flag as an unknown option, and a
// refused value without the flag's name (the option is named where the
// problem is reported).
func flagError(err error, k string) string {
	var ve *simserver.ValueError
	if errors.As(err, &ve) {
		return "invalid value " + ve.Value + ": " + ve.Why
	}
	if inner := errors.Unwrap(err); inner != nil {
		err = inner
	}
	msg := err.Error()
	if strings.HasPrefix(msg, "flag provided but not defined") {
		return "unknown option (see the sim backend's options)"
	}
	return msg
}

// shellQuote quotes s for the cmd backend's POSIX-style word splitting.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-./:=@%+,", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
