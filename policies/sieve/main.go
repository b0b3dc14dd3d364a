package main

import (
	"github.com/loadout-dev/loadout/policies/internal/cacherouter"
	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/evict"
)

// New is the sieve router's factory: cacherouter with SIEVE's queue.
var New = cacherouter.New("sieve", func() *evict.SIEVE[string] { return evict.NewSIEVE[string](1) })

func init() { sdk.RegisterSwapper(New) }

// main never runs in a WebAssembly reactor module; the host calls the SDK's
// exports instead.
func main() {}
