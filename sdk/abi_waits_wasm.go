//go:build wasip1

package sdk

import "unsafe"

// waits is an optional import (docs/ABI.md, "Waits"): a module that never
// calls ReadWaits on the host does not import it, so it loads on hosts
// built before it.
//
//go:wasmimport loadout_v2 waits
func hostWaits(p unsafe.Pointer, n uint32, buf unsafe.Pointer, limit uint32) int32

// Waits implements WaitReader through the `waits` import: false when the
// host refuses (an unknown model, a host that keeps none) or the reply
// does not decode.
func (wasmEffects) Waits(model string) (WaitStats, bool) {
	for {
		n := hostWaits(strPtr(model), uint32(len(model)), bytesPtr(scratch), uint32(len(scratch)))
		b, retry, ok := reply(n)
		if retry {
			continue
		}
		var w WaitStats
		if !ok || decodeMessage(b, &w) != nil {
			return WaitStats{}, false
		}
		return w, true
	}
}
