package settings

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPath_JoinSplit: keys that are plain names join with dots, others
// are quoted in brackets, and Split reads back what Join and Index wrote.
func TestPath_JoinSplit(t *testing.T) {
	cases := []struct {
		path string
		want []Segment
	}{
		{Join(Join("", "matrix"), "vars") + ".llama-70b", []Segment{{Key: "matrix"}, {Key: "vars"}, {Key: "llama-70b"}}},
		{Index(Join(Join("", "groups"), "chat"), 1) + "", []Segment{{Key: "groups"}, {Key: "chat"}, {Index: 1, IsIndex: true}}},
		{Join(Join("", "fifo"), "llama-3.1: 8b"), []Segment{{Key: "fifo"}, {Key: "llama-3.1: 8b"}}},
		{Join(Join("", "groups"), "(default)"), []Segment{{Key: "groups"}, {Key: "(default)"}}},
		{Join("", ""), []Segment{{Key: ""}}},
		{"$", nil},
		{"", nil},
	}
	for _, c := range cases {
		got, err := Split(c.path)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("Split(%q) = %v, %v; want %v", c.path, got, err, c.want)
		}
	}
	if got := Join(Join("", "groups"), "a.b"); got != `groups["a.b"]` {
		t.Errorf("Join of a dotted key = %s", got)
	}
	for _, bad := range []string{"a..b", "a[", `a["x`, "a[-1]", ".a"} {
		if _, err := Split(bad); err == nil {
			t.Errorf("Split(%q) succeeded", bad)
		}
	}
}

// TestError_FormatParse: the text of an *Error, however the host wraps it,
// parses back to the same path and message: the rule is written once.
func TestError_FormatParse(t *testing.T) {
	errs := []*Error{
		{Path: "matrix.vars.llama-70b", Message: "var ids are 1 to 32 characters"},
		{Path: `groups["a: b"].members[1]`, Message: `model "x" is in two groups: "a" and "b"`},
		{Path: "", Message: "want an object, got [1]"},
		{Path: "max_wait", Message: "settings: nested: text"},
	}
	for _, e := range errs {
		for _, wrap := range []string{"%s", "policy builtin:matrix: init: %s", "a\npolicy p: init: %s\nmore"} {
			text := fmt.Sprintf(wrap, e.Error())
			got := Parse(text)
			if len(got) != 1 || *got[0] != *e {
				t.Errorf("Parse(%q) = %v, want %v", text, got, e)
			}
		}
	}
	joined := errors.Join(errs[0], errs[1])
	if got := Parse("init: " + joined.Error()); len(got) != 2 || *got[1] != *errs[1] {
		t.Errorf("Parse of joined errors = %v", got)
	}
	for _, none := range []string{"matrix settings are bad", "no settings: here", "init: settings: a b: c", "settings: x"} {
		if got := Parse(none); got != nil {
			t.Errorf("Parse(%q) = %v, want none", none, got)
		}
	}
	if Find(fmt.Errorf("wrapped: %w", errs[0])) != errs[0] {
		t.Error("Find does not unwrap")
	}
}

// TestObject_Strict: an unknown key is an error at that key, naming the
// known keys; a key set twice is an error; paths follow the walk.
func TestObject_Strict(t *testing.T) {
	v, err := Decode([]byte(`{"fifo": {"priority": {"a": 1}}, "max_qeue": 3}`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = v.Object("fifo", "max_queue", "max_wait")
	if got, want := fmt.Sprint(err), `settings: max_qeue: unknown setting "max_qeue" (known: fifo, max_queue, max_wait)`; got != want {
		t.Errorf("err = %s, want %s", got, want)
	}
	_, err = Decode([]byte(`{"a": {"b": 1, "b": 2}}`))
	if got, want := fmt.Sprint(err), `settings: a.b: "b" is set twice`; got != want {
		t.Errorf("err = %s, want %s", got, want)
	}
	v, _ = Decode([]byte(`{"groups": {"chat": {"members": ["a", 2]}}}`))
	top, _ := v.Object("groups")
	groups, _ := top.Get("groups").Object()
	chat, _ := groups.Get("chat").Object("members")
	items, _ := chat.Get("members").List()
	_, err = items[1].String()
	if got, want := fmt.Sprint(err), `settings: groups.chat.members[1]: want a string, got 2`; got != want {
		t.Errorf("err = %s, want %s", got, want)
	}
	if keys := groups.Keys(); !reflect.DeepEqual(keys, []string{"chat"}) {
		t.Errorf("Keys = %v", keys)
	}
	for _, raw := range []string{"", " ", "null"} {
		v, err := Decode([]byte(raw))
		if err != nil || !v.IsNull() {
			t.Errorf("Decode(%q) = %v, %v", raw, v, err)
		}
	}
	if _, err := Decode([]byte(`{} {}`)); err == nil {
		t.Error("trailing data accepted")
	}
	if _, err := Decode([]byte(`{"a":`)); err == nil || Find(err) == nil {
		t.Errorf("bad JSON: %v, want a settings error", err)
	}
}

// TestValue_OneOf: a string from a fixed set reads as its index; any other
// string, and a value of another kind, is an error naming the path and
// every allowed string.
func TestValue_OneOf(t *testing.T) {
	v, err := Decode([]byte(`{"order": "queued_wait", "bad": "lifo", "num": 3, "solo": "x"}`))
	if err != nil {
		t.Fatal(err)
	}
	top, _ := v.Object("order", "bad", "num", "solo")
	if i, err := top.Get("order").OneOf("arrival", "queued_wait"); i != 1 || err != nil {
		t.Errorf("OneOf(order) = %d, %v, want 1", i, err)
	}
	for _, c := range []struct {
		key   string
		names []string
		want  string
	}{
		{"bad", []string{"arrival", "queued_wait"}, `settings: bad: want arrival or queued_wait, got "lifo"`},
		{"bad", []string{"a", "b", "c"}, `settings: bad: want a, b or c, got "lifo"`},
		{"num", []string{"a", "b"}, `settings: num: want a or b, got 3`},
		{"solo", []string{"y"}, `settings: solo: want y, got "x"`},
	} {
		i, err := top.Get(c.key).OneOf(c.names...)
		if got := fmt.Sprint(err); i != -1 || got != c.want || Find(err) == nil {
			t.Errorf("OneOf(%s, %v) = %d, %s, want -1, %s", c.key, c.names, i, got, c.want)
		}
	}
}

// TestUnits: durations as strings or seconds; sizes as strings or bytes.
func TestUnits(t *testing.T) {
	durs := map[string]time.Duration{`"30s"`: 30 * time.Second, `1.5`: 1500 * time.Millisecond, `0`: 0, `"1m30s"`: 90 * time.Second}
	for raw, want := range durs {
		var d Duration
		if err := d.UnmarshalJSON([]byte(raw)); err != nil || time.Duration(d) != want {
			t.Errorf("Duration %s = %v, %v; want %v", raw, d, err, want)
		}
	}
	for _, raw := range []string{`"-1s"`, `-1`, `"soon"`, `true`} {
		var d Duration
		if err := d.UnmarshalJSON([]byte(raw)); err == nil {
			t.Errorf("Duration %s accepted", raw)
		}
	}
	sizes := map[string]int64{`"512MiB"`: 512 << 20, `4096`: 4096, `"1.5GiB"`: 3 << 29, `"1.5GB"`: 1_500_000_000, `"24G"`: 24 << 30, `"0.1K"`: 102}
	for raw, want := range sizes {
		var s Size
		if err := s.UnmarshalJSON([]byte(raw)); err != nil || int64(s) != want {
			t.Errorf("Size %s = %d, %v; want %d", raw, s, err, want)
		}
	}
	for _, raw := range []string{`"-1"`, `-1`, `"1.5"`, `"1.5.1G"`, `"3 parsecs"`, `1.5`, `"9999999999999T"`, `".5G"`, `"5.G"`} {
		var s Size
		if err := s.UnmarshalJSON([]byte(raw)); err == nil {
			t.Errorf("Size %s accepted as %d", raw, s)
		}
	}
}

// FuzzParse: Parse never panics, and whatever it finds formats back to a
// text it finds again unchanged.
func FuzzParse(f *testing.F) {
	f.Add("policy p: init: settings: a.b[1][\"c d\"]: msg")
	f.Add("settings: $: x")
	f.Fuzz(func(t *testing.T, text string) {
		for _, e := range Parse(text) {
			again := Parse(e.Error())
			if len(again) != 1 || *again[0] != *e {
				t.Fatalf("%q: Parse(Format(%v)) = %v", text, e, again)
			}
		}
	})
}

// formatSizeFloat is FormatSize as it was written first, in floats: the
// reference its integer arithmetic must agree with.
func formatSizeFloat(n uint64, sep string) string {
	const units = "KMGTPE"
	if n < 1024 {
		return strconv.FormatUint(n, 10) + sep + "B"
	}
	v, u := float64(n)/1024, 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	return strings.TrimSuffix(strconv.FormatFloat(v, 'f', 1, 64), ".0") + sep + units[u:u+1] + "iB"
}

// FormatSize writes what FormatFloat's rounding writes, halfway cases
// (to even), carries into the next whole number and unit edges included.
func TestFormatSize_AgreesWithFloatFormatting(t *testing.T) {
	var ns []uint64
	for s := uint(10); s <= 60; s += 10 {
		u := uint64(1) << s
		for _, k := range []uint64{1, 2, 12, 1023, 1024} {
			for _, d := range []uint64{0, 1, u/20 - 1, u / 20, u/20 + 1, u / 10, 3 * u / 20, u / 4, u / 2, 3 * u / 4, u - 1} {
				ns = append(ns, k*u+d, k*u-d)
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		ns = append(ns, rng.Uint64()>>rng.UintN(64))
	}
	ns = append(ns, 1<<53-1, 1<<53, 1<<53+1, math.MaxUint64)
	for _, n := range ns {
		if got, want := FormatSize(n, " "), formatSizeFloat(n, " "); got != want {
			t.Fatalf("FormatSize(%d) = %q; want %q", n, got, want)
		}
	}
}
