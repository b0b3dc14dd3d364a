// Package evict is the eviction machinery every VRAM-aware router shares:
// given the host's snapshot and the model that must load, it checks
// whether the model fits as things are, and if not evicts running models
// one at a time, in an order the policy gives, until it fits; then it
// keeps back every victim whose memory turned out not to be needed, so the
// fewest models stop. Where the model goes is sdk/placement's rule, the
// one the host's lease ledger applies, so a plan made here is the
// placement the host leases.
//
// A policy supplies only what makes it itself: which running models may
// be evicted at all (Planner.Eligible) and in what order (Planner.Order).
// policies/prioritylru (lowest priority, least recently used) and
// policies/ollama (soonest keep-alive expiry) are this package with two
// orders.
//
// It also parses the placement constraints the host adds to every
// router's settings (ParsePlacement) and turns them into per-model rules
// (Rules).
//
// For routers that learn from the host's demand counts (adaptive,
// foresight) it keeps the machinery they share: duels and trials settled
// by Belady's rule after the fact (Challenge, Settle, DuelVerdict; Trial,
// SettleTrials, for many orders judged on one eviction), a
// model's entry in the demand list (Demand, Requests), the models asked
// for since a router's last count in the order of their last use
// (AskedSince, which the cache routers use too), and a router's own state
// per model kept in the demand list's order (Rows).
//
// S3FIFO, SIEVE and GDSF are three classical cache rules' state, one
// type each for both of its users: `loadout simulate`'s anchor feeds it a
// model sequence (Access), and the s3fifo, sieve or gdsf router feeds it
// the demand counts at swaps and reads its eviction order (Hit, Admit,
// Order, Evicted).
//
// It compiles to wasip1 and allocates nothing per plan once its scratch
// space has grown (in Go compiled to Wasm an allocation costs ~1.3 µs,
// and a plan is asked for on every request). It must not touch the host:
// everything it knows comes from sdk.Host reads.
package evict
