package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	promversion "github.com/prometheus/common/version"
	"github.com/spf13/cobra"

	"github.com/loadout-dev/loadout/host/proxy"
	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/wire"
)

// version is set at link time: -ldflags "-X main.version=v0.1.0".
var version = "dev"

// The build's version, for loadout version and loadout_build_info: the
// Prometheus packages' own variables hold it (prometheus/common/version),
// so the collector (client_golang's collectors/version) and this command
// read one figure; the revision comes from the Go toolchain's VCS stamp
// (version.GetRevision: "unknown" without one, "-modified" for a dirty
// tree).
func init() { promversion.Version = version }

// buildInfo is this binary's version as GET /api/version serves it
// (llama-swap's version, commit and build_date): the figures `loadout
// version` and loadout_build_info read (prometheus/common/version), the
// date from -ldflags (its BuildDate) or, without one, the toolchain's VCS
// time.
func buildInfo() proxy.BuildInfo {
	b := proxy.BuildInfo{Version: promversion.Version, Commit: promversion.GetRevision(), Date: promversion.BuildDate}
	if bi, ok := debug.ReadBuildInfo(); ok && b.Date == "" {
		for _, s := range bi.Settings {
			if s.Key == "vcs.time" {
				b.Date = s.Value
			}
		}
	}
	return b
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, the revision, the policy ABI version and the Go toolchain",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), versionLine())
			return nil
		},
	}
}

// versionLine is what `loadout version` and `loadout --version` print:
// the version, the revision, the policy ABI version the SDK speaks and the
// oldest the host loads (docs/ABI.md, "Versions"), and the Go toolchain.
func versionLine() string {
	return fmt.Sprintf("loadout %s %s (policy ABI v%d, loads v%d to v%d; %s)", version, promversion.GetRevision(), sdk.ABIVersion, wire.MinVersion, sdk.ABIVersion, runtime.Version())
}
