package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	cmdbackend "github.com/loadout-dev/loadout/backends/cmd"
	"github.com/loadout-dev/loadout/backends/llamaserver"
	"github.com/loadout-dev/loadout/backends/sim"
	simserver "github.com/loadout-dev/loadout/backends/sim/server"
	"github.com/loadout-dev/loadout/host/backend"
	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/plugins"
	"github.com/spf13/cobra"
)

// builtinBackends are the backend plugins compiled into this binary; the
// host runs each as `loadout backend NAME` (a go-plugin subprocess).
var builtinBackends = []string{"cmd", "llamaserver", "sim"}

func newBackendCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "backend",
		Short: "Write and check backend plugins (new, check)",
		Long: `Backend plugins start, watch and stop model servers for loadout (see
docs/BACKENDS.md). 'backend new' writes a new one, 'backend check' launches
one and reports what it can do.

'loadout backend NAME' with a built-in backend's name (` + strings.Join(builtinBackends, ", ") + `)
serves that backend as a plugin: loadout serve runs it, not a person.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			switch args[0] {
			case "cmd":
				b := cmdbackend.New(plugins.Logger())
				b.Estimator = llamaserver.EstimateCommand // llama-swap's `cmd: llama-server … -m FILE.gguf`
				plugins.Serve(b)
			case "llamaserver":
				plugins.Serve(llamaserver.New(plugins.Logger()))
			case "sim":
				exe, err := os.Executable()
				if err != nil {
					return err
				}
				plugins.Serve(sim.New([]string{exe, "sim-server"}, plugins.Logger()))
			default:
				return fmt.Errorf("unknown backend command or built-in backend %q (commands: new, check; built in: %v)", args[0], builtinBackends)
			}
			return nil
		},
	}
	cmd.AddCommand(newBackendNewCmd(), newBackendCheckCmd())
	return cmd
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

// validateModels asks each model's backend plugin to check the model's spec
// (Backend.Validate: its options above all) and returns every problem found
// as config.Errors, each at the option's line in the file and naming the
// model and the option, or nil. It starts the plugins it needs through
// launchers (backendLauncher); model servers are not started.
func validateModels(ctx context.Context, cfg *config.Config, launchers map[string]*backend.PluginLauncher, log *slog.Logger) error {
	var errs config.Errors
	for _, id := range cfg.ModelIDs() {
		m := cfg.Models[id]
		launcher, err := backendLauncher(launchers, m.Backend, log)
		if err != nil {
			return fmt.Errorf("model %s: %w", id, err)
		}
		spec, err := modelSpec(cfg, m)
		if err != nil {
			return fmt.Errorf("model %s: %w", id, err)
		}
		c, err := launcher.Client(ctx)
		if err != nil {
			return fmt.Errorf("model %s: backend %s: %w", id, m.Backend, err)
		}
		problems, err := c.Validate(ctx, spec)
		if err != nil {
			return fmt.Errorf("model %s: backend %s: validate: %w", id, m.Backend, err)
		}
		for _, p := range problems {
			errs = append(errs, m.OptionError(p.Option, p.Message))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}

// defaultListen is serve's --listen default, and config check's.
const defaultListen = "127.0.0.1:8080"

// checkBackends is validateModels for `config check`: it starts the backend
// plugins the models need, quietly, and stops them before returning.
func checkBackends(ctx context.Context, cfg *config.Config) error {
	launchers := map[string]*backend.PluginLauncher{}
	defer func() {
		for _, l := range launchers {
			l.Close()
		}
	}()
	return validateModels(ctx, cfg, launchers, slog.New(slog.DiscardHandler))
}

// hostOptions fit a configuration to this host (config.Options): ports for
// ${PORT} skip listen's port and ports something already listens on
// (plugins.CheckPortFree), and a proxy at listen is refused.
func hostOptions(listen string) config.Options {
	return config.Options{Listen: listen, PortFree: plugins.CheckPortFree}
}
