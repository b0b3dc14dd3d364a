package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/loadout-dev/loadout/host/policy"
	"github.com/loadout-dev/loadout/internal/policywasm"
	"github.com/loadout-dev/loadout/sdk/policytest"
	"github.com/spf13/cobra"
)

func newPolicyTestCmd(f *policyFlags) *cobra.Command {
	var verbose bool
	cmd := &cobra.Command{
		Use:   "test FILE.wasm SCENARIO.yaml...",
		Short: "Run scenario files against a policy module, in the real sandbox",
		Long: `test loads FILE.wasm as 'loadout serve' does (same checks, same sandbox, the
--timeout deadline on every call) and runs each SCENARIO.yaml against a fresh
instance of it. A scenario is data: the policy's settings, the models the
host starts with (and GPUs), a sequence of events — request, swap_done,
serve_done, cancel, leave, unload, tick, shutdown for a scheduler; plan and
swap_start for a swapper; set, which changes the host's models, for both —
with times, and the effects each event must cause: grants, errors with
their codes, swaps with their evictions and devices, stops, queue
positions, plans, log lines.

A scenario passes when every step causes exactly the effects it lists, in
order (a step without expect: is not checked). A failure prints the file and
line, the step, the first effect that differs, and every effect the step
caused. Breaking the host's contract (granting a model that is not ready,
forgetting a request, acting on a cancelled one, logging from a plan) fails
the step it happened in.

The same files run natively in a Go policy's own tests with
policytest.RunScenarioFiles, so a policy built from Go and its WebAssembly
build — or a policy written in another language — are held to the same
expectations. The format is described in docs/POLICIES.md.

With -v every step is printed with the effects and log lines it caused, in
the scenario format: write a step's event, run, check what it did, and paste
it as the step's expect:.

Exits non-zero if any scenario fails or does not parse.`,
		Example: `  loadout policy test lru.wasm testdata/scenarios/*.yaml
  loadout policy test -v policies/builtin/wasm/fifo.wasm policies/fifo/testdata/scenarios/collation.yaml`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.withModule(cmd, args[0], func(ctx context.Context, r *policy.Runtime, m *policy.Module) error {
				return runScenarios(ctx, cmd.OutOrStdout(), r, m, args[1:], verbose)
			})
		},
	}
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "print every step with the effects and log lines it caused")
	return cmd
}

// runScenarios runs each scenario file against a fresh instance of m and
// prints one line per file (and the failure under it); it returns an error
// when any failed.
func runScenarios(ctx context.Context, out io.Writer, r *policy.Runtime, m *policy.Module, files []string, verbose bool) error {
	failed := 0
	for _, file := range files {
		start := time.Now()
		sc, err := policytest.LoadScenario(file)
		if err == nil {
			var trace io.Writer
			if verbose {
				fmt.Fprintf(out, "=== %s: %s\n", file, sc.Name)
				trace = out
			}
			var opened []func()
			err = sc.Run(policywasm.ModulePolicy(r, m, func(close func()) { opened = append(opened, close) }), trace)
			for _, close := range opened {
				close()
			}
		}
		if err != nil {
			failed++
			fmt.Fprintf(out, "FAIL  %s\n%s\n", file, indent(err.Error()))
			continue
		}
		fmt.Fprintf(out, "ok    %s  %s\n", file, time.Since(start).Round(time.Millisecond))
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d scenarios failed against %s", failed, len(files), m.Name)
	}
	fmt.Fprintf(out, "all %d scenarios passed against %s (%s)\n", len(files), m.Name, m.Kind)
	return nil
}

// indent prefixes every line of s with two spaces.
func indent(s string) string { return "  " + strings.ReplaceAll(s, "\n", "\n  ") }
