// Command echo is the echopolicy scheduler as a Wasm policy module.
package main

import (
	"github.com/loadout-dev/loadout/host/policy/testdata/guests/echopolicy"
	"github.com/loadout-dev/loadout/sdk"
)

func init() { sdk.RegisterScheduler(echopolicy.New) }

func main() {}
