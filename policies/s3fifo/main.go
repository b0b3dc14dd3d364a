package main

import (
	"github.com/loadout-dev/loadout/policies/internal/cacherouter"
	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/evict"
)

// New is the s3fifo router's factory: cacherouter with S3-FIFO's queues.
var New = cacherouter.New("s3fifo", func() *evict.S3FIFO[string] { return evict.NewS3FIFO[string](1) })

func init() { sdk.RegisterSwapper(New) }

// main never runs in a WebAssembly reactor module; the host calls the SDK's
// exports instead.
func main() {}
