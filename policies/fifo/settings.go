package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
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

var settingKeys = []string{"fifo", "max_queue", "max_wait"}

// parseSettings parses the settings JSON; errors name the offending key.
func parseSettings(raw []byte) (settings, error) {
	cfg := settings{maxQueue: defaultMaxQueue, maxWait: int64(defaultMaxWait)}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return cfg, nil
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return cfg, fmt.Errorf("fifo settings: %w", err)
	}
	for _, key := range sortedKeys(top) {
		val := top[key]
		var err error
		switch key {
		case "max_queue":
			err = parseMaxQueue(val, &cfg.maxQueue)
		case "max_wait":
			cfg.maxWait, err = parseDuration(val)
		case "fifo":
			cfg.priority, err = parseFIFO(val)
		default:
			return cfg, fmt.Errorf("fifo settings: unknown setting %q (known: %s)", key, strings.Join(settingKeys, ", "))
		}
		if err != nil {
			return cfg, fmt.Errorf("fifo settings: %s: %w", key, err)
		}
	}
	return cfg, nil
}

func parseMaxQueue(val json.RawMessage, out *int) error {
	var n float64
	if err := json.Unmarshal(val, &n); err != nil {
		return fmt.Errorf("want a number of requests, got %s", val)
	}
	if n < 0 || n != math.Trunc(n) || n > math.MaxInt32 {
		return fmt.Errorf("want a whole number from 0 (unlimited) up, got %s", val)
	}
	*out = int(n)
	return nil
}

// parseDuration accepts a Go duration string ("30s", "1m30s") or a number
// of seconds.
func parseDuration(val json.RawMessage) (int64, error) {
	var s string
	if err := json.Unmarshal(val, &s); err == nil {
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, fmt.Errorf("want a duration like \"30s\": %w", err)
		}
		if d < 0 {
			return 0, fmt.Errorf("negative duration %s", val)
		}
		return int64(d), nil
	}
	var secs float64
	if err := json.Unmarshal(val, &secs); err != nil {
		return 0, fmt.Errorf("want a duration like \"30s\" or a number of seconds, got %s", val)
	}
	if secs < 0 || secs > float64(math.MaxInt64/int64(time.Second)) {
		return 0, fmt.Errorf("want a number of seconds from 0 up, got %s", val)
	}
	return int64(secs * float64(time.Second)), nil
}

// parseFIFO parses llama-swap's `fifo: {priority: {model: n}}`.
func parseFIFO(val json.RawMessage) (map[string]int32, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(val, &obj); err != nil {
		return nil, fmt.Errorf("want an object like {\"priority\": {\"model\": 10}}, got %s", val)
	}
	var prio map[string]int32
	for _, key := range sortedKeys(obj) {
		if key != "priority" {
			return nil, fmt.Errorf("unknown setting %q (known: priority)", key)
		}
		if err := json.Unmarshal(obj[key], &prio); err != nil {
			return nil, fmt.Errorf("priority: want an object of model names to whole numbers, got %s", obj[key])
		}
	}
	return prio, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
