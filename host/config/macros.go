package config

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

var (
	// llama-swap's macro rules: names match this, are shorter than 64
	// characters and are not reserved.
	macroName = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)
	// A macro reference, ${name}; ${env.VAR} does not match (the dot).
	macroRef = regexp.MustCompile(`\$\{([a-zA-Z0-9_-]+)\}`)
	// Anything that starts like an environment reference.
	envRef  = regexp.MustCompile(`\$\{env\.([^}]*)\}`)
	envName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
)

// Reserved macro names (llama-swap's): ${PORT} is assigned per model, ${MODEL_ID}
// is the model's id, ${PID} is the upstream process id, substituted in cmdStop
// when it runs.
const (
	macroPort    = "PORT"
	macroModelID = "MODEL_ID"
	macroPID     = "PID"
)

// maxMacroValue is llama-swap's limit on a macro's string value.
const maxMacroValue = 1024

// lookupEnv is os.LookupEnv; tests replace it.
var lookupEnv = os.LookupEnv

// substituteEnv replaces ${env.VAR} in every scalar of the tree, keys included,
// before anything else looks at it (llama-swap substitutes environment macros
// first, and an unset variable is an error). A plain scalar is re-typed after
// substitution, so `ttl: ${env.TTL}` can still be a number.
func (d *decoder) substituteEnv(n *yaml.Node, path string) {
	if n == nil {
		return
	}
	switch n.Kind {
	case yaml.ScalarNode:
		if !strings.Contains(n.Value, "${env.") {
			return
		}
		bad := false
		out := envRef.ReplaceAllStringFunc(n.Value, func(ref string) string {
			name := envRef.FindStringSubmatch(ref)[1]
			if !envName.MatchString(name) {
				d.errorf(n, path, "malformed environment macro %s: want ${env.NAME} with NAME a letter or _ followed by letters, digits or _", ref)
				bad = true
				return ref
			}
			v, ok := lookupEnv(name)
			if !ok {
				d.errorf(n, path, "environment variable %s is not set (used as ${env.%s})", name, name)
				bad = true
				return ref
			}
			return v
		})
		if bad {
			return
		}
		n.Value = out
		if n.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) == 0 && n.Tag != "!!merge" {
			n.Tag = "" // re-resolve: the value may now be a number or a boolean
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			d.substituteEnv(k, path)
			d.substituteEnv(n.Content[i+1], join(path, k.Value))
			if k.Kind == yaml.ScalarNode {
				k.Tag = "!!str"
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			d.substituteEnv(c, index(path, i))
		}
	}
}

// macros decodes and validates a macros mapping (global or model level).
// outer are the macros a model-level list may also refer to (the globals).
func (d *decoder) macros(n *yaml.Node, path string, outer []Macro) []Macro {
	var out []Macro
	defined := map[string]bool{macroPort: true, macroModelID: true, macroPID: true}
	for _, m := range outer {
		defined[m.Name] = true
	}
	for _, p := range d.pairs(n, path) {
		kp := join(path, p.name)
		switch {
		case len(p.name) >= 64:
			d.errorf(p.key, kp, "macro names must be shorter than 64 characters (llama-swap's limit)")
			continue
		case !macroName.MatchString(p.name):
			d.errorf(p.key, kp, "macro names may only use letters, digits, _ and - (llama-swap's ^[a-zA-Z0-9_-]+$)")
			continue
		case p.name == macroPort || p.name == macroModelID || p.name == macroPID:
			d.errorf(p.key, kp, "%s is a reserved macro name (PORT, MODEL_ID and PID are set by Loadout)", p.name)
			continue
		}
		if p.val.Kind != yaml.ScalarNode || isNull(p.val) {
			d.errorf(p.val, kp, "a macro value must be a string, number or boolean, got a %s", kindName(p.val))
			continue
		}
		v := d.value(p.val, kp)
		if s, ok := v.(string); ok {
			if len(s) > maxMacroValue {
				d.errorf(p.val, kp, "macro values are limited to %d characters (llama-swap's limit), got %d", maxMacroValue, len(s))
				continue
			}
			ok := true
			for _, ref := range macroRef.FindAllStringSubmatch(s, -1) {
				switch {
				case ref[1] == p.name:
					d.errorf(p.val, kp, "macro %s refers to itself", p.name)
					ok = false
				case !defined[ref[1]]:
					d.errorf(p.val, kp, "uses ${%s}, which is not defined above it (a macro may only use macros defined before it)", ref[1])
					ok = false
				}
			}
			if !ok {
				continue
			}
		}
		defined[p.name] = true
		out = append(out, Macro{Name: p.name, Value: v})
	}
	return out
}

// mergeMacros builds a model's macro list the way llama-swap does: MODEL_ID,
// then the globals, then the model's own (a model macro with a global's name
// takes the global's place).
func mergeMacros(modelID string, globals, local []Macro) []Macro {
	out := make([]Macro, 0, 1+len(globals)+len(local))
	out = append(out, Macro{Name: macroModelID, Value: modelID})
	out = append(out, globals...)
	for _, m := range local {
		replaced := false
		for i := range out {
			if out[i].Name == m.Name {
				out[i] = m
				replaced = true
				break
			}
		}
		if !replaced {
			out = append(out, m)
		}
	}
	return out
}

// maxExpanded bounds a value after macro substitution. Macros that each use
// an earlier one twice double at every step; without a bound thirty of them
// would need gigabytes.
const maxExpanded = 1 << 20

// substitute replaces ${name} for every macro in every scalar of the tree,
// keys included, in llama-swap's order: last macro first, so a macro's value
// may use macros defined before it. A scalar that is exactly one macro takes
// the macro's type (`port: ${PORT}` stays a number, as in llama-swap's
// metadata).
func (d *decoder) substitute(n *yaml.Node, path string, list []Macro) {
	if n == nil || len(list) == 0 {
		return
	}
	switch n.Kind {
	case yaml.ScalarNode:
		d.substituteScalar(n, path, list, true)
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			d.substituteScalar(k, join(path, k.Value), list, false)
			d.substitute(n.Content[i+1], join(path, k.Value), list)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			d.substitute(c, index(path, i), list)
		}
	}
}

// substituteScalar substitutes in one scalar; typed lets a scalar that is
// exactly one macro take the macro's type (not for keys, which are strings).
func (d *decoder) substituteScalar(n *yaml.Node, path string, list []Macro, typed bool) {
	for i := len(list) - 1; i >= 0 && strings.Contains(n.Value, "${"); i-- {
		m := list[i]
		ref := "${" + m.Name + "}"
		if !strings.Contains(n.Value, ref) {
			continue
		}
		val := macroString(m.Value)
		if typed && n.Value == ref {
			n.Value = val
			n.Tag = macroTag(m.Value)
			if n.Tag != "!!str" {
				n.Style = 0
			}
			continue
		}
		if len(n.Value)+strings.Count(n.Value, ref)*(len(val)-len(ref)) > maxExpanded {
			d.errorf(n, path, "substituting ${%s} makes the value longer than %d bytes", m.Name, maxExpanded)
			n.Value = strings.ReplaceAll(n.Value, ref, "")
			continue
		}
		n.Value = strings.ReplaceAll(n.Value, ref, val)
		if typed {
			n.Tag = "!!str"
		}
	}
}

func macroString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}

func macroTag(v any) string {
	switch v.(type) {
	case int64, int:
		return "!!int"
	case float64:
		return "!!float"
	case bool:
		return "!!bool"
	}
	return "!!str"
}

// leftoverMacros reports ${name} references that no macro resolved. allow
// names references left alone: PID in cmdStop, where it is substituted when
// the command runs.
func (d *decoder) leftoverMacros(n *yaml.Node, path string, allow ...string) {
	if n == nil {
		return
	}
	check := func(s *yaml.Node, p string) {
		seen := map[string]bool{}
		for _, ref := range macroRef.FindAllStringSubmatch(s.Value, -1) {
			name := ref[1]
			if seen[name] || slices.Contains(allow, name) {
				continue
			}
			seen[name] = true
			msg := fmt.Sprintf("unknown macro ${%s}", name)
			switch {
			case name == macroPID:
				msg += "; ${PID} is only available in cmdStop"
			case name == macroPort:
				msg += "; ${PORT} is only assigned to a model whose cmd uses it (llama-swap's rule)"
			case name == macroModelID:
				msg += "; ${MODEL_ID} is only available inside a model"
			case strings.ToUpper(name) == name:
				msg += fmt.Sprintf("; for an environment variable write ${env.%s}", name)
			}
			d.errorf(s, p, "%s", msg)
		}
	}
	switch n.Kind {
	case yaml.ScalarNode:
		check(n, path)
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			check(k, join(path, k.Value))
			d.leftoverMacros(n.Content[i+1], join(path, k.Value), allow...)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			d.leftoverMacros(c, index(path, i), allow...)
		}
	}
}
