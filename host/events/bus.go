package events

import (
	"cmp"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"time"
)

// Event types, the SSE "event:" field.
const (
	TypeModel          = "model"           // a model's state or counts changed (router.ModelStatus)
	TypeSwapStart      = "swap_start"      // a swap was launched
	TypeSwapEnd        = "swap_end"        // a swap ended (loaded or failed)
	TypeEviction       = "eviction"        // a running model was stopped, with its reason
	TypeRequest        = "request"         // one request's summary, when it ends
	TypePolicyFailed   = "policy_failed"   // a policy call failed (crash, deadline, disabled)
	TypePolicyHandover = "policy_handover" // a fallback took over or gave back
	TypeJob            = "job"             // a job's state changed (jobs.Transition)
	TypePeer           = "peer"            // a peer went up or down, hung, or a model of it changed state (peers.Status)
)

// Types are every event type a Bus carries, sorted: what a reader may
// ask for by name (GET /api/events/history?type=).
var Types = []string{TypeEviction, TypeJob, TypeModel, TypePeer, TypePolicyFailed, TypePolicyHandover, TypeRequest, TypeSwapEnd, TypeSwapStart}

// Event is one numbered event. Data is marshalled to JSON once, when the
// first subscriber reads it, so publishing stays cheap.
type Event struct {
	ID   uint64
	Type string
	Time time.Time
	data any

	once sync.Once
	json []byte
}

// Data is the value the event was published with (Publish's data): for
// TypeModel a router.ModelStatus, as the comment of each type says.
func (e *Event) Data() any { return e.data }

// JSON is the event's data as JSON (marshalled once).
func (e *Event) JSON() []byte {
	e.once.Do(func() {
		b, err := json.Marshal(e.data)
		if err != nil {
			b, _ = json.Marshal(map[string]string{"error": err.Error()})
		}
		e.json = b
	})
	return e.json
}

// DefaultRingSize is how many events a Bus keeps for Last-Event-ID resumes
// and slow readers when New is given 0.
const DefaultRingSize = 4096

// KeptPerType is how many of the newest events of each type a Bus keeps
// for History, whatever else fills its ring: a few hundred request events
// do not push the last swaps out of the swap timeline.
const KeptPerType = 256

// Bus is the ring of recent events and its subscribers. It is safe for
// concurrent use.
type Bus struct {
	mu     sync.Mutex
	ring   []*Event // ring[id % len(ring)]
	next   uint64   // the id of the next event; ids start at 1
	subs   map[*Subscription]struct{}
	closed bool
	// kept holds each type's newest KeptPerType events, oldest first
	// (History's source).
	kept map[string][]*Event
}

// New makes a Bus that keeps the last size events (DefaultRingSize if
// size <= 0).
func New(size int) *Bus {
	if size <= 0 {
		size = DefaultRingSize
	}
	return &Bus{ring: make([]*Event, size), next: 1, subs: map[*Subscription]struct{}{}, kept: map[string][]*Event{}}
}

// Publish appends an event of type typ with data (any JSON-encodable
// value, not modified afterwards) and wakes the subscribers. It never
// blocks on a subscriber.
func (b *Bus) Publish(typ string, data any) {
	ev := &Event{Type: typ, Time: time.Now(), data: data}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	ev.ID = b.next
	b.next++
	b.ring[ev.ID%uint64(len(b.ring))] = ev
	k := b.kept[typ]
	if len(k) == KeptPerType {
		k = append(k[:0], k[1:]...) // shift in place: the backing array is reused
	}
	b.kept[typ] = append(k, ev)
	for s := range b.subs {
		select {
		case s.wake <- struct{}{}:
		default: // already woken
		}
	}
	b.mu.Unlock()
}

// Close ends every subscription; later publishes are dropped.
func (b *Bus) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for s := range b.subs {
		close(s.wake)
		delete(b.subs, s)
	}
}

// History returns the newest events of the given types (each type's last
// KeptPerType at most, however many other events were published since),
// oldest first, at most limit of them (limit <= 0: all kept), and the id
// of the newest event of any type: a stream that resumes after it misses
// nothing published after the call.
func (b *Bus) History(types []string, limit int) (evs []*Event, lastID uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, typ := range types {
		evs = append(evs, b.kept[typ]...)
	}
	slices.SortFunc(evs, func(x, y *Event) int { return cmp.Compare(x.ID, y.ID) })
	evs = slices.CompactFunc(evs, func(x, y *Event) bool { return x.ID == y.ID }) // a type named twice
	if limit > 0 && len(evs) > limit {
		evs = evs[len(evs)-limit:]
	}
	return evs, b.next - 1
}

// LastID is the id of the newest event, 0 if none.
func (b *Bus) LastID() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.next - 1
}

// ErrDropped is what Next returns to a subscriber that fell further
// behind than the ring holds: events it never read are gone.
var ErrDropped = errors.New("events: subscriber fell behind the ring and was dropped")

// ErrClosed is what Next returns once the Bus is closed.
var ErrClosed = errors.New("events: closed")

// Subscription reads events in id order from where it started.
type Subscription struct {
	b    *Bus
	wake chan struct{}
	next uint64 // the id it reads next
	gap  bool
}

// Subscribe starts reading after the event with id after: 0 replays the
// whole ring, LastID() only new events. A resume (Last-Event-ID) whose
// next events have left the ring, or with an id past this run's newest
// (one from a previous run of the server), starts from the oldest kept,
// and Gap reports it, so the reader can tell its client to reload its
// state.
func (b *Bus) Subscribe(after uint64) *Subscription {
	s := &Subscription{b: b, wake: make(chan struct{}, 1), next: after + 1}
	b.mu.Lock()
	defer b.mu.Unlock()
	if s.next > b.next {
		// An id from a previous run of the server: what this run said
		// was never read. Replay the ring, and say the reader's state is
		// stale (Gap).
		s.next, s.gap = b.oldest(), true
	}
	if oldest := b.oldest(); s.next < oldest {
		s.gap = after != 0
		s.next = oldest
	}
	if b.closed {
		close(s.wake)
		return s
	}
	b.subs[s] = struct{}{}
	return s
}

// oldest is the id of the oldest event the ring holds; b.mu is held.
func (b *Bus) oldest() uint64 {
	if n := uint64(len(b.ring)); b.next > n {
		return b.next - n
	}
	return 1
}

// Gap reports whether the subscription resumed after events that have
// left the ring: the reader missed some.
func (s *Subscription) Gap() bool { return s.gap }

// Close ends the subscription.
func (s *Subscription) Close() {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	if _, ok := s.b.subs[s]; ok {
		delete(s.b.subs, s)
		close(s.wake)
	}
}

// Wake is signalled when events may be ready, and closed when the
// subscription or the Bus ends.
func (s *Subscription) Wake() <-chan struct{} { return s.wake }

// Ready returns the events published since the last call, in order, at
// most max. ErrDropped means the subscriber fell behind the ring (the
// caller should end the stream, so the client resumes or reloads);
// ErrClosed, that the bus was closed.
func (s *Subscription) Ready(max int) ([]*Event, error) {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if s.next < b.oldest() {
		s.drop()
		return nil, ErrDropped
	}
	var out []*Event
	for s.next < b.next && len(out) < max {
		out = append(out, b.ring[s.next%uint64(len(b.ring))])
		s.next++
	}
	if len(out) == 0 && b.closed {
		return nil, ErrClosed
	}
	return out, nil
}

// drop removes s from the bus; b.mu is held.
func (s *Subscription) drop() {
	if _, ok := s.b.subs[s]; ok {
		delete(s.b.subs, s)
		close(s.wake)
	}
}
