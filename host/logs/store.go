package logs

import (
	"sync"
)

// DefaultRingBytes bounds each model's ring (and each of the All, Proxy
// and Upstream rings) when New is given 0.
const DefaultRingBytes = 256 << 10

// subBuffer is how many lines a live reader may fall behind before it is
// dropped.
const subBuffer = 1024

// The rings beside each model's, named as llama-swap's log monitors are
// (GET /logs/stream/proxy, /logs/stream/upstream, /logs/stream): the
// names History and Subscribe take in place of a model id. Proxy and
// Upstream cannot be model ids (they start with a NUL byte).
const (
	// All is Loadout's own lines and every model server's ("[model] "
	// before each of those), as they came.
	All = ""
	// Proxy is Loadout's own log lines (AppendProxy).
	Proxy = "\x00proxy"
	// Upstream is every model server's lines, each after "[model] ".
	Upstream = "\x00upstream"
)

// Store is the rings and the live readers. Safe for concurrent use.
type Store struct {
	max int

	mu     sync.Mutex
	rings  map[string]*ring // a model's, or All, Proxy, Upstream
	subs   map[*Sub]struct{}
	closed bool
}

// New makes a Store whose rings keep at most ringBytes bytes each
// (DefaultRingBytes if ringBytes <= 0).
func New(ringBytes int) *Store {
	if ringBytes <= 0 {
		ringBytes = DefaultRingBytes
	}
	return &Store{max: ringBytes, rings: map[string]*ring{}, subs: map[*Sub]struct{}{}}
}

// ring is a byte-bounded list of lines, each ending in "\n".
type ring struct {
	lines []string
	size  int
}

func (r *ring) add(line string, max int) {
	r.lines = append(r.lines, line)
	r.size += len(line)
	drop := 0
	for r.size > max && drop < len(r.lines)-1 {
		r.size -= len(r.lines[drop])
		drop++
	}
	if drop > 0 {
		// Copy down now and then, not per line: the slice stays bounded.
		r.lines = append(r.lines[:0:0], r.lines[drop:]...)
	}
}

func (r *ring) bytes() []byte {
	out := make([]byte, 0, r.size)
	for _, l := range r.lines {
		out = append(out, l...)
	}
	return out
}

// Append records one line of model's server output (stream is "stdout"
// or "stderr"; it is not shown, as in llama-swap) in the model's ring and,
// after "[model] ", in the Upstream and All rings, and sends it to their
// live readers.
func (s *Store) Append(model, stream, line string) {
	own := line + "\n"
	tagged := "[" + model + "] " + own
	s.mu.Lock()
	defer s.mu.Unlock()
	s.add(model, own)
	s.add(Upstream, tagged)
	s.add(All, tagged)
}

// AppendProxy records one of Loadout's own log lines in the Proxy and All
// rings and sends it to their live readers.
func (s *Store) AppendProxy(line string) {
	l := line + "\n"
	s.mu.Lock()
	defer s.mu.Unlock()
	s.add(Proxy, l)
	s.add(All, l)
}

// add appends line to ring name and sends it to that ring's readers;
// s.mu is held.
func (s *Store) add(name, line string) {
	if s.closed {
		return
	}
	r := s.rings[name]
	if r == nil {
		r = &ring{}
		s.rings[name] = r
	}
	r.add(line, s.max)
	for sub := range s.subs {
		if sub.model != name {
			continue
		}
		select {
		case sub.ch <- line:
		default: // too slow: dropped
			delete(s.subs, sub)
			close(sub.ch)
		}
	}
}

// History returns the kept lines of model's ring (or of All, Proxy or
// Upstream), oldest first.
func (s *Store) History(model string) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.rings[model]; r != nil {
		return r.bytes()
	}
	return nil
}

// Sub is one live reader.
type Sub struct {
	s     *Store
	model string // the ring read
	ch    chan string
}

// Subscribe returns a reader of the new lines of model's ring (or of All,
// Proxy or Upstream) and, when history is true, the lines kept so far, taken atomically with
// the subscription so no line is missed or repeated.
func (s *Store) Subscribe(model string, history bool) (*Sub, []byte) {
	sub := &Sub{s: s, model: model, ch: make(chan string, subBuffer)}
	s.mu.Lock()
	defer s.mu.Unlock()
	var past []byte
	if r := s.rings[model]; history && r != nil {
		past = r.bytes()
	}
	if s.closed {
		close(sub.ch)
		return sub, past
	}
	s.subs[sub] = struct{}{}
	return sub, past
}

// Lines delivers the reader's lines; it is closed when the reader is
// dropped for being slow, closed, or the Store is closed.
func (sub *Sub) Lines() <-chan string { return sub.ch }

// Close ends the reader.
func (sub *Sub) Close() {
	sub.s.mu.Lock()
	defer sub.s.mu.Unlock()
	if _, ok := sub.s.subs[sub]; ok {
		delete(sub.s.subs, sub)
		close(sub.ch)
	}
}

// Close ends every reader; later lines are dropped.
func (s *Store) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for sub := range s.subs {
		delete(s.subs, sub)
		close(sub.ch)
	}
}
