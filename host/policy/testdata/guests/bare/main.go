// Command bare is not a policy: it exports a few raw functions, without the
// SDK's export glue, so that benchmarks can time single pieces of Go guest
// work through wazero (an empty call, decoding one event, a yield). Unlike
// the SDK's exports, decode never yields to the Go scheduler, so the GC
// never completes a cycle: a few million calls exhaust the guest's memory.
package main

//lint:file-ignore U1000 the functions are reached through //go:wasmexport

import (
	"runtime"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/wire"
)

var (
	event = wire.Append(nil, &sdk.ServeDoneEvent{Now: 1, ID: 2, Model: "m00"})
	sink  sdk.ServeDoneEvent
)

//go:wasmexport noop
func noop() uint32 { return 1 }

//go:wasmexport decode
func decode() uint32 {
	var ev sdk.ServeDoneEvent
	if wire.Decode(event, &ev) != nil {
		return 0
	}
	sink = ev
	return 1
}

//go:wasmexport gosched
func gosched() uint32 {
	runtime.Gosched()
	return 1
}

func main() {}
