// Command swapper is the swapperpolicy swapper as a Wasm policy module. With
// settings {"probe": true} its on_swap_start also calls every effect import
// a swapper may not use, with raw declarations so that it sees the exact
// results, and logs them.
package main

import (
	"encoding/json"
	"fmt"
	"unsafe"

	"github.com/loadout-dev/loadout/host/policy/testdata/guests/swapperpolicy"
	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/wire"
)

//go:wasmimport loadout_v2 grant_serve
func rawGrantServe(id uint64, p unsafe.Pointer, n uint32) int32

//go:wasmimport loadout_v2 grant_error
func rawGrantError(id uint64, code int32, p unsafe.Pointer, n uint32) int32

//go:wasmimport loadout_v2 start_swap
func rawStartSwap(p unsafe.Pointer, n uint32) int32

//go:wasmimport loadout_v2 stop_processes
func rawStopProcesses(p unsafe.Pointer, n uint32) int32

//go:wasmimport loadout_v2 set_queue_position
func rawSetQueuePosition(id uint64, pos int32) int32

//go:wasmimport loadout_v2 plan
func rawPlan(p unsafe.Pointer, n uint32, buf unsafe.Pointer, limit uint32) int32

type prober struct {
	*swapperpolicy.Swapper
	h sdk.Host
}

func (p prober) OnSwapStart(ev sdk.SwapStartEvent) {
	p.Swapper.OnSwapStart(ev)
	name := "m"
	np := unsafe.Pointer(unsafe.StringData(name))
	swap := wire.Append(nil, &sdk.SwapRequest{Model: name})
	stop := wire.Append(nil, &sdk.StopRequest{Models: []string{name}})
	var buf [256]byte
	p.h.Log(sdk.LevelInfo, fmt.Sprintf("probe grant_serve=%d grant_error=%d start_swap=%d stop_processes=%d set_queue_position=%d plan=%d",
		rawGrantServe(1, np, 1),
		rawGrantError(1, 0, np, 1),
		rawStartSwap(unsafe.Pointer(&swap[0]), uint32(len(swap))),
		rawStopProcesses(unsafe.Pointer(&stop[0]), uint32(len(stop))),
		rawSetQueuePosition(1, 1),
		rawPlan(np, 1, unsafe.Pointer(&buf[0]), uint32(len(buf)))))
}

func init() {
	sdk.RegisterSwapper(func(h sdk.Host, settings []byte) (sdk.Swapper, error) {
		s, err := swapperpolicy.New(h, settings)
		if err != nil {
			return nil, err
		}
		var set struct{ Probe bool }
		_ = json.Unmarshal(settings, &set)
		if set.Probe {
			return prober{s, h}, nil
		}
		return s, nil
	})
}

func main() {}
