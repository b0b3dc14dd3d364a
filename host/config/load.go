package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Defaults, llama-swap's unless noted.
const (
	defaultHealthCheckTimeout = 120 // seconds
	minHealthCheckTimeout     = 15  // seconds; llama-swap raises smaller values to this
	defaultStartPort          = 5800
	defaultUnloadTimeout      = 10 // seconds
	defaultLogLevel           = "info"
	defaultCheckEndpoint      = "/health"
	defaultProxy              = "http://127.0.0.1:${PORT}" // llama-swap's is http://localhost:${PORT}; 127.0.0.1 avoids an IPv6 lookup
)

// topKeys are the top-level keys Loadout honours; notHonoured holds the
// llama-swap keys it accepts with a warning.
var topKeys = []string{
	"healthCheckTimeout", "logLevel", "startPort", "globalTTL", "unloadTimeout",
	"apiKeys", "macros", "models", "groups", "matrix", "routing", "gpus", "hooks",
	"sendLoadingState", "includeAliasesInList", "placement", "peers", "liveness",
	"logToStdout", "logTimeFormat", "upstream", "ui", "metricsMaxInMemory",
	"profiles", "selectors", "captureBuffer", "hostMemory", "evict", "wakeTimeout",
}

// Options fit a configuration to the host it will run on. The zero value
// checks the file alone, as Parse and Load do.
type Options struct {
	// Listen is Loadout's own listen address (serve's --listen), as
	// host:port. Its port is never handed out for ${PORT} (the port is
	// skipped, with a warning), and a cmd model whose proxy points at it is
	// an error: Loadout would proxy the model's requests to itself. Empty:
	// neither check is made.
	Listen string
	// PortFree, when set, is asked about each port before it is handed out
	// for ${PORT}; a port it returns an error for is skipped, with a
	// warning carrying that error, and the next one is tried. Loadout
	// passes plugins.CheckPortFree, which binds 127.0.0.1:port briefly.
	// nil takes every port as free (the file alone decides).
	PortFree func(port int) error
	// Models are models defined outside the file (External: llama-server's
	// router-mode inputs); with them the file may be empty.
	Models []External
	// Ports are the ports models were given before, by model id (a
	// reload's: the running configuration's). A model id found here that
	// still needs a ${PORT} keeps its port, unasked (its own server may
	// hold it), and no other model is given any of these ports; the rest
	// count up from startPort as always. So a reload that adds a model
	// or a replica moves no other model's port, and restarts none. nil:
	// every port is handed out afresh (llama-swap's rule).
	Ports map[string]int
}

// Load reads and parses the configuration file at path. See Parse.
func Load(path string) (*Config, []Warning, error) {
	return LoadWith(path, Options{})
}

// LoadWith reads and parses the configuration file at path with o. See
// ParseWith.
func LoadWith(path string, o Options) (*Config, []Warning, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	return ParseWith(path, data, o)
}

// Parse parses a configuration. name is used in messages and its directory
// resolves relative paths (wasm policies, backend plugins). It returns the
// warnings (keys accepted but not acted on) even when the configuration is
// invalid; the error is then an Errors listing every problem found, each
// naming file:line:col and the key.
func Parse(name string, data []byte) (*Config, []Warning, error) {
	return ParseWith(name, data, Options{})
}

// ParseWith is Parse fitted to a host by o: ports for ${PORT} skip
// Loadout's own listen port and the ports o.PortFree refuses, and a proxy
// pointing at Loadout itself is an error. An o.Listen that is not host:port
// is an error of its own (without a position in the file).
func ParseWith(name string, data []byte, o Options) (*Config, []Warning, error) {
	return parseSources([]source{{name: name, data: data}}, o)
}

// parseSources is ParseWith of a configuration split over srcs, merged in
// order (merge.go).
func parseSources(srcs []source, o Options) (*Config, []Warning, error) {
	d := &decoder{file: srcs[0].name, opts: o, origin: map[*yaml.Node]string{}}
	for _, s := range srcs {
		d.files = append(d.files, s.name)
	}
	if o.Listen != "" {
		if _, port, err := net.SplitHostPort(o.Listen); err != nil {
			return nil, nil, fmt.Errorf("listen address %q: %w", o.Listen, err)
		} else if d.listenPort, err = strconv.Atoi(port); err != nil {
			return nil, nil, fmt.Errorf("listen address %q: port %q is not a number", o.Listen, port)
		}
	}
	cfg := d.parse(srcs)
	d.sorted()
	if len(d.errs) > 0 {
		return nil, d.warns, d.errs
	}
	return cfg, d.warns, nil
}

var (
	yamlLine      = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)
	unknownAnchor = regexp.MustCompile(`^yaml: unknown anchor '(.+)' referenced$`)
)

// aliasLine is the line (from 1) of the first alias *name in data, 0 when
// none is found: yaml.v3's error for an alias of an anchor never defined
// names no line.
func aliasLine(data []byte, name string) int {
	re := regexp.MustCompile(`\*` + regexp.QuoteMeta(name) + `(?:[\s,\]}]|$)`)
	for i, line := range bytes.Split(data, []byte("\n")) {
		if re.Match(line) {
			return i + 1
		}
	}
	return 0
}

// syntaxError turns a yaml.v3 error in data into an *Error, lifting the
// line number out of its text; where that line is indented with a tab
// (which YAML forbids, and yaml.v3 reports only as a character that
// cannot start a token), the message says so.
func (d *decoder) syntaxError(err error, data []byte) {
	msg := err.Error()
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	e := &Error{Pos: Pos{File: d.file}, Message: strings.TrimPrefix(msg, "yaml: ")}
	if m := unknownAnchor.FindStringSubmatch(msg); m != nil {
		e.Line = aliasLine(data, m[1])
		e.Message += " (no anchor &" + m[1] + " is defined before it)"
	}
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		e.Line, _ = strconv.Atoi(m[1])
		e.Message = m[2]
		// yaml.v3 numbers the lines of scanner errors from 1 but those of
		// parser errors ("did not find expected ...") from 0.
		if strings.HasPrefix(e.Message, "did not find expected") {
			e.Line++
		}
		if lines := bytes.Split(data, []byte("\n")); e.Line >= 1 && e.Line <= len(lines) {
			line := lines[e.Line-1]
			if indent := line[:len(line)-len(bytes.TrimLeft(line, " \t"))]; bytes.IndexByte(indent, '\t') >= 0 {
				e.Message += " (the line is indented with a tab: YAML indents with spaces only)"
			}
		}
	}
	d.errs = append(d.errs, e)
}

// decodeOne decodes one file's text to its normalized root: nil for a
// file that is empty or only comments; ok false after a syntax error.
func (d *decoder) decodeOne(data []byte) (root *yaml.Node, ok bool) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil && err != io.EOF {
		d.syntaxError(err, data)
		return nil, false
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		d.errorf(&extra, "", "a configuration is one YAML document; remove the second one (---)")
	case err != io.EOF:
		d.syntaxError(err, data)
	}
	if doc.Kind == 0 {
		return nil, true
	}
	return d.normalize(&doc, ""), true
}

func (d *decoder) parse(srcs []source) *Config {
	var root *yaml.Node
	for i, src := range srcs {
		n, ok := d.document(src, i == 0)
		switch {
		case !ok:
			return nil
		case isNull(n):
		case n.Kind != yaml.MappingNode:
			d.errorf(n, "", "want a mapping of settings at the top level, got a %s", kindName(n))
			return nil
		case root == nil:
			root = n
		default:
			d.mergeMapping(root, n, "")
		}
	}
	if isNull(root) && len(d.opts.Models) > 0 {
		root = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	}
	if isNull(root) {
		d.errorf(nil, "models", "the configuration is empty: at least one model is required")
		return nil
	}
	d.substituteEnv(root, "")

	dir := filepath.Dir(d.file)
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	cfg := &Config{
		File:               d.file,
		Files:              d.files,
		Dir:                dir,
		HealthCheckTimeout: defaultHealthCheckTimeout * time.Second,
		LogLevel:           defaultLogLevel,
		StartPort:          defaultStartPort,
		UnloadTimeout:      defaultUnloadTimeout * time.Second,
		WakeTimeout:        DefaultWakeTimeout,
		Models:             map[string]*Model{},
		LogToStdout:        LogProxy,
		SessionHeaders:     DefaultSessionHeaders,
		CaptureBuffer:      DefaultCaptureBuffer,
	}

	top := map[string]pair{}
	for _, p := range d.pairs(root, "") {
		switch {
		case slices.Contains(topKeys, p.name):
			top[p.name] = p
		case strings.HasPrefix(p.name, "x-"):
			// An extension field, as in docker compose: a place for anchors.
		case notHonoured[p.name] != "":
			d.warnf(p.key, p.name, "accepted for llama-swap compatibility but not honoured: %s", notHonoured[p.name])
		default:
			d.unknownKey(p.key, p.name, append(slices.Clone(topKeys), slices.Sorted(maps.Keys(notHonoured))...))
		}
	}
	d.injectExternal(top)
	get := func(k string) *yaml.Node {
		if p, ok := top[k]; ok {
			return p.val
		}
		return nil
	}

	d.globals(cfg, top)
	cfg.Macros = d.macros(get("macros"), "macros", nil)

	// Global macros may be used in any value (llama-swap); models get theirs
	// merged with their own, the rest get the globals here.
	for _, k := range []string{"apiKeys", "hooks", "gpus", "groups", "matrix", "routing", "peers", "upstream", "ui", "profiles", "selectors"} {
		d.substitute(get(k), k, cfg.Macros)
	}
	for _, k := range []string{"apiKeys", "hooks", "gpus", "peers", "upstream", "ui", "profiles", "selectors"} {
		d.leftoverMacros(get(k), k)
	}

	d.apiKeys(cfg, get("apiKeys"))
	peers := get("peers")
	src := d.models(cfg, top["models"], peers != nil && peers.Kind == yaml.MappingNode && len(peers.Content) > 0)
	d.aliases(cfg, src)
	d.gpus(cfg, get("gpus"))
	d.boxPlacement(cfg, get("placement"))
	d.declaredPlacement(cfg)
	d.routing(cfg, src, top)
	d.hooks(cfg, get("hooks"))
	d.placeExternal(cfg)
	d.peers(cfg, peers)
	d.selectors(cfg, get("selectors"))
	d.profiles(cfg, get("profiles"))
	d.liveness(cfg, get("liveness"))
	vllmSleeps(src)
	d.checkSleep(cfg, src, top)
	if n := get("logToStdout"); n != nil {
		d.logToStdout(cfg, n)
	}
	if n := get("logTimeFormat"); n != nil {
		d.logTimeFormat(cfg, n)
	}
	d.upstream(cfg, get("upstream"))
	if len(cfg.IgnorePaths) == 0 {
		cfg.IgnorePaths = defaultIgnorePaths()
	}
	d.ui(cfg, get("ui"))
	if n := get("metricsMaxInMemory"); n != nil {
		d.metricsMaxInMemory(cfg, n)
	}
	if n := get("captureBuffer"); n != nil {
		d.captureBuffer(cfg, n)
	}
	return cfg
}

// globals decodes the scalar top-level settings.
func (d *decoder) globals(cfg *Config, top map[string]pair) {
	if p, ok := top["healthCheckTimeout"]; ok {
		if s, ok := d.seconds(p.val, p.name, 0); ok {
			if s < minHealthCheckTimeout {
				d.warnf(p.val, p.name, "raised from %d to %d seconds, llama-swap's minimum", s, minHealthCheckTimeout)
				s = minHealthCheckTimeout
			}
			cfg.HealthCheckTimeout = time.Duration(s) * time.Second
		}
	}
	if p, ok := top["logLevel"]; ok {
		if s, ok := d.str(p.val, p.name); ok {
			switch s {
			case "debug", "info", "warn", "error":
				cfg.LogLevel = s
			default:
				d.errorf(p.val, p.name, "want one of debug, info, warn, error, got %q", s)
			}
		}
	}
	if p, ok := top["startPort"]; ok {
		if n, ok := d.integer(p.val, p.name, "a port number"); ok {
			if n < 1 || n > 65535 {
				d.errorf(p.val, p.name, "want a port number from 1 to 65535, got %d", n)
			} else {
				cfg.StartPort = n
			}
		}
	}
	if p, ok := top["globalTTL"]; ok {
		if s, ok := d.seconds(p.val, p.name, 0); ok {
			cfg.GlobalTTL = time.Duration(s) * time.Second
		}
	}
	if p, ok := top["unloadTimeout"]; ok {
		if s, ok := d.seconds(p.val, p.name, 0); ok {
			cfg.UnloadTimeout = time.Duration(s) * time.Second
		}
	}
	if p, ok := top["wakeTimeout"]; ok {
		if s, ok := d.seconds(p.val, p.name, 1); ok {
			cfg.WakeTimeout = time.Duration(s) * time.Second
		}
	}
	if p, ok := top["sendLoadingState"]; ok {
		cfg.SendLoadingState, _ = d.boolean(p.val, p.name)
	}
	if p, ok := top["includeAliasesInList"]; ok {
		cfg.IncludeAliasesInList, _ = d.boolean(p.val, p.name)
	}
	d.residency(cfg, top)
}

// apiKeys decodes llama-swap's apiKeys: non-empty strings without spaces.
func (d *decoder) apiKeys(cfg *Config, n *yaml.Node) {
	items, _ := d.items(n, "apiKeys")
	for i, it := range items {
		p := index("apiKeys", i)
		s, ok := d.str(it, p)
		switch {
		case !ok:
		case s == "":
			d.errorf(it, p, "an API key cannot be empty")
		case strings.ContainsAny(s, " \t\n"):
			d.errorf(it, p, "an API key cannot contain spaces")
		default:
			cfg.APIKeys = append(cfg.APIKeys, s)
		}
	}
}

// gpus decodes the declared devices.
func (d *decoder) gpus(cfg *Config, n *yaml.Node) {
	items, _ := d.items(n, "gpus")
	seen := map[string]*yaml.Node{}
	for i, it := range items {
		path := index("gpus", i)
		g := GPU{Name: fmt.Sprintf("gpu%d", i)}
		var hasMemory bool
		for _, p := range d.pairs(it, path) {
			kp := join(path, p.name)
			switch p.name {
			case "name":
				if s, ok := d.str(p.val, kp); ok && s != "" {
					g.Name = s
				}
			case "memory":
				hasMemory = true
				if m, ok := d.size(p.val, kp); ok && m <= 0 {
					d.errorf(p.val, kp, "a GPU of %s holds no model: want its memory, for example 24GiB", p.val.Value)
				} else {
					g.Memory = m
				}
			default:
				d.unknownKey(p.key, kp, []string{"name", "memory"})
			}
		}
		if it.Kind != yaml.MappingNode {
			continue
		}
		if !hasMemory {
			d.errorf(it, path, "memory is required (for example memory: 24GiB)")
		}
		if first, dup := seen[g.Name]; dup {
			d.errorf(it, path, "GPU name %q is already used (%s)", g.Name, d.posOf(first))
		}
		seen[g.Name] = it
		cfg.GPUs = append(cfg.GPUs, g)
	}
}

// size decodes a memory size (ParseSize syntax, or a YAML integer of bytes).
func (d *decoder) size(n *yaml.Node, path string) (int64, bool) {
	if n.Kind != yaml.ScalarNode || isNull(n) {
		d.errorf(n, path, "want a size like 24GiB, 512MiB, 1.5GB or a byte count, got a %s", kindName(n))
		return 0, false
	}
	v, err := ParseSize(n.Value)
	if err != nil {
		d.errorf(n, path, "%v", err)
		return 0, false
	}
	return v, true
}

// hooks decodes hooks.on_startup.preload (llama-swap's only hook), resolving
// aliases to model ids. A name that is no model or alias is skipped with a
// warning, as llama-swap skips it.
func (d *decoder) hooks(cfg *Config, n *yaml.Node) {
	for _, p := range d.pairs(n, "hooks") {
		kp := join("hooks", p.name)
		if p.name != "on_startup" {
			d.unknownKey(p.key, kp, []string{"on_startup"})
			continue
		}
		for _, q := range d.pairs(p.val, kp) {
			qp := join(kp, q.name)
			if q.name != "preload" {
				d.unknownKey(q.key, qp, []string{"preload"})
				continue
			}
			items, _ := d.items(q.val, qp)
			for i, it := range items {
				ip := index(qp, i)
				name, ok := d.str(it, ip)
				name = strings.TrimSpace(name)
				if !ok || name == "" {
					continue
				}
				id, ok := cfg.ResolveModel(name)
				if !ok {
					// llama-swap drops such a name without a word
					// (config/load.go); a config it starts with must
					// start here, so this is a warning.
					d.warnf(it, ip, "model %q is not defined, so it is not preloaded%s", name, d.didYouMeanModel(cfg, name))
					continue
				}
				if slices.Contains(cfg.Preload, id) {
					d.warnf(it, ip, "model %s is already preloaded", id)
					continue
				}
				cfg.Preload = append(cfg.Preload, id)
			}
		}
	}
}

// didYouMeanModel suggests a model id or alias close to name.
func (d *decoder) didYouMeanModel(cfg *Config, name string) string {
	names := cfg.ModelIDs()
	names = append(names, slices.Sorted(maps.Keys(cfg.aliases))...)
	if s := suggest(name, names); s != "" {
		return fmt.Sprintf("; did you mean %q?", s)
	}
	return ""
}
