// Package sim is Loadout's trace replay in virtual time (`loadout
// simulate`): the request trace format (ReadTrace, TraceWriter, also what
// `serve --record-trace` writes), workloads made from public traces with a
// documented model mix (ReadAzure, Assign), and the limits a policy's cold
// loads are read against (Bounds: LRU and Belady's offline optimum for k
// equal slots), and the report of a run (Report: JSON, and a
// self-contained HTML page whose timelines gonum/plot draws as inline
// SVG). It reads no clock and starts no process: everything here is a pure
// function of its inputs, so a replay and its report are reproducible
// byte for byte.
package sim

//go:generate go run ./gentraces ../../../shared/traces/azure-llm-2023 ../../testdata/traces
