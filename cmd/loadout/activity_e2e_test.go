package main

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// activityRow is one row of GET /api/activity as a client reads it.
type activityRow struct {
	RowID            int64   `json:"row_id"`
	ID               string  `json:"id"`
	Model            string  `json:"model"`
	Replica          string  `json:"replica"`
	Client           string  `json:"client"`
	Priority         int     `json:"priority"`
	Status           int     `json:"status"`
	QueueWait        float64 `json:"queue_wait_s"`
	LoadWait         float64 `json:"load_wait_s"`
	TTFT             float64 `json:"ttft_s"`
	PromptTokens     int     `json:"prompt_tokens"`
	CompletionTokens int     `json:"completion_tokens"`
	Duration         float64 `json:"duration_s"`
}

func (s *server) activity(t *testing.T, query string) []activityRow {
	t.Helper()
	code, body := s.get("/api/activity?" + query)
	if code != http.StatusOK {
		t.Fatalf("GET /api/activity?%s: %d %s", query, code, body)
	}
	var p struct{ Data []activityRow }
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("GET /api/activity?%s: %v in %s", query, err, body)
	}
	return p.Data
}

// Requests through a real serve with simulated models come back from
// /api/activity with the tokens their clients counted, their statuses,
// client and priority, and a load wait for the one that waited for a
// load; the rows are in the --db file and outlive a restart.
func TestServe_ActivityLogsEveryModelRequest(t *testing.T) {
	db := filepath.Join(t.TempDir(), "state.db")
	cfg := writeConfig(t, t.TempDir(), simModels)
	s := startServer(t, cfg, "--db", db)

	counts := map[string]*clientCount{"a": {}, "b": {}}
	chatCounting(t, s.base, "a", false, false, counts["a"]) // cold: waits for a's load
	chatCounting(t, s.base, "a", true, true, counts["a"])
	chatCounting(t, s.base, "b", true, false, counts["b"]) // no usage: chunks counted

	// A client and priority, and a request the model refuses.
	req, _ := http.NewRequest(http.MethodPost, s.base+"/v1/chat/completions",
		strings.NewReader(`{"model":"b","max_tokens":4,"messages":[{"role":"user","content":"hi there"}]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Loadout-Client", "team-x")
	req.Header.Set("X-Loadout-Priority", "5")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var u struct {
		Usage struct{ Prompt_tokens, Completion_tokens int }
	}
	if err := json.NewDecoder(resp.Body).Decode(&u); err != nil || resp.StatusCode != 200 {
		t.Fatalf("chat b as team-x: %d %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	counts["b"].requests++
	counts["b"].prompt += u.Usage.Prompt_tokens
	counts["b"].completion += u.Usage.Completion_tokens
	badCode, badBody := s.post("/v1/chat/completions", `{"model":"a","max_tokens":-5,"messages":[{"role":"user","content":"x"}]}`)
	if badCode < 400 {
		t.Fatalf("a request with max_tokens -5: %d %s, want an error", badCode, badBody)
	}

	var rows []activityRow
	eventually(t, "5 rows in /api/activity", func() bool {
		rows = s.activity(t, "limit=1000")
		return len(rows) >= 5
	})
	if len(rows) != 5 {
		t.Fatalf("%d rows, want 5: %+v", len(rows), rows)
	}
	got := map[string]*clientCount{"a": {}, "b": {}}
	for _, r := range rows {
		if r.Status != 200 {
			continue
		}
		c := got[r.Model]
		c.requests++
		c.prompt += r.PromptTokens
		c.completion += r.CompletionTokens
		if r.Duration <= 0 || r.TTFT <= 0 || r.LoadWait > r.QueueWait+1e-9 {
			t.Errorf("row %+v: want a duration, a TTFT, and a load wait within the queue wait", r)
		}
	}
	for m, want := range counts {
		if *got[m] != *want {
			t.Errorf("model %s: the log has %+v, the client counted %+v", m, *got[m], *want)
		}
	}
	if r := rows[0]; r.Model != "a" || r.Status != badCode {
		t.Errorf("newest row %+v, want a's refused request with status %d", r, badCode)
	}
	if r := rows[1]; r.Client != "team-x" || r.Priority != 5 || r.Model != "b" {
		t.Errorf("second row %+v, want b for team-x at priority 5", r)
	}
	if r := rows[4]; r.Model != "a" || r.LoadWait < 0.05 {
		t.Errorf("oldest row %+v, want a's cold request with its ~100 ms load wait", r)
	}

	if errs := s.activity(t, "status=error"); len(errs) != 1 || errs[0].Status != badCode {
		t.Errorf("status=error: %+v, want the one refused request", errs)
	}
	if mine := s.activity(t, "client=team-x&model=b"); len(mine) != 1 {
		t.Errorf("client=team-x&model=b: %d rows, want 1", len(mine))
	}
	if code, body := s.get("/api/activity?limit=5000"); code != 400 || !strings.Contains(body, "limit") {
		t.Errorf("limit=5000: %d %s, want a 400 naming limit", code, body)
	}
	if _, metrics := s.get("/metrics"); !strings.Contains(metrics, `loadout_activity_dropped_total{reason="full"} 0`) {
		t.Errorf("/metrics has no loadout_activity_dropped_total{reason=\"full\"} 0")
	}

	// The rows are in the --db file: a new serve on it shows them.
	s.stop()
	s2 := startServer(t, cfg, "--db", db)
	if again := s2.activity(t, "limit=1000"); len(again) != 5 || again[0].RowID != rows[0].RowID {
		t.Errorf("after a restart: %d rows, want the same 5", len(again))
	}
}

// The web UI's activity table shows requests made before it was opened:
// it loads the recent history from /api/activity, once per request even
// though the live stream may bring the same one.
func TestUI_ActivityHistoryOnOpen(t *testing.T) {
	ctx := browser(t)
	s := startServer(t, writeConfig(t, t.TempDir(), simModels), "--db", filepath.Join(t.TempDir(), "state.db"))
	req, _ := http.NewRequest(http.MethodPost, s.base+"/v1/chat/completions", strings.NewReader(chat("a", false)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Loadout-Client", "before-the-page")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("chat: %v %v", resp, err)
	}
	resp.Body.Close()
	eventually(t, "the request in /api/activity", func() bool { return len(s.activity(t, "client=before-the-page")) == 1 })

	var rows int
	if err := chromedp.Run(ctx,
		chromedp.Navigate(s.base+"/ui/#activity"),
		chromedp.WaitVisible(`#conn[data-conn="live"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`//section[@id="activity"]//td[text()="before-the-page"]`, chromedp.BySearch),
		chromedp.Evaluate(`document.querySelectorAll('#activity tr[data-request]').length`, &rows),
	); err != nil {
		t.Fatalf("history in the activity table: %v", err)
	}
	if rows != 1 {
		t.Errorf("%d activity rows, want the 1 request", rows)
	}
}
