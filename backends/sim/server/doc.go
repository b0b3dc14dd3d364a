// Package simserver is a simulated OpenAI-compatible model server: it takes
// a configurable time to load (answering /health with 503 until then),
// reports a configurable VRAM footprint, and generates deterministic text at
// a configurable token rate with iteration-level continuous batching: one
// decode loop advances up to max_batch sequences per step, a new request
// joins at the next step, and a step takes longer the larger the batch.
// It sleeps and wakes through a copy of vLLM's sleep API (POST
// /sleep?level=N, POST /wake_up, GET /is_sleeping): asleep, it reports no
// VRAM and answers 503 to inference; a wake takes --wake-time (level 1) or
// --wake-time-level-2.
//
// It owns the HTTP endpoints and the decode loop of one simulated server
// process; Run is what `loadout sim-server` calls. It touches no GPU and no
// file, and knows nothing of plugins or the host.
package simserver
