package simserver

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/loadout-dev/loadout/backends/sim/decode"
)

// seq is one request's generation as the decode loop sees it.
type seq struct {
	ctx       context.Context
	remaining int
	// tokens receives one value per generated token; its capacity is the
	// token count, so the loop never blocks on a slow reader.
	tokens chan struct{}
}

func newSeq(ctx context.Context, n int) *seq {
	return &seq{ctx: ctx, remaining: n, tokens: make(chan struct{}, n)}
}

// engine is the decode loop: decode's continuous batching (the timing
// model `loadout simulate` runs too), in real time.
type engine struct {
	model      decode.Model
	step       time.Duration // one step of a lone sequence
	crashAfter int64
	crash      func() // exits the process; called by the loop
	join       chan *seq

	generated atomic.Int64 // tokens in total
	steps     atomic.Int64 // decode steps in total
	active    atomic.Int64 // sequences in the current batch
}

func newEngine(o Options, crash func()) *engine {
	m := o.Decode()
	return &engine{
		model:      m,
		step:       m.Step(1),
		crashAfter: o.CrashAfterTokens,
		crash:      crash,
		join:       make(chan *seq),
	}
}

// submit hands s to the loop; it joins the batch at the next step.
func (e *engine) submit(s *seq) error {
	select {
	case e.join <- s:
		return nil
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
}

// run is the decode loop; it returns when ctx ends.
func (e *engine) run(ctx context.Context) {
	batch := decode.NewBatch[*seq](e.model)
	gone := func(s *seq) bool { return s.ctx.Err() != nil }
	// due is when the current step ends. Steps are scheduled back to back
	// from it, so a late wake-up shortens the next wait and the token rate
	// holds on a busy machine.
	var due time.Time
	for {
		if batch.Idle() {
			e.active.Store(0)
			due = time.Time{}
			select {
			case s := <-e.join:
				batch.Join(s)
			case <-ctx.Done():
				return
			}
		}
		batch.Drop(gone)
		active, d := batch.Begin()
		if len(active) == 0 {
			continue
		}
		e.active.Store(int64(len(active)))

		// One step; requests arriving meanwhile wait for the next.
		now := time.Now()
		if due.Before(now.Add(-e.step)) {
			due = now // idle, or too far behind to catch up
		}
		due = due.Add(d)
		timer := time.NewTimer(time.Until(due))
		for stepping := true; stepping; {
			select {
			case <-timer.C:
				stepping = false
			case s := <-e.join:
				batch.Join(s)
			case <-ctx.Done():
				timer.Stop()
				return
			}
		}

		// The step is counted before its tokens go out: a client that has
		// its last token sees its last step in /sim/stats.
		e.steps.Add(1)
		produced := int64(0)
		batch.End(func(s *seq) bool {
			if s.ctx.Err() != nil {
				return true // the client left: its sequence stops
			}
			s.tokens <- struct{}{}
			produced++
			s.remaining--
			return s.remaining == 0
		})
		if n := e.generated.Add(produced); e.crashAfter > 0 && n >= e.crashAfter {
			// Let the handlers write this step's tokens, then die mid-stream.
			time.Sleep(e.step)
			e.crash()
			return
		}
	}
}
