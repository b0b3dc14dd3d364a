// Command badplan is a swapper module written against the raw ABI, not the
// SDK, whose every plan is not a Plan message: bytes that decode as no
// message of any version. The host must count that as a crash (the guest's
// state is unknown), as it counts a status outside the ABI.
package main

//lint:file-ignore U1000 the functions are reached through //go:wasmexport

import "unsafe"

var (
	in, out [4096]byte
	buffers [4]uint32
)

//go:wasmexport loadout_abi_version
func abiVersion() uint32 { return 3 }

//go:wasmexport loadout_policy_kind
func policyKind() uint32 { return 2 } // a swapper

//go:wasmexport abi_buffers
func abiBuffers() uint32 {
	buffers = [4]uint32{
		uint32(uintptr(unsafe.Pointer(&in[0]))), uint32(len(in)),
		uint32(uintptr(unsafe.Pointer(&out[0]))), uint32(len(out)),
	}
	return uint32(uintptr(unsafe.Pointer(&buffers[0])))
}

//go:wasmexport init
func initPolicy(n uint32) uint64 { return 0 }

//go:wasmexport plan
func plan(n uint32) uint64 {
	for i := range 32 {
		out[i] = byte(0xA5 ^ i)
	}
	return 32 // status 0 (OK), 32 bytes of output
}

//go:wasmexport on_swap_start
func onSwapStart(n uint32) uint64 { return 0 }

func main() {}
