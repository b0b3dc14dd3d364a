// Command gen writes the policy SDK archive that package sdksource embeds:
//
//	go run ./internal/sdksource/gen SDK_DIR OUT.zip
//
// `make build` runs it as `go run ./internal/sdksource/gen sdk
// internal/sdksource/archive/sdk.zip` before building the binary.
package main

import (
	"fmt"
	"os"

	"github.com/loadout-dev/loadout/internal/sdksource"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: gen SDK_DIR OUT.zip")
		os.Exit(2)
	}
	if err := sdksource.WriteArchive(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}
