// Package router owns the run loop: the one goroutine that holds all
// scheduling state (the process table, the waiting callers, the active
// swaps, in-flight counts) and turns what happens — a request, a cancel, a
// finished swap, a finished serve, an unload, a tick, a crash, shutdown —
// into calls of the scheduler policy. It implements sdk.Effects, the policy's
// window onto the world, and checks every call a policy makes, so a buggy
// policy can fail requests but never strand or drop one.
//
// The rules it enforces are DESIGN.md's run-loop rules; each is named where
// it is enforced. The package knows nothing of HTTP (host/proxy calls
// Acquire and reverse-proxies to the granted upstream) nor of Wasm (policies
// arrive as SchedulerPolicy and SwapperPolicy values; host/policy makes them).
// Processes are behind the Process interface (process.go).
package router
