package proxy

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// MaxActivityLimit is the most rows one GET /api/activity returns;
// DefaultActivityLimit is what it returns when limit is not given.
const (
	MaxActivityLimit     = 1000
	DefaultActivityLimit = 100
)

// ActivityLog is the store behind GET /api/activity (host/activity's *Log
// in the binary). The proxy feeds it through Config.OnRequest and reads it
// through this interface only, so it knows nothing of how rows are kept.
type ActivityLog interface {
	// Query returns the rows f selects, newest (highest RowID) first, at
	// most f.Limit of them. Errors: the store cannot be read.
	Query(ctx context.Context, f ActivityFilter) ([]ActivityRecord, error)
}

// ActivityFilter selects activity rows. Zero fields select everything;
// the conditions that are set must all hold.
type ActivityFilter struct {
	Model  string // exact catalog model id
	Client string // exact client id (X-Loadout-Client)
	// MinStatus and MaxStatus bound the status, inclusive; 0 leaves that
	// side open.
	MinStatus, MaxStatus int
	// Since and Until bound the arrival time: Since <= Time < Until.
	Since, Until time.Time
	// BeforeID selects rows with RowID < BeforeID (the cursor of the next,
	// older page); 0: from the newest.
	BeforeID int64
	// Limit is the most rows returned, 1 to MaxActivityLimit.
	Limit int
}

// ActivityRecord is one stored model request: its summary and the row id
// the store gave it (increasing with insertion; the paging cursor).
type ActivityRecord struct {
	RowID int64 `json:"row_id"`
	RequestSummary
}

// activityPage is the body of GET /api/activity. NextBeforeID, when
// HasMore, is the before_id of the next, older page.
type activityPage struct {
	Object       string           `json:"object"` // "list"
	Data         []ActivityRecord `json:"data"`
	HasMore      bool             `json:"has_more"`
	NextBeforeID int64            `json:"next_before_id,omitempty"`
}

// apiActivity serves GET /api/activity: the activity log, newest first,
// filtered by model, client, status ("error": 400 and above, "ok": below
// 400, or an exact code) and arrival time (since, until: RFC 3339), paged
// by limit (1 to 1000, default 100) and before_id (the next_before_id of
// the previous page). A bad parameter is a 400 naming it; no log
// configured is a 404.
func (s *Server) apiActivity(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Activity == nil {
		s.writeError(w, r, &apiError{status: http.StatusNotFound, code: "no_activity",
			msg: "the activity log is not enabled (--activity-max-rows 0 turns it off; otherwise it needs the state database: see serve's log and --db)"})
		return
	}
	f, e := parseActivityFilter(r.URL.Query())
	if e != nil {
		s.writeError(w, r, e)
		return
	}
	want := f.Limit
	f.Limit++ // one more says whether there is another page
	rows, err := s.cfg.Activity.Query(r.Context(), f)
	if err != nil {
		s.writeError(w, r, &apiError{status: http.StatusInternalServerError, code: "activity_unavailable",
			msg: "reading the activity log: " + err.Error()})
		return
	}
	page := activityPage{Object: "list", Data: rows}
	if len(rows) > want {
		page.Data, page.HasMore = rows[:want], true
		page.NextBeforeID = page.Data[want-1].RowID
	}
	if page.Data == nil {
		page.Data = []ActivityRecord{}
	}
	s.writeJSON(w, r, page)
}

// activityParams are the query parameters GET /api/activity knows.
var activityParams = map[string]bool{"model": true, "client": true, "status": true,
	"since": true, "until": true, "limit": true, "before_id": true}

// parseActivityFilter reads GET /api/activity's query. Errors name the
// parameter (code invalid_<param>, or unknown_parameter).
func parseActivityFilter(q map[string][]string) (ActivityFilter, *apiError) {
	f := ActivityFilter{Limit: DefaultActivityLimit}
	bad := func(param, format string, args ...any) *apiError {
		return badRequest("invalid_"+param, fmt.Sprintf("parameter %s: ", param)+fmt.Sprintf(format, args...))
	}
	for name, vs := range q {
		if !activityParams[name] {
			return f, badRequest("unknown_parameter", fmt.Sprintf("unknown parameter %q: want model, client, status, since, until, limit or before_id", name))
		}
		if len(vs) > 1 {
			return f, bad(name, "given %d times; give it once", len(vs))
		}
	}
	get := func(name string) string {
		if vs := q[name]; len(vs) > 0 {
			return strings.TrimSpace(vs[0])
		}
		return ""
	}
	f.Model, f.Client = get("model"), get("client")
	switch st := get("status"); st {
	case "":
	case "error":
		f.MinStatus = 400
	case "ok":
		f.MinStatus, f.MaxStatus = 100, 399
	default:
		code, err := strconv.Atoi(st)
		if err != nil || code < 100 || code > 599 {
			return f, bad("status", "%q: want error, ok or an HTTP status code (100 to 599)", st)
		}
		f.MinStatus, f.MaxStatus = code, code
	}
	for _, p := range []struct {
		name string
		to   *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		v := get(p.name)
		if v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return f, bad(p.name, "%q: want an RFC 3339 time, e.g. 2026-01-02T15:04:05Z", v)
		}
		*p.to = t
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		return f, bad("until", "%s is not after since (%s)", get("until"), get("since"))
	}
	if v := get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxActivityLimit {
			return f, bad("limit", "%q: want a whole number from 1 to %d", v, MaxActivityLimit)
		}
		f.Limit = n
	}
	if v := get("before_id"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return f, bad("before_id", "%q: want a row_id (a positive whole number)", v)
		}
		f.BeforeID = n
	}
	return f, nil
}
