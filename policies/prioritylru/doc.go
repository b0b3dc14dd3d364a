// Command prioritylru is Loadout's VRAM-aware swapper (eviction) policy:
// it keeps as many models loaded as the GPUs hold, and when a model does
// not fit it evicts the fewest, lowest-priority, least recently used idle
// models that make room, and says which GPUs the model goes on. It is built
// to a WebAssembly module (GOOS=wasip1 GOARCH=wasm go build
// -buildmode=c-shared) and embedded in the loadout binary as the built-in
// router "prioritylru".
//
// # What it does when a model must load
//
// It reads the host's snapshot: every model with its state, requests in
// flight, priority, pinned flag, last use, devices and VRAM (the measured
// usage once the model has loaded, else the estimate: the config's vram:,
// else the backend's estimate), and every GPU with its
// total, free and leased memory. Then:
//
//  1. A model that is already loaded or loading needs nothing; nor does one
//     with no VRAM figure at all (the host places it), nor anything on a
//     box with no GPU.
//  2. If the model fits as things are, nothing is evicted and the plan
//     names its GPUs: the single GPU with the most free memory if it fits
//     there (the fullest that holds it under the box's placement: pack),
//     else a split (tensor split) over the fewest GPUs that hold it, those
//     with the most free memory first — only on the GPUs its gpus: lists,
//     never split under split: never, over every GPU it may use under
//     split: always. This is the host's own placement rule
//     (sdk/placement), so the two agree.
//  3. Otherwise running models on the GPUs it may use are evicted, one at
//     a time, until it fits:
//     first models already stopping (free to take), then idle ones, lowest
//     priority first, least recently used first within a priority, by name
//     last. Then every victim whose memory turned out not to be needed is
//     kept after all, most valuable first, so the fewest models stop.
//     (The mechanics of steps 1–4 are sdk/evict's, shared with the other
//     VRAM-aware routers; the order is this policy's.)
//  4. If it does not fit even with every model it may evict gone, the plan
//     fails with an error the client sees, such as
//     "model big needs 30 GiB; at most 24 GiB can be freed on any
//     placement (1 GPU, margin 0 B each; ...)".
//
// Never evicted: a pinned model, and a model with a higher priority than
// the one loading (equal priorities may evict each other). A model serving
// requests, or still loading, is evicted only when nothing idle makes
// room; the plan then names it and the scheduler waits until it is idle
// (the host refuses to stop a model with requests in flight, and fifo
// queues the request meanwhile), rather than failing a request that will
// fit in a moment.
//
// A model split over several GPUs is counted as split evenly between them
// when it is evicted (the snapshot says which GPUs it is on, not how much
// on each); the host's lease ledger checks the real figures, so an
// optimistic plan fails the swap cleanly rather than over-filling a GPU.
//
// # What it does when a GPU job needs GPUs
//
// A job that may evict idle models takes whole GPUs (sdk.JobPlanner): free
// ones first, then GPUs whose every model may go — ready, idle, unpinned,
// of no higher priority than the job — the least valuable first: the GPU
// whose most valuable model has the lowest priority, then was used least
// recently, then the lowest index; a model split over several GPUs frees
// them all, and goes before two that hold one each when the job needs
// both. A busy, loading or stopping model keeps its GPU: the job waits.
//
// The plan depends on the snapshot, not only on the running set, so the
// policy does not claim sdk.PurePlanner: the host asks it every time. It
// is deterministic: the same snapshot gives the same plan. It logs one line
// per swap that really starts, naming the model, its need, the evicted
// models, the memory they free and the placement.
//
// # Settings
//
// All optional; an unknown key is an error at load.
//
//	routing:
//	  router:
//	    use: prioritylru
//	    settings:
//	      margin: 512MiB   # kept free on every GPU a model uses, beyond its
//	                       # VRAM figure: a size (512MiB, 1.5GiB, 2G, 1GB)
//	                       # or a number of bytes. Default 0.
//
// The host's ledger keeps its own per-GPU reserve out of the free memory it
// reports, so margin is extra headroom for VRAM figures that are only
// estimates; the two add up. Priorities, pinning and VRAM figures come from
// each model's priority:, pinned: and vram: in the config.
//
// The host adds one more key, placement, from the configuration's
// placement constraints (host/config's RouterSettingsJSON; an operator
// does not write it): {"pack": true, "models": {"MODEL": {"gpus": [1, 2],
// "split": "never"}}}. The host's ledger enforces the same constraints and
// refuses a plan that breaks them.
package main
