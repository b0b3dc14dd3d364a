package proxy

import (
	"net/url"
	"testing"
)

// parseActivityFilter never panics, and what it accepts is in range.
func FuzzParseActivityFilter(f *testing.F) {
	for _, q := range []string{"", "limit=10&before_id=5", "status=error&model=a", "status=404",
		"since=2026-01-02T03:04:05Z&until=2026-01-03T00:00:00%2B02:00", "limit=0", "status=ok&client=x&x=1"} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		flt, e := parseActivityFilter(q)
		if e != nil {
			if e.status != 400 || e.msg == "" {
				t.Fatalf("%q: error %+v, want a 400 with a message", raw, e)
			}
			return
		}
		if flt.Limit < 1 || flt.Limit > MaxActivityLimit || flt.BeforeID < 0 ||
			(flt.MaxStatus != 0 && flt.MaxStatus < flt.MinStatus) ||
			(!flt.Since.IsZero() && !flt.Until.IsZero() && !flt.Until.After(flt.Since)) {
			t.Fatalf("%q: accepted %+v", raw, flt)
		}
	})
}
