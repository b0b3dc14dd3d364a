package main

import (
	"fmt"
	sdksettings "github.com/loadout-dev/loadout/sdk/settings"
	"slices"
	"strings"
	"testing"
)

// compileFor compiles a matrix whose vars are their own models.
func compileFor(t *testing.T, vars string, sets ...string) (*matrix, error) {
	t.Helper()
	cfg := settings{vars: map[string]string{}}
	known := map[string]bool{} // the host's models: the vars' only
	for _, v := range strings.Fields(vars) {
		cfg.vars[v] = v
		known[v] = true
	}
	for i := 0; i < len(sets); i += 2 {
		path := sdksettings.Join(pathSets, sets[i])
		cfg.sets = append(cfg.sets, setSettings{name: sets[i], expr: sets[i+1], path: path, namePath: path})
	}
	return compile(cfg, known)
}

// listCombos lists every combination as "set:[models]", in order.
func listCombos(m *matrix) []string {
	out := make([]string, len(m.setOf))
	for c := range int32(len(m.setOf)) {
		out[c] = fmt.Sprintf("%s:[%s]", m.sets[m.setOf[c]].name, m.describe(c))
	}
	return out
}

// TestExpand_Order: each set expands to its combinations in expansion
// order (alternatives in source order, products left-major), references
// inline the referenced set, duplicates keep their first place, and the
// matrix lists the sets in settings order.
func TestExpand_Order(t *testing.T) {
	for _, tc := range []struct {
		name string
		sets []string
		want []string
	}{
		{"one var", []string{"s", "a"}, []string{"s:[a]"}},
		{"and", []string{"s", "a & b"}, []string{"s:[a,b]"}},
		{"or", []string{"s", "c | a | b"}, []string{"s:[c]", "s:[a]", "s:[b]"}},
		{"product, left-major", []string{"s", "(a | b) & (c | d)"}, []string{"s:[a,c]", "s:[a,d]", "s:[b,c]", "s:[b,d]"}},
		{"precedence", []string{"s", "a | b & c"}, []string{"s:[a]", "s:[b,c]"}},
		{"a & a is a", []string{"s", "a & a"}, []string{"s:[a]"}},
		{"duplicates keep their first place", []string{"s", "(a | b) & (a | b)"}, []string{"s:[a]", "s:[a,b]", "s:[b]"}},
		{"references, in dependency order", []string{
			"mega", "+with_tts & e",
			"llms", "g | q | m",
			"with_tts", "+llms & v",
		}, []string{
			"mega:[e,g,v]", "mega:[e,q,v]", "mega:[e,m,v]",
			"llms:[g]", "llms:[q]", "llms:[m]",
			"with_tts:[g,v]", "with_tts:[q,v]", "with_tts:[m,v]",
		}},
		{"a combination in two sets belongs to the first", []string{
			"standard", "(g | q) & v",
			"big", "+standard | x",
		}, []string{"standard:[g,v]", "standard:[q,v]", "big:[x]"}},
		{"overlapping references", []string{"base", "a & b", "ext", "t & +base & b"}, []string{"base:[a,b]", "ext:[a,b,t]"}},
		{"pool", []string{"pool", "t | a | b", "all", "+pool & +pool"}, []string{
			"pool:[t]", "pool:[a]", "pool:[b]", "all:[a,t]", "all:[b,t]", "all:[a,b]",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := compileFor(t, "a b c d e g m q t v x", tc.sets...)
			if err != nil {
				t.Fatal(err)
			}
			if got := listCombos(m); !slices.Equal(got, tc.want) {
				t.Errorf("combinations\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

// TestExpand_ManyModels: combinations of more than 64 models take several
// words.
func TestExpand_ManyModels(t *testing.T) {
	var vars, and []string
	for i := range 70 {
		v := fmt.Sprintf("m%02d", i)
		vars = append(vars, v)
		and = append(and, v)
	}
	m, err := compileFor(t, strings.Join(vars, " "), "wide", strings.Join(and, " & "), "two", "m00 & m69 | m64")
	if err != nil {
		t.Fatal(err)
	}
	got := listCombos(m)
	want := []string{"wide:[" + strings.Join(vars, ",") + "]", "two:[m00,m69]", "two:[m64]"}
	if m.words != 2 || !slices.Equal(got, want) {
		t.Errorf("words %d, combinations\n%q\nwant 2 and\n%q", m.words, got, want)
	}
}

// TestExpand_Limit: an expansion past the limit is an error, whether one
// expression or all the sets together pass it, and the error comes before
// the work.
func TestExpand_Limit(t *testing.T) {
	defer func(old int) { maxTermWords = old }(maxTermWords)
	maxTermWords = 100
	vars := "a b c d e f g h i j k l m n o p q r s t"
	ten := "(a | b | c | d | e | f | g | h | i | j)"
	for _, tc := range []struct {
		sets []string
		want string
	}{
		{[]string{"s", ten + " & " + ten}, ""}, // 100 before duplicates are dropped
		{[]string{"s", ten + " & (k | l | m | n | o | p | q | r | s | t) & (a | k)"}, `settings: matrix.sets.s: expands to more than 100 combinations`},
		{[]string{"s", ten + " | " + ten + " | " + ten + " | " + ten + " | " + ten + " | " + ten + " | " + ten + " | " + ten + " | " + ten + " | " + ten + " | a"},
			`settings: matrix.sets.s: expands to more than 100 combinations`},
		{[]string{"s", ten + " & (k | l | m | n | o)", "u", ten + " & (p | q | r | s | t)", "w", "k"},
			`settings: matrix.sets.w: the sets together expand to more than 100 combinations`},
	} {
		_, err := compileFor(t, vars, tc.sets...)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || err.Error() != tc.want) {
			t.Errorf("sets %q: error %v, want %q", tc.sets, err, tc.want)
		}
	}
}

// TestBuildCandidates_Limit: a matrix whose index would pass the memory
// or the work limit is refused.
func TestBuildCandidates_Limit(t *testing.T) {
	pairs := func(n int) (vars, expr string) {
		var vs, groups []string
		for i := range n {
			a, b := fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)
			vs = append(vs, a, b)
			groups = append(groups, "("+a+" | "+b+")")
		}
		return strings.Join(vs, " "), strings.Join(groups, " & ")
	}
	// 2^12 combinations of 12 models out of 24: 589,824 pairs.
	vars, expr := pairs(12)
	if _, err := compileFor(t, vars, "s", expr); err != nil {
		t.Fatal(err)
	}
	// 2^14 of 14: 3,211,264 pairs, within the limit; 2^15 of 15 is not.
	vars, expr = pairs(14)
	if _, err := compileFor(t, vars, "s", expr); err != nil {
		t.Fatal(err)
	}
	vars, expr = pairs(15)
	_, err := compileFor(t, vars, "s", expr)
	want := "settings: matrix: matrix too large to index: its 32768 combinations of 30 models need 4 MiB and hold 7372800 model pairs (limits: 16 MiB, 4000000 pairs); simplify the sets"
	if err == nil || err.Error() != want {
		t.Errorf("error %v,\nwant %s", err, want)
	}
	defer func(old int) { maxIndexWords = old }(maxIndexWords)
	maxIndexWords = 1 << 14
	vars, expr = pairs(12)
	_, err = compileFor(t, vars, "s", expr)
	want = "settings: matrix: matrix too large to index: its 4096 combinations of 24 models need 339 KiB and hold 589824 model pairs (limits: 128 KiB, 4000000 pairs)"
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("with a 128 KiB limit: error %v,\nwant %s…", err, want)
	}
}
