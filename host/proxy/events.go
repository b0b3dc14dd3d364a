package proxy

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/loadout-dev/loadout/host/events"
	"github.com/loadout-dev/loadout/host/router"
)

// RequestSummary is one model request as the event stream and the
// activity log show it, made when its response ends. Durations are in
// seconds; zero where they do not apply (a request that failed before its
// grant has no TTFT).
type RequestSummary struct {
	// Seq numbers the requests of this server's run (1, 2, …), unique
	// where ID may not be (a client may send its own X-Request-Id): it
	// pairs a summary with its RequestStart. 0 in rows read back from the
	// activity log.
	Seq              uint64    `json:"-"`
	ID               string    `json:"id"`
	Time             time.Time `json:"time"` // when it arrived
	Model            string    `json:"model"`
	Replica          string    `json:"replica,omitempty"` // the replica that served it ("model@2"), for a model with replicas
	Client           string    `json:"client,omitempty"`
	Priority         int32     `json:"priority,omitempty"`
	Path             string    `json:"path"`
	Status           int       `json:"status"`
	Error            string    `json:"error,omitempty"`
	QueueWait        float64   `json:"queue_wait_s"`     // arrival to grant: queue and load
	LoadWait         float64   `json:"load_wait_s"`      // the part of QueueWait its model was loading
	Woke             bool      `json:"woke,omitempty"`   // that load was a wake of its sleeping model, not a cold load
	TTFT             float64   `json:"ttft_s,omitempty"` // arrival to first token, as loadout_time_to_first_token_seconds
	PromptTokens     int64     `json:"prompt_tokens"`
	CompletionTokens int64     `json:"completion_tokens"`
	TokensPerSecond  float64   `json:"tokens_per_second,omitempty"`
	Duration         float64   `json:"duration_s"` // arrival to the end of the response
}

// RequestStart is a model request as it goes to the router
// (Config.OnRequestStart): what is known before its response. The token
// fields are read from a JSON body only while OnRequestStart is set
// (estimate.go); they are 0 for other bodies and for /upstream requests.
type RequestStart struct {
	Seq      uint64    // as in its RequestSummary
	ID       string    // request id (X-Request-Id)
	Time     time.Time // when it arrived, as RequestSummary.Time
	Model    string    // catalog model id (aliases resolved)
	Path     string    // as RequestSummary.Path: /v1/chat/completions, /upstream/m/…
	Client   string    // x_client_id or X-Loadout-Client; "" when not given
	Priority int32     // x_priority or X-Loadout-Priority; 0 when not given
	// PromptEstimate is the prompt's size in tokens, estimated from the
	// body's text: the bytes of every string in messages[].content (text
	// parts included), prompt and input, divided by 4 and rounded up,
	// plus one per token id where those are token arrays. 0 when the body
	// has none of them.
	PromptEstimate int64
	// MaxTokens is the body's max_tokens (else max_completion_tokens,
	// else max_output_tokens); 0 when it sets none.
	MaxTokens int64
}

// announce hands a model request to OnRequestStart, when set.
func (s *Server) announce(ex *exchange, req router.Request) {
	if s.cfg.OnRequestStart == nil {
		return
	}
	s.cfg.OnRequestStart(RequestStart{
		Seq: ex.seq, ID: ex.id, Time: ex.start, Model: req.Model, Path: ex.path,
		Client: req.Client, Priority: req.Priority,
		PromptEstimate: ex.estimate.prompt, MaxTokens: ex.estimate.maxTokens,
	})
}

// summarize publishes the summary of a model request that named a
// catalog model, when anything listens for summaries.
func (s *Server) summarize(ex *exchange, status int, d time.Duration) {
	if (s.cfg.Events == nil && s.cfg.OnRequest == nil) || s.metrics.model(ex.model) == nil {
		return
	}
	sum := RequestSummary{
		Seq: ex.seq, ID: ex.id, Time: ex.start, Model: ex.model, Replica: ex.replica, Client: ex.req.Client, Priority: ex.req.Priority,
		Path: ex.path, Status: status, Error: ex.errMsg, QueueWait: ex.waited.Seconds(), LoadWait: ex.loadWait.Seconds(), Woke: ex.woke, Duration: d.Seconds(),
	}
	if u := ex.usage; u != nil {
		sum.PromptTokens, sum.CompletionTokens = u.prompt, u.completion
		if t, ok := u.ttft(ex.start); ok {
			sum.TTFT = t.Seconds()
		}
		if tps, ok := u.tokensPerSecond(); ok {
			sum.TokensPerSecond = tps
		}
	}
	if s.cfg.Events != nil {
		s.cfg.Events.Publish(events.TypeRequest, sum)
	}
	if s.cfg.OnRequest != nil {
		s.cfg.OnRequest(sum)
	}
}

// eventsWriteTimeout bounds one write to an event-stream client: a client
// that does not read for this long is dropped.
const eventsWriteTimeout = 10 * time.Second

// eventsBatch is how many events one wake writes at most before flushing.
const eventsBatch = 256

// apiEvents serves GET /api/events: the event ring as server-sent events,
// from the event after Last-Event-ID (header, or ?last_event_id=) or, with
// neither, only events from now on (?replay=1 sends the whole ring first).
// A client that falls behind the ring, or stops reading, is dropped; one
// that resumed past the ring's start gets a "reset" event first, saying it
// missed events and should reload its state.
func (s *Server) apiEvents(w http.ResponseWriter, r *http.Request) {
	bus := s.cfg.Events
	if bus == nil {
		s.writeError(w, r, &apiError{status: http.StatusNotFound, code: "no_events", msg: "the event stream is not enabled"})
		return
	}
	var after uint64
	last := r.Header.Get("Last-Event-ID")
	if last == "" {
		last = r.URL.Query().Get("last_event_id")
	}
	switch {
	case last != "":
		id, err := strconv.ParseUint(strings.TrimSpace(last), 10, 64)
		if err != nil {
			s.writeError(w, r, badRequest("invalid_last_event_id", fmt.Sprintf("Last-Event-ID %q: want an event id", last)))
			return
		}
		after = id
	case r.URL.Query().Get("replay") == "1":
		after = 0
	default:
		after = bus.LastID()
	}
	sub := bus.Subscribe(after)
	defer sub.Close()
	var head []byte
	if sub.Gap() {
		head = fmt.Appendf(head, "event: reset\ndata: {\"reason\":\"events after %d have left the ring\"}\n\n", after)
	}
	head = append(head, ": loadout events\n\n"...)
	streamEvents(w, r, sub, head, func(buf []byte, ev *events.Event) []byte {
		buf = fmt.Appendf(buf, "id: %d\nevent: %s\ndata: ", ev.ID, ev.Type)
		buf = append(buf, ev.JSON()...)
		return append(buf, "\n\n"...)
	})
}

// streamEvents answers r with sub's events as server-sent events until
// the client leaves, stops reading (a write blocked eventsWriteTimeout)
// or the bus closes: head first, then each event as render appends it to
// the buffer (nothing for an event it skips), with a keep-alive comment
// every 15 s of quiet.
func streamEvents(w http.ResponseWriter, r *http.Request, sub *events.Subscription, head []byte, render func(buf []byte, ev *events.Event) []byte) {
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	buf := head
	write := func() bool {
		_ = rc.SetWriteDeadline(time.Now().Add(eventsWriteTimeout))
		if _, err := w.Write(buf); err != nil {
			return false
		}
		buf = buf[:0]
		return rc.Flush() == nil
	}
	// drain writes every event ready now; false ends the stream (the
	// client is gone or too slow, or the bus closed).
	drain := func() bool {
		for {
			evs, err := sub.Ready(eventsBatch)
			if err != nil {
				return false
			}
			for _, ev := range evs {
				buf = render(buf, ev)
			}
			if !write() {
				return false
			}
			if len(evs) < eventsBatch {
				return true
			}
		}
	}
	if !drain() { // the events a resume or replay asked for, at once
		return
	}
	keepAlive := time.NewTicker(15 * time.Second)
	defer keepAlive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-keepAlive.C:
			buf = append(buf, ": keep-alive\n\n"...)
			if !write() {
				return
			}
		case _, open := <-sub.Wake():
			if !drain() || !open {
				return
			}
		}
	}
}
