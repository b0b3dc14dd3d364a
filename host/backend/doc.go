// Package backend launches and supervises backend plugin processes
// (hashicorp/go-plugin, see plugins/) and serves the run loop's Process
// seam with them: a PluginLauncher owns one plugin binary's process, shared
// by the models of that backend, and a PluginProcess starts one model's
// server through it. The run loop (host/router) knows only the Process and
// Instance interfaces, so it depends on neither go-plugin nor gRPC.
package backend
