// Command foresight is Loadout's forecasting swapper (eviction) policy:
// when a model does not fit, it evicts the running model whose next
// requests are expected to cost least — its forecast share of the demand
// times its load time, per byte of GPU memory it gives back — the demand
// forecast by whichever of a dozen estimators has predicted the traffic
// best so far. It is built to a WebAssembly module (GOOS=wasip1
// GOARCH=wasm go build -buildmode=c-shared) and embedded in the loadout
// binary as the built-in router "foresight"; it is written against the
// public SDK only, as an operator's own router would be.
//
// # The forecast
//
// The swapper sees the traffic only at swaps: each one, it reads the
// host's request counts (sdk.ReadDemand, the optional `demand` import).
// A model whose count grew since the previous swap was asked for in
// between: that is one observation, and the clock the swapper keeps
// counts observations, not seconds, so a quiet night or weekend ages
// nothing. Each estimator keeps, for every model, a count decayed by
// half every H observations, H one of 1, 4, 16, 64, 256, 1024 and 4096
// (a short H is close to LRU, a long one to LFU), and counts either
// requests or bursts (1 for a model asked for at all between two swaps:
// a batch client's twenty requests to one model are one sign of demand,
// and fifo serves them together anyway). That is 14 estimators.
//
// # Learning which estimator to follow
//
// At every swap, before folding in what it saw, each estimator is scored
// on it: the log of the share it gave (Laplace's rule, every model
// credited half an observation) to each model asked for since the
// previous swap. Scores fade by 0.995 a swap, so the choice follows the
// last few hundred swaps. Within a way of counting, the best-scored
// estimator is the one whose forecasts have come true most often: a
// half-life learned from the traffic rather than set by the operator.
//
// The scores cannot choose the way of counting, and on stationary
// traffic they prefer short half-lives whose noise misorders a small
// box's few models: what they score is the set of models asked for
// between two swaps, which is what a count of bursts forecasts, not the
// order of evictions. So the forecast is chosen by its evictions: at
// every swap that evicts, each of the fourteen estimators' victim among
// the swap's idle candidates is put on trial (evict.Trial), settled at
// later swaps by Belady's rule after the fact — a victim asked for while
// another estimator's victim has not been yet should have stayed, and
// every estimator that chose it loses the trial. Lost trials fade by
// 0.995 a swap, and the forecast follows whichever of three has lost
// fewest: the best-scored estimator counting bursts, the best-scored
// counting requests, and decayed LFU's (requests, the longest memory) —
// bursts' first among equals, as at start-up. At most 64 trials wait for
// a verdict.
//
// A trial judges one eviction among the models the box holds, which the
// forecast followed so far chose; what an estimator's own choices come
// to when they compound, none sees. So each estimator also keeps a
// shadow: the models its own cache would hold in the box's room (the
// most bytes run at once), played through the models asked for at every
// swap (between two swaps in the order of their last use), evicting its
// least value per byte. Misses fade by 0.995 a swap, and where another
// estimator's shadow has missed more than 5% less than the trials'
// choice's, the forecast follows it instead (on chat users beside
// agents, a count of bursts with a half-life of one or four
// observations, which neither the scores nor the trials pick).
//
// # A duel with LRU
//
// Where agents move between small working sets, last use orders models
// more finely than any count (every model observed between two swaps is
// observed at once), so the forecast's order has a rival: LRU's. When
// the order followed evicts x where the other would have evicted y, that
// is a duel, settled at later swaps by Belady's rule after the fact, as
// in adaptive: whichever of x and y is asked for first should have
// stayed, and the expert that chose to evict it has its weight
// multiplied by e^-0.3 (the weights then summed to 1, neither below
// 0.01). The plans follow LRU's order while its weight is above 0.7 —
// it must have won clearly more of the recent duels than it lost — and
// the forecast's otherwise: the forecast is the better expert on every
// other shape of traffic measured, and a lucky streak of LRU's on Zipf
// traffic should not hand it the lead. At most 64 duels wait for a
// verdict.
//
// The duels judge one eviction at a time, and their weights swing with
// streaks; what the two orders come to when their choices compound,
// their own caches tell. So LRU keeps a shadow too (below), and its
// order is also followed while its shadow has missed less than the
// shadow of the estimator the forecast follows, both counted over about
// the last 1,000 swaps: users in conversations, who ask one model
// several times in a row, minutes apart, make LRU the best classical
// rule, and there the duels had handed the forecast a third of the
// swaps.
//
// The likelihood can tell sooner: while the best-scored bursts
// estimator is the one of half-life 1 observation, the models asked for
// between the last two swaps are what predicts the next ones — the
// working set moves — and that estimator's order is a coarse recency, so
// LRU's order is followed then too, whatever the duels' weights (on agent
// traffic the duels took some 60 swaps to hand LRU the lead; on Zipf and
// production traffic the shortest memory almost never scores best).
//
// # The order of reuse
//
// LRU's order has a blind spot: an agent cycling through more models
// than the box holds (a planner, a coder and an embedder on two GPUs)
// asks, every request, for the model LRU evicted last, and every request
// is a cold load. So the LRU expert's order has a rival of its own: the
// order of reuse, which expects each model's next request its last gap
// between two requests after its last one (gaps counted in the box's
// requests, so a quiet night stretches none), and evicts the model
// expected last — in a cycle, the one asked for last, Belady's choice: a
// load every other request on a three-model cycle over two slots. A
// model more than one request late, back after more than four times its
// last gap, or seen once is expected as long after now as it has been
// away, so a cycle's models go in LRU's order once the agent moves on. As
// the forecast's value is, its urgency (1 over 1 + the requests until
// that next one) is weighed by the model's load time per byte. At every
// swap that evicts, LRU's victims and the order of reuse's are dueled,
// settled as the experts' duels are, with their own weights; the LRU
// expert follows the order of reuse while its weight is above 0.7 (on
// cycles it wins nearly every duel; elsewhere the two seldom disagree),
// and LRU's otherwise. In logs, expert=reuse.
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
//     starting ones (the scheduler waits for those), unless the wait is
//     free (below);
//  2. within a class, the lowest priority first;
//  3. then the lowest value per byte (the least recently used first
//     while LRU leads the duels, the least urgent per byte while the
//     order of reuse does): (forecast count + ½) × the model's
//     last cold load in seconds (the host's figure; 1 before the first),
//     ÷ its VRAM. With equal models this is the least expected demand;
//     with mixed ones, the expected load seconds its eviction causes per
//     byte it frees (GreedyDual-Size's weighing, with a learned
//     frequency);
//  4. then the least recently used.
//
// # Waits that are free
//
// A busy or starting model is evicted only after the idle ones because
// the request that needs its room must wait until it is idle, and a wait
// moves the tail of the queueing delay. Not always: where cold loads take
// one time, the 95th percentile of the waits is one cold load, many
// requests wait exactly that, and fewer than 5% wait longer — a few more
// may, and the percentile stays where it is. The host's record of waits
// (sdk.ReadWaits, the optional `waits` import) says how many: when both
// the box's record and the target's own have room for every request held
// now to end above their 95th percentile (WaitStats.Slack), the plan
// being made ranks busy and starting models by value with the idle ones
// (step 1's classes become one, as at patience 1), while the forecast
// leads. Every request that may end above a percentile is counted
// against its room first, so neither should rise — the box's, which a
// rule of "a p95 no worse than LRU's" reads, nor the target's — and the
// loads a frequency order loses to the run loop (its victim, loaded
// seconds before for a rare model, still busy when the next rare one
// comes) are won back where the traffic leaves room. What pays is the
// p99: the requests that wait were above the p95 already, and wait
// longer (on the Azure hours replayed on four slots, 10 s → 16–20 s).
// The record is the host's most recent grants (4,096 in the router), so
// the percentile kept is that window's: where a stretch of slow loads
// lifts the window's p95 above the whole run's, the room it lends can
// lift the run's (prod-mixed-1w seed 82: 14.3 s → 17.9 s; over 52
// other mixed-size traces the same nine are above LRU's p95 with free
// waits or without: docs/BENCHMARKS.md, "Ten fresh seeds of the
// production families").
// On a host without the record, or with patience set, the order is as
// above.
//
// A plan counts the requests since the last swap in full.
// Plan itself keeps no state (sdk.Swapper's contract): counts, clock,
// scores, weights, duels and trials change only in OnSwapStart. The
// sleep tier follows the leader: the most forecast load seconds a wake
// saves per byte of host memory, the soonest expected back while the
// order of reuse leads, or the most recently used while LRU's does. On a
// host without the `demand` import every value is alike and the swapper
// is LRU.
//
// # Settings
//
//	routing:
//	  router:
//	    use: foresight
//	    settings: {margin: 512MiB, patience: 0, free_waits: true}
//
// margin is the bytes left free on each GPU the model uses, beyond its
// VRAM figure. What other routers take as settings (a half-life, a decay)
// it learns. It leaves the operator two trades of waits for cold loads.
// free_waits (default true) spends the waits that leave the recent p95
// where it is (above, "Waits that are free"); false keeps the p99 too,
// at the loads they save (2.3% over the mixed-size traces measured). patience, in [0, 1] (default 0), spends more: above
// 0, while the forecast leads, a model that is
// loading or serving may be evicted in place of an idle one (step 1's
// classes become one), its value divided by patience, and the request
// that needs the room waits until it is idle. At 1 the order is by
// value alone: fewer cold loads and longer waits (on the Azure Zipf
// traces, 8–24% fewer loads at a p95 queueing delay 1.4–2× LRU's). Fit
// it to recorded traffic with `loadout policy tune --router foresight
// --set router.patience=0,0.25,0.5,1 --max-p95 20s` (the fewest cold
// loads at a p95 wait you accept). Why it is built this way, and
// what it was measured against: docs/RATIONALE.md ("A router that
// forecasts demand").
package main
