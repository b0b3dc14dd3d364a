package sim

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Request is one request of a trace: when it arrives, for which model, and
// how many tokens it reads and writes.
type Request struct {
	Arrival      float64 // seconds from the trace's start, ascending
	Model        string
	PromptTokens int
	OutputTokens int
	Priority     int32  // optional column; 0 when absent
	Client       string // optional column; "" when absent
}

// The trace format: CSV with a header naming the columns, in any order.
// The first four are required, the last two optional.
const (
	ColArrival  = "arrival_s"
	ColModel    = "model"
	ColPrompt   = "prompt_tokens"
	ColOutput   = "output_tokens"
	ColPriority = "priority"
	ColClient   = "client"
)

// MaxTraceSpan is the longest a trace may last from its first arrival to
// its last, in seconds: about three years, far beyond any replay, and
// well inside what virtual time (int64 nanoseconds) holds. A longer one
// is almost always milliseconds written as seconds.
const MaxTraceSpan = 1e8

// MaxTokens is the largest prompt or output token count a trace line may
// give: ten million, above any model's context window.
const MaxTokens = 10_000_000

// TraceError is a trace line that cannot be read: the file (as given to
// ReadTrace), the line (1-based, the header is line 1), the column, and
// what is wrong.
type TraceError struct {
	File   string
	Line   int
	Column string
	Msg    string
}

func (e *TraceError) Error() string {
	if e.Column == "" {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s:%d: %s: %s", e.File, e.Line, e.Column, e.Msg)
}

// Trace is a trace file as read: its requests, each one's line, and the
// header's columns outside the format.
type Trace struct {
	Requests []Request
	// Lines is each request's line in the file (1-based, the header is
	// line 1), by index in Requests; blank lines and quoted line breaks
	// make it differ from the index + 2.
	Lines []int
	// Ignored are the header's columns that are not in the format, in
	// header order: skipped, so that a trace exported with extra columns
	// (a request id, a timestamp) replays as it is.
	Ignored []string
}

// ReadTrace reads a whole trace in the format above and returns its
// requests; ParseTrace says more. name is the file's name for errors.
func ReadTrace(name string, r io.Reader) ([]Request, error) {
	t, err := ParseTrace(name, r)
	if err != nil {
		return nil, err
	}
	return t.Requests, nil
}

// ParseTrace reads a whole trace in the format above (encoding/csv: quoted
// fields, CRLF, blank lines skipped; a UTF-8 byte order mark before the
// header is dropped). name is the file's name for errors. Columns outside
// the format are skipped and listed in Trace.Ignored. Errors are
// *TraceError: a missing required column, a column given twice, a field
// that is not a number (or is negative, or not finite; a token count
// must be a whole number, "12" or "12.0", at most MaxTokens), an empty
// model, an arrival earlier than the line before it or more than
// MaxTraceSpan after the first; or the CSV reader's error with its
// line. An empty trace (a header alone) is valid.
func ParseTrace(name string, r io.Reader) (*Trace, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	cr.FieldsPerRecord = 0 // every line as wide as the header
	header, err := cr.Read()
	if err == io.EOF {
		return nil, &TraceError{File: name, Line: 1, Msg: "empty file: want a header " + strings.Join([]string{ColArrival, ColModel, ColPrompt, ColOutput}, ",")}
	}
	if err != nil {
		err := csvError(name, err, 0)
		if te, ok := err.(*TraceError); ok {
			te.Msg += "; a trace is CSV whose first line is its header, e.g. " + strings.Join([]string{ColArrival, ColModel, ColPrompt, ColOutput}, ",")
		}
		return nil, err
	}
	t := &Trace{}
	col := map[string]int{}
	known := []string{ColArrival, ColModel, ColPrompt, ColOutput, ColPriority, ColClient}
	for i, h := range header {
		h = strings.TrimSpace(h)
		if i == 0 {
			h = strings.TrimPrefix(h, "\ufeff")
		}
		if !slices.Contains(known, h) {
			t.Ignored = append(t.Ignored, h)
			continue
		}
		if _, dup := col[h]; dup {
			return nil, &TraceError{File: name, Line: 1, Column: h, Msg: "column given twice"}
		}
		col[h] = i
	}
	for _, req := range known[:4] {
		if _, ok := col[req]; !ok {
			msg := "required column missing (the format: " + strings.Join(known, ", ") + "; the last two optional)"
			if len(t.Ignored) > 0 {
				msg += "; the header's other columns: " + strings.Join(t.Ignored, ", ") + " (names are case-sensitive)"
			}
			return nil, &TraceError{File: name, Line: 1, Column: req, Msg: msg}
		}
	}
	var out []Request
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			t.Requests = out
			return t, nil
		}
		if err != nil {
			return nil, csvError(name, err, len(header))
		}
		line, _ := cr.FieldPos(0)
		bad := func(column, format string, args ...any) error {
			return &TraceError{File: name, Line: line, Column: column, Msg: fmt.Sprintf(format, args...)}
		}
		var q Request
		if q.Arrival, err = strconv.ParseFloat(strings.TrimSpace(rec[col[ColArrival]]), 64); err != nil ||
			q.Arrival < 0 || math.IsInf(q.Arrival, 0) || math.IsNaN(q.Arrival) {
			return nil, bad(ColArrival, "want seconds from the start, a number ≥ 0, got %q", rec[col[ColArrival]])
		}
		q.Arrival = math.Abs(q.Arrival) // -0 reads as 0 (it printed as "-0 s")
		if n := len(out); n > 0 && q.Arrival < out[n-1].Arrival {
			return nil, bad(ColArrival, "%g is earlier than the line before (%g): arrivals must ascend", q.Arrival, out[n-1].Arrival)
		}
		if n := len(out); n > 0 && q.Arrival-out[0].Arrival > MaxTraceSpan {
			return nil, bad(ColArrival, "%g is more than %g s after the first request (%g): want seconds, not milliseconds", q.Arrival, float64(MaxTraceSpan), out[0].Arrival)
		}
		if q.Model = strings.TrimSpace(rec[col[ColModel]]); q.Model == "" {
			return nil, bad(ColModel, "empty")
		}
		for _, f := range []struct {
			column string
			dst    *int
		}{{ColPrompt, &q.PromptTokens}, {ColOutput, &q.OutputTokens}} {
			v, ok := tokenCount(rec[col[f.column]])
			if !ok {
				return nil, bad(f.column, "want a token count, a whole number from 0 to %d, got %q", MaxTokens, rec[col[f.column]])
			}
			*f.dst = v
		}
		if i, ok := col[ColPriority]; ok && strings.TrimSpace(rec[i]) != "" {
			p, err := strconv.ParseInt(strings.TrimSpace(rec[i]), 10, 32)
			if err != nil {
				return nil, bad(ColPriority, "want an integer from %d to %d, got %q", math.MinInt32, math.MaxInt32, rec[i])
			}
			q.Priority = int32(p)
		}
		if i, ok := col[ColClient]; ok {
			q.Client = strings.TrimSpace(rec[i])
		}
		out = append(out, q)
		t.Lines = append(t.Lines, line)
	}
}

// tokenCount reads a token count: a whole number from 0 to MaxTokens,
// written as an integer or as a float with no fraction ("12.0", what a
// data frame with a missing value elsewhere in the column writes).
func tokenCount(field string) (int, bool) {
	field = strings.TrimSpace(field)
	if v, err := strconv.Atoi(field); err == nil {
		return v, v >= 0 && v <= MaxTokens
	}
	f, err := strconv.ParseFloat(field, 64)
	if err != nil || f < 0 || f > MaxTokens || f != math.Trunc(f) {
		return 0, false
	}
	return int(f), true
}

// Scale replays reqs at rate times their request rate: every arrival is
// divided by rate (2 halves the gaps, 0.1 stretches them tenfold), in
// place. Errors: a rate that is not positive and finite, or one that
// would stretch the trace beyond MaxTraceSpan (reqs is then unchanged).
func Scale(reqs []Request, rate float64) error {
	if !(rate > 0) || math.IsInf(rate, 0) {
		return fmt.Errorf("%v: want a positive multiple of the trace's request rate", rate)
	}
	if n := len(reqs); n > 0 {
		if span := (reqs[n-1].Arrival - reqs[0].Arrival) / rate; span > MaxTraceSpan {
			return fmt.Errorf("%v stretches the trace to %.3g s, more than a replay may span (%g s)", rate, span, float64(MaxTraceSpan))
		}
	}
	for i := range reqs {
		reqs[i].Arrival /= rate
	}
	return nil
}

// csvError gives the CSV reader's error the file's name, its line and
// where on the line (the character, counted from 1); a line of the wrong
// width is told the header's (fields, 0 for the header itself).
func csvError(name string, err error, fields int) error {
	var pe *csv.ParseError
	if !errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", name, err)
	}
	if errors.Is(pe.Err, csv.ErrFieldCount) && fields > 0 {
		return &TraceError{File: name, Line: pe.Line, Msg: fmt.Sprintf("%v: the header has %d columns", pe.Err, fields)}
	}
	return &TraceError{File: name, Line: pe.Line, Msg: fmt.Sprintf("%v (at character %d)", pe.Err, pe.Column)}
}

// TraceWriter writes requests in the trace format, header first; what
// `loadout serve --record-trace` and the workload generator write. Call
// Flush when done and check its error.
type TraceWriter struct {
	w      *csv.Writer
	header bool
	rec    []string
}

// NewTraceWriter returns a writer of the trace format with all six
// columns.
func NewTraceWriter(w io.Writer) *TraceWriter {
	return &TraceWriter{w: csv.NewWriter(w), rec: make([]string, 6)}
}

// Write writes one request (and the header before the first).
func (t *TraceWriter) Write(q Request) error {
	if !t.header {
		t.header = true
		if err := t.w.Write([]string{ColArrival, ColModel, ColPrompt, ColOutput, ColPriority, ColClient}); err != nil {
			return err
		}
	}
	t.rec[0] = strconv.FormatFloat(q.Arrival, 'f', 3, 64)
	t.rec[1] = q.Model
	t.rec[2] = strconv.Itoa(q.PromptTokens)
	t.rec[3] = strconv.Itoa(q.OutputTokens)
	t.rec[4] = strconv.FormatInt(int64(q.Priority), 10)
	t.rec[5] = q.Client
	return t.w.Write(t.rec)
}

// Flush writes what is buffered (the header too, for an empty trace) and
// returns the first write error.
func (t *TraceWriter) Flush() error {
	if !t.header {
		t.header = true
		_ = t.w.Write([]string{ColArrival, ColModel, ColPrompt, ColOutput, ColPriority, ColClient})
	}
	t.w.Flush()
	return t.w.Error()
}
