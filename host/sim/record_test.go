package sim

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// t0 is the first arrival of the recorder tests.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// at is t0 plus s seconds.
func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// step is one call on a Recorder.
type step struct {
	start bool
	id    uint64
	t     float64 // seconds after t0
	est   Request // start: the estimate
	p, o  int     // end: counted tokens (negative: keep the estimate)
}

func start(id uint64, t float64, est Request) step { return step{start: true, id: id, t: t, est: est} }
func end(id uint64, t float64, p, o int) step      { return step{id: id, t: t, p: p, o: o} }

func TestRecorder_Rule(t *testing.T) {
	a := Request{Model: "a", PromptTokens: 3, OutputTokens: 16, Priority: 2, Client: "ci"}
	b := Request{Model: "b", PromptTokens: 5}
	for _, tc := range []struct {
		name  string
		opt   RecorderOptions
		steps []step
		// rowsBeforeClose is how many rows are written before Close.
		rowsBeforeClose int
		want            []Request
		early           int
	}{
		{
			name: "rows in arrival order although requests end out of order",
			steps: []step{
				start(1, 0, a), start(2, 0.5, b), start(3, 1, a),
				end(3, 2, 30, 40), end(2, 3, 50, 60), end(1, 4, 10, 20),
			},
			rowsBeforeClose: 3,
			want: []Request{
				{Arrival: 0, Model: "a", PromptTokens: 10, OutputTokens: 20, Priority: 2, Client: "ci"},
				{Arrival: 0.5, Model: "b", PromptTokens: 50, OutputTokens: 60},
				{Arrival: 1, Model: "a", PromptTokens: 30, OutputTokens: 40, Priority: 2, Client: "ci"},
			},
		},
		{
			name:            "a negative count keeps the estimate",
			steps:           []step{start(1, 0, a), end(1, 1, -1, 7), start(2, 1, b), end(2, 2, 9, -1)},
			rowsBeforeClose: 2,
			want: []Request{
				{Arrival: 0, Model: "a", PromptTokens: 3, OutputTokens: 7, Priority: 2, Client: "ci"},
				{Arrival: 1, Model: "b", PromptTokens: 9, OutputTokens: 0},
			},
		},
		{
			name: "a request older than MaxWait is written with its estimates; its End is ignored",
			opt:  RecorderOptions{MaxWait: 10 * time.Second},
			steps: []step{
				start(1, 0, a), start(2, 1, b), end(2, 2, 8, 9),
				start(3, 10, b), // 1 is now 10 s old: it and 2 are written
				end(1, 11, 100, 100), end(3, 12, 1, 1),
			},
			rowsBeforeClose: 3,
			want: []Request{
				{Arrival: 0, Model: "a", PromptTokens: 3, OutputTokens: 16, Priority: 2, Client: "ci"},
				{Arrival: 1, Model: "b", PromptTokens: 8, OutputTokens: 9},
				{Arrival: 10, Model: "b", PromptTokens: 1, OutputTokens: 1},
			},
			early: 1,
		},
		{
			name: "more than MaxPending waiting writes the oldest with its estimates",
			opt:  RecorderOptions{MaxPending: 2},
			steps: []step{
				start(1, 0, a), start(2, 1, b), end(2, 1, 8, 9),
				start(3, 2, b), // three waiting: 1 goes, then 2 (ended)
			},
			rowsBeforeClose: 2,
			want: []Request{
				{Arrival: 0, Model: "a", PromptTokens: 3, OutputTokens: 16, Priority: 2, Client: "ci"},
				{Arrival: 1, Model: "b", PromptTokens: 8, OutputTokens: 9},
				{Arrival: 2, Model: "b", PromptTokens: 5},
			},
			early: 2, // 1, and 3 at Close
		},
		{
			name:            "Close writes what never ended, with its estimates",
			steps:           []step{start(1, 0, a), start(2, 1, b), end(2, 2, 8, 9)},
			rowsBeforeClose: 0,
			want: []Request{
				{Arrival: 0, Model: "a", PromptTokens: 3, OutputTokens: 16, Priority: 2, Client: "ci"},
				{Arrival: 1, Model: "b", PromptTokens: 8, OutputTokens: 9},
			},
			early: 1,
		},
		{
			name: "a request handed over after a later arrival takes that arrival",
			steps: []step{
				start(1, 1, a), start(2, 2, b), start(3, 1.5, a), // 3's body came slowly
				end(1, 3, 1, 1), end(2, 3, 2, 2), end(3, 3, 3, 3),
			},
			rowsBeforeClose: 3,
			want: []Request{
				{Arrival: 0, Model: "a", PromptTokens: 1, OutputTokens: 1, Priority: 2, Client: "ci"},
				{Arrival: 1, Model: "b", PromptTokens: 2, OutputTokens: 2},
				{Arrival: 1, Model: "a", PromptTokens: 3, OutputTokens: 3, Priority: 2, Client: "ci"},
			},
		},
		{
			name:  "an End nobody started is ignored",
			steps: []step{end(7, 0, 1, 1), start(1, 0, b), end(1, 1, 2, 3)},
			want:  []Request{{Model: "b", PromptTokens: 2, OutputTokens: 3}},
			// written at once
			rowsBeforeClose: 1,
		},
		{name: "no requests: a header alone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			r, err := NewRecorder(&buf, tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tc.steps {
				if s.start {
					r.Start(s.id, at(s.t), s.est)
				} else {
					r.End(s.id, at(s.t), s.p, s.o)
				}
			}
			// Every settled row is on the writer before Close.
			if got := strings.Count(buf.String(), "\n") - 1; got != tc.rowsBeforeClose {
				t.Errorf("%d rows written before Close, want %d:\n%s", got, tc.rowsBeforeClose, buf.String())
			}
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
			got, err := ReadTrace("rec.csv", &buf)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("trace:\n got %+v\nwant %+v", got, tc.want)
			}
			if st := r.Stats(); st.Rows != len(tc.want) || st.Early != tc.early {
				t.Errorf("stats %+v, want %d rows, %d early", st, len(tc.want), tc.early)
			}
			// Nothing is recorded after Close.
			r.Start(99, at(100), Request{Model: "late"})
			r.End(99, at(100), 1, 1)
			if err := r.Close(); err != nil || r.Stats().Rows != len(tc.want) {
				t.Errorf("after Close: %v, %+v", err, r.Stats())
			}
		})
	}
}

// failAfter accepts n writes, then fails.
type failAfter struct{ n int }

var errDiskFull = errors.New("disk full")

func (f *failAfter) Write(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errDiskFull
	}
	f.n--
	return len(p), nil
}

func TestRecorder_WriteErrorReportedOnce(t *testing.T) {
	if _, err := NewRecorder(&failAfter{}, RecorderOptions{}); !errors.Is(err, errDiskFull) {
		t.Fatalf("NewRecorder on a failing writer: %v, want the write error", err)
	}
	var reported []error
	r, err := NewRecorder(&failAfter{n: 1}, RecorderOptions{OnError: func(err error) { reported = append(reported, err) }})
	if err != nil {
		t.Fatal(err)
	}
	for i := range uint64(3) {
		r.Start(i, at(float64(i)), Request{Model: "a"})
		r.End(i, at(float64(i)), 1, 1)
	}
	if err := r.Close(); !errors.Is(err, errDiskFull) {
		t.Errorf("Close = %v, want the write error", err)
	}
	if len(reported) != 1 || !errors.Is(reported[0], errDiskFull) {
		t.Errorf("OnError got %v, want the write error once", reported)
	}
}

// Requests from many goroutines, ending in any order: every row is
// written once, and the trace reads back sorted (the race detector
// watches the locking).
func TestRecorder_Concurrent(t *testing.T) {
	var buf bytes.Buffer
	r, err := NewRecorder(&buf, RecorderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		next uint64
		wg   sync.WaitGroup
	)
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				mu.Lock()
				next++
				id, when := next, at(float64(next)/10)
				mu.Unlock()
				r.Start(id, when, Request{Model: "m", PromptTokens: g})
				if i%3 != 0 {
					r.End(id, when, g, i) // the others end at Close
				}
			}
		})
	}
	wg.Wait()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := ReadTrace("rec.csv", &buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 400 {
		t.Fatalf("%d rows, want 400", len(got))
	}
}
