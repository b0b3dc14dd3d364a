package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/loadout-dev/loadout/host/events"
)

// SummaryWindow is the span GET /api/summary's rates cover: the last five
// minutes, as a dashboard's headline figures (and Grafana's default
// rate(...[5m])) do.
const SummaryWindow = 5 * time.Minute

// recentWindow counts the model requests, errors and completion tokens
// of the last SummaryWindow in one-second buckets, for GET /api/summary.
// It counts what loadout_requests_total and loadout_completion_tokens_total
// count (observeRequest feeds both), over a window the Prometheus client
// cannot give without a server to keep history. Safe for concurrent use.
type recentWindow struct {
	mu      sync.Mutex
	buckets [int(SummaryWindow / time.Second)]recentBucket
}

// recentBucket is one second's counts; sec is its Unix second, so a stale
// bucket (an older lap of the ring) is told from a current one.
type recentBucket struct {
	sec                      int64
	requests, errors, tokens int64
}

// add counts one ended model request at now: an error when its status is
// 400 or above (the activity log's status=error), its completion tokens
// (those of successful responses, as the token counter's).
func (w *recentWindow) add(now time.Time, status int, tokens int64) {
	sec := now.Unix()
	w.mu.Lock()
	defer w.mu.Unlock()
	b := &w.buckets[sec%int64(len(w.buckets))]
	if b.sec != sec {
		*b = recentBucket{sec: sec}
	}
	b.requests++
	if status >= 400 {
		b.errors++
	}
	b.tokens += tokens
}

// totals sums the buckets of the window that ends at now (now's second
// included).
func (w *recentWindow) totals(now time.Time) (requests, errors, tokens int64) {
	sec := now.Unix()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, b := range w.buckets {
		if b.sec > sec-int64(len(w.buckets)) && b.sec <= sec {
			requests += b.requests
			errors += b.errors
			tokens += b.tokens
		}
	}
	return requests, errors, tokens
}

// apiSummary is the body of GET /api/summary. Rates are per second over
// WindowSeconds (the whole window, also while the server is younger than
// it); counts are of the window.
type apiSummary struct {
	WindowSeconds     float64 `json:"window_s"`
	Requests          int64   `json:"requests"`
	Errors            int64   `json:"errors"` // status 400 and above, 499 (the client left) included
	CompletionTokens  int64   `json:"completion_tokens"`
	RequestsPerSecond float64 `json:"requests_per_second"`
	TokensPerSecond   float64 `json:"tokens_per_second"` // completion tokens of successful responses
	// Jobs counts the job queue's tasks by state (RUNNING, QUEUED, …);
	// absent when the job queue is off. Counts only: the jobs themselves
	// stay behind the job token.
	Jobs map[string]int `json:"jobs,omitempty"`
	// JobsError says why Jobs could not be read (the state database).
	JobsError string `json:"jobs_error,omitempty"`
}

// apiSummaryHandler serves GET /api/summary: the web UI's headline figures.
func (s *Server) apiSummaryHandler(w http.ResponseWriter, r *http.Request) {
	req, errs, toks := s.metrics.recent.totals(time.Now())
	win := SummaryWindow.Seconds()
	out := apiSummary{WindowSeconds: win, Requests: req, Errors: errs, CompletionTokens: toks,
		RequestsPerSecond: float64(req) / win, TokensPerSecond: float64(toks) / win}
	if s.cfg.Jobs != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		counts, err := s.cfg.Jobs.Store().CountByState(ctx)
		if err != nil {
			out.JobsError = err.Error()
		} else {
			out.Jobs = make(map[string]int, len(counts))
			for st, n := range counts {
				out.Jobs[string(st)] = n
			}
		}
	}
	s.writeJSON(w, r, out)
}

// historyEvent is one event of GET /api/events/history: what the stream
// sends as id, event and data, with the time it was published.
type historyEvent struct {
	ID   uint64          `json:"id"`
	Type string          `json:"type"`
	Time time.Time       `json:"time"`
	Data json.RawMessage `json:"data"`
}

// MaxHistoryLimit is the most events one GET /api/events/history returns.
const MaxHistoryLimit = 1000

// apiEventsHistory serves GET /api/events/history?type=A,B&limit=N: the
// newest N (default and most MaxHistoryLimit) events of the given types
// (each type's last events.KeptPerType, however busy the ring), oldest
// first, and last_id: resume GET /api/events with Last-Event-ID: last_id
// and no event published after this answer is missed. What the UI's swap
// timeline and activity table show at first paint.
func (s *Server) apiEventsHistory(w http.ResponseWriter, r *http.Request) {
	bus := s.cfg.Events
	if bus == nil {
		s.writeError(w, r, &apiError{status: http.StatusNotFound, code: "no_events", msg: "the event stream is not enabled"})
		return
	}
	q := r.URL.Query()
	for name, vs := range q {
		if name != "type" && name != "limit" {
			s.writeError(w, r, badRequest("unknown_parameter", fmt.Sprintf("unknown parameter %q: want type or limit", name)))
			return
		}
		if len(vs) > 1 { // the second was ignored: name types comma-separated
			s.writeError(w, r, badRequest("invalid_"+name, fmt.Sprintf("parameter %s given twice (name several types comma-separated: type=A,B)", name)))
			return
		}
	}
	var types []string
	for _, t := range strings.Split(q.Get("type"), ",") {
		if t = strings.TrimSpace(t); t == "" {
			continue
		}
		if !slices.Contains(events.Types, t) {
			// A typo (evictions) would read as "none happened".
			s.writeError(w, r, badRequest("invalid_type", fmt.Sprintf("parameter type: unknown event type %q: want %s", t, strings.Join(events.Types, ", "))))
			return
		}
		types = append(types, t)
	}
	if len(types) == 0 {
		s.writeError(w, r, badRequest("invalid_type", "parameter type: name one or more event types, comma-separated (e.g. type="+
			events.TypeSwapStart+","+events.TypeSwapEnd+","+events.TypeEviction+")"))
		return
	}
	limit := MaxHistoryLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxHistoryLimit {
			s.writeError(w, r, badRequest("invalid_limit", "parameter limit: "+strconv.Quote(v)+": want a whole number from 1 to "+strconv.Itoa(MaxHistoryLimit)))
			return
		}
		limit = n
	}
	evs, last := bus.History(types, limit)
	out := struct {
		Object string         `json:"object"` // "list"
		LastID uint64         `json:"last_id"`
		Data   []historyEvent `json:"data"`
	}{Object: "list", LastID: last, Data: make([]historyEvent, 0, len(evs))}
	for _, ev := range evs {
		out.Data = append(out.Data, historyEvent{ID: ev.ID, Type: ev.Type, Time: ev.Time, Data: ev.JSON()})
	}
	s.writeJSON(w, r, out)
}
