package main

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestParse_Precedence: "&" binds tighter than "|", parentheses group,
// operators are n-ary, references and names parse as atoms.
func TestParse_Precedence(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{"a", "a"},
		{"a & b", "(a & b)"},
		{"a | b", "(a | b)"},
		{"a | b & c", "(a | (b & c))"},
		{"a & b | c", "((a & b) | c)"},
		{"(a | b) & c", "((a | b) & c)"},
		{"a & (b | c)", "(a & (b | c))"},
		{"a & b & c", "(a & b & c)"},
		{"a | b | c & d | e", "(a | b | (c & d) | e)"},
		{"(a | b) & (c | d)", "((a | b) & (c | d))"},
		{"((a))", "a"},
		{"a&b|c", "((a & b) | c)"},
		{"\n\ta |\r\n b ", "(a | b)"},
		{"+llms & v", "(+llms & v)"},
		{"+with_tts | +my-set.v2", "(+with_tts | +my-set.v2)"},
		{"model-1.v2 & x_y", "(model-1.v2 & x_y)"},
		{"(g | q | m) & v", "((g | q | m) & v)"},
	} {
		n, err := parse(tc.expr)
		if err != nil {
			t.Errorf("parse(%q): %v", tc.expr, err)
			continue
		}
		if got := n.String(); got != tc.want {
			t.Errorf("parse(%q) = %s, want %s", tc.expr, got, tc.want)
		}
	}
}

// TestParse_Errors: syntax errors give the column (1-based, in
// characters) and what was expected.
func TestParse_Errors(t *testing.T) {
	deep := strings.Repeat("(", maxDepth+1) + "a" + strings.Repeat(")", maxDepth+1)
	for _, tc := range []struct{ expr, want string }{
		{"", "empty expression"},
		{" \t\n", "empty expression"},
		{"(", "column 2: expected identifier, got end of expression"},
		{")", `column 1: expected identifier, got ")"`},
		{"a)", `column 2: unmatched ")"`},
		{"(a))", `column 4: unmatched ")"`},
		{"a b", `column 3: expected "&", "|" or end of expression, got "b"`},
		{"a +b", `column 3: expected "&", "|" or end of expression, got "+b"`},
		{"a (b)", `column 3: expected "&", "|" or end of expression, got "("`},
		{"a &", "column 4: expected identifier, got end of expression"},
		{"a & | b", `column 5: expected identifier, got "|"`},
		{"& a", `column 1: expected identifier, got "&"`},
		{"(g | q) & ()", `column 12: expected identifier, got ")"`},
		{"(a | b", `column 7: expected ")" to close "(" at column 1, got end of expression`},
		{"a & (b | (c & d) e", `column 18: expected ")" to close "(" at column 5, got "e"`},
		{"+", `column 1: expected set name after "+"`},
		{"a | + b", `column 5: expected set name after "+"`},
		{"a # b", "column 3: unexpected character '#'"},
		{"a | é", "column 5: unexpected character 'é'"},
		{"a | \x00", `column 5: unexpected character '\x00'`},
		{deep, "column 101: parentheses nested deeper than 100"},
	} {
		_, err := parse(tc.expr)
		if err == nil || err.Error() != tc.want {
			t.Errorf("parse(%q): error %v, want %s", tc.expr, err, tc.want)
		}
	}
	ok := strings.Repeat("(", maxDepth) + "a" + strings.Repeat(")", maxDepth)
	if _, err := parse(ok); err != nil {
		t.Errorf("%d nested parentheses: %v", maxDepth, err)
	}
}

// FuzzParse: the parser never panics or hangs; an error names a column
// inside the expression (or one past its end); what it accepts prints back
// to an expression that parses to the same tree.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"a", "(g | q | m) & v", "+llms & v | (a & (b | c))", "a b", "((", "a |", "+", "é", "a)",
		strings.Repeat("(", 120) + "a", "x_1.y-2 & +s", "\t\n",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		n, err := parse(expr)
		if err != nil {
			var ee *exprError
			if errors.As(err, &ee) {
				if ee.col < 1 || ee.col > utf8.RuneCountInString(expr)+1 {
					t.Fatalf("parse(%q): column %d outside the expression", expr, ee.col)
				}
			} else if err.Error() != "empty expression" {
				t.Fatalf("parse(%q): unexpected error %v", expr, err)
			}
			return
		}
		printed := n.String()
		if n.kind == nodeAnd || n.kind == nodeOr {
			printed = printed[1 : len(printed)-1] // no deeper than expr
		}
		again, err := parse(printed)
		if err != nil {
			t.Fatalf("parse(%q) printed %q, which does not parse: %v", expr, printed, err)
		}
		if again.String() != n.String() {
			t.Fatalf("parse(%q) = %s, printed %q, which parses to %s", expr, n, printed, again)
		}
	})
}
