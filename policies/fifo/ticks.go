package main

import (
	"math"

	"github.com/loadout-dev/loadout/sdk"
)

// Ticks on demand (doc.go, "Ticks"; sdk.TickRequester). On a host that
// offers them, fifo asks for a tick only for what only time changes:
//
//   - queue aging: the first time a queued request will have waited
//     longer than max_wait (agingAt);
//   - scale-in: while a model runs more replicas than its min_replicas,
//     the first time one of them will have been idle for scale_in_after,
//     and at the latest scale_in_after from now (a replica busy now goes
//     idle later, so its deadline is later than that).
//
// Everything else a tick did is brought by an event: a model that
// stopped, crashed or was measured (TickEvent.Changed), a job's release
// (the host ticks), a request that ended (OnServeDone), a load that ended
// (OnSwapDone). An idle fifo therefore asks for no tick at all, and an
// idle host calls it never.

// wantTick asks the host for a tick at or before at (Unix ns; 0: nothing
// new), unless one is already asked for no later. The first call on a
// host that ticks on demand says so even when nothing is wanted.
func (s *scheduler) wantTick(at int64) {
	if s.ticker == nil || (s.onDemand && (at == 0 || (s.tickAt != 0 && s.tickAt <= at))) {
		return
	}
	if err := s.ticker.RequestTick(at); err != nil {
		s.ticker = nil // a host that ticks periodically: ask no more
		return
	}
	s.onDemand, s.tickAt = true, at
}

// tickUsed forgets the requested tick once a tick at or after it came.
func (s *scheduler) tickUsed(now int64) {
	if s.tickAt != 0 && now >= s.tickAt {
		s.tickAt = 0
	}
}

// nextAging is when the queue next needs aging, 0 for never.
func (s *scheduler) nextAging() int64 {
	if s.cfg.maxWait <= 0 || len(s.queue) == 0 || s.agingAt == math.MaxInt64 {
		return 0
	}
	return s.agingAt
}

// earliest is the earlier of two tick times, 0 meaning none.
func earliest(a, b int64) int64 {
	switch {
	case a == 0:
		return b
	case b == 0:
		return a
	}
	return min(a, b)
}

// clampTick keeps a wanted tick within what the host grants
// (sdk.MaxTickDelay), so that the tick it gives uses the request up.
func clampTick(now, at int64) int64 {
	if at == 0 {
		return 0
	}
	return min(at, now+sdk.MaxTickDelay)
}
