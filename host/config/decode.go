package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// maxNodes bounds the tree after anchors are expanded, so that a YAML "billion
// laughs" document fails cleanly instead of exhausting memory. A configuration
// with a hundred models has a few thousand nodes.
const maxNodes = 100_000

// maxDepth bounds nesting. Configurations nest a dozen levels at most; the
// bound keeps key paths, which grow with depth, small.
const maxDepth = 64

// decoder collects the problems found while turning the YAML tree into a
// Config. Every helper reports through it and carries on, so one run reports
// every problem it can.
type decoder struct {
	file       string
	opts       Options
	listenPort int // opts.Listen's port, 0 when unset
	errs       Errors
	warns      []Warning
	// files are the configuration's files in merge order, the first
	// being file; origin is the file of every node read from another
	// (merge.go).
	files  []string
	origin map[*yaml.Node]string

	// normalize's guards
	nodes, depth    int
	tooBig, tooDeep bool
	expanding       map[*yaml.Node]bool // anchored nodes being expanded
}

func (d *decoder) pos(n *yaml.Node) Pos {
	if n == nil {
		return Pos{File: d.file}
	}
	return Pos{File: d.fileOf(n), Line: n.Line, Column: n.Column}
}

func (d *decoder) errorf(n *yaml.Node, key, format string, args ...any) {
	d.errs = append(d.errs, &Error{Pos: d.pos(n), Key: key, Message: fmt.Sprintf(format, args...)})
}

func (d *decoder) warnf(n *yaml.Node, key, format string, args ...any) {
	d.warns = append(d.warns, Warning{Pos: d.pos(n), Key: key, Message: fmt.Sprintf(format, args...)})
}

// sorted orders errors and warnings by position, the order a reader fixes
// them, and drops repeats (an anchor merged into several places is checked
// once per place).
func (d *decoder) sorted() {
	sort.SliceStable(d.errs, func(i, j int) bool { return d.less(d.errs[i].Pos, d.errs[j].Pos) })
	sort.SliceStable(d.warns, func(i, j int) bool { return d.less(d.warns[i].Pos, d.warns[j].Pos) })
	// The same place and message under another key path is the same problem
	// reached through an anchor; the first path is where it is written.
	type problem struct {
		Pos
		msg string
	}
	seen := map[problem]bool{}
	d.errs = slices.DeleteFunc(d.errs, func(e *Error) bool {
		p := problem{e.Pos, e.Message}
		dup := seen[p]
		seen[p] = true
		return dup
	})
	d.warns = slices.DeleteFunc(d.warns, func(w Warning) bool {
		p := problem{w.Pos, "warning: " + w.Message}
		dup := seen[p]
		seen[p] = true
		return dup
	})
}

// less orders positions as a reader fixes them: by file (fileRank),
// line and column.
func (d *decoder) less(a, b Pos) bool {
	if ra, rb := d.fileRank(a.File), d.fileRank(b.File); ra != rb {
		return ra < rb
	}
	if a.Line != b.Line {
		return a.Line < b.Line
	}
	return a.Column < b.Column
}

// join appends a mapping key to a key path. Keys that would make the path
// ambiguous (dots, brackets, spaces) are quoted: models."qwen2.5".ttl.
func join(path, key string) string {
	if key == "" || strings.ContainsAny(key, ".[]\" \t\n") {
		key = strconv.Quote(key)
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// index appends a sequence index to a key path: apiKeys[2].
func index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

// pair is one key/value of a mapping.
type pair struct {
	key, val *yaml.Node
	name     string // key.Value
}

// normalize returns a copy of n with anchors expanded and merge keys (<<)
// applied, so that later stages see a plain tree they may edit in place (a
// model that shares an anchor with another gets its own ${MODEL_ID}). It
// reports duplicate keys, non-scalar keys, anchors that contain themselves,
// and trees too deep or too large.
func (d *decoder) normalize(n *yaml.Node, path string) *yaml.Node {
	if n == nil {
		return nil
	}
	null := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Line: n.Line, Column: n.Column}
	d.nodes++
	if d.nodes > maxNodes {
		if !d.tooBig {
			d.tooBig = true
			d.errorf(n, path, "document too large after expanding anchors (more than %d nodes)", maxNodes)
		}
		return null
	}
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			return null
		}
		if d.expanding[n.Alias] {
			d.errorf(n, path, "anchor &%s contains itself", n.Value)
			return null
		}
		return d.normalize(n.Alias, path)
	}
	if n.Anchor != "" {
		if d.expanding == nil {
			d.expanding = map[*yaml.Node]bool{}
		}
		d.expanding[n] = true
		defer delete(d.expanding, n)
	}
	d.depth++
	defer func() { d.depth-- }()
	if d.depth > maxDepth {
		if !d.tooDeep {
			d.tooDeep = true
			d.errorf(n, path, "nested more than %d levels deep", maxDepth)
		}
		return null
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil
		}
		return d.normalize(n.Content[0], path)
	case yaml.SequenceNode:
		out := *n
		out.Content = make([]*yaml.Node, len(n.Content))
		for i, c := range n.Content {
			out.Content[i] = d.normalize(c, index(path, i))
		}
		return &out
	case yaml.MappingNode:
		return d.normalizeMapping(n, path)
	default:
		out := *n
		out.Content = nil
		return &out
	}
}

func (d *decoder) normalizeMapping(n *yaml.Node, path string) *yaml.Node {
	out := *n
	out.Content = nil
	seen := map[string]*yaml.Node{}
	var merged [][]*yaml.Node // normalized key/value lists from <<, in order of precedence
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			merged = append(merged, d.mergeSources(v, path)...)
			continue
		}
		if k.Kind == yaml.AliasNode && k.Alias != nil && k.Alias.Kind == yaml.ScalarNode {
			k = k.Alias
		}
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, path, "keys must be plain strings, got a %s", kindName(k))
			continue
		}
		name := k.Value
		if first, dup := seen[name]; dup {
			d.errorf(k, join(path, name), "duplicate key (first defined at line %d)", first.Line)
			continue
		}
		seen[name] = k
		kc := *k
		kc.Content = nil
		out.Content = append(out.Content, &kc, d.normalize(v, join(path, name)))
	}
	for _, src := range merged {
		for i := 0; i+1 < len(src); i += 2 {
			k := src[i]
			if _, ok := seen[k.Value]; ok {
				continue // explicit keys, and earlier merges, win
			}
			seen[k.Value] = k
			out.Content = append(out.Content, k, src[i+1])
		}
	}
	return &out
}

// mergeSources returns the normalized contents of the mappings a << value
// names: one mapping, or a list of them (earlier ones take precedence, as
// YAML's merge key says).
func (d *decoder) mergeSources(v *yaml.Node, path string) [][]*yaml.Node {
	n := d.normalize(v, join(path, "<<"))
	switch {
	case n == nil || isNull(n):
		return nil
	case n.Kind == yaml.MappingNode:
		return [][]*yaml.Node{n.Content}
	case n.Kind == yaml.SequenceNode:
		var out [][]*yaml.Node
		for _, c := range n.Content {
			if c.Kind != yaml.MappingNode {
				d.errorf(c, join(path, "<<"), "merge key wants a mapping or a list of mappings, got a list holding a %s", kindName(c))
				continue
			}
			out = append(out, c.Content)
		}
		return out
	}
	d.errorf(v, join(path, "<<"), "merge key wants a mapping or a list of mappings, got a %s", kindName(n))
	return nil
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "null"
		case "!!bool":
			return "boolean"
		case "!!int", "!!float":
			return "number"
		}
		return "string"
	}
	return "node"
}

func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

// pairs returns the entries of a mapping node; null gives none. Anything else
// is reported as "want a mapping".
func (d *decoder) pairs(n *yaml.Node, path string) []pair {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "want a mapping, got a %s", kindName(n))
		return nil
	}
	out := make([]pair, 0, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		out = append(out, pair{key: n.Content[i], val: n.Content[i+1], name: n.Content[i].Value})
	}
	return out
}

// items returns the elements of a sequence node; null gives none.
func (d *decoder) items(n *yaml.Node, path string) ([]*yaml.Node, bool) {
	if isNull(n) {
		return nil, true
	}
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, path, "want a list, got a %s", kindName(n))
		return nil, false
	}
	return n.Content, true
}

// str decodes a scalar as a string. Numbers and booleans are taken as written
// (yaml.v3 decodes `cmd: 123` into a string field the same way); null is "".
func (d *decoder) str(n *yaml.Node, path string) (string, bool) {
	if isNull(n) {
		return "", true
	}
	if n.Kind != yaml.ScalarNode {
		d.errorf(n, path, "want a string, got a %s", kindName(n))
		return "", false
	}
	return n.Value, true
}

func (d *decoder) boolean(n *yaml.Node, path string) (bool, bool) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!bool" {
		var b bool
		if err := n.Decode(&b); err == nil {
			return b, true
		}
	}
	d.errorf(n, path, "want true or false, got %s", describe(n))
	return false, false
}

func (d *decoder) integer(n *yaml.Node, path, what string) (int, bool) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int" {
		var i int
		if err := n.Decode(&i); err == nil {
			return i, true
		}
		d.errorf(n, path, "%s is out of range", n.Value)
		return 0, false
	}
	d.errorf(n, path, "want %s, got %s", what, describe(n))
	return 0, false
}

// seconds decodes one of llama-swap's whole-seconds keys. min is the smallest
// value accepted (-1 for the model ttl, which means "use globalTTL").
func (d *decoder) seconds(n *yaml.Node, path string, min int) (int, bool) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int" {
		var i int
		if err := n.Decode(&i); err != nil || i > math.MaxInt64/int(time.Second) {
			d.errorf(n, path, "%s seconds is out of range", n.Value)
			return 0, false
		}
		if i < min {
			if min == -1 {
				d.errorf(n, path, "want a whole number of seconds >= 0, or -1 for globalTTL, got %d", i)
			} else {
				d.errorf(n, path, "want a whole number of seconds >= %d, got %d", min, i)
			}
			return 0, false
		}
		return i, true
	}
	msg := fmt.Sprintf("want a whole number of seconds, got %s", describe(n))
	if n.Kind == yaml.ScalarNode {
		if dur, err := time.ParseDuration(n.Value); err == nil && dur%time.Second == 0 {
			msg += fmt.Sprintf(" (llama-swap counts this key in seconds: write %d)", int64(dur/time.Second))
		}
	}
	d.errorf(n, path, "%s", msg)
	return 0, false
}

// describe quotes a scalar for a message, or names the kind of anything else.
func describe(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode && !isNull(n) {
		return strconv.Quote(n.Value)
	}
	return "a " + kindName(n)
}

// value converts a normalized node to plain Go values: string, int64, float64,
// bool, nil, []any, map[string]any. Numbers JSON cannot carry (.inf, .nan) are
// reported.
func (d *decoder) value(n *yaml.Node, path string) any {
	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for _, p := range d.pairs(n, path) {
			m[p.name] = d.value(p.val, join(path, p.name))
		}
		return m
	case yaml.SequenceNode:
		s := make([]any, len(n.Content))
		for i, c := range n.Content {
			s[i] = d.value(c, index(path, i))
		}
		return s
	}
	switch n.ShortTag() {
	case "!!null":
		return nil
	case "!!bool":
		var b bool
		if n.Decode(&b) == nil {
			return b
		}
	case "!!int":
		var i int64
		if n.Decode(&i) == nil {
			return i
		}
		var f float64
		if n.Decode(&f) == nil {
			return f
		}
	case "!!float":
		var f float64
		if n.Decode(&f) == nil {
			if math.IsInf(f, 0) || math.IsNaN(f) {
				d.errorf(n, path, "%s cannot be passed on as JSON", n.Value)
				return nil
			}
			return f
		}
	}
	return n.Value
}

// orderedJSON renders a normalized node as JSON, keeping the YAML key order
// (matrix sets break ties by definition order, so order is information).
func (d *decoder) orderedJSON(n *yaml.Node, path string) json.RawMessage {
	var b bytes.Buffer
	d.writeJSON(&b, n, path)
	return b.Bytes()
}

func (d *decoder) writeJSON(b *bytes.Buffer, n *yaml.Node, path string) {
	switch n.Kind {
	case yaml.MappingNode:
		b.WriteByte('{')
		for i, p := range d.pairs(n, path) {
			if i > 0 {
				b.WriteByte(',')
			}
			k, _ := json.Marshal(p.name)
			b.Write(k)
			b.WriteByte(':')
			d.writeJSON(b, p.val, join(path, p.name))
		}
		b.WriteByte('}')
	case yaml.SequenceNode:
		b.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				b.WriteByte(',')
			}
			d.writeJSON(b, c, index(path, i))
		}
		b.WriteByte(']')
	default:
		v, err := json.Marshal(d.value(n, path))
		if err != nil {
			v = []byte("null")
		}
		b.Write(v)
	}
}

// object is a JSON object that keeps its member order.
type object []member

type member struct {
	Key   string
	Value any
}

func (o object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(m.Key)
		if err != nil {
			return nil, err
		}
		v, err := json.Marshal(m.Value)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}
