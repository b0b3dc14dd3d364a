// Package policy is the host half of Loadout's policy ABI (versions 2 and
// 3, imports in module loadout_v2; see docs/ABI.md): it loads policy
// modules (.wasm), checks them, instantiates them in wazero's sandbox and
// calls them, each in its own ABI version (Module.ABIVersion): a version 2
// module gets version 2 messages, with no residency and no eviction modes.
//
// It owns:
//
//   - the wazero runtime, its compilation cache and its limits (memory pages,
//     the per-call deadline);
//   - load checks: a module is refused, with a message naming the file, when
//     it is not Wasm, imports anything but loadout_v2 and WASI preview 1,
//     speaks an ABI version outside 2 to 3, registers no policy, or lacks an export of
//     its kind with exactly the signature docs/ABI.md gives;
//   - the host imports of module loadout_v2, which forward a guest's effects
//     and reads to the sdk.Effects or sdk.Host of the instance that made the
//     call;
//   - crash handling (DESIGN.md run-loop rule 7): a trap, exit, panic,
//     deadline overrun or exhausted memory discards the instance, makes a
//     fresh one with the same settings and returns a *CrashError; a policy
//     that crashes too often is disabled and answers ErrUnhealthy.
//
// It must not touch HTTP, processes, queues or GPUs: it knows models only as
// names inside encoded messages, and everything it does to the world goes
// through the sdk.Effects the run loop (host/router) passes in. The router
// calls a Scheduler or Swapper from one goroutine only; the sole nesting is a
// scheduler's plan import, which reaches a Swapper through sdk.Effects.Plan
// while the scheduler's call is still in progress.
//
// Inspect and Bench are the logic behind `loadout policy check` and
// `loadout policy bench`.
package policy
