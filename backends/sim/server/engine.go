package simserver

import (
	"context"
	"sync/atomic"
	"time"
)

// batchPenalty is how much longer a step gets per extra sequence in it.
const batchPenalty = 0.05

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

// engine is the decode loop: iteration-level continuous batching.
type engine struct {
	step       time.Duration // one step of a lone sequence
	maxBatch   int
	crashAfter int64
	crash      func() // exits the process; called by the loop
	join       chan *seq

	generated atomic.Int64 // tokens in total
	steps     atomic.Int64 // decode steps in total
	active    atomic.Int64 // sequences in the current batch
}

func newEngine(o Options, crash func()) *engine {
	return &engine{
		step:       time.Duration(float64(time.Second) / o.TokensPerSecond),
		maxBatch:   o.MaxBatch,
		crashAfter: o.CrashAfterTokens,
		crash:      crash,
		join:       make(chan *seq),
	}
}

// stepTime is the duration of a step of b sequences.
func (e *engine) stepTime(b int) time.Duration {
	return time.Duration(float64(e.step) * (1 + batchPenalty*float64(b-1)))
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
	var active, waiting []*seq
	// due is when the current step ends. Steps are scheduled back to back
	// from it, so a late wake-up shortens the next wait and the token rate
	// holds on a busy machine.
	var due time.Time
	for {
		if len(active) == 0 && len(waiting) == 0 {
			e.active.Store(0)
			due = time.Time{}
			select {
			case s := <-e.join:
				waiting = append(waiting, s)
			case <-ctx.Done():
				return
			}
		}
		waiting = live(waiting)
		for len(active) < e.maxBatch && len(waiting) > 0 {
			active, waiting = append(active, waiting[0]), waiting[1:]
		}
		active = live(active)
		if len(active) == 0 {
			continue
		}
		e.active.Store(int64(len(active)))

		// One step; requests arriving meanwhile wait for the next.
		now := time.Now()
		if due.Before(now.Add(-e.step)) {
			due = now // idle, or too far behind to catch up
		}
		due = due.Add(e.stepTime(len(active)))
		timer := time.NewTimer(time.Until(due))
		for stepping := true; stepping; {
			select {
			case <-timer.C:
				stepping = false
			case s := <-e.join:
				waiting = append(waiting, s)
			case <-ctx.Done():
				timer.Stop()
				return
			}
		}

		kept, produced := active[:0], int64(0)
		for _, s := range active {
			if s.ctx.Err() != nil {
				continue // the client left: its sequence stops
			}
			s.tokens <- struct{}{}
			produced++
			s.remaining--
			if s.remaining > 0 {
				kept = append(kept, s)
			}
		}
		clear(active[len(kept):])
		active = kept
		e.steps.Add(1)
		if n := e.generated.Add(produced); e.crashAfter > 0 && n >= e.crashAfter {
			// Let the handlers write this step's tokens, then die mid-stream.
			time.Sleep(e.step)
			e.crash()
			return
		}
	}
}

// live drops sequences whose clients have left.
func live(ss []*seq) []*seq {
	kept := ss[:0]
	for _, s := range ss {
		if s.ctx.Err() == nil {
			kept = append(kept, s)
		}
	}
	clear(ss[len(kept):])
	return kept
}
