// Command gentraces writes the workloads of host/sim (sim.Workloads) under
// testdata/traces from the Azure 2023 traces in shared/traces. Run it from
// the repository's root, with shared/ beside the checkout:
//
//	go generate ./host/sim
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/loadout-dev/loadout/host/sim"
)

func main() {
	azure, out := "../shared/traces/azure-llm-2023", "testdata/traces"
	if len(os.Args) == 3 {
		azure, out = os.Args[1], os.Args[2]
	}
	for _, w := range sim.Workloads {
		b, err := w.Generate(azure)
		if err == nil {
			err = os.WriteFile(filepath.Join(out, w.File), b, 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "gentraces:", err)
			os.Exit(1)
		}
		fmt.Println("wrote", filepath.Join(out, w.File))
	}
}
