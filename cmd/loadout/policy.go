package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"text/tabwriter"
	"time"

	"github.com/loadout-dev/loadout/host/policy"
	"github.com/loadout-dev/loadout/sdk"
	"github.com/spf13/cobra"
)

// policyFlags are the flags every policy subcommand shares.
type policyFlags struct {
	cacheDir string
	timeout  time.Duration
	memPages uint32
}

func newPolicyCmd() *cobra.Command {
	var f policyFlags
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Create, check, test and benchmark policy modules (.wasm)",
		Long: `Scheduling and eviction in loadout are decided by policies: WebAssembly
modules built from Go with the loadout SDK (GOOS=wasip1 GOARCH=wasm go build
-buildmode=c-shared). These commands load a module exactly as 'loadout serve'
does — same checks, same sandbox, same compilation cache — without a config,
a GPU or a model server.

Writing one: 'loadout policy new NAME --kind swapper' makes a module that
builds, passes its tests and passes 'policy check'; 'policy test' runs
scenario files against the built module; docs/POLICIES.md walks through it.`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.cacheDir, "cache-dir", "", "compilation cache directory (default: the user cache directory's loadout/wazero)")
	positiveDurationVar(pf, &f.timeout, "timeout", policy.DefaultCallTimeout, "deadline of one call into the policy")
	memoryPagesVar(pf, &f.memPages, "memory-pages", policy.DefaultMemoryLimitPages, "memory limit of one instance, in 64 KiB pages (1 to 65536)")
	cmd.AddCommand(newPolicyNewCmd(), newPolicyCheckCmd(&f), newPolicyTestCmd(&f), newPolicyBenchCmd(&f), newPolicyTuneCmd(&f))
	return cmd
}

// runtime makes the policy runtime the subcommands use, logging warnings
// (a compilation cache that cannot be opened) to stderr.
func (f *policyFlags) runtime(ctx context.Context, stderr io.Writer) (*policy.Runtime, error) {
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return policy.NewRuntime(ctx, policy.Options{
		CacheDir:         f.cacheDir,
		CallTimeout:      f.timeout,
		MemoryLimitPages: f.memPages,
		Logger:           log,
	})
}

func newPolicyCheckCmd(f *policyFlags) *cobra.Command {
	var settings string
	cmd := &cobra.Command{
		Use:   "check FILE.wasm",
		Short: "Load a policy module and print what it is, or why it is refused",
		Long: `check compiles FILE.wasm and runs every load check 'loadout serve' runs: it
must be WebAssembly, import only from loadout_v2 and wasi_snapshot_preview1,
speak this host's ABI version, register a scheduler or a swapper, and export
every function its kind needs with exactly the right signature (docs/ABI.md).
Then it makes one instance as serve does: the buffers abi_buffers gives must
lie in the module's memory, and init must accept --settings (the settings:
block serve would pass, as JSON; {} by default) on a fake host of eight models.

It prints the file, its kind, its ABI version, its exports and imports with
their signatures and how long compiling took (a second or so the first time,
tens of milliseconds once the compilation cache holds it). A refused module
exits non-zero with a message naming the file and what is wrong.`,
		Example: `  loadout policy check policies/builtin/wasm/fifo.wasm   # after make build
  loadout policy check --cache-dir /tmp/wz ./mine.wasm`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			wasm, err := os.ReadFile(args[0])
			if err != nil {
				return fmt.Errorf("reading policy: %w", err)
			}
			r, err := f.runtime(ctx, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer r.Close(ctx)
			rep, err := policy.Inspect(ctx, r, args[0], wasm, []byte(settings))
			if err != nil {
				return err
			}
			printReport(cmd.OutOrStdout(), rep)
			return nil
		},
	}
	cmd.Flags().StringVar(&settings, "settings", "{}", "the settings init is called with (JSON), as serve passes the configuration's settings: block")
	return cmd
}

// versionNote says what an ABI version older than the host's means for the
// module (docs/ABI.md, "Versions"); "" for the current one.
func versionNote(v uint32) string {
	if v >= sdk.ABIVersion {
		return ""
	}
	return fmt.Sprintf(" (this host speaks %d: the module sees no residency, and every model it evicts gets its configured evict:)", sdk.ABIVersion)
}

func printReport(out io.Writer, rep *policy.Report) {
	cache := rep.CacheDir
	if cache == "" {
		cache = "none"
	}
	fmt.Fprintf(out, "file:         %s (%.1f MB)\n", rep.Name, float64(rep.Size)/1e6)
	fmt.Fprintf(out, "kind:         %s\n", rep.Kind)
	fmt.Fprintf(out, "ABI version:  %d%s\n", rep.ABIVersion, versionNote(rep.ABIVersion))
	fmt.Fprintf(out, "compile time: %s (cache: %s)\n", rep.CompileTime.Round(time.Millisecond/10), cache)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "exports:\n")
	for _, e := range rep.Exports {
		fmt.Fprintf(tw, "  %s\t%s\n", e.Name, e.Signature)
	}
	fmt.Fprintf(tw, "imports:\n")
	for _, i := range rep.Imports {
		fmt.Fprintf(tw, "  %s\t%s\n", i.Name, i.Signature)
	}
	tw.Flush()
}

func newPolicyBenchCmd(f *policyFlags) *cobra.Command {
	var (
		events, models  int
		settings        string
		swapperFile     string
		swapperSettings string
	)
	cmd := &cobra.Command{
		Use:   "bench FILE.wasm",
		Short: "Measure what each event costs a policy, through the real sandbox",
		Long: `bench instantiates FILE.wasm in the same sandbox 'loadout serve' uses (deadline
on) against an in-process fake host with --models ready models, one stopped
model and one GPU, drives it with synthetic events and prints the cost of
each kind of event, measured per call on the host: median, 99th percentile
and mean, in microseconds. Encoding, the Wasm call, the policy's own host
calls (reads, effects, a nested plan) and decoding are all included.

A scheduler gets on_request/on_serve_done pairs on ready models, then a
queue-drain scenario: 16 callers for the stopped model (the first plans and
starts a swap, the others join it), the swap's on_swap_done that grants
them all, and their on_serve_done. Its plans are answered by --swapper
FILE.wasm if given, else natively by evicting the first running model.

A swapper gets plan calls for a target that must evict one model, and an
on_swap_start every tenth plan.

A tenth of --events runs first as an unmeasured warm-up.`,
		Example: `  loadout policy bench policies/builtin/wasm/fifo.wasm   # after make build
  loadout policy bench --events 50000 --models 16 --swapper policies/builtin/wasm/prioritylru.wasm policies/builtin/wasm/group.wasm
  loadout policy bench --settings '{"margin": "1GiB"}' policies/builtin/wasm/prioritylru.wasm`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.withModule(cmd, args[0], func(ctx context.Context, r *policy.Runtime, m *policy.Module) error {
				opts := policy.BenchOptions{Events: events, Models: models, Settings: []byte(settings)}
				if swapperFile != "" {
					if m.Kind != sdk.KindScheduler {
						return fmt.Errorf("--swapper is for benchmarking a scheduler; %s is a %s", m.Name, m.Kind)
					}
					var err error
					if opts.Swapper, err = compileFile(ctx, r, swapperFile); err != nil {
						return err
					}
					opts.SwapperSettings = []byte(swapperSettings)
				}
				res, err := policy.Bench(ctx, r, m, opts)
				if err != nil {
					return err
				}
				printBench(cmd.OutOrStdout(), res, opts.Events)
				return nil
			})
		},
	}
	fl := cmd.Flags()
	positiveIntVar(fl, &events, "events", 10000, "events per scenario")
	positiveIntVar(fl, &models, "models", 8, "ready models on the fake host")
	fl.StringVar(&settings, "settings", "{}", "the policy's settings (JSON)")
	fl.StringVar(&swapperFile, "swapper", "", "a swapper .wasm to answer a scheduler's plans (default: a native one)")
	fl.StringVar(&swapperSettings, "swapper-settings", "{}", "the --swapper's settings (JSON)")
	return cmd
}

// withModule runs fn with a runtime made from f's flags and the module at
// path compiled in it, for the subcommands that run one module; the
// runtime is closed afterwards.
func (f *policyFlags) withModule(cmd *cobra.Command, path string, fn func(ctx context.Context, r *policy.Runtime, m *policy.Module) error) error {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	r, err := f.runtime(ctx, cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	defer r.Close(ctx)
	m, err := compileFile(ctx, r, path)
	if err != nil {
		return err
	}
	return fn(ctx, r, m)
}

func compileFile(ctx context.Context, r *policy.Runtime, path string) (*policy.Module, error) {
	wasm, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading policy: %w", err)
	}
	return r.Compile(ctx, path, wasm)
}

func printBench(out io.Writer, res *policy.BenchResult, events int) {
	fmt.Fprintf(out, "policy: %s (%s), %d ready models, %d events per scenario\n\n", res.Policy, res.Kind, res.Models, events)
	width := len("event")
	for _, s := range res.Scenarios {
		width = max(width, len(s.Name))
	}
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	fmt.Fprintf(out, "%-*s  %7s  %10s  %10s  %10s\n", width, "event", "calls", "median µs", "p99 µs", "mean µs")
	for _, s := range res.Scenarios {
		fmt.Fprintf(out, "%-*s  %7d  %10.2f  %10.2f  %10.2f\n", width, s.Name, s.Events, us(s.Median), us(s.P99), us(s.Mean))
	}
}
