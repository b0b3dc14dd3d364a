//go:build wasip1

package sdk

import "unsafe"

// demand is an optional import (docs/ABI.md, "Demand"): a module that
// never calls ReadDemand on the host does not import it, so it loads on
// hosts built before it.
//
//go:wasmimport loadout_v2 demand
func hostDemand(buf unsafe.Pointer, limit uint32) int32

// replyDemand is Demand's storage, reused: the guest is single-threaded
// and the list is valid until the next call.
var replyDemand DemandList

// Demand implements DemandReader through the `demand` import; nil when the
// host refuses or the reply does not decode.
func (wasmEffects) Demand() []ModelDemand {
	for {
		b, retry, ok := reply(hostDemand(bytesPtr(scratch), uint32(len(scratch))))
		if retry {
			continue
		}
		if !ok || decodeMessage(b, &replyDemand) != nil {
			return nil
		}
		return replyDemand.Models
	}
}
