package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/loadout-dev/loadout/host/proxy"
	"github.com/loadout-dev/loadout/sdk"
	"github.com/spf13/cobra"
)

// version is set at link time: -ldflags "-X main.version=v0.1.0".
var version = "dev"

// buildInfo is this binary's version, with the VCS revision and time the
// toolchain recorded (empty when built without VCS information): what
// `loadout version` prints and GET /api/version serves.
func buildInfo() proxy.BuildInfo {
	b := proxy.BuildInfo{Version: version}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value
			case "vcs.time":
				b.Date = s.Value
			}
		}
	}
	return b
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, the policy ABI version and the Go toolchain",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b := buildInfo()
			rev := ""
			if b.Commit != "" {
				rev = " " + b.Commit
			}
			fmt.Fprintf(cmd.OutOrStdout(), "loadout %s%s (policy ABI loadout_v%d, %s)\n", b.Version, rev, sdk.ABIVersion, runtime.Version())
			return nil
		},
	}
}
