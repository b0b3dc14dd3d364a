// Package logs keeps each model server's recent output (stdout and
// stderr, as its backend plugin reports it) in a bounded ring per model,
// Loadout's own log lines in one more, both together in another, as
// llama-swap's log monitors do (proxy, upstream and both), and fans new
// lines out to live readers (GET /logs/stream). A reader that does not
// keep up is dropped; appending never blocks.
//
// The lines arrive through the host's log: backend plugins log every line
// of their model server as a "model server output" record with model,
// stream and line attributes, and Handler, wrapped around the logger the
// plugin launchers use, takes those records into a Store. No plugin RPC is
// needed. ProxyHandler, beside the host's own log output, takes the
// host's records. The package knows nothing of HTTP; host/proxy serves it.
package logs
