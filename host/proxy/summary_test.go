package proxy

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/events"
)

// The window counts what ended in its last five minutes and forgets the
// rest: a request 299 s old counts, one 300 s old does not, and a bucket
// reused a lap later starts from zero.
func TestRecentWindow_ForgetsAfterFiveMinutes(t *testing.T) {
	var w recentWindow
	t0 := time.Unix(1_700_000_000, 0)
	w.add(t0, 200, 10)
	w.add(t0.Add(500*time.Millisecond), 502, 0)
	w.add(t0.Add(time.Second), 499, 0)
	if r, e, tok := w.totals(t0.Add(299 * time.Second)); r != 3 || e != 2 || tok != 10 {
		t.Fatalf("at +299 s: %d requests, %d errors, %d tokens; want 3, 2, 10", r, e, tok)
	}
	if r, e, tok := w.totals(t0.Add(300 * time.Second)); r != 1 || e != 1 || tok != 0 {
		t.Fatalf("at +300 s: %d requests, %d errors, %d tokens; want 1, 1, 0 (t0's second has left)", r, e, tok)
	}
	w.add(t0.Add(300*time.Second), 200, 5) // t0's bucket, a lap later
	if r, _, tok := w.totals(t0.Add(300 * time.Second)); r != 2 || tok != 5 {
		t.Fatalf("after reuse: %d requests, %d tokens; want 2, 5", r, tok)
	}
}

// GET /api/summary counts the model requests of the last five minutes,
// their errors (400 and above) and completion tokens, as rates per second
// over the window.
func TestSummary_CountsRequestsErrorsTokens(t *testing.T) {
	e := newEnv(t, envOpts{})
	for range 2 {
		if resp, b := e.do(request{path: "/v1/chat/completions", body: `{"model":"a","stream":true,"messages":[]}`}); resp.StatusCode != 200 {
			t.Fatalf("a: %d %s", resp.StatusCode, b)
		}
	}
	if resp, _ := e.do(request{path: "/v1/chat/completions", body: `{"model":"broken","messages":[]}`}); resp.StatusCode < 500 {
		t.Fatalf("broken: %d, want a 5xx", resp.StatusCode)
	}
	resp, b := e.do(request{method: http.MethodGet, path: "/api/summary"})
	if resp.StatusCode != 200 {
		t.Fatalf("summary: %d %s", resp.StatusCode, b)
	}
	var sum apiSummary
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	if sum.WindowSeconds != 300 || sum.Requests != 3 || sum.Errors != 1 || sum.CompletionTokens <= 0 {
		t.Fatalf("summary %+v: want window 300 s, 3 requests, 1 error, some tokens", sum)
	}
	if sum.RequestsPerSecond != 3.0/300 || sum.TokensPerSecond != float64(sum.CompletionTokens)/300 {
		t.Fatalf("rates %+v: want counts / 300 s", sum)
	}
	if sum.Jobs != nil {
		t.Fatalf("jobs %v with the job queue off", sum.Jobs)
	}
}

// GET /api/events/history gives the swap timeline at first paint: the
// events of the named types, oldest first, with their times, and the id
// to resume the stream after; bad parameters are 400s that say what to
// send.
func TestEventsHistory_SwapsWithTimesAndResumeID(t *testing.T) {
	e := newEnv(t, envOpts{events: true})
	before := time.Now()
	for _, m := range []string{"a", "b", "a"} {
		if resp, b := e.do(request{path: "/v1/chat/completions", body: `{"model":"` + m + `","messages":[]}`}); resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", m, resp.StatusCode, b)
		}
	}
	resp, b := e.do(request{method: http.MethodGet, path: "/api/events/history?type=swap_start,eviction&limit=1000"})
	if resp.StatusCode != 200 {
		t.Fatalf("history: %d %s", resp.StatusCode, b)
	}
	var h struct {
		Object string `json:"object"`
		LastID uint64 `json:"last_id"`
		Data   []struct {
			ID   uint64          `json:"id"`
			Type string          `json:"type"`
			Time time.Time       `json:"time"`
			Data json.RawMessage `json:"data"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &h); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for i, ev := range h.Data {
		kinds = append(kinds, ev.Type)
		if ev.Time.Before(before) || ev.Time.After(time.Now()) || (i > 0 && ev.ID <= h.Data[i-1].ID) {
			t.Fatalf("event %d: %+v (times from %v, ids rising)", i, ev, before)
		}
	}
	// a's swap; b's swap and a's eviction; a's swap and b's eviction (the
	// eviction and its swap in either order).
	if h.Object != "list" || len(kinds) != 5 || kinds[0] != events.TypeSwapStart || strings.Count(strings.Join(kinds, ","), "eviction") != 2 {
		t.Fatalf("history %s: want 3 swap_start and 2 eviction", b)
	}
	if !bytes.Contains(h.Data[len(h.Data)-1].Data, []byte(`"a"`)) && !bytes.Contains(h.Data[len(h.Data)-2].Data, []byte(`"a"`)) {
		t.Errorf("the last swap is not a's: %s", b)
	}
	if h.LastID != e.bus.LastID() || h.LastID < h.Data[len(h.Data)-1].ID {
		t.Errorf("last_id %d, bus at %d", h.LastID, e.bus.LastID())
	}

	for _, bad := range []struct{ query, code string }{
		{"", "invalid_type"},
		{"?type=swap_start&limit=0", "invalid_limit"},
		{"?type=swap_start&limit=1001", "invalid_limit"},
		{"?type=swap_start&limit=x", "invalid_limit"},
		{"?type=evictions", "invalid_type"}, // a typo is not "none happened"
		{"?type=swap_start&bogus=1", "unknown_parameter"},
		{"?type=model&type=bogus", "invalid_type"}, // the second was ignored
		{"?type=model&limit=5&limit=x", "invalid_limit"},
	} {
		resp, b := e.do(request{method: http.MethodGet, path: "/api/events/history" + bad.query})
		if resp.StatusCode != 400 {
			t.Fatalf("%q: %d %s, want 400", bad.query, resp.StatusCode, b)
		}
		if oe := openAIError(t, b); oe.Code != bad.code {
			t.Errorf("%q: %+v, want code %s", bad.query, oe, bad.code)
		}
	}
}

// Browsers ask every site for /favicon.ico without credentials: it is
// served (the UI's embedded icon, also linked from its page) with API
// keys configured, where every other unlisted path is a 401.
func TestUI_FaviconIsPublic(t *testing.T) {
	e := newEnv(t, envOpts{apiKeys: []string{"k"}})
	for _, path := range []string{"/favicon.ico", "/ui/favicon.ico"} {
		resp, b := e.do(request{method: http.MethodGet, path: path})
		if resp.StatusCode != 200 || !bytes.HasPrefix(b, []byte{0, 0, 1, 0}) {
			t.Fatalf("%s: %d, %d bytes starting %q; want 200 and an ICO", path, resp.StatusCode, len(b), b[:min(len(b), 4)])
		}
	}
	resp, b := e.do(request{method: http.MethodGet, path: "/ui/"})
	if resp.StatusCode != 200 || !bytes.Contains(b, []byte(`<link rel="icon" href="favicon.ico"`)) {
		t.Fatalf("/ui/: %d, no icon link:\n%s", resp.StatusCode, b)
	}
}
