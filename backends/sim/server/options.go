package simserver

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/loadout-dev/loadout/backends/sim/decode"
)

// Options configure a simulated server. The zero value of each field means
// its documented default.
type Options struct {
	// Host is the address to listen on; default 127.0.0.1.
	Host string
	// Port is the TCP port to listen on; 0 picks a free one.
	Port int
	// Listener, if set, is served instead of listening on Host:Port.
	Listener net.Listener
	// Model is the model id /v1/models lists and responses carry when a
	// request names none; default "sim".
	Model string
	// LoadTime is how long the server "loads" before /health answers 200.
	LoadTime time.Duration
	// VRAM is the simulated device memory footprint in bytes, reported at
	// /sim/stats.
	VRAM int64
	// TTFT is the fixed part of a request's prefill, before it joins the
	// decode loop.
	TTFT time.Duration
	// PrefillTokensPerSecond adds promptTokens / PrefillTokensPerSecond to
	// the prefill; 0 (the default) makes the prefill TTFT alone.
	PrefillTokensPerSecond float64
	// TokensPerSecond is the decode rate of a lone sequence; default 50. A
	// step of a batch of b sequences takes (1 + 0.05·(b−1)) / TokensPerSecond
	// seconds (package decode has the timing rules).
	TokensPerSecond float64
	// MaxBatch is how many sequences decode together per step; default 8.
	MaxBatch int
	// Seed makes generated text and embeddings differ between servers;
	// output is a function of seed and input only.
	Seed int64
	// CrashAfterTokens, if positive, makes the process exit abruptly (status
	// 1) once that many tokens have been generated in total.
	CrashAfterTokens int64
	// WakeTime is how long a wake from a level 1 sleep takes (vLLM: the
	// weights copied back from host RAM).
	WakeTime time.Duration
	// WakeTimeLevel2 is how long a wake from a level 2 sleep takes (the
	// weights read again); 0 means LoadTime.
	WakeTimeLevel2 time.Duration
	// HostBytes is the host memory in bytes the process holds beside its
	// weights, reported while asleep: at level 2 alone, at level 1 with
	// VRAM (the weights it keeps in host RAM).
	HostBytes int64
	// SleepFails makes POST /sleep answer 500, as a vLLM started without
	// sleep mode does.
	SleepFails bool
	// WakeHangs makes POST /wake_up never answer (until its client leaves).
	WakeHangs bool
	// Logger receives the server's log lines; default slog.Default().
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.Model == "" {
		o.Model = "sim"
	}
	if o.TokensPerSecond == 0 {
		o.TokensPerSecond = 50
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = 8
	}
	if o.WakeTimeLevel2 == 0 {
		o.WakeTimeLevel2 = o.LoadTime
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Decode is the options' timing model (package decode), which the server
// runs in real time and `loadout simulate` in virtual time.
func (o Options) Decode() decode.Model {
	return decode.Model{TTFT: o.TTFT, PrefillTokensPerSecond: o.PrefillTokensPerSecond,
		TokensPerSecond: o.TokensPerSecond, MaxBatch: o.MaxBatch}
}

func (o Options) validate() error {
	var errs []error
	if o.Port < 0 || o.Port > 65535 {
		errs = append(errs, fmt.Errorf("port %d out of range", o.Port))
	}
	if o.LoadTime < 0 {
		errs = append(errs, errors.New("load time must not be negative"))
	}
	if o.VRAM < 0 {
		errs = append(errs, errors.New("vram must not be negative"))
	}
	errs = append(errs, o.Decode().Validate())
	if o.CrashAfterTokens < 0 {
		errs = append(errs, errors.New("crash after tokens must not be negative"))
	}
	if o.WakeTime < 0 || o.WakeTimeLevel2 < 0 {
		errs = append(errs, errors.New("wake time must not be negative"))
	}
	if o.HostBytes < 0 {
		errs = append(errs, errors.New("host bytes must not be negative"))
	}
	return errors.Join(errs...)
}

// ParseFlags parses the command line of `loadout sim-server` (args without
// the program and subcommand names) into Options with defaults applied:
//
//	--host 127.0.0.1 --port N --model ID --load-time 2s --vram 8GiB
//	--ttft 50ms --prefill-tokens-per-second 0 --tokens-per-second 50 --max-batch 8 --seed 1
//	--crash-after-tokens N
//	--wake-time 0.5s --wake-time-level-2 3s --host-bytes 512MiB --sleep-fails --wake-hangs
//
// --vram and --host-bytes take bytes or a size with a unit: KB, MB, GB (powers of 1000) or
// KiB, MiB, GiB, TiB (powers of 1024). Invalid or out-of-range values are
// errors, and so is a positional argument.
func ParseFlags(args []string) (Options, error) {
	var o Options
	fs := flag.NewFlagSet("sim-server", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.Host, "host", "127.0.0.1", "address to listen on")
	fs.IntVar(&o.Port, "port", 0, "TCP port to listen on (0: any free port)")
	fs.StringVar(&o.Model, "model", "sim", "model id")
	fs.DurationVar(&o.LoadTime, "load-time", 0, "time before /health answers 200")
	fs.Func("vram", "simulated VRAM footprint (bytes, or e.g. 8GiB)", func(s string) error {
		n, err := parseBytes(s)
		o.VRAM = n
		return err
	})
	fs.DurationVar(&o.TTFT, "ttft", 0, "prefill time before a request joins the decode loop")
	fs.Float64Var(&o.PrefillTokensPerSecond, "prefill-tokens-per-second", 0, "prompt processing rate added to the prefill (0: prefill is --ttft alone)")
	fs.Float64Var(&o.TokensPerSecond, "tokens-per-second", 50, "decode rate of a lone sequence")
	fs.IntVar(&o.MaxBatch, "max-batch", 8, "sequences decoded together per step")
	fs.Int64Var(&o.Seed, "seed", 0, "seed of the generated text")
	fs.Int64Var(&o.CrashAfterTokens, "crash-after-tokens", 0, "exit abruptly after this many tokens in total (0: never)")
	fs.DurationVar(&o.WakeTime, "wake-time", 0, "time a wake from a level 1 sleep takes")
	fs.DurationVar(&o.WakeTimeLevel2, "wake-time-level-2", 0, "time a wake from a level 2 sleep takes (0: --load-time)")
	fs.Func("host-bytes", "host memory held beside the weights while asleep (bytes, or e.g. 512MiB)", func(s string) error {
		n, err := parseBytes(s)
		o.HostBytes = n
		return err
	})
	fs.BoolVar(&o.SleepFails, "sleep-fails", false, "POST /sleep answers 500")
	fs.BoolVar(&o.WakeHangs, "wake-hangs", false, "POST /wake_up never answers")
	if err := fs.Parse(args); err != nil {
		return Options{}, fmt.Errorf("sim-server: %w", valueError(fs, err))
	}
	if fs.NArg() > 0 {
		return Options{}, fmt.Errorf("sim-server: unexpected argument %q", fs.Arg(0))
	}
	// Validate before defaults: an explicit --max-batch=0 is an error.
	if err := o.validate(); err != nil {
		return Options{}, fmt.Errorf("sim-server: %w", err)
	}
	return o.withDefaults(), nil
}

// badValue is the flag package's error for a value its flag refused.
var badValue = regexp.MustCompile(`^invalid (?:boolean )?value (".*") for (?:flag )?-([a-z0-9-]+): (.*)$`)

// ValueError is ParseFlags's error for a flag's value that was refused:
// the value as given (quoted), the flag's name and why, where the flag
// package's bare "parse error" is replaced by the form the flag takes.
type ValueError struct {
	Value, Flag, Why string
}

func (e *ValueError) Error() string {
	return fmt.Sprintf("invalid value %s for flag -%s: %s", e.Value, e.Flag, e.Why)
}

// valueError is err as a *ValueError when it is the flag package's
// refusal of a value (its "parse error" replaced by the form the flag
// takes, read from its value's type); any other error as it is.
func valueError(fs *flag.FlagSet, err error) error {
	m := badValue.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	ve := &ValueError{Value: m[1], Flag: m[2], Why: m[3]}
	if f := fs.Lookup(m[2]); f != nil && ve.Why == "parse error" {
		ve.Why = "want another value"
		if g, ok := f.Value.(flag.Getter); ok {
			switch g.Get().(type) {
			case time.Duration:
				ve.Why = "want a duration such as 2s or 500ms"
			case float64:
				ve.Why = "want a number"
			case int, int64:
				ve.Why = "want a whole number"
			case bool:
				ve.Why = "want true or false"
			}
		}
	}
	return ve
}

// parseBytes reads "1073741824", "8GiB", "1.5 GB" and the like.
func parseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := s, ""
	if i >= 0 {
		num, unit = s[:i], strings.TrimSpace(s[i:])
	}
	mult, ok := map[string]float64{
		"": 1, "B": 1,
		"KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
		"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
	}[unit]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q", s, unit)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	b := f * mult
	if b < 0 || b >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q out of range", s)
	}
	return int64(b), nil
}
