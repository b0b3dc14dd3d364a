package plugins

import (
	"errors"
	"strings"

	"github.com/google/shlex"
)

// SplitCommand splits a model's command (ModelSpec.Cmd, cmdStop) into argv
// with github.com/google/shlex, the splitter llama-swap uses: POSIX-like
// quoting and backslash escapes, and '#' at the start of a word begins a
// comment that runs to the end of the line. There is no variable expansion,
// globbing or redirection: the command is not run by a shell. It is the one
// splitter: host/config checks a configuration's cmd with it and
// backends/cmd runs the command it returns. Errors: "unterminated quote",
// "trailing backslash", "empty command".
func SplitCommand(cmd string) ([]string, error) {
	argv, err := shlex.Split(cmd)
	switch {
	case err == nil:
	case strings.Contains(err.Error(), "closing quote"):
		return nil, errors.New("unterminated quote")
	case strings.Contains(err.Error(), "escape character"):
		return nil, errors.New("trailing backslash")
	default:
		return nil, err
	}
	if len(argv) == 0 {
		return nil, errors.New("empty command")
	}
	return argv, nil
}
