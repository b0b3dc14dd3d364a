package cmdbackend

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/loadout-dev/loadout/plugins"
)

// The cmd backend's options (ModelSpec.Options), all about sleep: see the
// package comment's "Sleep and wake" and docs/BACKENDS.md.
const (
	optPreset      = "preset"
	optSleep       = "sleep"
	optWake        = "wake"
	optWakeLevel2  = "wake_level_2"
	optIsSleeping  = "is_sleeping"
	optSleepLevels = "sleep_levels"
)

var optionNames = []string{optIsSleeping, optPreset, optSleep, optSleepLevels, optWake, optWakeLevel2}

// StepOptions are the options that hold sleep and wake steps, and
// StepMacros the macros a step may use that are substituted when it runs
// (the level asked for, the server's pid: runStep), besides the
// configuration's own: a configuration check leaves them in place.
var (
	StepOptions = []string{optSleep, optWake, optWakeLevel2, optIsSleeping}
	StepMacros  = []string{"level", "PID"}
)

// Preset is a server whose sleep API the cmd backend knows: options
// {"preset": NAME} stand for its sleep, wake and is_sleeping steps, and the
// flags it needs are added to a command line that runs it.
type Preset struct {
	// Name is the preset option's value.
	Name string
	// Sleep is the server's sleep configuration.
	Sleep SleepConfig
	// Flags are added to the end of a command line that Runs it and lacks
	// them.
	Flags []string
	// Env entries (KEY=VALUE) are added to the model's env unless it sets
	// KEY itself.
	Env []string
	// Runs reports whether argv starts the server (so that Flags apply).
	Runs func(argv []string) bool
}

func mustSteps(ss ...string) []Step {
	out := make([]Step, len(ss))
	for i, s := range ss {
		st, err := ParseStep(s)
		if err != nil {
			panic(err)
		}
		out[i] = st
	}
	return out
}

// Presets are the servers the preset option names.
//
// vllm, from vLLM's sleep mode (docs/features/sleep_mode.md): the server
// runs with --enable-sleep-mode and VLLM_SERVER_DEV_MODE=1 (the sleep
// endpoints are development endpoints); POST /sleep?level=N puts it to
// sleep at level 1 (weights to host RAM, KV cache dropped) or 2 (both
// dropped); POST /wake_up wakes a level 1 sleep; a level 2 sleep is woken
// as those docs require, weights first, reloaded in place, then the KV
// cache: POST /wake_up?tags=weights, POST /collective_rpc
// {"method":"reload_weights"}, POST /wake_up?tags=kv_cache, and POST
// /reset_prefix_cache, the prefix cache's entries pointing into a KV
// cache that was discarded; GET /is_sleeping answers {"is_sleeping": bool}.
//
// sglang, from SGLang's HTTP server (entrypoints/http_server.py): the
// server runs with --enable-memory-saver (without it the endpoints release
// nothing) and --enable-weights-cpu-backup (without it the weights are lost
// on release and must be loaded again, which this preset does not do);
// POST /release_memory_occupation {} releases the weights, the KV cache and
// the CUDA graphs, POST /resume_memory_occupation {} restores them: level 1
// only. SGLang has no is_sleeping endpoint. Its /health runs a one-token
// generation unless SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION is false
// (environ.py); the release asserts an idle server and a sleeper has no
// weights to generate with, so the preset sets it false: /health then
// answers 503 while the server starts or shuts down and 200 otherwise,
// vLLM's and llama-server's sense, which readiness and liveness probes
// need.
var Presets = map[string]Preset{
	"vllm": {
		Name: "vllm",
		Sleep: SleepConfig{
			Levels: 1 | 2,
			Sleep:  mustSteps("POST /sleep?level=${level}"),
			Wake:   mustSteps("POST /wake_up"),
			WakeLevel2: mustSteps(
				"POST /wake_up?tags=weights",
				`POST /collective_rpc {"method": "reload_weights"}`,
				"POST /wake_up?tags=kv_cache",
				"POST /reset_prefix_cache",
			),
			IsSleeping: &mustSteps("GET /is_sleeping")[0],
		},
		Flags: []string{"--enable-sleep-mode"},
		Env:   []string{"VLLM_SERVER_DEV_MODE=1"},
		Runs: func(argv []string) bool {
			return runsTool(argv, "vllm", "serve") || runsModule(argv, "vllm.entrypoints.openai.api_server")
		},
	},
	"sglang": {
		Name: "sglang",
		Sleep: SleepConfig{
			Levels: 1,
			Sleep:  mustSteps("POST /release_memory_occupation {}"),
			Wake:   mustSteps("POST /resume_memory_occupation {}"),
		},
		Flags: []string{"--enable-memory-saver", "--enable-weights-cpu-backup"},
		Env:   []string{"SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=false"},
		Runs: func(argv []string) bool {
			return runsTool(argv, "sglang", "serve") || runsModule(argv, "sglang.launch_server")
		},
	},
}

// runsTool reports whether argv runs the executable named tool (any
// directory) with the subcommand sub.
func runsTool(argv []string, tool, sub string) bool {
	for i, a := range argv[:max(0, len(argv)-1)] {
		if path.Base(a) == tool && argv[i+1] == sub {
			return true
		}
	}
	return false
}

// runsModule reports whether argv runs "python -m module".
func runsModule(argv []string, module string) bool {
	for i, a := range argv[:max(0, len(argv)-1)] {
		if a == "-m" && argv[i+1] == module {
			return true
		}
	}
	return false
}

// options is what a cmd model's options say.
type options struct {
	preset *Preset
	sleep  SleepConfig
}

// parseOptions reads a cmd model's options (see the package comment) and
// returns every problem, each naming its option.
func parseOptions(raw json.RawMessage) (options, []plugins.Problem) {
	var o options
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return o, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return o, []plugins.Problem{{Message: fmt.Sprintf("want a JSON object: %v", err)}}
	}
	var problems []plugins.Problem
	bad := func(k, format string, a ...any) {
		problems = append(problems, plugins.Problem{Option: k, Message: fmt.Sprintf(format, a...)})
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(optionNames, k) {
			bad(k, "unknown option (known: %s; put server flags in cmd)", strings.Join(optionNames, ", "))
		}
	}
	if v, ok := m[optPreset]; ok {
		var name string
		if json.Unmarshal(v, &name) != nil {
			bad(optPreset, "want a string: %s", strings.Join(slices.Sorted(maps.Keys(Presets)), " or "))
		} else if p, ok := Presets[name]; !ok {
			bad(optPreset, "unknown preset %q (known: %s)", name, strings.Join(slices.Sorted(maps.Keys(Presets)), ", "))
		} else {
			o.preset = &p
			o.sleep = p.Sleep
		}
	}
	steps := func(k string) ([]Step, bool) {
		v, ok := m[k]
		if !ok {
			return nil, false
		}
		var list []string
		var one string
		if json.Unmarshal(v, &one) == nil {
			list = []string{one}
		} else if json.Unmarshal(v, &list) != nil {
			bad(k, `want a step or a list of steps: "METHOD /path [JSON body]" or a command`)
			return nil, false
		}
		var out []Step
		for _, s := range list {
			st, err := ParseStep(s)
			if err != nil {
				bad(k, "%v", err)
				return nil, false
			}
			out = append(out, st)
		}
		return out, true
	}
	has := func(k string) bool { _, ok := m[k]; return ok }
	hasSleep, hasWake, hasWake2, hasIsSleeping := has(optSleep), has(optWake), has(optWakeLevel2), has(optIsSleeping)
	sleep, okSleep := steps(optSleep)
	wake, okWake := steps(optWake)
	wake2, okWake2 := steps(optWakeLevel2)
	isSleeping, okIsSleeping := steps(optIsSleeping)
	if okSleep {
		o.sleep.Sleep = sleep
		if o.preset == nil {
			o.sleep.Levels = 1
		}
	}
	if okWake {
		o.sleep.Wake = wake
	}
	if okWake2 {
		o.sleep.WakeLevel2 = wake2
	}
	if okIsSleeping {
		if len(isSleeping) != 1 {
			bad(optIsSleeping, "want one step")
		} else {
			o.sleep.IsSleeping = &isSleeping[0]
		}
	}
	if v, ok := m[optSleepLevels]; ok {
		var levels []int
		var one int
		if json.Unmarshal(v, &one) == nil {
			levels = []int{one}
		} else if json.Unmarshal(v, &levels) != nil {
			levels = nil
		}
		o.sleep.Levels = 0
		for _, l := range levels {
			if l != 1 && l != 2 {
				o.sleep.Levels = 0
				break
			}
			o.sleep.Levels |= 1 << (l - 1)
		}
		if o.sleep.Levels == 0 {
			bad(optSleepLevels, "want the levels the server offers: 1, 2 or [1, 2]")
		}
	}
	switch {
	case o.preset != nil:
	case (hasSleep || hasIsSleeping) && !hasWake:
		bad(optWake, "required with sleep: how the server wakes")
	case hasWake && !hasSleep && !hasIsSleeping:
		bad(optSleep, "required with wake: how the server sleeps (or is_sleeping, for a server that falls asleep by itself)")
	case !hasSleep && !hasWake:
		if _, ok := m[optSleepLevels]; ok {
			bad(optSleepLevels, "needs sleep and wake")
		}
		if hasWake2 {
			bad(optWakeLevel2, "needs sleep and wake")
		}
	}
	if o.sleep.Levels == 0 && len(o.sleep.Sleep) == 0 && o.sleep.IsSleeping != nil && hasWake {
		o.sleep.Levels = 1
	}
	return o, problems
}

// applyPreset adds o's preset's flags to spec's command line, when it runs
// the preset's server and lacks them, and the preset's env; a command line
// that does not recognisably run the server and lacks a flag is a problem
// (the server would refuse to sleep).
func (o options) applyPreset(spec *plugins.ModelSpec) []plugins.Problem {
	if o.preset == nil {
		return nil
	}
	argv, err := plugins.SplitCommand(spec.Cmd)
	if err != nil {
		return nil // cmd's own problem, reported by the host's config
	}
	var missing []string
	for _, f := range o.preset.Flags {
		if !slices.Contains(argv, f) {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 && !o.preset.Runs(argv) {
		return []plugins.Problem{{Option: optPreset, Message: fmt.Sprintf(
			"preset %s: cmd does not run %s as the preset knows it, so %s cannot be added: add it to cmd yourself",
			o.preset.Name, o.preset.Name, strings.Join(missing, " "))}}
	}
	if len(missing) > 0 {
		spec.Cmd += " " + strings.Join(missing, " ")
	}
	for _, e := range o.preset.Env {
		key, _, _ := strings.Cut(e, "=")
		if !slices.ContainsFunc(spec.Env, func(s string) bool { return strings.HasPrefix(s, key+"=") }) {
			spec.Env = append(spec.Env, e)
		}
	}
	return nil
}
