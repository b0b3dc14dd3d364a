package config

import (
	"fmt"
	"strings"
)

// Pos is a place in a configuration file. Line and Column are 1-based; a zero
// Line means the place is the file as a whole (for example an empty file), a
// zero Column means the whole line (yaml.v3 reports syntax errors by line only).
type Pos struct {
	File   string
	Line   int
	Column int
}

// String formats the position as "file:line:col", dropping the parts that are
// zero.
func (p Pos) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		fmt.Fprintf(&b, ":%d", p.Line)
		if p.Column > 0 {
			fmt.Fprintf(&b, ":%d", p.Column)
		}
	}
	return b.String()
}

// Error is one problem found in a configuration file. Key is the dotted path of
// the offending key ("models.llama.ttl", "apiKeys[2]"); it is empty for
// problems with the file as a whole, such as YAML syntax errors.
type Error struct {
	Pos
	Key     string
	Message string
}

// Error formats the problem as "file:line:col: key: message".
func (e *Error) Error() string { return format(e.Pos, e.Key, e.Message) }

// Errors is every problem found in one configuration file, in file order. Parse
// and Load return it (never an empty one) when the file is invalid, so a caller
// can print all of them at once; errors.As finds the individual *Error.
type Errors []*Error

// Error formats the problems one per line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the individual problems, for errors.As and errors.Is.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// Warning is a key that Loadout accepts but does not act on (yet), or a value it
// changed on the way in (llama-swap's minimum healthCheckTimeout). A llama-swap
// configuration loads unchanged; the warnings say what it does not do here.
type Warning struct {
	Pos
	Key     string
	Message string
}

// String formats the warning as "file:line:col: key: message".
func (w Warning) String() string { return format(w.Pos, w.Key, w.Message) }

func format(p Pos, key, msg string) string {
	var parts []string
	if at := p.String(); at != "" { // a configuration made in memory has no file
		parts = append(parts, at)
	}
	if key != "" {
		parts = append(parts, key)
	}
	return strings.Join(append(parts, msg), ": ")
}
