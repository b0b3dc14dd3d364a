package logs

import (
	"sync"
)

// DefaultRingBytes bounds each model's ring (and the all-models ring)
// when New is given 0.
const DefaultRingBytes = 256 << 10

// subBuffer is how many lines a live reader may fall behind before it is
// dropped.
const subBuffer = 1024

// Store is the per-model rings and the live readers. Safe for concurrent
// use.
type Store struct {
	max int

	mu     sync.Mutex
	rings  map[string]*ring // model → its lines; "" → every model's, prefixed
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
// or "stderr"; it is not shown, as in llama-swap) and sends it to the
// live readers of the model and of all models.
func (s *Store) Append(model, stream, line string) {
	own := line + "\n"
	all := "[" + model + "] " + own
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	r := s.rings[model]
	if r == nil {
		r = &ring{}
		s.rings[model] = r
	}
	r.add(own, s.max)
	a := s.rings[""]
	if a == nil {
		a = &ring{}
		s.rings[""] = a
	}
	a.add(all, s.max)
	for sub := range s.subs {
		var msg string
		switch sub.model {
		case "":
			msg = all
		case model:
			msg = own
		default:
			continue
		}
		select {
		case sub.ch <- msg:
		default: // too slow: dropped
			delete(s.subs, sub)
			close(sub.ch)
		}
	}
}

// History returns model's kept lines ("" for every model's, each prefixed
// with "[model] "), oldest first.
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
	model string
	ch    chan string
}

// Subscribe returns a reader of model's new lines ("" for every model's)
// and, when history is true, the lines kept so far, taken atomically with
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
