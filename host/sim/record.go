package sim

import (
	"io"
	"sync"
	"time"
)

// Recorder writes live traffic as a trace (`loadout serve
// --record-trace`): one row per request, in arrival order, although a
// request's token counts are only known when it ends and requests end in
// any order.
//
// The rule: a request's row is written once it has ended and every request
// that arrived before it has been written. So that one request that never
// ends cannot hold back the rest (or memory) for ever, the oldest request
// is written early, with its estimates (what Start was told), when it is
// older than MaxWait or when more than MaxPending requests wait behind it;
// its End is then ignored. Close writes whatever is left the same way.
// The checks run when a request starts or ends, with the time the caller
// gives: the Recorder reads no clock.
//
// Arrivals are seconds from the first request's. A request handed to
// Start later than one that arrived after it (its body was slower to
// come) is recorded at the later one's arrival, so the file stays sorted.
//
// It is safe for concurrent use. Rows go to the writer as they are
// settled, flushed each time, so a process killed outright leaves every
// settled row on disk.
type Recorder struct {
	mu      sync.Mutex
	w       *TraceWriter
	opt     RecorderOptions
	epoch   time.Time   // the first arrival
	last    float64     // the latest arrival handed out, in seconds from epoch
	queue   []*recorded // started and not yet written, in arrival order
	pending map[uint64]*recorded
	stats   RecorderStats
	err     error // the first write error; nothing is written after it
	closed  bool
}

// recorded is one request of a Recorder's queue.
type recorded struct {
	id    uint64
	at    time.Time
	q     Request
	ended bool
}

// RecorderOptions bound a Recorder's buffering. Zero fields take the
// defaults.
type RecorderOptions struct {
	// MaxWait is how long after its arrival a request that has not ended
	// holds back the rows behind it (default DefaultRecordMaxWait).
	MaxWait time.Duration
	// MaxPending is how many requests may wait to be written behind one
	// that has not ended (default DefaultRecordMaxPending).
	MaxPending int
	// OnError, when set, is called once, with the first write error.
	// Rows after it are dropped. It runs with the Recorder locked and must
	// not call it.
	OnError func(error)
}

// The defaults of RecorderOptions: a request streaming for longer than
// ten minutes is rare, and ten thousand rows are about a megabyte.
const (
	DefaultRecordMaxWait    = 10 * time.Minute
	DefaultRecordMaxPending = 10000
)

// RecorderStats counts a Recorder's rows.
type RecorderStats struct {
	Rows  int // rows written
	Early int // of those, written before their request ended (estimates)
}

// NewRecorder returns a Recorder writing to w and writes the trace's
// header, so that even a run without requests leaves a valid trace.
// Errors: writing the header.
func NewRecorder(w io.Writer, o RecorderOptions) (*Recorder, error) {
	if o.MaxWait <= 0 {
		o.MaxWait = DefaultRecordMaxWait
	}
	if o.MaxPending <= 0 {
		o.MaxPending = DefaultRecordMaxPending
	}
	r := &Recorder{w: NewTraceWriter(w), opt: o, pending: map[uint64]*recorded{}}
	if err := r.w.Flush(); err != nil {
		return nil, err
	}
	return r, nil
}

// Start records that request id (unique among the requests not yet
// ended) arrived at at. est is its row as known now: Model, Priority,
// Client, and token counts that are estimates until End (its Arrival is
// ignored).
func (r *Recorder) Start(id uint64, at time.Time, est Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	if r.epoch.IsZero() {
		r.epoch = at
	}
	est.Arrival = max(at.Sub(r.epoch).Seconds(), r.last)
	r.last = est.Arrival
	e := &recorded{id: id, at: at, q: est}
	r.queue = append(r.queue, e)
	r.pending[id] = e
	r.drain(at)
}

// Served records the model that served request id, in place of Start's
// (a llama-swap selector's pick: the trace names models, which a replay
// can load); "" or an id whose row was already written changes nothing.
func (r *Recorder) Served(id uint64, model string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.pending[id]; ok && model != "" {
		e.q.Model = model
	}
}

// End records that request id ended at at, with its counted tokens: each
// count ≥ 0 replaces Start's estimate, a negative one keeps it. An id
// that Start did not see, or whose row was already written, is ignored.
func (r *Recorder) End(id uint64, at time.Time, promptTokens, outputTokens int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.pending[id]
	if !ok || r.closed {
		return
	}
	delete(r.pending, id)
	if promptTokens >= 0 {
		e.q.PromptTokens = promptTokens
	}
	if outputTokens >= 0 {
		e.q.OutputTokens = outputTokens
	}
	e.ended = true
	r.drain(at)
}

// drain writes the rows at the queue's head that are settled at now:
// ended, or held back too long.
func (r *Recorder) drain(now time.Time) {
	n := 0
	for n < len(r.queue) {
		e := r.queue[n]
		if !e.ended && now.Sub(e.at) < r.opt.MaxWait && len(r.queue)-n <= r.opt.MaxPending {
			break
		}
		r.write(e)
		r.queue[n] = nil
		n++
	}
	if n == 0 {
		return
	}
	r.queue = r.queue[n:]
	r.flush()
}

// write writes one row; one not ended leaves the pending set.
func (r *Recorder) write(e *recorded) {
	if !e.ended {
		r.stats.Early++
		delete(r.pending, e.id)
	}
	r.stats.Rows++
	if r.err == nil {
		r.fail(r.w.Write(e.q))
	}
}

// flush pushes the written rows to the writer.
func (r *Recorder) flush() {
	if r.err == nil {
		r.fail(r.w.Flush())
	}
}

func (r *Recorder) fail(err error) {
	if err != nil && r.err == nil {
		r.err = err
		if r.opt.OnError != nil {
			r.opt.OnError(err)
		}
	}
}

// Stats returns the rows written so far.
func (r *Recorder) Stats() RecorderStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// Close writes the rows still waiting, with what is known of each (the
// estimates of requests that have not ended), and flushes. It returns
// the first write error, if any; Start and End do nothing after it. It
// does not close the underlying writer.
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		for _, e := range r.queue {
			r.write(e)
		}
		r.queue, r.pending = nil, nil
		r.flush()
	}
	return r.err
}
