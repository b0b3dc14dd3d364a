// Command sieve is SIEVE (Zhang et al., "SIEVE is Simpler than LRU: an
// Efficient Turn-Key Eviction Algorithm for Web Caches", NSDI 2024) as a
// Loadout router (swapper) policy: the classical anchor closest to
// foresight on the production-shaped traces, run through the run loop, so
// that `loadout simulate --compare router=all` holds every router against
// it on the loop's terms and not only on the model sequence's, and so an
// operator who wants a plain, well-studied rule can have it. It is built
// to a WebAssembly module and embedded in the loadout binary as the
// built-in router "sieve"; it is written against the public SDK only.
//
// # The rule
//
// One FIFO of the models held, each with a visited bit, set when the
// model is asked for while held (sdk/evict's SIEVE, the very state
// `loadout simulate`'s SIEVE anchor keeps). To evict, a hand walks from
// the oldest model toward the newest, clearing the bits it passes, evicts
// the first model whose bit is clear, and moves on to the next newer
// model, back to the oldest past the newest. A model loaded goes in as
// the newest, its bit clear. A model asked for again survives the hand's
// next pass; one asked for once goes when the hand reaches it.
//
// The router sees the traffic at swaps, through the host's per-model
// request counts (the optional `demand` import): a held model whose count
// grew since the last swap was asked for, which is all a visited bit
// records, so the state is the anchor's exactly. The number of slots is
// the most models that have run at once. A model that stops for another
// reason (its TTL, an unload, a crash) leaves the queue as if evicted. On
// a replay of a trace's model sequence (`simulate --sequence`) it makes
// the SIEVE anchor's cold loads exactly
// (TestSimulate_AnchorRoutersMatchTheirAnchors).
//
// # What it does when a model must load
//
// The mechanics are sdk/evict's, as in prioritylru, and the router is
// policies/internal/cacherouter, shared with s3fifo: a model loaded or
// loading needs nothing; one that fits as things are evicts nothing; one
// that does not fit evicts running models on the GPUs it may use, one at
// a time, until it fits, keeps back every victim whose memory turned out
// not to be needed, and fails with a clear error if it cannot fit at all.
// Pinned and higher-priority models are never evicted. Victims go:
//
//  1. stopping models first, then idle ones, then busy or starting ones
//     (the scheduler waits for those);
//  2. within a class, the lowest priority first;
//  3. then SIEVE's order (the one the hand would evict first first; a
//     running model it has not seen loaded, before all);
//  4. then the least recently used.
//
// Where SIEVE's own victim is busy the next in its order goes; the hand
// moves on to the model evicted, passing the busy one by.
//
// # Settings
//
// All optional; an unknown key is an error at load.
//
//	routing:
//	  router:
//	    use: sieve
//	    settings:
//	      margin: 512MiB   # kept free on every GPU a model uses, beyond its
//	                       # VRAM figure. Default 0.
//
// The host adds placement (the models' gpus: and split:, the box's
// placement:), as for prioritylru.
package main
