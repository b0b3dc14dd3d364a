// Command testplugin is the backend plugin binary the tests of plugins,
// backends and host/router run as real processes:
//
//	testplugin cmd              serve the cmd backend (needs the host handshake)
//	testplugin sim              serve the sim backend, running "testplugin sim-server"
//	testplugin sim-server ARGS  run a simulated model server (simserver flags)
//
// and the faulty and versioned plugins the protocol's tests hold the host to:
//
//	testplugin cmd-v1           the cmd backend as a plugin built against protocol version 1 serves it
//	testplugin no-sleep         the cmd backend without Sleep, Wake and Residency (a version 2 plugin that lacks them)
//	testplugin sleepy           the sim backend with Sleep, Wake and Residency (version 2) as bookkeeping
//	testplugin v3               answers the handshake with protocol version 3
//	testplugin stdout           prints a line to stdout, then serves the cmd backend
//	testplugin hang-start       the cmd backend, but Start never returns
//	testplugin crash-validate   the cmd backend, but Validate exits with status 3
//	testplugin bad-port         Start reports an upstream port nothing listens on
//
// With TESTPLUGIN_IGNORE_SIGTERM=1 in its environment, sim-server ignores
// SIGTERM, to test SIGKILL escalation. Build it with
//
//	go build -o DIR/testplugin ./backends/internal/testplugin
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	cmdbackend "github.com/loadout-dev/loadout/backends/cmd"
	"github.com/loadout-dev/loadout/backends/sim"
	simserver "github.com/loadout-dev/loadout/backends/sim/server"
	"github.com/loadout-dev/loadout/plugins"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testplugin cmd|sim|sim-server [flags]")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "cmd":
		plugins.Serve(cmdbackend.New(plugins.Logger()))
	case "sim":
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		plugins.Serve(sim.New([]string{exe, "sim-server"}, plugins.Logger()))
	case "cmd-v1":
		serveV1Only(cmdbackend.New(plugins.Logger()))
	case "sleepy":
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		plugins.Serve(&sleepy{Backend: sim.New([]string{exe, "sim-server"}, plugins.Logger()), levels: map[string]plugins.SleepLevel{}})
	case "v3":
		serveV3()
	case "stdout":
		fmt.Println("starting up")
		plugins.Serve(cmdbackend.New(plugins.Logger()))
	case "no-sleep":
		plugins.Serve(struct{ plugins.Backend }{cmdbackend.New(plugins.Logger())})
	case "hang-start":
		plugins.Serve(hangStart{cmdbackend.New(plugins.Logger())})
	case "crash-validate":
		plugins.Serve(crashValidate{cmdbackend.New(plugins.Logger())})
	case "bad-port":
		plugins.Serve(&badPort{Backend: cmdbackend.New(plugins.Logger()), stopped: map[string]chan struct{}{}})
	case "sim-server":
		if err := simServer(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	default:
		fmt.Fprintf(os.Stderr, "testplugin: unknown mode %q\n", os.Args[1])
		os.Exit(2)
	}
}

func simServer(args []string) error {
	opts, err := simserver.ParseFlags(args)
	if err != nil {
		return err
	}
	opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	sigs := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if os.Getenv("TESTPLUGIN_IGNORE_SIGTERM") == "1" {
		signal.Ignore(syscall.SIGTERM)
		sigs = sigs[:1]
	}
	ctx, stop := signal.NotifyContext(context.Background(), sigs...)
	defer stop()
	return simserver.Run(ctx, opts)
}
