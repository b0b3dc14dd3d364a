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
)

// settings is the parsed `settings:` object.
type settings struct {
	maxQueue int              // 0: unlimited
	maxWait  int64            // nanoseconds; 0: no aging
	priority map[string]int32 // per-model priority for requests without one
}

// parseSettings parses the settings JSON:
//
//	{"max_queue": 1024, "max_wait": "60s", "fifo": {"priority": {"MODEL": 10}}}
//
// every key optional. Errors are *sdksettings.Error naming the offending
// setting's path ("max_wait", "fifo.priority.llama").
func parseSettings(raw []byte) (settings, error) {
	cfg := settings{maxQueue: defaultMaxQueue, maxWait: int64(defaultMaxWait)}
	root, err := sdksettings.Decode(raw)
	if err != nil {
		return cfg, err
	}
	top, err := root.Object("fifo", "max_queue", "max_wait")
	if err != nil {
		return cfg, err
	}
	if v := top.Get("max_queue"); !v.IsNull() {
		n, err := v.Int(0, math.MaxInt32)
		if err != nil {
			return cfg, err
		}
		cfg.maxQueue = int(n)
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
