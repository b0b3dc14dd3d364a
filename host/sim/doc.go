// Package sim is Loadout's trace replay in virtual time (`loadout
// simulate`): the replay itself (Run: the real run loop through
// router.Virtual and the real policies, with model servers simulated by
// backends/sim/decode's timing model), the request trace format
// (ReadTrace, TraceWriter; Recorder writes live traffic in it for `serve
// --record-trace`), workloads made from public traces with a documented
// model mix (ReadAzure, Assign), the limits a policy's cold loads are read
// against (Bounds: Belady's offline optimum and the classical online
// anchors for k equal slots; BoxBounds: with a LoadBound, Berger et al.'s
// flow bound on load seconds where models differ), generated
// production-like workloads (Productions),
// and the report of a run (Report: JSON, and a self-contained HTML page
// whose timelines gonum/plot draws as inline SVG). It reads no clock and
// starts no process: a replay and its report are a function of their
// inputs, reproducible byte for byte (but for the wall time a caller
// measures).
package sim

//go:generate go run ./gentraces ../../../shared/traces/azure-llm-2023 ../../testdata/traces
