package config

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Evict is how a model is evicted when its scheduler's plan leaves it to
// the host (DESIGN.md, "Residency"): `evict:` at the top of the config
// (every model's default) or on a model. llama-swap has no such setting:
// it always stops.
type Evict uint8

// The values of evict:.
const (
	// EvictAuto (`auto`, the default) sleeps at level 1 when the model's
	// backend can and host memory holds its weights, else at level 2 when
	// it can and host memory holds its process's overhead, else stops.
	EvictAuto Evict = iota
	// EvictStop (`stop`) stops the model's server: the next request for
	// it is a cold load.
	EvictStop
	// EvictSleep (`sleep`) sleeps at level 1 (weights kept in host RAM)
	// when host memory holds them, else stops.
	EvictSleep
	// EvictSleep2 (`sleep2`) sleeps at level 2 (weights dropped, the
	// process kept) when host memory holds its overhead, else stops.
	EvictSleep2
)

var evictNames = [...]string{"auto", "stop", "sleep", "sleep2"}

// String is the config spelling: auto, stop, sleep or sleep2.
func (e Evict) String() string {
	if int(e) < len(evictNames) {
		return evictNames[e]
	}
	return fmt.Sprintf("evict(%d)", e)
}

// ParseEvict reads an evict: value (auto, stop, sleep or sleep2, any
// case). The error names the value and the accepted ones.
func ParseEvict(s string) (Evict, error) {
	for i, n := range evictNames {
		if strings.EqualFold(strings.TrimSpace(s), n) {
			return Evict(i), nil
		}
	}
	return 0, fmt.Errorf("want one of %s, got %q", strings.Join(evictNames[:], ", "), s)
}

// Level is the sleep level an explicit sleep asks for: 1 (sleep), 2
// (sleep2), else 0.
func (e Evict) Level() uint8 {
	switch e {
	case EvictSleep:
		return 1
	case EvictSleep2:
		return 2
	}
	return 0
}

// DefaultWakeTimeout is wakeTimeout's default: a wake measured at
// 0.26–0.82 s for vLLM (its sleep-mode post) and seconds for llama.cpp
// gets two orders of magnitude of room before it is taken for hung, and a
// sleep room for llama-server's, which comes --sleep-idle-seconds after
// its last task.
const DefaultWakeTimeout = 60 * time.Second

// HostMemoryAuto is Config.HostMemory for `hostMemory: auto` (the
// default): the machine's available memory when serve starts, minus a
// reserve (HostMemoryReserve).
const HostMemoryAuto = -1

// HostMemoryReserve is what `hostMemory: auto` leaves the machine of the
// memory available at start, in bytes: a tenth of it, and at least 4 GiB,
// so sleepers never push the machine into swap or the OOM killer.
func HostMemoryReserve(available uint64) uint64 {
	return max(available/10, 4<<30)
}

// SleepLevels is what m's backend can sleep at, as far as the config
// tells (value 1 level 1, 2 level 2, 3 both; 0 none), by the backends'
// options (docs/BACKENDS.md, "Sleeping"): the simulator at both levels;
// the cmd backend (and vllm) with preset: vllm at both (vLLM's sleep
// mode), with preset: sglang at level 1 (SGLang's memory release), with
// sleep: steps at its sleep_levels (default level 1); llama-server at
// level 2 with sleep_idle_seconds (its idle sleep). A running server's
// own answer (its plugin's) has the last word.
func (m *Model) SleepLevels() uint8 {
	switch m.Backend {
	case BackendSim:
		return 3
	case BackendLlamaServer:
		if _, ok := m.Options["sleep_idle_seconds"]; ok {
			return 2
		}
	case BackendCmd, BackendVLLM:
		switch m.Options["preset"] {
		case "vllm":
			return 3
		case "sglang":
			return 1
		}
		if _, ok := m.Options["sleep"]; !ok {
			return 0
		}
		levels, ok := m.Options["sleep_levels"].([]any)
		if !ok {
			return 1
		}
		var out uint8
		for _, l := range levels {
			switch fmt.Sprint(l) {
			case "1":
				out |= 1
			case "2":
				out |= 2
			}
		}
		return out
	}
	return 0
}

// vllmSleeps gives every backend: vllm model without a preset option the
// vllm preset (its sleep mode: --enable-sleep-mode, /sleep, /wake_up;
// docs/BACKENDS.md), so that vLLM models sleep without more config.
func vllmSleeps(src map[string]*modelSrc) {
	for _, s := range src {
		m := s.model
		if m.Backend != BackendVLLM {
			continue
		}
		if _, ok := m.Options["preset"]; ok {
			continue
		}
		if m.Options == nil {
			m.Options = map[string]any{}
		}
		m.Options["preset"] = "vllm"
	}
}

// residency decodes hostMemory: and evict: at the top of the config.
func (d *decoder) residency(cfg *Config, top map[string]pair) {
	cfg.HostMemory = HostMemoryAuto
	if p, ok := top["hostMemory"]; ok {
		if p.val.Kind == yaml.ScalarNode && strings.EqualFold(p.val.Value, "auto") {
			cfg.HostMemory = HostMemoryAuto
		} else if n, ok := d.size(p.val, p.name); ok {
			cfg.HostMemory = n
		}
	}
	if p, ok := top["evict"]; ok {
		cfg.Evict, _ = d.evict(p.val, p.name)
	}
}

// evict decodes one evict: value.
func (d *decoder) evict(n *yaml.Node, path string) (Evict, bool) {
	s, ok := d.str(n, path)
	if !ok {
		return 0, false
	}
	e, err := ParseEvict(s)
	if err != nil {
		d.errorf(n, path, "%v", err)
		return 0, false
	}
	return e, true
}

// checkSleep checks every model's evict: against what its backend can do:
// a model that asks for a sleep its backend cannot give is an error at its
// evict: line; a global evict: asking for one is a warning naming the
// models that will be stopped instead; hostMemory: 0 with a sleep asked
// for is a warning.
func (d *decoder) checkSleep(cfg *Config, src map[string]*modelSrc, top map[string]pair) {
	var cannot []string
	for _, id := range slices.Sorted(maps.Keys(src)) {
		s := src[id]
		m := s.model
		level := m.Evict.Level()
		if level == 0 || m.SleepLevels()&level != 0 {
			continue
		}
		if s.evict != nil {
			d.errorf(s.evict, join(join("models", id), "evict"), "%s", cannotSleep(m, level))
			continue
		}
		cannot = append(cannot, id)
	}
	for _, id := range slices.Sorted(maps.Keys(src)) {
		d.checkIdleSleep(src[id].model)
	}
	if p, ok := top["evict"]; ok && len(cannot) > 0 {
		d.warnf(p.val, p.name, "%s: the backends of %s cannot sleep; they are stopped when evicted", cfg.Evict, strings.Join(cannot, ", "))
	}
	if p, ok := top["hostMemory"]; ok && cfg.HostMemory == 0 && cfg.Evict.Level() != 0 {
		d.warnf(p.val, p.name, "0: nothing can sleep, so evict: %s stops every evicted model", cfg.Evict)
	}
}

// cannotSleep says why m cannot sleep at level, and what would let it:
// the evict: that matches the level its options give, or the options that
// give one (docs/BACKENDS.md, "Sleeping").
func cannotSleep(m *Model, level uint8) string {
	msg := fmt.Sprintf("model %s cannot sleep at level %d", m.ID, level)
	switch has := m.SleepLevels(); {
	case has&1 != 0:
		return msg + " (its options give level 1: use evict: sleep, or auto)"
	case has&2 != 0:
		return msg + " (its options give level 2: use evict: sleep2, or auto)"
	}
	switch m.Backend {
	case BackendLlamaServer:
		return msg + " (llama-server sleeps at level 2 only, with options.sleep_idle_seconds: set it and use evict: sleep2 or auto, or evict: stop)"
	case BackendCmd, BackendVLLM:
		return msg + " (give its options sleep: steps, or preset: vllm or sglang, as docs/BACKENDS.md shows; or use evict: stop)"
	}
	return msg + " (backend " + m.Backend + " offers no sleep: use evict: stop or auto)"
}

// checkIdleSleep warns of a llama-server model that sleeps by its own idle
// timer (sleep_idle_seconds) no sooner than its wakeTimeout, which bounds a
// sleep too: every eviction would wait the whole wakeTimeout for a sleep
// that cannot come, then stop the server.
func (d *decoder) checkIdleSleep(m *Model) {
	if m.Backend != BackendLlamaServer || m.Evict == EvictStop || m.WakeTimeout <= 0 {
		return
	}
	v, ok := m.Options["sleep_idle_seconds"]
	if !ok {
		return
	}
	secs, err := strconv.ParseFloat(fmt.Sprint(v), 64)
	if err != nil || time.Duration(secs*float64(time.Second)) < m.WakeTimeout {
		return
	}
	e := m.OptionError("sleep_idle_seconds", fmt.Sprintf("%v is not below the model's wakeTimeout (%s), which bounds its sleep: every eviction would wait %s for a sleep that cannot come, then stop the server; lower it (each eviction waits it out) or use evict: stop", v, m.WakeTimeout, m.WakeTimeout))
	d.warns = append(d.warns, Warning{Pos: e.Pos, Key: e.Key, Message: e.Message})
}

// hostMemory is Report's hostMemory line.
func hostMemory(n int64) string {
	switch n {
	case HostMemoryAuto:
		return "auto (the machine's available memory at start, minus a tenth, at least 4 GiB)"
	case 0:
		return "0 (nothing sleeps: every evicted model is stopped)"
	}
	return formatSize(n)
}

// evictReport says what evicting m does, for Report.
func evictReport(m *Model) string {
	levels := m.SleepLevels()
	switch {
	case m.Evict == EvictStop:
		return "stopped when evicted"
	case levels == 0:
		return "its backend (" + m.Backend + ") cannot sleep: stopped when evicted"
	case m.Evict == EvictAuto && levels == 3:
		return "sleeps when evicted (level 1 if host memory holds its weights, else level 2), else stopped"
	}
	level := m.Evict.Level()
	if level == 0 { // auto, with one level to sleep at
		level = 1
		if levels&1 == 0 {
			level = 2
		}
	}
	return fmt.Sprintf("sleeps at level %d when evicted if host memory allows, else stopped", level)
}
