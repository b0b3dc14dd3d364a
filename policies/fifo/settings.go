package main

import (
	"math"
	"time"

	sdksettings "github.com/loadout-dev/loadout/sdk/settings"
)

// Defaults of the settings.
const (
	defaultMaxQueue         = 1024
	defaultMaxWait          = 60 * time.Second
	defaultConcurrencyLimit = 10 // llama-swap's default concurrencyLimit
	defaultScaleInAfter     = 2 * time.Minute
	defaultDrainAfter       = 10 * time.Second
)

// settings is the parsed `settings:` object.
type settings struct {
	maxQueue  int              // 0: unlimited
	maxWait   int64            // nanoseconds; 0: no aging
	priority  map[string]int32 // per-model priority for requests without one
	loadOrder loadOrder        // which queued requests a drain tries first
	// scaleInAfter is how long a replica beyond its model's min_replicas
	// stays idle before it is stopped (replicas.go), nanoseconds; 0: never.
	scaleInAfter int64
	// afterSwap: a request for a model that a running swap evicted waits
	// for that swap to end even once the model has stopped
	// (reload_evicted: after_swap), rather than start its load at once.
	afterSwap bool
	// drainAfter is how long a queued request that must evict a busy
	// model lets that model's new requests be served ahead of it,
	// counted from when the requests the model was serving as the
	// request began to wait have ended (hold); after it, they queue
	// behind it, so the model's in-flight requests end and it can be
	// evicted (drain_after), nanoseconds; 0: at once (llama-swap's
	// strict order).
	drainAfter int64
}

// loadOrder is the order in which a drain of the queue goes through the
// queued requests, and so which waiting model gets the room that freed up.
type loadOrder uint8

const (
	// byArrival: queue order (aged, then priority, then arrival), as
	// llama-swap's FIFO.
	byArrival loadOrder = iota
	// byQueuedWait: aged requests first, in queue order; then the requests
	// of the model whose queued requests have waited longest in total
	// (the sum of their waits so far), then the next such model, each
	// model's requests in queue order.
	byQueuedWait
)

// loadOrderNames are the load orders' spellings in settings (load_order),
// indexed by loadOrder.
var loadOrderNames = [...]string{byArrival: "arrival", byQueuedWait: "queued_wait"}

// parseSettings parses the settings JSON:
//
//	{"max_queue": 1024, "max_wait": "60s", "load_order": "arrival",
//	 "scale_in_after": "2m", "reload_evicted": "at_once", "drain_after": "10s",
//	 "fifo": {"priority": {"MODEL": 10}}}
//
// every key optional. Errors are *sdksettings.Error naming the offending
// setting's path ("max_wait", "fifo.priority.llama").
func parseSettings(raw []byte) (settings, error) {
	cfg := settings{maxQueue: defaultMaxQueue, maxWait: int64(defaultMaxWait), scaleInAfter: int64(defaultScaleInAfter), drainAfter: int64(defaultDrainAfter)}
	root, err := sdksettings.Decode(raw)
	if err != nil {
		return cfg, err
	}
	top, err := root.Object("fifo", "max_queue", "max_wait", "load_order", "scale_in_after", "reload_evicted", "drain_after")
	if err != nil {
		return cfg, err
	}
	if v := top.Get("reload_evicted"); !v.IsNull() {
		i, err := v.OneOf("at_once", "after_swap")
		if err != nil {
			return cfg, err
		}
		cfg.afterSwap = i == 1
	}
	if v := top.Get("load_order"); !v.IsNull() {
		i, err := v.OneOf(loadOrderNames[:]...)
		if err != nil {
			return cfg, err
		}
		cfg.loadOrder = loadOrder(i)
	}
	if v := top.Get("max_queue"); !v.IsNull() {
		n, err := v.Int(0, math.MaxInt32)
		if err != nil {
			return cfg, err
		}
		cfg.maxQueue = int(n)
	}
	if v := top.Get("scale_in_after"); !v.IsNull() {
		d, err := v.Duration()
		if err != nil {
			return cfg, err
		}
		cfg.scaleInAfter = int64(d)
	}
	if v := top.Get("drain_after"); !v.IsNull() {
		d, err := v.Duration()
		if err != nil {
			return cfg, err
		}
		cfg.drainAfter = int64(d)
	}
	if v := top.Get("max_wait"); !v.IsNull() {
		d, err := v.Duration()
		if err != nil {
			return cfg, err
		}
		cfg.maxWait = int64(d)
	}
	// llama-swap's `fifo: {priority: {model: n}}`.
	fifo, err := top.Get("fifo").Object("priority")
	if err != nil {
		return cfg, err
	}
	prio, err := fifo.Get("priority").Object()
	if err != nil {
		return cfg, err
	}
	for _, model := range prio.Keys() {
		n, err := prio.Get(model).Int(math.MinInt32, math.MaxInt32)
		if err != nil {
			return cfg, err
		}
		if cfg.priority == nil {
			cfg.priority = make(map[string]int32)
		}
		cfg.priority[model] = int32(n)
	}
	return cfg, nil
}
