// Command loadout runs the model servers of a GPU box behind one
// OpenAI-compatible endpoint, deciding every swap, eviction and queue through
// sandboxed WebAssembly policies. See README.md.
package main

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
)

func main() {
	root := newRootCmd()
	args := oneDashLongFlags(root, os.Args[1:])
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "loadout:", err)
		if servesFlags(root, args) {
			fmt.Fprintln(os.Stderr, "loadout: llama-swap's flags are serve's here: loadout serve -config FILE -listen ADDR")
		}
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "loadout",
		Short: "Run many model servers on a few GPUs behind one OpenAI-compatible endpoint",
		Long: `Loadout sits in front of the model servers of a GPU box. Clients speak the
OpenAI API to it; for every request it decides whether the model can serve now
or what must happen first (load it, evict others, queue), through scheduling
and eviction policies that are sandboxed WebAssembly modules.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       versionLine(), // --version, as llama-server and llama-swap have it
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.AddCommand(newServeCmd(), newConfigCmd(), newPolicyCmd(), newVersionCmd(), newBackendCmd(), newSimServerCmd(), newJobsCmd(), newSimulateCmd(),
		newPsCmd(), newLoadCmd(), newUnloadCmd(), newLogsCmd())
	return root
}

// oneDashLongFlags rewrites -name and -name=value in args to --name and
// --name=value where name (two letters or more) is a long flag of the
// command args run, as Go's flag package reads flags: so llama-swap's
// command line (-config FILE -listen ADDR -watch-config) works after
// `loadout serve`. Shorthands (-c FILE, -vc) and anything after "--" are
// left as they are; a word that names no flag is left for cobra to
// refuse.
func oneDashLongFlags(root *cobra.Command, args []string) []string {
	cmd, _, err := root.Find(args)
	if err != nil {
		return args
	}
	cmd.InitDefaultHelpFlag()
	cmd.InitDefaultVersionFlag()
	out := slices.Clone(args)
	for i, a := range out {
		if a == "--" {
			break
		}
		if len(a) < 3 || a[0] != '-' || a[1] == '-' {
			continue
		}
		name, _, _ := strings.Cut(a[1:], "=")
		if len(name) > 1 && (cmd.Flags().Lookup(name) != nil || cmd.InheritedFlags().Lookup(name) != nil) {
			out[i] = "-" + a
		}
	}
	return out
}

// servesFlags tells a command line that gives serve's flags to no command
// (`loadout -config FILE`, llama-swap's command line): llama-swap is one
// command, Loadout's server is `loadout serve`.
func servesFlags(root *cobra.Command, args []string) bool {
	if c, _, _ := root.Find(args); c != root {
		return false
	}
	serve, _, err := root.Find([]string{"serve"})
	if err != nil {
		return false
	}
	root.InitDefaultVersionFlag() // --version is root's too
	root.InitDefaultHelpFlag()
	for _, a := range args {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && len(name) > 1 && serve.Flags().Lookup(name) != nil && root.Flags().Lookup(name) == nil {
			return true
		}
	}
	return false
}
