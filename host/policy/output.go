package policy

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tetratelabs/wazero/sys"
)

// maxOutput bounds what is kept of a guest's stdout and stderr per call, in
// bytes; the rest is counted, not kept.
const maxOutput = 8 << 10

// guestOutput receives an instance's stdout and stderr (WASI fd_write). The
// guest writes only while the host is calling it, on the calling goroutine,
// so it needs no lock. The host takes the text after every call: it logs it,
// or, when the call crashed, reads the reason from it (the Go runtime prints
// "fatal error: out of memory" or "panic: …" before it exits).
type guestOutput struct {
	buf     []byte
	dropped int
}

// Write keeps the first maxOutput bytes; it never fails.
func (o *guestOutput) Write(p []byte) (int, error) {
	room := max(maxOutput-len(o.buf), 0)
	n := min(room, len(p))
	o.buf = append(o.buf, p[:n]...)
	o.dropped += len(p) - n
	return len(p), nil
}

// empty reports whether nothing was written since the last reset.
func (o *guestOutput) empty() bool { return len(o.buf) == 0 && o.dropped == 0 }

// text returns what was written, trimmed, noting what was dropped.
func (o *guestOutput) text() string {
	s := strings.TrimSpace(string(o.buf))
	if o.dropped > 0 {
		s += fmt.Sprintf("\n… %d more bytes", o.dropped)
	}
	return s
}

func (o *guestOutput) reset() { o.buf, o.dropped = o.buf[:0], 0 }

// crashReason says in one line why an instance died: the deadline, out of
// memory, the Go runtime's fatal error or panic line, the exit code, or the
// first line of the trap.
func crashReason(err error, overran bool, timeout time.Duration, output string) string {
	if overran {
		return fmt.Sprintf("deadline of %s exceeded", timeout)
	}
	if strings.Contains(output, "out of memory") {
		return "out of memory"
	}
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		switch code := exit.ExitCode(); code {
		case sys.ExitCodeDeadlineExceeded, sys.ExitCodeContextCanceled:
			return fmt.Sprintf("deadline of %s exceeded", timeout)
		default:
			if line := firstLineWith(output, "fatal error: ", "panic: "); line != "" {
				return fmt.Sprintf("%s (exit code %d)", line, code)
			}
			return fmt.Sprintf("exited with code %d", code)
		}
	}
	if err == nil {
		return "unknown failure"
	}
	msg := err.Error()
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i] // drop wazero's "wasm stack trace:" lines
	}
	// The Go runtime ends an unrecovered panic or a fatal error with a
	// trap after printing why.
	if line := firstLineWith(output, "fatal error: ", "panic: "); line != "" {
		return fmt.Sprintf("%s (%s)", line, msg)
	}
	return msg
}

// firstLineWith returns the first line of text starting with one of the
// prefixes, or "".
func firstLineWith(text string, prefixes ...string) string {
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				return line
			}
		}
	}
	return ""
}

// truncate cuts b to at most n bytes.
func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
