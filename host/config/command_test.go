package config

import (
	"reflect"
	"testing"

	"github.com/loadout-dev/loadout/plugins"
)

// TestSplitCommand_Table: the configuration's commands split as the cmd
// backend runs them (google/shlex, llama-swap's splitter): '#' at the
// start of a word begins a comment, a quoted "#" does not; "\n" inside
// double quotes is a backslash and an n.
func TestSplitCommand_Table(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr string
	}{
		{in: "llama-server --port 8080", want: []string{"llama-server", "--port", "8080"}},
		{in: "  a\t b \n c  ", want: []string{"a", "b", "c"}},
		{in: `a 'b c' "d e"`, want: []string{"a", "b c", "d e"}},
		{in: `a 'x\y' "q\"r\\s\$t\z"`, want: []string{"a", `x\y`, `q"r\s$tz`}}, // shlex drops the \ of \z
		{in: `a b\ c \'d`, want: []string{"a", "b c", "'d"}},
		{in: `a ''`, want: []string{"a", ""}},
		{in: `--samplers "top_k;top_p"x`, want: []string{"--samplers", "top_k;top_px"}},
		{in: `a#b # c`, want: []string{"a#b"}}, // # starting a word comments out the rest (shlex, as llama-swap)
		{in: `--prompt #hello`, want: []string{"--prompt"}},
		{in: `--prompt "#hello" '#x'`, want: []string{"--prompt", "#hello", "#x"}},
		{in: `x "a\nb"`, want: []string{"x", `anb`}},
		{in: "x \"a\nb\"", want: []string{"x", "a\nb"}},
		{in: "", wantErr: "empty command"},
		{in: "   ", wantErr: "empty command"},
		{in: `a 'b`, wantErr: "unterminated quote"},
		{in: `a "b`, wantErr: "unterminated quote"},
		{in: `a \`, wantErr: "trailing backslash"},
	}
	for _, tt := range tests {
		got, err := SplitCommand(tt.in)
		// One splitter: the cmd backend runs what plugins.SplitCommand
		// returns, and config check accepts what SplitCommand does.
		if pgot, perr := plugins.SplitCommand(tt.in); !reflect.DeepEqual(pgot, got) || (perr == nil) != (err == nil) {
			t.Errorf("SplitCommand(%q) = %q, %v; the backend's splitter gives %q, %v", tt.in, got, err, pgot, perr)
		}
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("SplitCommand(%q) = %q, %v; want error %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("SplitCommand(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestFoldCommand_Table(t *testing.T) {
	tests := []struct{ in, want string }{
		{"a b", "a b"},
		{"a\n  b\n\n c\n", "a b c"},
		{"a \\\n  --x 1 \\\n  --y 2", "a --x 1 --y 2"},
		{stripComments("# head\na\n  # indented comment\nb # not a comment\n"), "a b # not a comment"},
	}
	for _, tt := range tests {
		if got := foldCommand(tt.in); got != tt.want {
			t.Errorf("foldCommand(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
