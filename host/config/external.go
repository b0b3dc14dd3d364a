package config

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// External is a model defined outside the configuration file: by
// llama-server's router-mode inputs (serve's --models-dir and
// --models-preset, read by backends/llamaserver/routermode). It becomes a
// model like one written under models: (every default, the port, the
// implicit group), beside the file's models or alone.
type External struct {
	// ID is the model's id.
	ID string
	// Pos is where it is defined (a preset's section line, or the GGUF
	// file of a models-dir model, Line 0).
	Pos Pos
	// Source says what defined it, for the report ("models dir",
	// "preset", "models dir + preset").
	Source string
	// Flags are its llama-server flags as one line, for the report.
	Flags string
	// Backend is its backend (BackendLlamaServer).
	Backend string
	// Options are the backend's options, as a model's options: holds.
	Options map[string]any
	// UnloadTimeout replaces the configuration's unloadTimeout when not 0
	// (a preset's stop-timeout).
	UnloadTimeout time.Duration
	// Preload loads it at startup (a preset's load-on-startup), after the
	// file's hooks.on_startup.preload.
	Preload bool
}

// injectExternal adds the external models to the models: mapping (made
// when the file has none), as the YAML a configuration author would have
// written, so that they get every rule a file's model gets. A model id the
// file defines too is an error naming both places.
func (d *decoder) injectExternal(top map[string]pair) {
	if len(d.opts.Models) == 0 {
		return
	}
	p, ok := top["models"]
	if !ok || isNull(p.val) {
		p = pair{key: &yaml.Node{Kind: yaml.ScalarNode, Value: "models"}, val: &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}, name: "models"}
		if ok {
			p.key = top["models"].key
		}
		top["models"] = p
	}
	if p.val.Kind != yaml.MappingNode {
		return // reported by models()
	}
	for _, x := range d.opts.Models {
		if i := slices.IndexFunc(p.val.Content, func(n *yaml.Node) bool { return n.Value == x.ID }); i >= 0 && i%2 == 0 {
			d.errorf(p.val.Content[i], join("models", x.ID), "model %s is defined here and by the %s at %s: a model id may be defined once", x.ID, x.Source, x.Pos)
			continue
		}
		m := map[string]any{"backend": x.Backend, "options": x.Options}
		if x.UnloadTimeout > 0 {
			m["unloadTimeout"] = int(x.UnloadTimeout / time.Second)
		}
		var val yaml.Node
		if err := val.Encode(m); err != nil {
			d.errs = append(d.errs, &Error{Pos: x.Pos, Key: join("models", x.ID), Message: err.Error()})
			continue
		}
		p.val.Content = append(p.val.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: x.ID}, &val)
	}
}

// placeExternal gives the external models their own positions and adds
// the ones to preload.
func (d *decoder) placeExternal(cfg *Config) {
	for _, x := range d.opts.Models {
		m := cfg.Models[x.ID]
		if m == nil || m.Pos.Line > 0 { // not made, or the file's own
			continue
		}
		m.Pos = x.Pos
		cfg.External = append(cfg.External, x)
		if x.Preload && !slices.Contains(cfg.Preload, x.ID) {
			cfg.Preload = append(cfg.Preload, x.ID)
		}
	}
}

// externalReport is the report's section on router-mode models: where
// each came from, its flags, and what may run beside it. llama-server's
// router runs up to --models-max (default 4) models at once and unloads
// the least recently used beyond; Loadout runs them by its groups and
// router instead, which the last lines say.
func externalReport(b *strings.Builder, cfg *Config) {
	if len(cfg.External) == 0 {
		return
	}
	b.WriteString("\nRouter mode (llama-server's --models-dir / --models-preset)\n")
	swapOne := true
	for _, x := range cfg.External {
		group := "-"
		if g := cfg.GroupOf(x.ID); g != nil {
			group = g.Name
			if !g.Swap {
				swapOne = false
			}
		}
		fmt.Fprintf(b, "  %s: from the %s (%s), group %s\n      %s\n", x.ID, x.Source, x.Pos, group, x.Flags)
	}
	if swapOne && cfg.Routing.Router.Use == RouterGroup && cfg.Routing.Router.Wasm == "" {
		b.WriteString("  one model at a time: they are in swap groups (like llama-server --models-max 1; its default is 4,\n" +
			"  the least recently used unloaded beyond). To run several at once, declare gpus: and use a VRAM-aware\n" +
			"  router (routing.router.use: prioritylru) in a --config file.\n")
	}
}
