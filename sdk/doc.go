// Package sdk is the policy SDK for Loadout's policy ABI, version 3
// (ABIVersion; the host imports are module `loadout_v2`, docs/ABI.md).
//
// A policy is an ordinary Go package that implements Scheduler (the queue and
// the decision tree: serve, join a swap, queue, or start a swap) or Swapper
// (eviction: which running models must stop before a target can load, and,
// with JobPlanner, which idle models a GPU job evicts), and registers a
// factory for it from an init function:
//
//	func init() { sdk.RegisterScheduler(New) }
//	func main() {}
//
// Built with GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared, the same
// package becomes a sandboxed policy module that Loadout loads at run time;
// built natively, it is unit-tested with plain `go test` through
// sdk/policytest. The SDK owns everything about the ABI: the compact binary
// codec (codec.go, and guestdecode.go's shortcuts for the guest), the
// exports and imports (abi_wasm.go, wasip1 only), snapshot deltas
// (snapshot_delta.go), panic recovery and the yield at the end of each
// export. The host (host/policy)
// uses the same types and codec, so both halves agree by construction.
//
// What a host offers beyond Effects is found by type assertion on the
// Effects, so a policy written before it works unchanged: Admitter (the
// warm path), TickRequester (ticks on demand), and the reads
// ReadSnapshot, ReadReplicas, ReadDemand and ReadWaits fall back where a host lacks
// them.
//
// Policies are deterministic: time is an input (every event carries Now, in
// Unix nanoseconds) and the sandbox gives no clock, filesystem, network or
// environment. A recorded trace therefore replays bit for bit.
package sdk
