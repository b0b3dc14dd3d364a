package activity

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/loadout-dev/loadout/host/jobs"
	"github.com/loadout-dev/loadout/host/proxy"
)

func openLog(t *testing.T, path string, opt Options) *Log {
	t.Helper()
	l, err := Open(path, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func flush(t *testing.T, l *Log) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func query(t *testing.T, l *Log, f proxy.ActivityFilter) []proxy.ActivityRecord {
	t.Helper()
	rows, err := l.Query(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func TestLog_RecordFlushQueryRoundTrip(t *testing.T) {
	l := openLog(t, filepath.Join(t.TempDir(), "state.db"), Options{})
	at := time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)
	want := proxy.RequestSummary{ID: "req-1", Time: at, Model: "small", Client: "team-a", Priority: 7,
		Path: "/v1/chat/completions", Status: 200, QueueWait: 1.5, LoadWait: 1.25, Woke: true, TTFT: 0.125,
		PromptTokens: 11, CompletionTokens: 22, TokensPerSecond: 33.5, Duration: 2.75}
	l.Record(want)
	l.Record(proxy.RequestSummary{ID: "req-2", Time: at.Add(time.Second), Model: "small", Status: 503, Error: "no"})
	flush(t, l)
	rows := query(t, l, proxy.ActivityFilter{Limit: 10})
	if len(rows) != 2 || rows[0].ID != "req-2" || rows[1].ID != "req-1" || rows[0].RowID <= rows[1].RowID {
		t.Fatalf("rows %+v, want req-2 then req-1, row ids descending", rows)
	}
	if got := rows[1].RequestSummary; got != want {
		t.Errorf("stored %+v\nwant   %+v", got, want)
	}
}

// The activity table lives in the job queue's file, beside its tables,
// both open at once.
func TestLog_SharesTheJobQueueFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jobs.db")
	store, err := jobs.OpenStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	l := openLog(t, path, Options{})
	l.Record(proxy.RequestSummary{ID: "a", Time: time.Now(), Model: "m", Status: 200})
	flush(t, l)
	if _, err := store.List(context.Background()); err != nil {
		t.Fatalf("the job store beside the activity log: %v", err)
	}
	l.Close()
	// Reopened: the migration is not applied twice, the row is there.
	l2 := openLog(t, path, Options{})
	if rows := query(t, l2, proxy.ActivityFilter{Limit: 5}); len(rows) != 1 {
		t.Fatalf("after reopening: %d rows, want 1", len(rows))
	}
}

func TestLog_RetentionByAgeAndCount(t *testing.T) {
	l := openLog(t, filepath.Join(t.TempDir(), "state.db"), Options{MaxAge: time.Hour, MaxRows: 50, PruneInterval: time.Hour})
	now := time.Now()
	for i := range 20 { // old: past MaxAge
		l.Record(proxy.RequestSummary{ID: fmt.Sprintf("old-%d", i), Time: now.Add(-2 * time.Hour), Model: "m", Status: 200})
	}
	for i := range 80 {
		l.Record(proxy.RequestSummary{ID: fmt.Sprintf("new-%d", i), Time: now.Add(-time.Minute), Model: "m", Status: 200})
	}
	flush(t, l)
	n, err := l.Prune(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n != 50 {
		t.Errorf("pruned %d rows, want 50 (20 by age, 30 by count)", n)
	}
	rows := query(t, l, proxy.ActivityFilter{Limit: 1000})
	if len(rows) != 50 || rows[0].ID != "new-79" || rows[49].ID != "new-30" {
		t.Fatalf("kept %d rows from %s to %s, want the 50 newest (new-79 … new-30)", len(rows), rows[0].ID, rows[len(rows)-1].ID)
	}
	if n, _ := l.Prune(context.Background()); n != 0 {
		t.Errorf("a second prune removed %d rows", n)
	}
}

// The writer prunes on its own, off the request path.
func TestLog_RetentionRunsInTheBackground(t *testing.T) {
	l := openLog(t, filepath.Join(t.TempDir(), "state.db"), Options{MaxRows: 3, PruneInterval: 10 * time.Millisecond})
	for i := range 10 {
		l.Record(proxy.RequestSummary{ID: fmt.Sprint(i), Time: time.Now(), Model: "m", Status: 200})
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(query(t, l, proxy.ActivityFilter{Limit: 100})) != 3 {
		if time.Now().After(deadline) {
			t.Fatal("the background prune did not bring the log to 3 rows")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestLog_FullBufferDropsAndCounts(t *testing.T) {
	l := openLog(t, filepath.Join(t.TempDir(), "state.db"), Options{Buffer: 1})
	reg := prometheus.NewRegistry()
	if err := l.Register(reg); err != nil {
		t.Fatal(err)
	}
	// Take the log's one connection, so its writer waits, and offer more
	// than the buffer holds.
	tx, err := l.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := range 100 {
		l.Record(proxy.RequestSummary{ID: fmt.Sprint(i), Time: time.Now(), Model: "m", Status: 200})
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("100 Records took %v with the writer stuck: Record blocks", d)
	}
	tx.Rollback()
	flush(t, l)
	var m dto.Metric
	if err := l.dropped.WithLabelValues("full").Write(&m); err != nil {
		t.Fatal(err)
	}
	dropped := m.GetCounter().GetValue()
	kept := len(query(t, l, proxy.ActivityFilter{Limit: 1000}))
	if dropped < 90 || int(dropped)+kept != 100 {
		t.Errorf("dropped %v, kept %d: want most dropped and every one either kept or counted", dropped, kept)
	}
}

func TestLog_Filters(t *testing.T) {
	l := openLog(t, filepath.Join(t.TempDir(), "state.db"), Options{})
	t0 := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	for i, s := range []struct {
		model, client string
		status        int
	}{{"a", "x", 200}, {"b", "x", 404}, {"a", "y", 503}, {"a", "x", 200}, {"b", "y", 499}} {
		l.Record(proxy.RequestSummary{ID: fmt.Sprint(i), Time: t0.Add(time.Duration(i) * time.Minute), Model: s.model, Client: s.client, Status: s.status})
	}
	flush(t, l)
	ids := func(f proxy.ActivityFilter) string {
		f.Limit = 100
		var out string
		for _, r := range query(t, l, f) {
			out += r.ID
		}
		return out
	}
	for _, tc := range []struct {
		name string
		f    proxy.ActivityFilter
		want string
	}{
		{"all", proxy.ActivityFilter{}, "43210"},
		{"model", proxy.ActivityFilter{Model: "a"}, "320"},
		{"client", proxy.ActivityFilter{Client: "y"}, "42"},
		{"errors", proxy.ActivityFilter{MinStatus: 400}, "421"},
		{"exact", proxy.ActivityFilter{MinStatus: 200, MaxStatus: 200}, "30"},
		{"time", proxy.ActivityFilter{Since: t0.Add(time.Minute), Until: t0.Add(3 * time.Minute)}, "21"},
		{"model and errors", proxy.ActivityFilter{Model: "b", MinStatus: 400}, "41"},
	} {
		if got := ids(tc.f); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
	rows := query(t, l, proxy.ActivityFilter{Limit: 2})
	next := query(t, l, proxy.ActivityFilter{Limit: 2, BeforeID: rows[1].RowID})
	if len(rows) != 2 || len(next) != 2 || rows[1].ID != "3" || next[0].ID != "2" {
		t.Errorf("paging: %v then %v", rows, next)
	}
}

func TestLog_CloseWritesWhatIsBuffered(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	l := openLog(t, path, Options{})
	for i := range 500 {
		l.Record(proxy.RequestSummary{ID: fmt.Sprint(i), Time: time.Now(), Model: "m", Status: 200})
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Flush(context.Background()); err != ErrClosed {
		t.Errorf("Flush after Close: %v, want ErrClosed", err)
	}
	l2 := openLog(t, path, Options{})
	if n := len(query(t, l2, proxy.ActivityFilter{Limit: 1000})); n != 500 {
		t.Errorf("after Close and reopen: %d rows, want 500", n)
	}
}
