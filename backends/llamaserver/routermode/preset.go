package routermode

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/loadout-dev/loadout/backends/llamaserver"
)

// section is one [name] of a preset, its keys resolved to flags.
type section struct {
	name          string
	line          int
	args          []llamaserver.Arg
	stopTimeout   time.Duration
	loadOnStartup bool
	// failed: an error was reported for a key of the section; its model
	// is not made (nor reported again as lacking a GGUF).
	failed bool
}

// preset is a read preset file.
type preset struct {
	global   *section   // [*]; nil when absent
	sections []*section // the models' sections, in file order
	warns    []Warning
}

// routerOwned are the flags llama-server's router sets or removes for each
// model it runs (server-models.cpp: unset_reserved_args and update_args);
// Loadout's llamaserver backend owns host and port the same way.
var routerOwned = []string{"--host", "--port", "--alias", "--hf-repo", "--api-key",
	"--ssl-key-file", "--ssl-cert-file", "--models-dir", "--models-max", "--models-preset", "--models-autoload"}

// readPreset reads a preset file (see the package comment for the
// format), checking each key against binary's flags. Every problem found
// is returned, joined, each an *Error naming the file and line.
func readPreset(ctx context.Context, path, binary string) (preset, error) {
	var p preset
	data, err := os.ReadFile(path)
	if err != nil {
		return p, &Error{File: path, Message: fmt.Sprintf("models preset: %v", errors.Unwrap(err))}
	}
	if binary == "" {
		binary = llamaserver.DefaultBinary
	}
	// The flags of the backend's own options resolve without --help; any
	// other key needs it, and says why it cannot be checked without it.
	flags, flagsErr := llamaserver.ReadFlags(ctx, binary)

	var errs []error
	var cur *section
	fail := func(line int, format string, a ...any) {
		errs = append(errs, &Error{File: path, Line: line, Message: fmt.Sprintf(format, a...)})
		if cur != nil {
			cur.failed = true
		}
	}
	seen := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimRight(sc.Text(), "\r")
		trimmed := strings.TrimLeft(line, " \t")
		switch {
		case trimmed == "" || trimmed[0] == ';' || trimmed[0] == '#':
			continue
		case trimmed[0] == '[':
			name, ok := header(trimmed)
			if !ok {
				cur = nil
				fail(n, "want a section header [name], got %q", line)
				continue
			}
			if first, dup := seen[name]; dup {
				cur = nil
				fail(n, "section [%s] is already defined at line %d (llama-server would drop what that one set)", name, first)
			}
			cur = &section{name: name, line: n}
			if _, dup := seen[name]; dup {
				cur.failed = true // reported above
			}
			seen[name] = n
			if name == "*" {
				p.global = cur
			} else {
				p.sections = append(p.sections, cur)
			}
			continue
		}
		key, value, ok := keyValue(trimmed)
		if !ok {
			fail(n, "want key = value, a [section] or a ; comment, got %q", line)
			continue
		}
		if key == "version" {
			continue // reserved by llama-server for the format's version
		}
		if cur == nil {
			fail(n, "%s is outside any section: put it under [*] (every model) or under a model's [name]", key)
			continue
		}
		switch key {
		case "load-on-startup":
			on, ok := llamaserver.ParseSwitch(value)
			if !ok {
				fail(n, "load-on-startup: want true or false, got %q", value)
			}
			cur.loadOnStartup = on
			continue
		case "stop-timeout":
			s, err := strconv.Atoi(value)
			if err != nil || s < 0 {
				fail(n, "stop-timeout: want a whole number of seconds, got %q", value)
			}
			cur.stopTimeout = time.Duration(max(s, 0)) * time.Second
			continue
		case "dedup-cache-models":
			p.warns = append(p.warns, Warning{File: path, Line: n, Message: "dedup-cache-models is ignored: Loadout does not list llama.cpp's download cache"})
			continue
		}
		a, err := flags.Resolve(key, value)
		if err != nil {
			if flagsErr != nil {
				err = fmt.Errorf("%w (%v)", err, flagsErr)
			}
			fail(n, "[%s] %v", cur.name, err)
			continue
		}
		if slices.Contains(routerOwned, a.Flag) {
			p.warns = append(p.warns, Warning{File: path, Line: n, Message: fmt.Sprintf("[%s] %s is ignored: llama-server's router sets it for each model itself, and so does Loadout", cur.name, key)})
			continue
		}
		if err := llamaserver.CheckArg(a); err != nil {
			fail(n, "[%s] %v", cur.name, err)
			continue
		}
		if a.Flag == "--model" || a.Flag == "--mmproj" {
			a.Words[1] = abs(a.Words[1]) // relative to the working directory, as llama-server's are
			if _, err := os.Stat(a.Words[1]); err != nil {
				fail(n, "[%s] %s: GGUF file %s: %v", cur.name, key, a.Words[1], errors.Unwrap(err))
				continue
			}
		}
		cur.args = merge(cur.args, []llamaserver.Arg{a})
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, &Error{File: path, Message: fmt.Sprintf("models preset: %v", err)})
	}
	return p, errors.Join(errs...)
}

// header reads "[name]" with an optional comment after it; the name is
// anything but "]", surrounding blanks dropped (common/preset.cpp's
// grammar).
func header(s string) (string, bool) {
	end := strings.IndexByte(s, ']')
	if end < 0 {
		return "", false
	}
	name := strings.Trim(s[1:end], " \t")
	rest := strings.TrimLeft(s[end+1:], " \t")
	if name == "" || rest != "" && rest[0] != ';' && rest[0] != '#' {
		return "", false
	}
	return name, true
}

// keyValue reads "key = value": a key of letters, digits, _ . - (not
// starting with a digit, . or -), and a value that ends at a ; or # or
// the line's end, trailing blanks dropped (common/preset.cpp's grammar).
func keyValue(s string) (key, value string, ok bool) {
	i := 0
	for i < len(s) && (isLetter(s[i]) || s[i] == '_' || i > 0 && (s[i] >= '0' && s[i] <= '9' || s[i] == '.' || s[i] == '-')) {
		i++
	}
	key = s[:i]
	rest := strings.TrimLeft(s[i:], " \t")
	if key == "" || !strings.HasPrefix(rest, "=") {
		return "", "", false
	}
	value = strings.TrimLeft(rest[1:], " \t")
	if j := strings.IndexAny(value, ";#"); j >= 0 {
		value = value[:j]
	}
	return key, strings.TrimRight(value, " \t"), true
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
