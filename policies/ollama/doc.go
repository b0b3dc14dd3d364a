// Command ollama is Ollama's eviction rule as a Loadout router (swapper)
// policy, so that `loadout simulate` can hold Loadout's own routers
// against it on the same trace: when a model does not fit, evict the idle
// model whose keep-alive expires soonest (Ollama's scheduler, server/
// sched.go: findRunnerToUnload prefers a runner with no references, and a
// runner's keep-alive timer starts at its last use). With one keep-alive
// for every model that is least recently used among the idle ones. It is
// built to a WebAssembly module and embedded in the loadout binary as the
// built-in router "ollama".
//
// # What it does when a model must load
//
//  1. A model that is already loaded or loading needs nothing; nor does
//     one with no VRAM figure (the host places it), nor anything on a box
//     with no GPU.
//  2. If the model fits as things are, nothing is evicted and the plan
//     names its GPUs by the host's placement rule (sdk/placement).
//  3. Otherwise running models are evicted, one at a time, until it fits:
//     first models already stopping, then idle ones, the one whose
//     keep-alive expires soonest first (last use + the model's ttl; a
//     model with no ttl never expires, so it goes after every one that
//     does, least recently used first among them), by name last; then busy
//     ones in the same order (the scheduler waits until the one named is
//     idle, as Ollama waits for the runner it picked). Then every victim
//     whose memory turned out not to be needed is kept after all.
//  4. If it does not fit even with every model it may evict gone, the plan
//     fails with an error saying how much could be freed.
//
// Ollama has no priorities: a model's priority: is ignored here. A pinned
// model is never evicted (a Loadout guarantee every router keeps). Steps
// 1, 2 and 4 and the mechanics of 3 are sdk/evict's, shared with
// prioritylru; only the order is this policy's.
//
// # Settings
//
// All optional; an unknown key is an error at load.
//
//	routing:
//	  router:
//	    use: ollama
//	    settings:
//	      margin: 512MiB   # kept free on every GPU a model uses, beyond its
//	                       # VRAM figure. Default 0.
//
// The host adds placement (the models' gpus: and split:, the box's
// placement:), as for prioritylru.
package main
