// Command adaptive is Loadout's learning swapper (eviction) policy: when a
// model does not fit, it evicts by the order of one of two experts —
// least recently used (Ollama's rule, prioritylru's) or least often
// requested — and learns which one the traffic rewards from the evictions
// on which they disagree. It is built to a WebAssembly module
// (GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared) and embedded in
// the loadout binary as the built-in router "adaptive"; it is written
// against the public SDK only, as an operator's own router would be.
//
// # Why two experts
//
// Recency and frequency each fail on traffic the other serves well. When
// a few models take most requests and the rest are asked for now and then
// (a Zipf law over fine-tunes), LRU evicts a popular model for every rare
// request that comes in after it was last used, and loads it again soon
// after; counting requests keeps the popular ones. When agents move
// between small working sets (a planner, a coder, an embedder, then
// another set), the counts remember the last set long after it is gone
// and LRU is right. The swapper keeps both orders and follows the expert
// with the higher weight, as LeCaR does for caches (Vietri et al.,
// HotStorage 2018), but judges them by a duel rather than a regret
// history.
//
// # Duels
//
// When the expert in charge evicts x where the other would have evicted
// y, that is a duel, decided by Belady's rule after the fact: whichever
// of x and y is asked for first should have stayed. Each later real swap
// (OnSwapStart) settles what it can from the host's request counts: the
// swap's target was asked for just now, and a model whose count grew
// since the duel began, not the target, was asked for before it; two that
// both grew, neither the target, give no verdict. The loser's weight is
// multiplied by e^-rate (0.45 by default) and the weights summed to 1
// again, neither below 0.01, so the lead changes within a few duels when
// the traffic does. At most 64 duels wait for a verdict.
//
// # What it does when a model must load
//
// The mechanics are sdk/evict's, as in prioritylru: a model loaded or
// loading needs nothing; one that fits as things are evicts nothing; one
// that does not fit evicts running models on the GPUs it may use, one at
// a time, until it fits, keeps back every victim whose memory turned out
// not to be needed, and fails with a clear error if it cannot fit at all.
// Pinned and higher-priority models are never evicted. Victims go:
//
//  1. stopping models first (free to take), then idle ones, then busy or
//     starting ones (the scheduler waits for those: rule 6);
//  2. within a class, the lowest priority first;
//  3. then in the leading expert's order: LRU the least recently used
//     first; LFU the lowest request count first, then the least recently
//     used;
//  4. then by name.
//
// The counts come from the host (sdk.ReadDemand, the optional `demand`
// import: the requests that arrived for each model). At every real swap
// the swapper folds the requests since the previous swap into each
// model's count, multiplying what was there by decay (0.9 by default):
// the LFU expert forgets by swaps, not by seconds, so it behaves alike
// whether the box swaps every second or every hour. A plan counts the
// requests since the last swap in full. Plan itself keeps no state
// (sdk.Swapper's contract): weights, counts and duels change only in
// OnSwapStart. On a host without the `demand` import every count is 0
// and the swapper is prioritylru.
//
// On a saturated box, where the moment a cold model can load is the
// moment one model goes idle, there is no choice to make and it decides
// as LRU does (docs/RATIONALE.md, "A learning router").
//
// # Settings
//
//	routing:
//	  router:
//	    use: adaptive
//	    settings: {decay: 0.9, rate: 0.45, margin: 512MiB}
//
// decay is in (0, 1]; rate is above 0; margin is the bytes left free on
// each GPU the model uses, beyond its VRAM figure.
package main
