package config

import (
	"encoding/json"
	"strings"
	"testing"
)

// WithSetting replaces a member in place, adds a missing one last, makes
// the objects on its way, and keeps every other setting in its order.
func TestPolicy_WithSetting(t *testing.T) {
	for _, tc := range []struct {
		settings, path, value, want string
	}{
		{"", "decay", "0.5", `{"decay":0.5}`},
		{`{"rate":1,"decay":0.9,"margin":"1GiB"}`, "decay", "0.5", `{"rate":1,"decay":0.5,"margin":"1GiB"}`},
		{`{"rate":1}`, "max_wait", `"30s"`, `{"rate":1,"max_wait":"30s"}`},
		{`{"max_queue":4}`, "fifo.priority.m1", "10", `{"max_queue":4,"fifo":{"priority":{"m1":10}}}`},
		{`{"fifo":{"priority":{"a":1,"b":2}}}`, `fifo.priority["b.c"]`, "3", `{"fifo":{"priority":{"a":1,"b":2,"b.c":3}}}`},
	} {
		p, err := Policy{Use: "adaptive", Settings: json.RawMessage(tc.settings)}.WithSetting(tc.path, json.RawMessage(tc.value))
		if err != nil {
			t.Errorf("%s into %s: %v", tc.path, tc.settings, err)
			continue
		}
		if string(p.Settings) != tc.want {
			t.Errorf("%s=%s into %s: %s, want %s", tc.path, tc.value, tc.settings, p.Settings, tc.want)
		}
	}
	for _, tc := range []struct{ settings, path, want string }{
		{`{}`, "groups.a.members[1]", "list item"},
		{`{"decay":0.5}`, "decay.x", "decay: not a JSON object"},
		{`{}`, "a..b", "path"},
		{`{}`, "", "name a key"},
	} {
		_, err := Policy{Settings: json.RawMessage(tc.settings)}.WithSetting(tc.path, json.RawMessage("1"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s into %s: error %v, want one saying %q", tc.path, tc.settings, err, tc.want)
		}
	}
}
