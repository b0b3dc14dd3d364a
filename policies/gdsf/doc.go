// Command gdsf is Greedy-Dual-Size-Frequency (Cherkasova, "Improving WWW
// Proxies Performance with Greedy-Dual-Size-Frequency Caching Policy",
// HP Labs HPL-98-69, 1998) as a Loadout router (swapper) policy: the
// classical anchor that comes closest to foresight on production-shaped
// traffic on two and three slots, run through the run loop, so that
// `loadout simulate --compare router=all` holds every router against it
// on the loop's terms and not only on the model sequence's, and so an
// operator who wants a plain, cost-aware rule can have it. It is built to
// a WebAssembly module and embedded in the loadout binary as the built-in
// router "gdsf"; it is written against the public SDK only.
//
// # The rule
//
// Each model held has a priority H = L + F·cost (sdk/evict's GDSF, the
// very state `loadout simulate`'s GDSF anchor keeps): F its requests
// since it was loaded, cost its cold load in seconds per GiB of VRAM (the
// host's figures: the last load measured, else the configured or
// estimated one; its VRAM estimate). The model of least H goes first
// (ties to the one used least recently), and L, which every H added
// later starts from, rises to it: a model once asked for often but not
// lately ages out, and a model slow to load per byte it holds stays
// longer than a quick one asked for as often. On K equal slots every
// model costs the same and the rule is LFU with dynamic aging.
//
// The router sees the traffic at swaps, through the host's per-model
// request counts (the optional `demand` import): a held model whose count
// grew since the last swap was asked for that many times, counted in the
// order the host last used them. A model that stops for another reason
// (its TTL, an unload, a crash) leaves as if evicted. On a replay of a
// trace's model sequence (`simulate --sequence`) on equal slots it makes
// the GDSF anchor's cold loads exactly
// (TestSimulate_AnchorRoutersMatchTheirAnchors).
//
// # What it does when a model must load
//
// The mechanics are sdk/evict's, as in prioritylru, and the router is
// policies/internal/cacherouter, shared with s3fifo and sieve: a model
// loaded or loading needs nothing; one that fits as things are evicts
// nothing; one that does not fit evicts running models on the GPUs it
// may use, one at a time, until it fits, keeps back every victim whose
// memory turned out not to be needed, and fails with a clear error if it
// cannot fit at all. Pinned and higher-priority models are never
// evicted. Victims go:
//
//  1. stopping models first, then idle ones, then busy or starting ones
//     (the scheduler waits for those);
//  2. within a class, the lowest priority first;
//  3. then GDSF's order (least H first; a running model it has not seen
//     loaded, before all);
//  4. then the least recently used.
//
// Where GDSF's own victim is busy the next in its order goes, and L rises
// only to the least H held, as GDSF's own eviction would have raised it.
//
// # Settings
//
// All optional; an unknown key is an error at load.
//
//	routing:
//	  router:
//	    use: gdsf
//	    settings:
//	      margin: 512MiB   # kept free on every GPU a model uses, beyond its
//	                       # VRAM figure. Default 0.
//
// The host adds placement (the models' gpus: and split:, the box's
// placement:), as for prioritylru.
package main
