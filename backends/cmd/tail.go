package cmdbackend

import (
	"bufio"
	"io"
	"strings"
	"sync"
)

// Bounds of the stderr tail kept for error messages.
const (
	tailLines = 20
	tailBytes = 4 << 10
)

// tail keeps the last lines of a stream: at most tailLines lines and, past
// the newest line, at most tailBytes bytes.
type tail struct {
	mu    sync.Mutex
	lines []string
	size  int
}

func (t *tail) add(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, line)
	t.size += len(line) + 1
	for len(t.lines) > 1 && (len(t.lines) > tailLines || t.size > tailBytes) {
		t.size -= len(t.lines[0]) + 1
		t.lines = t.lines[1:]
	}
}

// String returns the kept lines, newline-separated.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}

// readLines calls onLine for every line of r (a line longer than the read
// buffer arrives in pieces) until r ends.
func readLines(r io.Reader, onLine func(string)) {
	br := bufio.NewReaderSize(r, tailBytes)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			onLine(strings.TrimRight(string(line), "\r\n"))
		}
		if err != nil && err != bufio.ErrBufferFull {
			return
		}
	}
}
