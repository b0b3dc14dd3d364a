//go:build wasip1

package sdk

import "unsafe"

// replicas is an optional import (docs/ABI.md, "Replicas"): a module that
// never calls ReadReplicas on the host does not import it, so it loads on
// hosts built before it.
//
//go:wasmimport loadout_v2 replicas
func hostReplicas(p unsafe.Pointer, n uint32, buf unsafe.Pointer, limit uint32) int32

// Replicas implements ReplicaReader through the `replicas` import.
func (wasmEffects) Replicas(model string) (ReplicaSet, bool) {
	for {
		n := hostReplicas(strPtr(model), uint32(len(model)), bytesPtr(scratch), uint32(len(scratch)))
		b, retry, ok := reply(n)
		if retry {
			continue
		}
		var set ReplicaSet
		if !ok || decodeMessage(b, &set) != nil {
			return ReplicaSet{}, false
		}
		return set, true
	}
}
