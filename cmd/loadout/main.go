// Command loadout runs the model servers of a GPU box behind one
// OpenAI-compatible endpoint, deciding every swap, eviction and queue through
// sandboxed WebAssembly policies. See README.md.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "loadout:", err)
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
