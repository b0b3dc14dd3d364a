package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/spf13/cobra"
)

// version is set at link time: -ldflags "-X main.version=v0.1.0".
var version = "dev"

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, the policy ABI version and the Go toolchain",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rev := ""
			if bi, ok := debug.ReadBuildInfo(); ok {
				for _, s := range bi.Settings {
					if s.Key == "vcs.revision" {
						rev = " " + s.Value
					}
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "loadout %s%s (policy ABI loadout_v%d, %s)\n", version, rev, sdk.ABIVersion, runtime.Version())
			return nil
		},
	}
}
