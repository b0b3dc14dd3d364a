package config

import (
	"errors"
	"strings"
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
// arguments with POSIX shell quoting, as llama-swap does before it runs one:
// 'single quotes' are literal, "double quotes" honour \" \\ \$ and \`, a
// backslash outside quotes escapes the next character. There is no variable
// expansion, globbing or redirection: the command is not run by a shell.
func SplitCommand(cmd string) ([]string, error) {
	var (
		args  []string
		cur   strings.Builder
		inArg bool
	)
	for i := 0; i < len(cmd); i++ {
		c := cmd[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			if inArg {
				args = append(args, cur.String())
				cur.Reset()
				inArg = false
			}
		case c == '\'':
			inArg = true
			j := strings.IndexByte(cmd[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("unterminated single quote")
			}
			cur.WriteString(cmd[i+1 : i+1+j])
			i += j + 1
		case c == '"':
			inArg = true
			closed := false
			for i++; i < len(cmd); i++ {
				c := cmd[i]
				if c == '"' {
					closed = true
					break
				}
				if c == '\\' && i+1 < len(cmd) && strings.IndexByte("\"\\$`\n", cmd[i+1]) >= 0 {
					i++
					if cmd[i] != '\n' {
						cur.WriteByte(cmd[i])
					}
					continue
				}
				cur.WriteByte(c)
			}
			if !closed {
				return nil, errors.New("unterminated double quote")
			}
		case c == '\\':
			if i+1 >= len(cmd) {
				return nil, errors.New("trailing backslash")
			}
			i++
			if cmd[i] != '\n' {
				inArg = true
				cur.WriteByte(cmd[i])
			}
		default:
			inArg = true
			cur.WriteByte(c)
		}
	}
	if inArg {
		args = append(args, cur.String())
	}
	if len(args) == 0 {
		return nil, errors.New("empty command")
	}
	return args, nil
}
