package config

import (
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Modalities are the values capabilities.in and capabilities.out take
// (llama-swap's).
var Modalities = []string{"text", "audio", "image"}

// Capabilities is what a model accepts and produces (llama-swap's
// capabilities:), shown in /v1/models (host/proxy renders it as
// llama-swap does: architecture, capabilities, supported_parameters,
// context_length). The zero value means none were declared.
type Capabilities struct {
	// In and Out are the input and output modalities, each one of
	// Modalities, in the order written, without repeats.
	In, Out []string
	// Tools: the model supports function calling.
	Tools bool
	// Reranker: the model serves the rerank endpoints.
	Reranker bool
	// Context is the longest context the model takes, in tokens; 0 when
	// not given.
	Context int
}

// Empty reports whether no capability is declared (llama-swap treats an
// all-zero block as absent).
func (c Capabilities) Empty() bool {
	return len(c.In) == 0 && len(c.Out) == 0 && !c.Tools && !c.Reranker && c.Context == 0
}

var capabilityKeys = []string{"in", "out", "tools", "reranker", "context"}

// capabilities decodes a model's capabilities: block at path. Errors, at
// their line: a modality not in Modalities, a negative context, a value of
// the wrong type, an unknown key.
func (d *decoder) capabilities(n *yaml.Node, path string) Capabilities {
	var c Capabilities
	for _, p := range d.pairs(n, path) {
		kp := join(path, p.name)
		switch p.name {
		case "in", "out":
			items, _ := d.items(p.val, kp)
			var list []string
			for i, it := range items {
				s, ok := d.str(it, index(kp, i))
				switch {
				case !ok:
				case !slices.Contains(Modalities, s):
					d.errorf(it, index(kp, i), "want one of %s, got %q", strings.Join(Modalities, ", "), s)
				case !slices.Contains(list, s):
					list = append(list, s)
				}
			}
			if p.name == "in" {
				c.In = list
			} else {
				c.Out = list
			}
		case "tools":
			c.Tools, _ = d.boolean(p.val, kp)
		case "reranker":
			c.Reranker, _ = d.boolean(p.val, kp)
		case "context":
			if v, ok := d.integer(p.val, kp, "a whole number of tokens"); ok {
				if v < 0 {
					d.errorf(p.val, kp, "want 0 or more tokens, got %d", v)
				} else {
					c.Context = v
				}
			}
		default:
			d.unknownKey(p.key, kp, capabilityKeys)
		}
	}
	return c
}

// String describes c for Report: "in text+image, out text, tools, context 32000".
func (c Capabilities) String() string {
	var parts []string
	if len(c.In) > 0 {
		parts = append(parts, "in "+strings.Join(c.In, "+"))
	}
	if len(c.Out) > 0 {
		parts = append(parts, "out "+strings.Join(c.Out, "+"))
	}
	if c.Tools {
		parts = append(parts, "tools")
	}
	if c.Reranker {
		parts = append(parts, "reranker")
	}
	if c.Context > 0 {
		parts = append(parts, fmt.Sprintf("context %d", c.Context))
	}
	return strings.Join(parts, ", ")
}
