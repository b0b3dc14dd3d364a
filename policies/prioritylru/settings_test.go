package main

import (
	"strings"
	"testing"
)

// FuzzParseSettings: any settings either parse or fail with an error that
// names the problem; none panics. A margin given as a size string parses
// the same on its own.
//
//	go test ./policies/prioritylru -run '^$' -fuzz FuzzParseSettings -fuzztime 30s
func FuzzParseSettings(f *testing.F) {
	for _, tc := range goodSettings {
		f.Add(tc.settings)
	}
	for _, tc := range badSettings {
		f.Add(tc.settings)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		st, err := parseSettings([]byte(raw))
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("settings %q: empty error", raw)
			}
			return
		}
		if strings.Contains(raw, `"margin"`) && st.Margin == 0 && !strings.Contains(raw, "0") {
			t.Fatalf("settings %q parsed with a zero margin", raw)
		}
	})
}
