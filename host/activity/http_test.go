package activity

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/proxy"
	"github.com/loadout-dev/loadout/host/router"
)

// noRouter is a proxy.Router for tests that send no model requests.
type noRouter struct{}

func (noRouter) Acquire(context.Context, router.Request) (*router.Grant, error) {
	return nil, &router.Error{Message: "no models here"}
}
func (noRouter) Unload(context.Context, router.UnloadOptions) error { return nil }
func (noRouter) Models() []router.ModelStatus                       { return nil }
func (noRouter) Counters() map[string]router.PolicyCounters         { return nil }

// apiServer serves GET /api/activity from l through the real proxy
// handler.
func apiServer(t *testing.T, l *Log) *httptest.Server {
	t.Helper()
	h, err := proxy.New(proxy.Config{Router: noRouter{}, Models: []proxy.ModelEntry{{ID: "a"}, {ID: "b"}},
		Activity: l, OnRequest: l.Record})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

type page struct {
	Object       string                 `json:"object"`
	Data         []proxy.ActivityRecord `json:"data"`
	HasMore      bool                   `json:"has_more"`
	NextBeforeID int64                  `json:"next_before_id"`
}

func get(t *testing.T, srv *httptest.Server, query string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(srv.URL + "/api/activity?" + query)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func getPage(t *testing.T, srv *httptest.Server, query string) page {
	t.Helper()
	code, b := get(t, srv, query)
	if code != http.StatusOK {
		t.Fatalf("GET /api/activity?%s: %d %s", query, code, b)
	}
	var p page
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("GET /api/activity?%s: %v in %s", query, err, b)
	}
	return p
}

func ids(p page) string {
	var s []string
	for _, r := range p.Data {
		s = append(s, r.ID)
	}
	return strings.Join(s, ",")
}

func TestAPIActivity_FiltersOverHTTP(t *testing.T) {
	l := openLog(t, filepath.Join(t.TempDir(), "state.db"), Options{})
	srv := apiServer(t, l)
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for i, s := range []struct {
		model, client string
		status        int
	}{{"a", "x", 200}, {"b", "x", 404}, {"a", "y", 503}, {"a", "x", 200}, {"b", "y", 499}} {
		l.Record(proxy.RequestSummary{ID: fmt.Sprint("r", i), Time: t0.Add(time.Duration(i) * time.Minute),
			Model: s.model, Client: s.client, Status: s.status, PromptTokens: int64(i)})
	}
	flush(t, l)
	for _, tc := range []struct{ query, want string }{
		{"", "r4,r3,r2,r1,r0"},
		{"model=a", "r3,r2,r0"},
		{"client=y", "r4,r2"},
		{"status=error", "r4,r2,r1"},
		{"status=ok", "r3,r0"},
		{"status=404", "r1"},
		{"model=b&status=error", "r4,r1"},
		{"since=2026-05-01T12:01:00Z&until=2026-05-01T12:03:00Z", "r2,r1"},
		{"since=" + url.QueryEscape("2026-05-01T14:03:00+02:00"), "r4,r3"},
		{"model=nope", ""},
	} {
		p := getPage(t, srv, tc.query)
		if got := ids(p); got != tc.want || p.Object != "list" || p.Data == nil {
			t.Errorf("?%s: got %q (object %q), want %q", tc.query, got, p.Object, tc.want)
		}
	}
}

func TestAPIActivity_PagesWithBeforeID(t *testing.T) {
	l := openLog(t, filepath.Join(t.TempDir(), "state.db"), Options{})
	srv := apiServer(t, l)
	for i := range 7 {
		l.Record(proxy.RequestSummary{ID: fmt.Sprint(i), Time: time.Now(), Model: "a", Status: 200})
	}
	flush(t, l)
	var got []string
	q := "limit=3"
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		p := getPage(t, srv, q)
		got = append(got, ids(p))
		if !p.HasMore {
			if p.NextBeforeID != 0 {
				t.Errorf("last page has next_before_id %d", p.NextBeforeID)
			}
			break
		}
		q = fmt.Sprintf("limit=3&before_id=%d", p.NextBeforeID)
	}
	if s := strings.Join(got, "|"); s != "6,5,4|3,2,1|0" {
		t.Errorf("pages %q, want 6,5,4|3,2,1|0", s)
	}
	// Exactly a page's worth: no empty page after it.
	if p := getPage(t, srv, "limit=7"); p.HasMore || len(p.Data) != 7 {
		t.Errorf("limit=7 of 7: has_more %v, %d rows", p.HasMore, len(p.Data))
	}
}

func TestAPIActivity_BadParametersAre400sNamingThem(t *testing.T) {
	l := openLog(t, filepath.Join(t.TempDir(), "state.db"), Options{})
	srv := apiServer(t, l)
	for _, tc := range []struct{ query, param string }{
		{"limit=0", "limit"},
		{"limit=1001", "limit"},
		{"limit=ten", "limit"},
		{"status=bad", "status"},
		{"status=99", "status"},
		{"since=yesterday", "since"},
		{"until=2026-13-01T00:00:00Z", "until"},
		{"since=2026-05-02T00:00:00Z&until=2026-05-01T00:00:00Z", "until"},
		{"before_id=-1", "before_id"},
		{"model=a&model=b", "model"},
		{"modle=a", "modle"},
	} {
		code, b := get(t, srv, tc.query)
		var e struct {
			Error struct{ Message, Type, Code string } `json:"error"`
		}
		if err := json.Unmarshal(b, &e); err != nil || code != http.StatusBadRequest {
			t.Errorf("?%s: %d %s, want a 400 OpenAI error", tc.query, code, b)
			continue
		}
		if e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, tc.param) {
			t.Errorf("?%s: error %+v does not name %s", tc.query, e.Error, tc.param)
		}
	}
}

func TestAPIActivity_OffIs404(t *testing.T) {
	h, err := proxy.New(proxy.Config{Router: noRouter{}, Models: []proxy.ModelEntry{{ID: "a"}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	if code, b := get(t, srv, ""); code != http.StatusNotFound || !strings.Contains(string(b), "no_activity") {
		t.Errorf("no activity log: %d %s, want 404 no_activity", code, b)
	}
}
