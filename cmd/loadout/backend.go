package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	cmdbackend "github.com/loadout-dev/loadout/backends/cmd"
	"github.com/loadout-dev/loadout/backends/llamaserver"
	"github.com/loadout-dev/loadout/backends/sim"
	simserver "github.com/loadout-dev/loadout/backends/sim/server"
	"github.com/loadout-dev/loadout/plugins"
	"github.com/spf13/cobra"
)

// builtinBackends are the backend plugins compiled into this binary; the
// host runs each as `loadout backend NAME` (a go-plugin subprocess).
var builtinBackends = []string{"cmd", "llamaserver", "sim"}

func newBackendCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "backend NAME",
		Short:  "Serve a built-in backend plugin (started by `loadout serve`, not by hand)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			switch args[0] {
			case "cmd":
				plugins.Serve(cmdbackend.New(plugins.Logger()))
			case "llamaserver":
				plugins.Serve(llamaserver.New(plugins.Logger()))
			case "sim":
				exe, err := os.Executable()
				if err != nil {
					return err
				}
				plugins.Serve(sim.New([]string{exe, "sim-server"}, plugins.Logger()))
			default:
				return fmt.Errorf("unknown built-in backend %q (built in: %v)", args[0], builtinBackends)
			}
			return nil
		},
	}
}

func newSimServerCmd() *cobra.Command {
	return &cobra.Command{
		Use:                "sim-server [flags]",
		Short:              "Run one simulated OpenAI-compatible model server (the sim backend's process)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(_ *cobra.Command, args []string) error {
			opts, err := simserver.ParseFlags(args)
			if err != nil {
				return err
			}
			opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return simserver.Run(ctx, opts)
		},
	}
}
