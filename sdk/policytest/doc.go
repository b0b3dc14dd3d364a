// Package policytest runs a Loadout policy natively, in a plain `go test`,
// against Host: a fake host that implements sdk.Effects the way the real run
// loop does and records every effect the policy asks for.
//
// A scheduler test builds a Host with its models, makes the scheduler with
// the Host as its Effects, attaches it, and drives a scenario with the
// Host's helpers, which deliver events the way the run loop would:
//
//	h := policytest.NewHost(t,
//		sdk.ModelInfo{Name: "a"},
//		sdk.ModelInfo{Name: "b"})
//	h.Swapper = policytest.NativeSwapper(mySwapper) // optional; nil plans no evictions
//	s, err := New(h, []byte(`{}`))                  // the policy's factory
//	if err != nil { t.Fatal(err) }
//	h.Scheduler = policytest.Native(s)
//
//	h.Request(1, "a")       // OnRequest: the policy starts a swap for a
//	h.CompleteSwap("a", "") // a is ready: OnSwapDone
//	if !h.Granted(1) { t.Fatal(h.Calls) }
//
// Scheduler and Swapper are the policy interfaces with an error on every
// method, so the same scenario drives a native policy (through Native and
// NativeSwapper) or a WebAssembly module loaded by host/policy, whose
// scheduler and swapper have exactly these methods.
//
// The Host checks the host-side contract as it goes (sdk.Scheduler's and
// DESIGN.md's run-loop rules): every request must end, within its
// OnRequest, granted, errored or held with a queue position; a caller is
// granted or failed at most once; a cancelled caller is never touched
// again; a model that is not ready is never granted; a swap that would
// evict a busy model is refused. A breach is reported with the test's
// Errorf, so a policy test fails with a message naming the rule.
//
// Everything is synchronous and deterministic: no goroutines, no sleeps,
// and time is the Host's Now field, advanced by the test.
//
// # Scenario files
//
// A scenario can also be written as data: a YAML file with the policy's
// settings, the models the host starts with, a sequence of events and the
// effects each must cause (Scenario; the format is in docs/POLICIES.md).
// RunScenarioFiles runs a directory of them in a plain `go test`:
//
//	func TestScenarios(t *testing.T) {
//		policytest.RunScenarioFiles(t, policytest.SchedulerPolicy(New), "testdata/scenarios/*.yaml")
//	}
//
// and `loadout policy test FILE.wasm testdata/scenarios/*.yaml` runs the
// same files against the built module in the real sandbox, so the native
// policy and its WebAssembly build (or a policy written in another
// language) are held to the same expectations. A failure names the file,
// the line and the step, and shows the first effect that differs beside
// every effect of that step.
//
// # A router on equal slots
//
// Box benches a router's order on a GPU of K equal slots, the terms of
// the classical cache anchors (`simulate --sequence`): requests one at a
// time, a swap on every miss, the cold loads counted. A case written once
// against a MakeSwapper runs the native router and its WebAssembly build
// alike:
//
//	b := policytest.NewBox(t, policytest.NativeSwapperOf(New), `{}`, 2, "hot", "r1", "r2", "r3")
//	b.AskAll(policytest.Skewed(30)) // LRU loads hot in every round
//	if b.Loads["hot"] > 3 { t.Errorf("hot loaded %d times", b.Loads["hot"]) }
//
// KeepsTheHotModel is that case whole, for any router that weighs how
// often models are asked for.
package policytest
