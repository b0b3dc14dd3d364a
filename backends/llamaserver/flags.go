package llamaserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/loadout-dev/loadout/plugins"
)

// optionFlag ties one of this backend's options to the llama-server flag
// it is written as. optionFlags is the one table both directions use:
// args writes options as flags, OptionsFromArgs reads flags (a router-mode
// preset's) back into options, and extra_args may not repeat them.
type optionFlag struct {
	// option is the options key; "" for a flag the backend sets itself.
	option string
	// flags are the flag args writes, then its other names, as
	// llama-server --help lists them.
	flags []string
	// env is the LLAMA_ARG_* environment name llama-server reads the
	// flag from (its --help's "(env: ...)").
	env string
}

var optionFlags = []optionFlag{
	{"model", []string{"--model", "-m"}, "LLAMA_ARG_MODEL"},
	{"mmproj", []string{"--mmproj", "-mm"}, "LLAMA_ARG_MMPROJ"},
	{"ctx_size", []string{"--ctx-size", "-c"}, "LLAMA_ARG_CTX_SIZE"},
	{"n_gpu_layers", []string{"--n-gpu-layers", "-ngl", "--gpu-layers"}, "LLAMA_ARG_N_GPU_LAYERS"},
	{"parallel", []string{"--parallel", "-np"}, "LLAMA_ARG_N_PARALLEL"},
	{"flash_attn", []string{"--flash-attn", "-fa"}, "LLAMA_ARG_FLASH_ATTN"},
	{"cache_type_k", []string{"--cache-type-k", "-ctk"}, "LLAMA_ARG_CACHE_TYPE_K"},
	{"cache_type_v", []string{"--cache-type-v", "-ctv"}, "LLAMA_ARG_CACHE_TYPE_V"},
	{"sleep_idle_seconds", []string{"--sleep-idle-seconds"}, ""},
	{"", []string{"--host"}, "LLAMA_ARG_HOST"},
	{"", []string{"--port"}, "LLAMA_ARG_PORT"},
}

// flagOf is the flag args writes option as.
func flagOf(option string) string {
	for _, f := range optionFlags {
		if f.option == option {
			return f.flags[0]
		}
	}
	panic("llamaserver: no flag for option " + option)
}

// ownedFlags maps every name of a flag in optionFlags to its option ("" for
// the backend's own): extra_args may not repeat them (llama-server takes
// the last, so the estimate or the upstream would be wrong).
var ownedFlags = sync.OnceValue(func() map[string]string {
	m := map[string]string{}
	for _, f := range optionFlags {
		for _, name := range f.flags {
			m[name] = f.option
		}
	}
	return m
})

// tableFlag finds key (a flag name without its dashes, or its LLAMA_ARG_*
// name) in optionFlags.
func tableFlag(key string) (optionFlag, bool) {
	for _, f := range optionFlags {
		if key == f.env {
			return f, true
		}
		for _, name := range f.flags {
			if strings.TrimLeft(name, "-") == key {
				return f, true
			}
		}
	}
	return optionFlag{}, false
}

// Flags are the flags one llama-server binary takes, read from its --help
// (ReadFlags, ParseHelp): each flag's names, long and short, its LLAMA_ARG_*
// environment names, whether it takes a value, and for a boolean flag its
// negative names (--no-jinja). A preset is checked against the binary that
// will run it, not against a list that drifts from it.
type Flags struct {
	groups []*flagGroup
	byKey  map[string]*flagGroup // names without dashes, and env names
}

// flagGroup is one entry of llama-server --help.
type flagGroup struct {
	pos, neg []string // names as written (--jinja; --no-jinja)
	env      []string
	value    bool
}

// canonical is the name that identifies the flag, whatever name a preset
// used: the last positive name, the one llama-server itself writes
// (common_preset::to_args uses args.back()).
func (g *flagGroup) canonical() string { return g.pos[len(g.pos)-1] }

// ReadFlags runs `binary --help` (at most 10 seconds) and parses what it
// prints with ParseHelp. Errors: the binary cannot be run, or its help
// lists no flag.
func ReadFlags(ctx context.Context, binary string) (*Flags, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "--help")
	// A binary that hangs is killed at the deadline; WaitDelay bounds the
	// wait for pipes a child of it may still hold.
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if err != nil && len(out) == 0 {
		return nil, fmt.Errorf("reading llama-server's flags: %s --help: %w", binary, err)
	}
	f := ParseHelp(string(out))
	if len(f.groups) == 0 {
		return nil, fmt.Errorf("reading llama-server's flags: %s --help lists no flag", binary)
	}
	return f, nil
}

// helpColumn is where llama-server --help starts a flag's description
// (common/arg.cpp pads the flag names to it, or breaks the line).
const helpColumn = 40

// ParseHelp parses the text of llama-server --help: a line that starts
// with "-" names a flag ("-ngl,  --gpu-layers, --n-gpu-layers N", a value
// hint after the last name when it takes one), and "(env: LLAMA_ARG_...)"
// on it or the lines after gives its environment name. In a boolean flag
// that lists both forms ("--jinja, --no-jinja"), the names starting with
// --no- (and a short name just before one) are its negative forms.
func ParseHelp(text string) *Flags {
	f := &Flags{byKey: map[string]*flagGroup{}}
	var cur *flagGroup
	for line := range strings.Lines(text) {
		line = strings.TrimRight(line, "\r\n")
		if strings.HasPrefix(line, "-") && !strings.HasPrefix(line, "---") {
			left := line
			if len(line) > helpColumn && line[helpColumn-1] == ' ' {
				left = line[:helpColumn]
			}
			cur = parseHelpNames(strings.TrimSpace(left))
			if cur != nil {
				f.groups = append(f.groups, cur)
			}
		}
		if cur == nil {
			continue
		}
		for rest := line; ; {
			i := strings.Index(rest, "(env: ")
			if i < 0 {
				break
			}
			rest = rest[i+len("(env: "):]
			if j := strings.IndexByte(rest, ')'); j > 0 {
				cur.env = append(cur.env, rest[:j])
			}
		}
	}
	for _, g := range f.groups {
		for _, n := range slices.Concat(g.pos, g.neg) {
			f.byKey[strings.TrimLeft(n, "-")] = g
		}
		for _, e := range g.env {
			f.byKey[e] = g
		}
	}
	return f
}

// parseHelpNames parses the names part of a --help entry; nil when it
// names no flag.
func parseHelpNames(left string) *flagGroup {
	g := &flagGroup{}
	var names []string
	for item := range strings.SplitSeq(left, ",") {
		item = strings.TrimSpace(item)
		if !strings.HasPrefix(item, "-") {
			if item != "" {
				g.value = true // the rest of a value hint ("MiB0,MiB1,...")
			}
			continue
		}
		name, hint, _ := strings.Cut(item, " ")
		names = append(names, name)
		if strings.TrimSpace(hint) != "" {
			g.value = true
		}
	}
	if len(names) == 0 {
		return nil
	}
	hasPositiveLong := slices.ContainsFunc(names, func(n string) bool {
		return strings.HasPrefix(n, "--") && !strings.HasPrefix(n, "--no-")
	})
	for i, n := range names {
		negative := hasPositiveLong && !g.value && (strings.HasPrefix(n, "--no-") ||
			!strings.HasPrefix(n, "--") && i+1 < len(names) && strings.HasPrefix(names[i+1], "--no-"))
		if negative {
			g.neg = append(g.neg, n)
		} else {
			g.pos = append(g.pos, n)
		}
	}
	if len(g.pos) == 0 {
		g.pos, g.neg = g.neg, nil
	}
	return g
}

// Arg is one llama-server flag resolved from a preset key: Flag is the
// name that identifies it (so a model's section overrides the [*]
// section's value for the same flag whatever name each wrote), Words what
// goes on the command line ("--threads", "1"; "--no-jinja"; none for a
// boolean flag turned off that has no negative form).
type Arg struct {
	Flag  string
	Words []string
}

// Resolve turns a preset key and its value into llama-server arguments.
// The key is a flag name without its leading dashes, long or short, or
// its LLAMA_ARG_* environment name; a boolean flag takes true, false, on,
// off, 1, 0, enabled or disabled, and its negative name (no-jinja = true)
// means the opposite (llama-server's router mode, tools/server/README.md
// "Model presets"; common/preset.cpp). The flags of this backend's own
// options (model, ctx-size, ...) resolve without f (f may be nil). Errors:
// the key is not a flag of this llama-server (or f is nil and it is not
// one of the backend's own), a boolean's value is neither true nor false,
// a flag that takes a value has none.
func (f *Flags) Resolve(key, value string) (Arg, error) {
	var g *flagGroup
	if f != nil {
		g = f.byKey[key]
	}
	if g == nil {
		if t, ok := tableFlag(key); ok {
			return Arg{Flag: t.flags[0], Words: []string{t.flags[0], value}}, nil
		}
		if f == nil {
			return Arg{}, fmt.Errorf("flag %s: cannot check it: llama-server's flags could not be read (run with a llama-server binary that answers --help)", key)
		}
		return Arg{}, fmt.Errorf("flag %s is not one of llama-server's flags (its --help lists them)", key)
	}
	if t, ok := tableFlag(strings.TrimLeft(g.canonical(), "-")); ok {
		return Arg{Flag: t.flags[0], Words: []string{t.flags[0], value}}, nil
	}
	if g.value {
		if value == "" {
			return Arg{}, fmt.Errorf("flag %s takes a value", key)
		}
		return Arg{Flag: g.canonical(), Words: []string{g.canonical(), value}}, nil
	}
	on, ok := ParseSwitch(value)
	if !ok {
		return Arg{}, fmt.Errorf("flag %s is a switch: want true or false (on, off, 1, 0, enabled, disabled), got %q", key, value)
	}
	if slices.ContainsFunc(g.neg, func(n string) bool { return strings.TrimLeft(n, "-") == key }) {
		on = !on
	}
	a := Arg{Flag: g.canonical()}
	switch {
	case on:
		a.Words = []string{g.canonical()}
	case len(g.neg) > 0:
		a.Words = []string{g.neg[len(g.neg)-1]}
	}
	return a, nil
}

// ParseSwitch reads a switch's value the way llama.cpp's common_arg_utils
// does (is_truthy, is_falsey): true, on, enabled or 1; false, off, disabled
// or 0, in any case. ok is false for anything else.
func ParseSwitch(s string) (on, ok bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true", "on", "enabled", "1":
		return true, true
	case "false", "off", "disabled", "0":
		return false, true
	}
	return false, false
}

// OptionsFromArgs turns llama-server arguments into this backend's options
// (the JSON object a model's options: holds): a flag of a backend option
// (--model, --ctx-size, ...; optionFlags) becomes that option, ctx_size and
// parallel as numbers; every other flag is appended to extra_args as
// written, in order. The result is checked as a model's options are
// (without opening the model file). Errors: --host or --port (the backend
// sets them), a number that is not one, or options the backend refuses,
// each naming the flag or option.
func OptionsFromArgs(args []Arg) (map[string]any, error) {
	opts := map[string]any{}
	var extra []string
	for _, a := range args {
		if len(a.Words) == 0 {
			continue
		}
		opt, owned := ownedFlags()[a.Words[0]]
		switch {
		case !owned:
			extra = append(extra, a.Words...)
		case opt == "":
			return nil, fmt.Errorf("flag %s is set by Loadout's llamaserver backend", a.Words[0])
		case len(a.Words) != 2:
			return nil, fmt.Errorf("flag %s takes a value", a.Words[0])
		case opt == "ctx_size" || opt == "parallel" || opt == "sleep_idle_seconds":
			n, err := strconv.Atoi(strings.TrimSpace(a.Words[1]))
			if err != nil {
				return nil, fmt.Errorf("flag %s: want a whole number, got %q", a.Words[0], a.Words[1])
			}
			opts[opt] = n
		default:
			opts[opt] = a.Words[1]
		}
	}
	if len(extra) > 0 {
		opts["extra_args"] = extra
	}
	raw, err := json.Marshal(opts)
	if err != nil {
		return nil, err
	}
	if _, err := parseOptions(raw); err != nil {
		return nil, err
	}
	return opts, nil
}

// CommandLine is args as llama-server's command line would carry them,
// each word quoted where it needs it: for reports.
func CommandLine(args []Arg) string {
	var b bytes.Buffer
	for _, a := range args {
		for _, w := range a.Words {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(shellQuote(w))
		}
	}
	return b.String()
}

// CheckArg checks one argument as OptionsFromArgs would, so that a bad
// value is reported where it is written: the value of a backend option's
// flag (a number that is not one, a cache type llama-server lacks), or a
// flag the backend sets itself.
func CheckArg(a Arg) error {
	_, err := OptionsFromArgs([]Arg{{Flag: flagOf("model"), Words: []string{flagOf("model"), "m.gguf"}}, a})
	return err
}

// projectorOffloaded reports whether llama-server puts a model's
// projector (--mmproj) on the GPU, its default, given the words of its
// command line after the program (args) and its environment (env,
// KEY=VALUE), read as llama.cpp's common/arg.cpp reads them: the
// environment first — LLAMA_ARG_NO_MMPROJ_OFFLOAD set to anything, or
// LLAMA_ARG_MMPROJ_OFFLOAD false ("0", "false", "off", "disabled"),
// keeps it on the CPU, and "1", "true", "on" or "enabled" offloads it —
// then the command line, where the last of --mmproj-offload and
// --no-mmproj-offload wins.
func projectorOffloaded(args, env []string) bool {
	on := true
	for _, kv := range env { // the last of a key counts, as os/exec passes it on
		if key, value, _ := strings.Cut(kv, "="); key == "LLAMA_ARG_MMPROJ_OFFLOAD" {
			switch value {
			case "0", "false", "off", "disabled":
				on = false
			case "1", "true", "on", "enabled":
				on = true
			}
		}
	}
	if slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "LLAMA_ARG_NO_MMPROJ_OFFLOAD=") }) {
		on = false
	}
	for _, a := range args {
		switch a {
		case "--mmproj-offload":
			on = true
		case "--no-mmproj-offload":
			on = false
		}
	}
	return on
}

// EstimateCommand is Estimate for a llama-server run by a command line of
// its own rather than this backend's options: the cmd backend's (llama-
// swap's `cmd: llama-server --port ${PORT} -m model.gguf …`), argv its
// words, env the model's env (KEY=VALUE). Where the command is one
// commandOptions reads, the estimate is the one this backend makes for
// those options, split over devices GPUs; any other command (another
// server, a model llama-server downloads with -hf): an estimate not Known,
// and no error. Errors: a flag of these options with a bad value, or a
// model file that cannot be read, named.
func EstimateCommand(argv, env []string, devices int) (plugins.Estimate, error) {
	o, ok, err := commandOptions(argv, env)
	if !ok || err != nil {
		return plugins.Estimate{}, err
	}
	return estimate(o, devices)
}

// OptionFiles are the GGUF files a llamaserver model's options
// (ModelSpec.Options) name, as the server will be given them: its model,
// then its projector (mmproj) where it has one; none for options that do
// not parse (Validate reports them).
func OptionFiles(optionsJSON json.RawMessage) []string {
	o, err := parseOptions(optionsJSON)
	if err != nil {
		return nil
	}
	return o.files()
}

// CommandFiles are the GGUF files a llama-server command line names
// (commandOptions): its model, then its projector (--mmproj) where it has
// one; none for any other command or one with a bad value.
func CommandFiles(argv, env []string) []string {
	o, ok, err := commandOptions(argv, env)
	if !ok || err != nil {
		return nil
	}
	return o.files()
}

// commandOptions reads a command line as this backend's options: where
// argv's program is llama-server and a GGUF file is named (-m/--model, or
// LLAMA_ARG_MODEL in env), the options its flags stand for (optionFlags:
// --ctx-size, --n-gpu-layers, --parallel, --cache-type-k/-v, …, written
// `--flag value` or `--flag=value`, or as their LLAMA_ARG_* in env, the
// command line winning as it does in llama-server), and true; its other
// flags are not read. false for any other command. Errors: a flag of
// these options with a bad value, named.
func commandOptions(argv, env []string) (options, bool, error) {
	if len(argv) == 0 || strings.TrimSuffix(filepath.Base(argv[0]), ".exe") != DefaultBinary {
		return options{}, false, nil
	}
	// The options' flags as OptionsFromArgs reads them, env's first so
	// that the command line's, later, win.
	var args []Arg
	for _, kv := range env {
		key, value, _ := strings.Cut(kv, "=")
		for _, f := range optionFlags {
			if f.option != "" && f.env == key {
				args = append(args, Arg{Flag: f.flags[0], Words: []string{f.flags[0], value}})
			}
		}
	}
	for i := 1; i < len(argv); i++ {
		name, value, inline := strings.Cut(argv[i], "=")
		if option, ok := ownedFlags()[name]; !ok || option == "" {
			continue
		} else if !inline {
			switch {
			case option == "flash_attn" && (i+1 == len(argv) || strings.HasPrefix(argv[i+1], "-")):
				value = "on" // older llama-servers' -fa takes no value
			case i+1 == len(argv):
				continue
			default:
				i++
				value = argv[i]
			}
		}
		args = append(args, Arg{Flag: name, Words: []string{name, value}})
	}
	opts, err := OptionsFromArgs(args)
	if err != nil {
		if !slices.ContainsFunc(args, func(a Arg) bool { return ownedFlags()[a.Flag] == "model" }) {
			return options{}, false, nil // no model named: not this backend's to estimate
		}
		return options{}, false, err
	}
	if _, ok := opts["model"]; !ok {
		return options{}, false, nil
	}
	raw, err := json.Marshal(opts)
	if err != nil {
		return options{}, false, err
	}
	o, err := parseOptions(raw)
	o.ProjectorOnCPU = !projectorOffloaded(argv[1:], env)
	return o, err == nil, err
}
