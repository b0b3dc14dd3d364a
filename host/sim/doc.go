// Package sim is Loadout's trace replay in virtual time (`loadout
// simulate`): the request trace format (ReadTrace, TraceWriter; Recorder
// writes live traffic in it for `serve --record-trace`), workloads made
// from public traces with a documented model mix (ReadAzure, Assign), and
// the limits a policy's cold loads are read against (Bounds: LRU and
// Belady's offline optimum for k equal slots). It reads no clock and
// starts no process: everything here is a pure function of its inputs, so
// a replay is reproducible byte for byte.
package sim

//go:generate go run ./gentraces ../../../shared/traces/azure-llm-2023 ../../testdata/traces
