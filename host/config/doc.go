// Package config turns Loadout's YAML configuration into a typed, validated
// Config.
//
// The format is llama-swap's (github.com/mostlygeek/llama-swap): a llama-swap
// configuration loads unchanged, with the same defaults, macro rules, ${PORT}
// assignment, alias and group rules, and rejects what llama-swap rejects
// (and a filter naming a protected field, which llama-swap drops
// silently). Its model filters, metadata, capabilities, timeouts and
// compat, and its logToStdout, logTimeFormat, upstream, ui,
// metricsMaxInMemory, captureBuffer, profiles and selectors keys are acted
// on (profiles.go, selectors.go: a selector whose id is a model id, an
// alias or a peer model's name, or whose target is a selector, is an error
// at its line). Keys llama-swap has and Loadout
// does not act on yet are accepted with a Warning naming the key and why. Loadout adds a few keys of its own: per model `backend`,
// `options`, `vram`, `priority`, `pinned`, and the placement constraints
// `gpus` and `split` (checked against the devices with CheckPlacement);
// top-level `gpus` and `placement`; per peer (llama-swap's `peers:`, which
// Loadout honours) `health`; and
// routing.scheduler / routing.router may name a WebAssembly policy module with
// `wasm:` instead of a built-in with `use:`. Top-level keys starting with "x-"
// are ignored, as in docker compose, to hold YAML anchors (&name) that models
// merge with <<: *name. Any other unknown key is an error.
//
// Every problem is reported as file:line:col, the key path and what was wrong,
// and Parse reports all the problems it finds, not only the first:
//
//	config.yaml:14:5: models.llama.ttl: want a whole number of seconds, got "abc"
//
// The order of work, which matters when macros are involved, follows
// llama-swap: ${env.VAR} is substituted everywhere first (an unset variable is
// an error); then, per model in sorted id order, comment lines are dropped from
// cmd and cmdStop, MODEL_ID, global and model macros are substituted in every
// value of the model, ${PORT} is assigned, and any ${name} left over is an
// error. Global macros are also substituted in the other sections.
//
// ParseWith fits the numbering of ${PORT} to the host (Options): ports are
// still handed out in that order, but Loadout's own listen port and ports
// another process holds are skipped, each with a warning, so a model server
// is never told to listen where something else answers; and a cmd model's
// proxy that points at Loadout's own listen address is an error. Parse
// checks the file alone.
//
// The package owns parsing and validation only. It does not start processes
// (whether a port is taken is asked of Options.PortFree),
// open policy modules or talk to GPUs: it checks that a wasm path or backend
// plugin path exists and hands the rest to host/policy, host/router and
// host/gpu. Policy settings reach policies as JSON (SchedulerSettingsJSON,
// RouterSettingsJSON); backend options as JSON (Model.OptionsJSON).
package config
