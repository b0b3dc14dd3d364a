package main

import (
	"github.com/loadout-dev/loadout/policies/internal/cacherouter"
	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/evict"
)

// New is the gdsf router's factory: cacherouter with GDSF's priorities,
// weighed by the host's load seconds per GiB.
var New = cacherouter.New("gdsf", func() *evict.GDSF[string] { return evict.NewGDSF[string](1, nil) })

func init() { sdk.RegisterSwapper(New) }

// main never runs in a WebAssembly reactor module; the host calls the SDK's
// exports instead.
func main() {}
