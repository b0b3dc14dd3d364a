package config

import (
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode"

	"gopkg.in/yaml.v3"

	cmdbackend "github.com/loadout-dev/loadout/backends/cmd"
)

// modelKeys are the keys a model may have: llama-swap's (modelNotHonoured
// holds those accepted with a warning) and Loadout's own.
var modelKeys = []string{
	// llama-swap
	"cmd", "cmdStop", "proxy", "aliases", "env", "checkEndpoint", "ttl",
	"useModelName", "unlisted", "name", "description", "concurrencyLimit",
	"unloadTimeout", "metadata", "macros", "sendLoadingState",
	"filters", "timeouts", "capabilities", "compat",
	// Loadout
	"backend", "options", "vram", "priority", "pinned", "simulate",
	"gpus", "split", "replicas", "min_replicas", "max_replicas", "evict", "weights", "wakeTimeout",
}

// shadowedMetadata are the meta.llamaswap keys /v1/models sets itself
// (host/proxy), hiding a metadata key of the same name.
var shadowedMetadata = []string{"type", "aliases", "modelID", "peerID"}

var builtinBackends = []string{BackendCmd, BackendSim, BackendLlamaServer, BackendVLLM}

// modelSrc keeps the YAML a model came from, for checks across models.
type modelSrc struct {
	model    *Model
	key      *yaml.Node   // the model id's key
	aliases  []*yaml.Node // one per Model.Aliases entry
	aliasIdx []int        // its index in the YAML list
	evict    *yaml.Node   // the evict: value, when the model sets one
	priority *yaml.Node   // the priority: value, when set
	byID     []*yaml.Node // the keys of filters.setParamsByID
}

// models decodes `models:` in sorted id order (the order ports are assigned
// in, as in llama-swap).
// A box with peers may have no model of its own: it is then one endpoint
// in front of other boxes (withPeers).
func (d *decoder) models(cfg *Config, top pair, withPeers bool) map[string]*modelSrc {
	src := map[string]*modelSrc{}
	const none = "no models defined: at least one model, or a peer under peers:, is required"
	if top.val == nil {
		if !withPeers {
			d.errorf(nil, "models", none)
		}
		return src
	}
	if isNull(top.val) {
		if !withPeers {
			d.errorf(top.key, "models", none)
		}
		return src
	}
	byID := map[string]pair{}
	for _, p := range d.pairs(top.val, "models") {
		byID[p.name] = p
	}
	if top.val.Kind == yaml.MappingNode && len(byID) == 0 && !withPeers {
		d.errorf(top.key, "models", none)
	}
	ids := slices.Sorted(maps.Keys(byID))
	sort.Strings(ids)
	nextPort := cfg.StartPort
	for _, id := range ids {
		p := byID[id]
		s := d.model(cfg, id, p, &nextPort)
		if s != nil {
			cfg.Models[id] = s.model
			src[id] = s
		}
	}
	d.expandReplicas(cfg, src, &nextPort)
	return src
}

func (d *decoder) model(cfg *Config, id string, mp pair, nextPort *int) *modelSrc {
	path := join("models", id)
	m := &Model{
		ID:               id,
		Pos:              d.pos(mp.key),
		CheckEndpoint:    defaultCheckEndpoint,
		TTL:              cfg.GlobalTTL,
		Evict:            cfg.Evict,
		UnloadTimeout:    cfg.UnloadTimeout,
		WakeTimeout:      cfg.WakeTimeout,
		SendLoadingState: cfg.SendLoadingState,
		Timeouts:         DefaultTimeouts,
	}
	if id == "" {
		d.errorf(mp.key, path, "a model id cannot be empty")
		return nil
	}
	if i := strings.IndexFunc(id, unicode.IsControl); i >= 0 {
		// A request could not name it in a header, and it would break
		// every table and log line that prints it.
		d.errorf(mp.key, path, "a model id cannot hold a control character (%q at byte %d)", id[i:i+1], i)
		return nil
	}
	if mp.val.Kind != yaml.MappingNode {
		d.errorf(mp.val, path, "want a mapping with at least cmd (or backend), got a %s", kindName(mp.val))
		return nil
	}
	s := &modelSrc{model: m, key: mp.key}

	fields := map[string]pair{}
	var order []string
	for _, p := range d.pairs(mp.val, path) {
		switch {
		case slices.Contains(modelKeys, p.name):
		case modelNotHonoured[p.name] != "":
			d.warnf(p.key, join(path, p.name), "accepted for llama-swap compatibility but not honoured: %s", modelNotHonoured[p.name])
		default:
			d.unknownKey(p.key, join(path, p.name), append(slices.Clone(modelKeys), slices.Sorted(maps.Keys(modelNotHonoured))...))
			continue
		}
		fields[p.name] = p
		order = append(order, p.name)
	}

	// Macros: llama-swap strips comments from cmd and cmdStop first, then
	// substitutes MODEL_ID, the global and the model's macros in every value.
	var local []Macro
	if p, ok := fields["macros"]; ok {
		local = d.macros(p.val, join(path, "macros"), cfg.Macros)
	}
	for _, k := range []string{"cmd", "cmdStop"} {
		if p, ok := fields[k]; ok && p.val.Kind == yaml.ScalarNode {
			p.val.Value = stripComments(p.val.Value)
		}
	}
	merged := mergeMacros(id, cfg.Macros, local)
	for _, k := range order {
		if k != "macros" {
			d.substitute(fields[k].val, join(path, k), merged)
		}
	}

	// Backend: cmd when cmd is set, else it must be named.
	cmd := ""
	if p, ok := fields["cmd"]; ok {
		if c, ok := d.str(p.val, join(path, "cmd")); ok {
			cmd = foldCommand(c)
		}
	}
	if p, ok := fields["backend"]; ok {
		m.Backend = d.backend(cfg, p.val, join(path, "backend"))
	} else if _, ok := fields["cmd"]; ok {
		m.Backend = BackendCmd
	} else {
		d.errorf(mp.key, path, "cmd is required (or name a backend: %s, or a plugin path)", strings.Join(builtinBackends, ", "))
	}
	if m.Backend == BackendCmd && cmd == "" {
		if p, ok := fields["cmd"]; ok {
			d.errorf(p.val, join(path, "cmd"), "the command is empty")
		} else if _, ok := fields["backend"]; ok {
			d.errorf(mp.key, path, "backend cmd needs a cmd")
		}
	}

	// ${PORT}: llama-swap assigns one to each model whose cmd uses it, and
	// rejects a proxy that uses it when cmd does not. Non-cmd backends always
	// get one: the host hands it to the plugin to listen on.
	proxy := ""
	proxyNode := mp.key
	if p, ok := fields["proxy"]; ok {
		proxyNode = p.val
		proxy, _ = d.str(p.val, join(path, "proxy"))
	} else if m.Backend == BackendCmd {
		proxy = defaultProxy
	}
	cmdHasPort := strings.Contains(cmd, "${PORT}")
	proxyHasPort := strings.Contains(proxy, "${PORT}")
	var allow []string
	switch {
	case m.Backend == BackendCmd && cmd == "":
		// reported above; a ${PORT} complaint would only add noise
	case m.Backend == BackendCmd && !cmdHasPort && proxyHasPort:
		what := "proxy"
		if _, ok := fields["proxy"]; !ok {
			what = fmt.Sprintf("proxy (default %s)", defaultProxy)
		}
		d.errorf(proxyNode, join(path, "proxy"), "${PORT} is used in %s but not in cmd; llama-swap rejects this too: pass --port ${PORT} in cmd, or set proxy to the URL the server listens on", what)
		allow = append(allow, macroPort) // reported once, here
	case m.Backend == BackendCmd && !cmdHasPort:
	case m.Backend != "":
		assigned, ok := d.assignPort(id, mp.key, path, cfg, nextPort)
		if !ok {
			allow = append(allow, macroPort)
			break
		}
		m.Port = assigned
		port := []Macro{{Name: macroPort, Value: int64(m.Port)}}
		for _, k := range order {
			if k != "macros" {
				d.substitute(fields[k].val, join(path, k), port)
			}
		}
		m.cmdTemplate, m.proxyTemplate = cmd, proxy
		cmd = strings.ReplaceAll(cmd, "${PORT}", fmt.Sprint(m.Port))
		proxy = strings.ReplaceAll(proxy, "${PORT}", fmt.Sprint(m.Port))
	}
	for _, k := range order {
		switch k {
		case "macros":
		case "cmdStop":
			d.leftoverMacros(fields[k].val, join(path, k), append(slices.Clone(allow), macroPID)...)
		case "options":
			// The cmd backend's sleep and wake steps have macros of their
			// own, substituted when a step runs (${level}, ${PID}).
			n := fields[k].val
			if n.Kind != yaml.MappingNode {
				d.leftoverMacros(n, join(path, k), allow...)
				break
			}
			for i := 0; i+1 < len(n.Content); i += 2 {
				a := allow
				if slices.Contains(cmdbackend.StepOptions, n.Content[i].Value) {
					a = append(slices.Clone(allow), cmdbackend.StepMacros...)
				}
				d.leftoverMacros(n.Content[i+1], join(join(path, k), n.Content[i].Value), a...)
			}
		default:
			d.leftoverMacros(fields[k].val, join(path, k), allow...)
		}
	}

	m.Cmd = cmd
	if m.Cmd != "" {
		if _, err := SplitCommand(m.Cmd); err != nil {
			d.errorf(fields["cmd"].val, join(path, "cmd"), "%v", err)
		}
	}
	m.Proxy = proxy
	if p, ok := fields["proxy"]; ok {
		if !strings.Contains(proxy, "${") { // else reported as a macro problem
			d.checkProxy(p.val, join(path, "proxy"), proxy, m.Backend == BackendCmd)
		}
		if m.Backend != BackendCmd && m.Backend != "" {
			d.warnf(p.key, join(path, "proxy"), "ignored for backend %s, which reports its own URL", m.Backend)
			m.Proxy = ""
		}
	}

	for _, k := range order {
		p := fields[k]
		kp := join(path, k)
		switch k {
		case "cmdStop":
			if c, ok := d.str(p.val, kp); ok {
				m.CmdStop = foldCommand(c)
				if m.CmdStop != "" {
					if _, err := SplitCommand(m.CmdStop); err != nil {
						d.errorf(p.val, kp, "%v", err)
					}
				}
			}
		case "aliases":
			items, _ := d.items(p.val, kp)
			for i, it := range items {
				a, ok := d.str(it, index(kp, i))
				if !ok {
					continue
				}
				if strings.TrimSpace(a) == "" {
					d.errorf(it, index(kp, i), "an alias cannot be empty")
					continue
				}
				m.Aliases = append(m.Aliases, a)
				s.aliases = append(s.aliases, it)
				s.aliasIdx = append(s.aliasIdx, i)
			}
		case "env":
			items, _ := d.items(p.val, kp)
			for i, it := range items {
				e, ok := d.str(it, index(kp, i))
				if !ok {
					continue
				}
				if name, _, found := strings.Cut(e, "="); !found || name == "" || strings.ContainsAny(name, " \t") {
					d.errorf(it, index(kp, i), "want NAME=value, got %q", e)
					continue
				}
				m.Env = append(m.Env, e)
			}
		case "checkEndpoint":
			if c, ok := d.str(p.val, kp); ok {
				switch {
				case c == "none":
					m.CheckEndpoint = ""
				case !strings.HasPrefix(c, "/"):
					d.errorf(p.val, kp, "want a path starting with / (or none to skip health checks), got %q", c)
				default:
					m.CheckEndpoint = c
				}
			}
		case "ttl":
			if t, ok := d.seconds(p.val, kp, -1); ok && t >= 0 {
				m.TTL = time.Duration(t) * time.Second
			}
		case "unloadTimeout":
			if t, ok := d.seconds(p.val, kp, 0); ok && t > 0 {
				m.UnloadTimeout = time.Duration(t) * time.Second
			}
		case "wakeTimeout":
			if t, ok := d.seconds(p.val, kp, 0); ok && t > 0 {
				m.WakeTimeout = time.Duration(t) * time.Second
			}
		case "useModelName":
			m.UseModelName, _ = d.str(p.val, kp)
		case "name":
			m.Name, _ = d.str(p.val, kp)
		case "description":
			m.Description, _ = d.str(p.val, kp)
		case "unlisted":
			m.Unlisted, _ = d.boolean(p.val, kp)
		case "sendLoadingState":
			if !isNull(p.val) {
				m.SendLoadingState, _ = d.boolean(p.val, kp)
			}
		case "concurrencyLimit":
			if n, ok := d.integer(p.val, kp, "a whole number of requests"); ok {
				if n < 0 {
					d.errorf(p.val, kp, "want 0 (the default) or more, got %d", n)
				} else {
					m.ConcurrencyLimit = n
				}
			}
		case "metadata":
			m.Metadata = d.mapValue(p.val, kp)
			for _, q := range d.pairs(p.val, kp) {
				if slices.Contains(shadowedMetadata, q.name) {
					d.warnf(q.key, join(kp, q.name), "hidden in /v1/models by llama-swap's own meta.llamaswap.%s; rename it", q.name)
				}
			}
		case "filters":
			m.Filters, s.byID = d.filters(p.val, kp)
		case "timeouts":
			m.Timeouts = d.timeouts(p.val, kp, DefaultTimeouts, timeoutKeys)
		case "capabilities":
			m.Capabilities = d.capabilities(p.val, kp)
		case "compat":
			d.compat(m, p.val, kp)
		case "options":
			m.Options, m.options = d.keyedMap(p, kp)
		case "simulate":
			m.Simulate, m.simulate = d.keyedMap(p, kp)
			if m.Simulate == nil {
				m.Simulate = map[string]any{}
			}
		case "vram":
			m.VRAM, _ = d.size(p.val, kp)
			m.placed.vram = p.val
			if m.VRAM > 0 && m.VRAM < 1<<20 && !strings.ContainsFunc(p.val.Value, unicode.IsLetter) {
				// vram: 12 is 12 bytes; no model is that small.
				d.warnf(p.val, kp, "%s is %d bytes; write the unit, e.g. %sGiB", p.val.Value, m.VRAM, p.val.Value)
			}
		case "priority":
			if n, ok := d.integer(p.val, kp, "a whole number (higher runs first)"); ok {
				m.Priority = n
				s.priority = p.val
			}
		case "pinned":
			m.Pinned, _ = d.boolean(p.val, kp)
		case "weights":
			items, _ := d.items(p.val, kp)
			for i, it := range items {
				if f, ok := d.str(it, index(kp, i)); ok {
					if !filepath.IsAbs(f) {
						f = filepath.Join(cfg.Dir, f)
					}
					m.Weights = append(m.Weights, f)
				}
			}
		case "evict":
			if e, ok := d.evict(p.val, kp); ok {
				m.Evict, s.evict = e, p.val
			}
		case "gpus":
			d.modelGPUs(m, p.val, kp)
		case "split":
			d.modelSplit(m, p.val, kp)
		}
	}
	d.modelPlacement(m, path)
	d.modelReplicas(m, fields, path)
	if id == ComfyUIModel {
		comfyUI(m)
	}
	return s
}

// ComfyUIModel is the model id that GET /comfyui/ serves (llama-swap's
// ComfyUI passthrough, host/proxy): /comfyui/{path} is
// /upstream/comfyui_auto/{path}, and only the root page loads it.
const ComfyUIModel = "comfyui_auto"

// comfyUIConcurrency is the least concurrencyLimit of ComfyUIModel: a
// ComfyUI page asks for dozens of assets at once (llama-swap's 50).
const comfyUIConcurrency = 50

// comfyUI applies what llama-swap sets for ComfyUIModel whatever its
// config says: a concurrencyLimit of at least comfyUIConcurrency (0, the
// default, is raised too), and compat.ignoreWebsockets, so that ComfyUI's
// WebSocket neither loads the model nor holds it.
func comfyUI(m *Model) {
	m.ConcurrencyLimit = max(m.ConcurrencyLimit, comfyUIConcurrency)
	m.IgnoreWebsockets = true
}

// compat decodes a model's compat: block (llama-swap's):
// ignoreWebsockets.
func (d *decoder) compat(m *Model, n *yaml.Node, path string) {
	for _, p := range d.pairs(n, path) {
		kp := join(path, p.name)
		if p.name != "ignoreWebsockets" {
			d.unknownKey(p.key, kp, []string{"ignoreWebsockets"})
			continue
		}
		m.IgnoreWebsockets, _ = d.boolean(p.val, kp)
	}
}

// mapValue decodes a free-form mapping (metadata, options, filters).
func (d *decoder) mapValue(n *yaml.Node, path string) map[string]any {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "want a mapping, got a %s", kindName(n))
		return nil
	}
	m, _ := d.value(n, path).(map[string]any)
	return m
}

// checkProxy validates an upstream base URL: http or https with a host.
// checkProxy checks an explicit proxy URL; used says whether the backend
// proxies to it (only cmd does), so that pointing at Loadout's own listen
// address matters.
func (d *decoder) checkProxy(n *yaml.Node, path, proxy string, used bool) {
	u, err := url.Parse(proxy)
	if err != nil {
		d.errorf(n, path, "invalid URL: %v", err)
		return
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		d.errorf(n, path, "want an http:// or https:// URL with a host, like http://127.0.0.1:8080, got %q", proxy)
		return
	}
	if used && d.opts.Listen != "" && isListenAddress(u, d.opts.Listen) {
		d.errorf(n, path, "%s is Loadout's own listen address (%s): the model's requests would be proxied back to Loadout; point proxy at the model server", proxy, d.opts.Listen)
	}
}

// backend decodes `backend:`: a built-in name, or the path of a plugin binary
// (anything with a path separator), resolved against the configuration's
// directory, which must exist and be an executable file.
func (d *decoder) backend(cfg *Config, n *yaml.Node, path string) string {
	b, ok := d.str(n, path)
	if !ok {
		return ""
	}
	if slices.Contains(builtinBackends, b) {
		return b
	}
	if !strings.ContainsAny(b, `/\`) {
		msg := fmt.Sprintf("unknown backend %q: want %s, or the path of a plugin binary", b, strings.Join(builtinBackends, ", "))
		if s := suggest(b, builtinBackends); s != "" {
			msg += fmt.Sprintf("; did you mean %q?", s)
		}
		d.errorf(n, path, "%s", msg)
		return ""
	}
	p := d.resolvePath(cfg, b)
	if err := CheckPluginBinary(b, p); err != nil {
		d.errorf(n, path, "%v", err)
		return ""
	}
	return p
}

// CheckPluginBinary checks that the backend plugin binary at path (named
// as written, for the message) is an executable file: the rule for a
// config's backend: and for `loadout backend check`. Errors: "backend
// plugin NAME: no such file", "... is a directory", "... is not
// executable".
func CheckPluginBinary(name, path string) error {
	if fi, err := os.Stat(path); err != nil {
		return fmt.Errorf("backend plugin %s: %v", name, pathErr(err))
	} else if fi.IsDir() {
		return fmt.Errorf("backend plugin %s is a directory", name)
	} else if fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("backend plugin %s is not executable (chmod +x it, or name the binary rather than its source)", name)
	}
	return nil
}

func (d *decoder) resolvePath(cfg *Config, p string) string {
	if !filepath.IsAbs(p) {
		p = filepath.Join(cfg.Dir, p)
	}
	return filepath.Clean(p)
}

func pathErr(err error) string {
	if os.IsNotExist(err) {
		return "no such file"
	}
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err.Error()
	}
	return err.Error()
}

// aliases validates aliases across models (llama-swap: aliases are unique
// globally) and builds the alias index. When two models claim a name, the one
// later in the file gets the error. The keys of a model's
// filters.setParamsByID other than its id are aliases too (llama-swap
// registers them): each is added to the model's Aliases, and one that is
// another model's id or alias is an error at its line.
func (d *decoder) aliases(cfg *Config, src map[string]*modelSrc) {
	type claim struct {
		alias, model string
		path         string
		node         *yaml.Node
		byID         bool // a key of filters.setParamsByID
	}
	var claims []claim
	for id, s := range src {
		for i, a := range s.model.Aliases {
			claims = append(claims, claim{a, id, index(join(join("models", id), "aliases"), s.aliasIdx[i]), s.aliases[i], false})
		}
		for _, k := range s.byID {
			if k.Value != id { // the model's own id needs no alias
				path := join(join(join(join("models", id), "filters"), "setParamsByID"), k.Value)
				claims = append(claims, claim{k.Value, id, path, k, true})
			}
		}
	}
	sort.Slice(claims, func(i, j int) bool { return d.less(d.pos(claims[i].node), d.pos(claims[j].node)) })
	cfg.aliases = map[string]string{}
	first := map[string]claim{}
	for _, c := range claims {
		path := c.path
		what := "alias"
		if c.byID {
			what = "setParamsByID name (an alias, as in llama-swap)"
		}
		if c.alias == c.model {
			d.warnf(c.node, path, "alias %q is the model's own id; drop it", c.alias)
			continue
		}
		if other, ok := src[c.alias]; ok {
			d.errorf(c.node, path, "%s %q of model %s is the id of model %s (%s)", what, c.alias, c.model, c.alias, d.posOf(other.key))
			continue
		}
		if replicaSuffix.MatchString(c.alias) {
			d.errorf(c.node, path, "%s %q may not end in @ and a number: that names a replica (replica 2 of model m is m@2)", what, c.alias)
			continue
		}
		if f, ok := first[c.alias]; ok {
			switch {
			case f.model == c.model && (c.byID || f.byID):
				// an alias also given its own parameters: one name
			case f.model == c.model:
				d.errorf(c.node, path, "duplicate alias %q (already listed at %s)", c.alias, d.posOf(f.node))
			default:
				d.errorf(c.node, path, "%s %q of model %s is already an alias of model %s (%s)", what, c.alias, c.model, f.model, d.posOf(f.node))
			}
			continue
		}
		first[c.alias] = c
		cfg.aliases[c.alias] = c.model
		if c.byID {
			m := src[c.model].model
			m.Aliases = append(m.Aliases, c.alias)
		}
	}
}

// keyedMap decodes a mapping value and where it and each of its keys are.
func (d *decoder) keyedMap(p pair, kp string) (map[string]any, keyedMap) {
	k := keyedMap{pos: d.pos(p.key)}
	if p.val.Kind == yaml.MappingNode {
		k.keys = map[string]Pos{}
		for i := 0; i+1 < len(p.val.Content); i += 2 {
			k.keys[p.val.Content[i].Value] = d.pos(p.val.Content[i])
		}
	}
	return d.mapValue(p.val, kp), k
}
