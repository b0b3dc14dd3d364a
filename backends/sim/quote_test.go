package sim

import (
	"slices"
	"testing"

	"github.com/google/shlex"
)

func TestShellQuote_RoundTrips(t *testing.T) {
	words := []string{"/usr/bin/loadout", "sim-server", "--model", "my model", "it's", `a"b`, `back\slash`, "", "${PORT}", "x=1,2"}
	quoted := ""
	for _, w := range words {
		quoted += shellQuote(w) + " "
	}
	got, err := shlex.Split(quoted)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, words) {
		t.Errorf("shlex.Split(%q) = %q, want %q", quoted, got, words)
	}
}
