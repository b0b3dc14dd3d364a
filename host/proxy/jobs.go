package proxy

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/gorilla/mux"

	"github.com/loadout-dev/loadout/host/jobs"
)

// jobsPrefix is where the jobs API lives. Its requests are authorised by
// the job token, never by an inference API key (issue 12: training jobs
// are a platform team's, inference keys are clients').
const jobsPrefix = "/api/jobs"

// isJobsPath reports whether path belongs to the jobs API.
func isJobsPath(path string) bool {
	return path == jobsPrefix || strings.HasPrefix(path, jobsPrefix+"/")
}

// jobRoutes registers the jobs API on m: POST /api/jobs (a YAML or JSON
// job spec → the task), GET /api/jobs[?state=A,B][&limit=N[&after=ID]],
// GET /api/jobs/{id}, POST /api/jobs/{id}/cancel, GET
// /api/jobs/{id}/logs[?from=BYTE][&attempt=SUBMISSION_ID].
func (s *Server) jobRoutes(m *mux.Router) {
	m.HandleFunc(jobsPrefix, s.jobsAuth(s.submitJob)).Methods(http.MethodPost)
	m.HandleFunc(jobsPrefix, s.jobsAuth(s.listJobs)).Methods(http.MethodGet)
	m.HandleFunc(jobsPrefix+"/{id}", s.jobsAuth(s.getJob)).Methods(http.MethodGet)
	m.HandleFunc(jobsPrefix+"/{id}/cancel", s.jobsAuth(s.cancelJob)).Methods(http.MethodPost)
	m.HandleFunc(jobsPrefix+"/{id}/logs", s.jobsAuth(s.jobLogs)).Methods(http.MethodGet)
}

// jobsAuth checks "Authorization: Bearer <job token>" (compared as SHA-256
// digests in constant time). With no runner or no token configured the
// jobs API is off: 503 says how to turn it on.
func (s *Server) jobsAuth(h http.HandlerFunc) http.HandlerFunc {
	var want [sha256.Size]byte
	if s.cfg.JobToken != "" {
		want = sha256.Sum256([]byte(s.cfg.JobToken))
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Jobs == nil || s.cfg.JobToken == "" {
			s.writeError(w, r, &apiError{status: http.StatusServiceUnavailable, code: "jobs_disabled",
				msg: "the jobs API is off: start serve with a job token (--job-token or LOADOUT_JOB_TOKEN) and a job database it can open (--db; see its log)"})
			return
		}
		tok := ""
		if scheme, rest, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
			tok = strings.TrimSpace(rest)
		}
		if tok == "" {
			s.writeError(w, r, &apiError{status: http.StatusUnauthorized, code: "missing_job_token",
				msg: "missing job token: send it as \"Authorization: Bearer <job token>\" (an inference API key is not one)"})
			return
		}
		got := sha256.Sum256([]byte(tok))
		if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			s.writeError(w, r, &apiError{status: http.StatusUnauthorized, code: "invalid_job_token", msg: "invalid job token"})
			return
		}
		h(w, r)
	}
}

// jobError maps the jobs package's errors to API errors.
func jobError(err error) *apiError {
	var fe *jobs.FieldError
	var se *jobs.SpecError
	var re *jobs.RefusedError
	var ue *jobs.RayUnreachableError
	var he *jobs.RayHTTPError
	switch {
	case errors.As(err, &fe), errors.As(err, &se):
		return &apiError{status: http.StatusBadRequest, code: "invalid_job_spec", msg: err.Error()}
	case errors.As(err, &re):
		return &apiError{status: http.StatusUnprocessableEntity, code: "job_never_fits", msg: err.Error()}
	case errors.Is(err, jobs.ErrNotFound):
		return &apiError{status: http.StatusNotFound, code: "job_not_found", msg: err.Error()}
	case errors.Is(err, jobs.ErrConflict):
		return &apiError{status: http.StatusConflict, code: "job_finished", msg: err.Error()}
	case errors.Is(err, jobs.ErrNoLogs):
		return &apiError{status: http.StatusNotFound, code: "no_logs", msg: err.Error()}
	case errors.As(err, &ue):
		// The executor (Ray's dashboard) did not answer: a gateway's
		// failure, not the job's.
		status := http.StatusBadGateway
		if strings.Contains(ue.Err.Error(), "no answer within") {
			status = http.StatusGatewayTimeout
		}
		return &apiError{status: status, code: "executor_unreachable", msg: err.Error()}
	case errors.As(err, &he):
		return &apiError{status: http.StatusBadGateway, code: "executor_error", msg: err.Error()}
	default:
		return &apiError{status: http.StatusInternalServerError, code: "internal_error", msg: err.Error()}
	}
}

// maxJobSpecBytes bounds a job spec.
const maxJobSpecBytes = 1 << 20

func (s *Server) submitJob(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxJobSpecBytes+1))
	if err != nil {
		s.writeError(w, r, &apiError{status: http.StatusBadRequest, code: "invalid_request", msg: "reading the job spec: " + err.Error()})
		return
	}
	if len(body) > maxJobSpecBytes {
		s.writeError(w, r, &apiError{status: http.StatusRequestEntityTooLarge, code: "request_too_large", msg: "the job spec is over 1 MiB"})
		return
	}
	t, err := s.cfg.Jobs.Submit(r.Context(), body)
	if err != nil {
		s.writeError(w, r, jobError(err))
		return
	}
	w.WriteHeader(http.StatusCreated)
	s.writeJSON(w, r, t)
}

// listJobs is GET /api/jobs[?state=A,B][&limit=N[&after=ID]]: the tasks
// in queue order; with limit, at most N of them after task ID (from the
// first without after), and "next", the ID to pass as after for the next
// page, when there are more.
func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) {
	bad := func(format string, args ...any) {
		s.writeError(w, r, &apiError{status: http.StatusBadRequest, code: "invalid_request", msg: fmt.Sprintf(format, args...)})
	}
	q := r.URL.Query()
	var states []jobs.State
	if v := q.Get("state"); v != "" {
		for _, st := range strings.Split(v, ",") {
			st := jobs.State(strings.ToUpper(strings.TrimSpace(st)))
			if !containsState(st) {
				bad("state: %q is not a job state; want one of %v", st, jobs.States)
				return
			}
			states = append(states, st)
		}
	}
	limit := 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			bad("limit: %q is not a positive number of tasks", v)
			return
		}
		limit = n
	}
	var after *jobs.Task
	if v := q.Get("after"); v != "" {
		t, err := s.cfg.Jobs.Store().Get(r.Context(), v)
		if errors.Is(err, jobs.ErrNotFound) {
			bad("after: no task %q", v)
			return
		}
		if err != nil {
			s.writeError(w, r, jobError(err))
			return
		}
		after = t
	}
	fetch := 0
	if limit > 0 {
		fetch = limit + 1 // one more says whether there is a next page
	}
	ts, err := s.cfg.Jobs.Store().ListAfter(r.Context(), after, fetch, states...)
	if err != nil {
		s.writeError(w, r, jobError(err))
		return
	}
	page := struct {
		Jobs []*jobs.Task `json:"jobs"`
		Next string       `json:"next,omitempty"`
	}{Jobs: ts}
	if limit > 0 && len(ts) > limit {
		page.Jobs = ts[:limit]
		page.Next = ts[limit-1].ID
	}
	if page.Jobs == nil {
		page.Jobs = []*jobs.Task{}
	}
	s.writeJSON(w, r, page)
}

func containsState(st jobs.State) bool {
	for _, s := range jobs.States {
		if s == st {
			return true
		}
	}
	return false
}

// jobDetail is GET /api/jobs/{id}: the task, every attempt (start, end,
// failure kind and message) and its events.
type jobDetail struct {
	*jobs.Task
	AttemptList []*jobs.Attempt `json:"attempt_list"`
	Events      []jobs.Event    `json:"events"`
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["id"]
	st := s.cfg.Jobs.Store()
	t, err := st.Get(r.Context(), id)
	if err != nil {
		s.writeError(w, r, jobError(err))
		return
	}
	as, err := st.Attempts(r.Context(), id)
	if err != nil {
		s.writeError(w, r, jobError(err))
		return
	}
	evs, err := st.Events(r.Context(), id)
	if err != nil {
		s.writeError(w, r, jobError(err))
		return
	}
	if as == nil {
		as = []*jobs.Attempt{}
	}
	s.writeJSON(w, r, jobDetail{Task: t, AttemptList: as, Events: evs})
}

func (s *Server) cancelJob(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["id"]
	if err := s.cfg.Jobs.Cancel(r.Context(), id); err != nil {
		s.writeError(w, r, jobError(err))
		return
	}
	t, err := s.cfg.Jobs.Store().Get(r.Context(), id)
	if err != nil {
		s.writeError(w, r, jobError(err))
		return
	}
	s.writeJSON(w, r, t)
}

// Headers of GET /api/jobs/{id}/logs: which attempt's output the answer
// holds, the offset of its first byte in the whole output (the bytes left
// out before it), and the whole output's size so far.
const (
	headerLogAttempt = "X-Loadout-Log-Attempt"
	headerLogStart   = "X-Loadout-Log-Start"
	headerLogSize    = "X-Loadout-Log-Size"
	// headerLogOmitted, on an answer that leaves out the start of the
	// output (one without from, of an output over jobs.MaxLogChunk), is
	// the number of bytes left out.
	headerLogOmitted = "X-Loadout-Log-Omitted"
)

// jobLogs is GET /api/jobs/{id}/logs[?from=BYTE][&attempt=SUBMISSION_ID]:
// at most jobs.MaxLogChunk bytes of the attempt's output (the latest
// attempt's without attempt), from byte BYTE of the whole output, or,
// without from, its end. The headers say which part it is.
func (s *Server) jobLogs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	from := int64(-1)
	if v := q.Get("from"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			s.writeError(w, r, &apiError{status: http.StatusBadRequest, code: "invalid_request", msg: fmt.Sprintf("from: %q is not a byte offset (0 or more)", v)})
			return
		}
		from = n
	}
	c, err := s.cfg.Jobs.LogsFrom(r.Context(), mux.Vars(r)["id"], q.Get("attempt"), from)
	if err != nil {
		s.writeError(w, r, jobError(err))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set(headerLogAttempt, c.SubmissionID)
	h.Set(headerLogStart, strconv.FormatInt(c.Start, 10))
	h.Set(headerLogSize, strconv.FormatInt(c.Size, 10))
	if from < 0 && c.Start > 0 {
		h.Set(headerLogOmitted, strconv.FormatInt(c.Start, 10))
	}
	_, _ = io.WriteString(w, c.Text)
}
