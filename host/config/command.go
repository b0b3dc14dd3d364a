package config

import (
	"strings"

	"github.com/loadout-dev/loadout/plugins"
)

// stripComments drops the lines of a command whose first non-blank character
// is '#' (llama-swap allows comments in a `cmd: |` block). A '#' later in a line
// is an argument, not a comment. llama-swap strips comments before it expands
// macros, and so does Loadout.
func stripComments(cmd string) string {
	lines := strings.Split(cmd, "\n")
	out := lines[:0]
	for _, l := range lines {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// foldCommand joins a multi-line command into one line: blank lines dropped,
// a trailing backslash (shell line continuation) removed, the lines joined
// with single spaces. llama-swap splits the command on whitespace with shell
// quoting, where a newline is a space, so the folded command means the same.
func foldCommand(cmd string) string {
	var parts []string
	for _, l := range strings.Split(cmd, "\n") {
		l = strings.TrimSpace(l)
		l = strings.TrimSpace(strings.TrimSuffix(l, "\\"))
		if l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, " ")
}

// SplitCommand splits a folded command (Model.Cmd, Model.CmdStop) into
// arguments the way the cmd backend will run it: it is plugins.SplitCommand
// (github.com/google/shlex, llama-swap's splitter), so what config check
// accepts is what runs.
func SplitCommand(cmd string) ([]string, error) { return plugins.SplitCommand(cmd) }
