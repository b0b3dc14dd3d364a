package settings

import (
	"errors"
	"strings"
)

// Error is a problem with one setting: the path of the offending setting
// (see Join; "" for the settings object as a whole) and what is wrong.
type Error struct {
	Path    string
	Message string
}

// Error returns Format(e.Path, e.Message), the form Parse reads back.
func (e *Error) Error() string { return Format(e.Path, e.Message) }

// NewError makes an *Error at path with message as it is. Build the
// message with strconv (or fmt.Sprintf, if the policy links fmt anyway):
// the package offers no printf of its own, so a guest that reads its
// settings does not link fmt (about 0.13 MB of Wasm even unused, through
// its package initialisation).
func NewError(path, message string) *Error {
	return &Error{Path: path, Message: message}
}

// Wrap returns err with prefix and ": " before its text and err in its
// chain (errors.As and Find still reach an *Error in it): what
// fmt.Errorf(prefix+": %w", err) makes, without linking fmt into a
// guest. Wrap(prefix, nil) is nil.
func Wrap(prefix string, err error) error {
	if err == nil {
		return nil
	}
	return &wrapped{prefix: prefix, err: err}
}

type wrapped struct {
	prefix string
	err    error
}

func (w *wrapped) Error() string { return w.prefix + ": " + w.err.Error() }
func (w *wrapped) Unwrap() error { return w.err }

// marker starts the text of every settings error.
const marker = "settings: "

// Format is the one textual form of a settings error:
//
//	settings: <path>: <message>
//
// with the root path written "$" and any newline in message replaced by a
// space, so that one error is one line. Parse reads it back.
func Format(path, message string) string {
	if path == "" {
		path = "$"
	}
	return marker + path + ": " + strings.ReplaceAll(message, "\n", " ")
}

// Parse finds the settings errors in text, the error text of a policy's
// init as the host received it: every "settings: <path>: <message>" that
// starts text or a line, or follows ": " (the host prefixes what the
// policy returned with its name and the export, "policy P: init: "). The
// message runs to the end of its line. Parse returns nil when text holds
// none, for example when a policy returned a plain error.
func Parse(text string) []*Error {
	var out []*Error
	for line := range strings.SplitSeq(text, "\n") {
		for at := 0; at < len(line); {
			i := strings.Index(line[at:], marker)
			if i < 0 {
				break
			}
			i += at
			at = i + len(marker)
			if i != 0 && !strings.HasSuffix(line[:i], ": ") {
				continue
			}
			rest := line[at:]
			var path string
			if strings.HasPrefix(rest, "$: ") {
				rest = rest[1:]
			} else {
				segs, r, err := splitPrefix(rest)
				if err != nil || len(segs) == 0 {
					continue
				}
				path = rest[:len(rest)-len(r)]
				rest = r
			}
			if !strings.HasPrefix(rest, ": ") {
				continue
			}
			out = append(out, &Error{Path: path, Message: rest[2:]})
			break
		}
	}
	return out
}

// Find returns the *Error in err's chain, or nil. Use it natively, where
// the error has not been through the ABI's text; across the ABI, Parse.
func Find(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}
