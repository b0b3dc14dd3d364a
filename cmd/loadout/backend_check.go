package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/loadout-dev/loadout/host/backend"
	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/plugins"
	"github.com/spf13/cobra"
)

func newBackendCheckCmd() *cobra.Command {
	var options string
	var timeout time.Duration
	var verbose bool
	cmd := &cobra.Command{
		Use:   "check BINARY",
		Short: "Launch a backend plugin, report its protocol version and capabilities, and validate sample options",
		Long: `check launches BINARY as the host would (a path, or a built-in backend's
name: cmd, llamaserver, sim), performs the go-plugin handshake and prints:
the protocol version negotiated (this host speaks 1 to 2), the plugin's name,
version and features (can it sleep, estimate VRAM, measure memory, report
residency), what this host cannot do with it, and what Validate says of
--options. Nothing is started.

It fails, saying why, on a binary that is not a backend plugin, one that
writes to stdout before its handshake, speaks a protocol version this host
does not, hangs in the handshake (--timeout) or in a call (the plugin's call
limits), or crashes. Problems Validate reports with the options are printed,
not failures: they are what the plugin would say of a config.`,
		Example: `  loadout backend check ./llamacpp-python --options '{"model": "/models/tiny.gguf"}'
  loadout backend check sim --options '{"tokens_per_second": 50}'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !json.Valid([]byte(options)) {
				return fmt.Errorf("--options: not JSON: %s", options)
			}
			level := slog.LevelWarn
			if verbose {
				level = slog.LevelDebug
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
			return checkBackend(cmd.Context(), cmd.OutOrStdout(), args[0], []byte(options), timeout, log)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&options, "options", "{}", "a model's options, as JSON, for Validate")
	positiveDurationVar(fl, &timeout, "timeout", 10*time.Second, "how long the plugin may take to start and complete the handshake")
	fl.BoolVarP(&verbose, "verbose", "v", false, "log go-plugin's lines and the plugin's stderr")
	return cmd
}

// pluginCommand is the command that runs backend plugin binary: a built-in
// backend's name runs this executable as `loadout backend NAME`.
func pluginCommand(binary string) (*exec.Cmd, error) {
	if slices.Contains(builtinBackends, binary) {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		return exec.Command(exe, "backend", binary), nil
	}
	if !strings.ContainsAny(binary, `/\`) {
		return nil, fmt.Errorf("%q is neither a built-in backend (%s) nor a path (write ./%s for a file here)", binary, strings.Join(builtinBackends, ", "), binary)
	}
	abs, err := filepath.Abs(binary)
	if err != nil {
		return nil, err
	}
	if err := config.CheckPluginBinary(binary, abs); err != nil {
		return nil, err
	}
	return exec.Command(abs), nil
}

// checkBackend is `loadout backend check`.
func checkBackend(ctx context.Context, out io.Writer, binary string, options []byte, timeout time.Duration, log *slog.Logger) error {
	if ctx == nil {
		ctx = context.Background()
	}
	cmd, err := pluginCommand(binary)
	if err != nil {
		return err
	}
	lctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	c, err := plugins.Launch(lctx, cmd, log)
	if err != nil {
		if lctx.Err() != nil && ctx.Err() == nil {
			return fmt.Errorf("backend plugin %s: no handshake within %s: it hangs before plugins.Serve, or is not a loadout backend plugin", binary, timeout)
		}
		return err
	}
	took := time.Since(start)
	defer c.Kill()
	v := c.ProtocolVersion()
	fmt.Fprintf(out, "backend plugin %s\n", binary)
	fmt.Fprintf(out, "  handshake        ok in %s: protocol version %d (this host speaks %d to %d)\n", took.Round(time.Millisecond), v, plugins.OldestProtocolVersion, plugins.ProtocolVersion)
	caps, err := c.Capabilities(ctx)
	if err != nil {
		return fmt.Errorf("backend plugin %s: Capabilities: %w", binary, err)
	}
	yes := func(f string) string {
		if slices.Contains(caps.Features, f) {
			return "yes"
		}
		return "no"
	}
	sleep := map[uint8]string{0: "no", 1: "yes, level 1", 2: "yes, level 2 only", 3: "yes, levels 1 and 2"}[backend.SleepLevels(v, caps)]
	if v < 2 {
		sleep = "no (protocol version 1)"
	}
	fmt.Fprintf(out, "  name             %s %s\n", caps.Name, caps.Version)
	fmt.Fprintf(out, "  features         %s\n", strings.Join(caps.Features, ", "))
	fmt.Fprintf(out, "  can sleep        %s\n", sleep)
	fmt.Fprintf(out, "  estimates VRAM   %s\n", yes(plugins.FeatureEstimate))
	fmt.Fprintf(out, "  measures memory  %s\n", yes(plugins.FeatureMeasuredMemory))
	fmt.Fprintf(out, "  residency        %s\n", yes(plugins.FeatureResidency))
	for i, l := range backend.Limitations(v, caps) {
		head := ""
		if i == 0 {
			head = "limitations"
		}
		fmt.Fprintf(out, "  %-16s %s\n", head, l)
	}
	problems, err := c.Validate(ctx, plugins.ModelSpec{Model: "check", Options: options})
	if err != nil {
		return fmt.Errorf("backend plugin %s: Validate(%s): %w", binary, options, err)
	}
	if len(problems) == 0 {
		fmt.Fprintf(out, "  validate         %s: no problems\n", options)
		return nil
	}
	fmt.Fprintf(out, "  validate         %s: %d problem(s)\n", options, len(problems))
	for _, p := range problems {
		fmt.Fprintf(out, "    %s\n", p)
	}
	return nil
}
