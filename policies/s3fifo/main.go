package main

import "github.com/loadout-dev/loadout/sdk"

func init() { sdk.RegisterSwapper(New) }

// main never runs in a WebAssembly reactor module; the host calls the SDK's
// exports instead.
func main() {}
