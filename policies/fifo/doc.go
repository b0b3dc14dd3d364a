// Command fifo is Loadout's default scheduler policy: llama-swap's FIFO
// scheduler, with priorities, a bounded queue and aging. It is built to a
// WebAssembly module (GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared)
// and embedded in the loadout binary as the built-in scheduler "fifo".
//
// # What it does with a request
//
// For every request, in order:
//
//  1. An unknown model is refused (404).
//  2. If a swap (a model load) for the same model is already running, the
//     request joins it and is served when it finishes.
//  3. If the model is ready, the request is served at once, or queued for
//     a free slot when the model is at its concurrency limit (below). A
//     running swap that evicts the model queues it as in step 4. The
//     swapper is not asked: nothing has to load, so a failing or
//     crash-looping swapper never takes down models that are ready. Only
//     the steps below, for a model that must load, ask it for a plan.
//  4. If loading the model would collide with a running swap (it would evict
//     that swap's model, that swap is still stopping this model, or both
//     would evict the same model), the request is queued. A model whose
//     stop has ended is the swap's no longer: a request for it starts its
//     own load at once, while the swap still loads its target, instead of
//     waiting out that load before its own (reload_evicted: at_once, the
//     default; after_swap keeps the older rule, which waits for the swap
//     to end).
//  5. If loading it would evict a model that is still serving requests, the
//     request is queued until that model is idle: a busy model is never
//     evicted. The requests a model was serving when the request began
//     to wait would have kept it busy that long anyway; once the model's
//     new requests have held the request back drain_after (10 s) beyond
//     them (or beyond its arrival, if later), the new requests of the
//     models its load would evict (the idle ones too) that come after it
//     in queue order queue behind it rather than being served at once
//     (3), or go to a ready replica of their model that is not drained:
//     the busy ones' requests in flight end, and the swap starts. A model
//     finishing one long request while short ones come and go is not
//     drained for them. Before, a model under steady traffic (two
//     users, back to back) stayed busy for as long as the traffic lasted,
//     and the request for the other model waited all that time, past
//     max_wait. llama-swap's group lock holds the model's new requests at
//     once (drain_after: 0).
//  6. Otherwise a swap starts (the evictions the swapper chose, each in
//     the mode it chose — sleep or stop, ABI version 3 — then the load)
//     and the request waits for it. Swaps that touch disjoint models
//     run in parallel. If the host answers that GPU jobs hold the memory
//     the model needs for now (to the plan or to the swap), the request is
//     queued until they end: the host ticks when a job's lease ends.
//
// When a swap finishes, every request waiting on it is served (or fails
// with the load's error, 502), then the queue is drained: each queued
// request, in queue order, goes through the steps again. A queued request
// for a model that now has a swap joins it, so requests arriving as
// A B C A B C for models that exclude each other are served A A B B C C,
// with two swaps instead of five. Requests still blocked keep their
// places. With load_order: queued_wait the drain tries the requests in
// another order (their places in the queue do not change): aged requests
// first, then the requests of the model whose queued requests have waited
// longest in total, then the next model's, so the room that freed up goes
// to the model whose load relieves the most accumulated waiting rather
// than to the model of the oldest request (a ski-rental rule: load where
// waiting has cost most so far). Aging bounds every request's wait as
// before. The queue is also drained when a model becomes idle, after an
// unload, and on every tick (a crashed or stopped model may unblock it);
// when a request ends on a model that stays busy, under its concurrency
// limit, only that model's queued requests (and its replicas') are tried
// again: nothing that decides another model's request has changed.
//
// A model serves at most its concurrencyLimit requests at once (10 when
// unset, as in llama-swap). A request beyond that is not refused: it waits
// in the queue like any other blocked request (its position reported,
// bounded by max_queue, aged by max_wait) until one of the model's
// requests ends. So do the waiters of a finished swap beyond the limit:
// they go back to the queue in their arrival order, whatever max_queue
// says, since they were admitted when they joined the swap. The only 429
// is a full queue.
//
// # The warm path
//
// When a request for a ready model is served at once (3) and nothing is
// queued for the model, fifo hands the host the model's warm path
// (sdk.Admitter) with the model's concurrency limit: until the host takes
// it back, the host serves the model's requests under the limit itself,
// without calling the policy, which is exactly what (3) would do. The
// host takes it back whenever fifo must decide again: a swap loads or
// evicts the model, its state changes, fifo queues a request for it (the
// limit was reached, or a swap evicts it), an unload, a crash. The next
// request served at once hands it over again. Requests ending on the warm
// path are not reported to fifo while it holds no request: with an empty
// queue and no swap waiters its OnServeDone has nothing to drain.
//
// # Replicas
//
// A model with replicas (replicas: N, or min_replicas and max_replicas)
// is several models to fifo, one per replica, and the host routes each
// request to the ready replica with the fewest in flight. A request that
// finds its replica full (or not ready) is served on a ready sibling with
// a free slot; when every ready replica is full, fifo starts one more, up
// to max_replicas, only into free GPU memory (a scale-out never evicts
// another model), and the queued request goes to whichever replica frees
// up or comes up first. A cold load of the model starts its replicas
// until min_replicas run, all at once, and so does every finished load
// (evicting idle models as any load does); a replica that
// crashes is started again on the next tick, and one stopped otherwise
// while its model runs below min_replicas (added or changed by a reload,
// evicted) too, where it fits without evicting; a replica beyond the minimum
// that has been idle for scale_in_after, with nothing queued for its
// model, is stopped, the highest-numbered first (replicas.go).
//
// # Queue order
//
// The queue is ordered by priority, highest first, and by arrival among
// equal priorities. A request's priority is its own (X-Loadout-Priority),
// else the model's configured priority, else this policy's per-model
// priority setting. A request that has waited longer than max_wait is
// "aged" and goes ahead of every request that has not, aged requests in
// arrival order, so a steady stream of high-priority requests cannot
// starve a low-priority one. Every change of a queued request's position is
// reported to it (shown to clients that stream the loading progress).
//
// A caller that disconnects is removed from the queue and from the swap it
// waited on; it never starts a swap. A swap whose callers all left still
// completes.
//
// Unloads: an operator's unload fails the requests waiting on the models'
// swaps or queued for them (503, "model unloaded") and stops the models (the
// host lets a busy one finish its requests first, unless the unload is
// forced). An idle-timeout (ttl) unload stops only the models that are
// ready, idle, not loading, and not wanted by a queued request. On shutdown
// every request still held fails with 503.
//
// # Ticks
//
// On a host that ticks on demand (sdk.TickRequester; docs/ABI.md, "Ticks
// on demand") fifo asks for a tick only for what only time changes: when
// the first queued request will have waited longer than max_wait, and,
// while a model runs more replicas than its min_replicas, when the first
// of them will have been idle for scale_in_after (at the latest
// scale_in_after from now). Everything else a tick did comes with an
// event: a stop that finished, a crash or a reload (the host ticks for
// them, naming the models), a job's lease that ended (the host ticks), a
// request that ended, a load that ended; a replica below min_replicas
// that did not fit is retried at the next of those rather than every
// second. An idle fifo asks for nothing, so an idle host never calls it
// (ticks.go). On a host that ticks periodically it is ticked every
// second, as before.
//
// # Settings
//
// All optional; an unknown key is an error at load.
//
//	routing:
//	  scheduler:
//	    use: fifo
//	    settings:
//	      max_queue: 1024   # most requests queued at once; 0 = unlimited; beyond: 429
//	      max_wait: 60s     # age after which a queued request goes first; a Go
//	                        # duration or a number of seconds; 0 = no aging
//	      load_order: arrival  # which queued model gets room first: arrival
//	                        # (the oldest request's, llama-swap's) or
//	                        # queued_wait (the most waiting in total; see
//	                        # docs/BENCHMARKS.md for when it pays)
//	      scale_in_after: 2m  # idle time before a replica beyond min_replicas
//	                        # is stopped; 0 = never
//	      drain_after: 10s  # how long a busy model's new requests may hold
//	                        # back a request that must evict it, counted
//	                        # once the requests it was serving then end (5);
//	                        # 0 = not at all (llama-swap's strict order)
//	      reload_evicted: at_once  # a model a running swap has stopped loads
//	                        # again at once (at_once) or after that swap
//	                        # (after_swap: fewer cold loads on a saturated
//	                        # box, a longer tail; docs/BENCHMARKS.md)
//	      fifo:             # llama-swap's setting, accepted as is
//	        priority:       # per-model priority for requests that have none
//	          big-model: 10
package main
