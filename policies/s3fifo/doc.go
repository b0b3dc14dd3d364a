// Command s3fifo is S3-FIFO (Yang et al., "FIFO queues are all you need
// for cache eviction", SOSP 2023) as a Loadout router (swapper) policy:
// the classical anchor that comes closest to foresight on bursty traffic,
// run through the run loop, so that `loadout simulate --compare
// router=all` holds every router against it on the loop's terms and not
// only on the model sequence's, and so an operator who wants a plain,
// well-studied rule can have it. It is built to a WebAssembly module and
// embedded in the loadout binary as the built-in router "s3fifo"; it is
// written against the public SDK only.
//
// # The rule
//
// Three FIFO queues of model names (sdk/evict's S3FIFO, the very state
// `loadout simulate`'s S3-FIFO anchor keeps): a small queue S of a tenth
// of the slots (at least one), a main queue M of the rest, and a ghost
// queue G remembering as many evicted names as M holds. A model loaded
// enters S, or M if G remembers it. To evict, S's oldest leaves (to G)
// unless it was asked for more than once while in S, which moves it to
// M; M's oldest is given another round, its 2-bit counter decremented,
// while the counter is above 0. One-hit models leave quickly; models
// asked for again stay.
//
// The router sees the traffic at swaps, through the host's per-model
// request counts (the optional `demand` import): a held model whose count
// grew since the last swap was asked for that many times (its counter
// saturates at 3). The number of slots is the most models that have run
// at once. A model that stops for another reason (its TTL, an unload, a
// crash) leaves the queues as if evicted. On a replay of a trace's model
// sequence (`simulate --sequence`) it makes the S3-FIFO anchor's cold
// loads exactly (TestSimulate_AnchorRoutersMatchTheirAnchors).
//
// # What it does when a model must load
//
// The mechanics are sdk/evict's, as in prioritylru, and the router is
// policies/internal/cacherouter, shared with sieve: a model loaded or
// loading needs nothing; one that fits as things are evicts nothing; one
// that does not fit evicts running models on the GPUs it may use, one at
// a time, until it fits, keeps back every victim whose memory turned out
// not to be needed, and fails with a clear error if it cannot fit at all.
// Pinned and higher-priority models are never evicted. Victims go:
//
//  1. stopping models first, then idle ones, then busy or starting ones
//     (the scheduler waits for those);
//  2. within a class, the lowest priority first;
//  3. then S3-FIFO's order (the one it would evict first first; a running
//     model it has not seen loaded, before all);
//  4. then the least recently used.
//
// Where S3-FIFO's own victim is busy the next in its order goes, and the
// queues record that eviction where it was made.
//
// # Settings
//
// All optional; an unknown key is an error at load.
//
//	routing:
//	  router:
//	    use: s3fifo
//	    settings:
//	      margin: 512MiB   # kept free on every GPU a model uses, beyond its
//	                       # VRAM figure. Default 0.
//
// The host adds placement (the models' gpus: and split:, the box's
// placement:), as for prioritylru.
package main
