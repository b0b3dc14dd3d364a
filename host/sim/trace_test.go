package sim

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

func TestReadTrace_RoundTrip(t *testing.T) {
	in := []Request{
		{Arrival: 0, Model: "a", PromptTokens: 10, OutputTokens: 5},
		{Arrival: 0.5, Model: "b, with a comma", PromptTokens: 0, OutputTokens: 100, Priority: -3, Client: "ci"},
		{Arrival: 0.5, Model: "a", PromptTokens: 7, OutputTokens: 1, Priority: 9},
	}
	var b bytes.Buffer
	w := NewTraceWriter(&b)
	for _, q := range in {
		if err := w.Write(q); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	out, err := ReadTrace("t.csv", &b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", out, in)
	}
}

func TestReadTrace_MinimalColumnsInAnyOrder(t *testing.T) {
	out, err := ReadTrace("t.csv", strings.NewReader("model,output_tokens,arrival_s,prompt_tokens\r\nx,3,1.25,2\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []Request{{Arrival: 1.25, Model: "x", PromptTokens: 2, OutputTokens: 3}}; !reflect.DeepEqual(out, want) {
		t.Fatalf("got %+v, want %+v", out, want)
	}
}

// Columns outside the format are skipped and named, a byte order mark
// before the header is dropped, whole token counts written as floats are
// read, and each request keeps its line in the file across blank lines
// and quoted line breaks.
func TestParseTrace_WhatOtherToolsWrite(t *testing.T) {
	src := "\ufeffid,arrival_s,model,prompt_tokens,output_tokens,note\n" +
		"r1,0.5,a,12.0,3,\n" +
		"\n" +
		"r2,1,b,4,1e2,\"two\nlines\"\n" +
		"r3,2,a,0,0,x\n"
	tr, err := ParseTrace("t.csv", strings.NewReader(src))
	if err != nil {
		t.Fatal(err)
	}
	want := []Request{{Arrival: 0.5, Model: "a", PromptTokens: 12, OutputTokens: 3},
		{Arrival: 1, Model: "b", PromptTokens: 4, OutputTokens: 100}, {Arrival: 2, Model: "a"}}
	if !reflect.DeepEqual(tr.Requests, want) {
		t.Errorf("requests %+v, want %+v", tr.Requests, want)
	}
	if !reflect.DeepEqual(tr.Lines, []int{2, 4, 6}) || !reflect.DeepEqual(tr.Ignored, []string{"id", "note"}) {
		t.Errorf("lines %v, ignored %q; want [2 4 6] and [id note]", tr.Lines, tr.Ignored)
	}
}

// A bad line is an error naming the file, the line and the column; nothing
// is returned with it.
// An arrival written -0 is 0: nothing downstream prints "-0 s".
func TestReadTrace_NegativeZero(t *testing.T) {
	reqs, err := ReadTrace("t.csv", strings.NewReader("arrival_s,model,prompt_tokens,output_tokens\n-0,a,1,1\n-0.0,a,1,1\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range reqs {
		if math.Signbit(q.Arrival) {
			t.Errorf("arrival %v keeps its sign", q.Arrival)
		}
	}
}

func TestReadTrace_BadInput(t *testing.T) {
	const head = "arrival_s,model,prompt_tokens,output_tokens\n"
	cases := []struct{ name, src, want string }{
		{"empty file", "", "t.csv:1: empty file"},
		{"missing column", "arrival_s,model,prompt_tokens\n", "t.csv:1: output_tokens: required column missing"},
		{"column in capitals", "ARRIVAL_S,model,prompt_tokens,output_tokens\n", "the header's other columns: ARRIVAL_S (names are case-sensitive)"},
		{"column twice", head[:len(head)-1] + ",model\n", "t.csv:1: model: column given twice"},
		{"fractional tokens", head + "0,a,1.5,1\n", "t.csv:2: prompt_tokens: want a token count, a whole number"},
		{"too many tokens", head + "0,a,1,1e12\n", "t.csv:2: output_tokens: want a token count, a whole number from 0 to 10000000"},
		{"milliseconds", head + "0,a,1,1\n100000000.5,a,1,1\n", "t.csv:3: arrival_s: 1.000000005e+08 is more than 1e+08 s after the first request"},
		{"arrival not a number", head + "0,a,1,1\nsoon,a,1,1\n", "t.csv:3: arrival_s: want seconds"},
		{"arrival going back", head + "2,a,1,1\n1,a,1,1\n", "t.csv:3: arrival_s: 1 is earlier than the line before (2)"},
		{"negative tokens", head + "0,a,-1,1\n", "t.csv:2: prompt_tokens: want a token count, a whole number from 0"},
		{"empty model", head + "0, ,1,1\n", "t.csv:2: model: empty"},
		{"short line", head + "0,a,1\n", "t.csv:2: wrong number of fields: the header has 4 columns"},
		{"bare quote", head + "0,a\"b,1,1\n", `t.csv:2: bare " in non-quoted-field (at character 4)`},
		{"JSON lines", `{"arrival_s": 0, "model": "a"}` + "\n", "a trace is CSV whose first line is its header, e.g. arrival_s,model,prompt_tokens,output_tokens"},
		{"priority out of range", "arrival_s,model,prompt_tokens,output_tokens,priority\n0,a,1,1,-99999999999\n", "t.csv:2: priority: want an integer from -2147483648 to 2147483647"},
		{"bad priority", "arrival_s,model,prompt_tokens,output_tokens,priority\n0,a,1,1,high\n", "t.csv:2: priority: want an integer"},
	}
	for _, tc := range cases {
		out, err := ReadTrace("t.csv", strings.NewReader(tc.src))
		var te *TraceError
		if !errors.As(err, &te) || !strings.Contains(err.Error(), tc.want) || out != nil {
			t.Errorf("%s: got %v, %v; want an error containing %q", tc.name, out, err, tc.want)
		}
	}
}

// FuzzReadTrace: any input gives requests or a *TraceError, never a panic,
// and what is read writes back to the same requests.
func FuzzReadTrace(f *testing.F) {
	f.Add("arrival_s,model,prompt_tokens,output_tokens\n0,a,1,2\n1.5,b,3,4\n")
	f.Add("model,arrival_s,output_tokens,prompt_tokens,client,priority\nx,0,1,1,c,2\n")
	f.Fuzz(func(t *testing.T, src string) {
		reqs, err := ReadTrace("f.csv", strings.NewReader(src))
		if err != nil {
			return
		}
		var b bytes.Buffer
		w := NewTraceWriter(&b)
		for _, q := range reqs {
			q.Arrival = float64(int64(q.Arrival*1000)) / 1000 // the writer keeps milliseconds
			_ = w.Write(q)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadTrace("again.csv", &b); err != nil {
			t.Fatalf("written back, it does not read: %v", err)
		}
	})
}

func seq(models ...string) []Request {
	out := make([]Request, len(models))
	for i, m := range models {
		out[i] = Request{Arrival: float64(i), Model: m}
	}
	return out
}

func TestBounds_Known(t *testing.T) {
	cases := []struct {
		models          string
		k, lru, optimal int
	}{
		{"a b c a b c a b c", 2, 9, 6}, // LRU's worst case: a cycle one longer than the slots
		{"a b a b a b", 2, 2, 2},
		{"a b c d a b e a b c d e", 3, 10, 7}, // the textbook sequence
		{"a a a", 1, 1, 1},
		{"", 3, 0, 0},
	}
	for _, tc := range cases {
		got := Bounds(seq(strings.Fields(tc.models)...), tc.k, nil)
		if got.LRU != tc.lru || got.Belady != tc.optimal {
			t.Errorf("%q with %d slots: %+v, want LRU %d, Belady %d", tc.models, tc.k, got, tc.lru, tc.optimal)
		}
	}
}

// On random sequences Belady never loses to LRU, and neither loads a model
// fewer times than it appears, nor more than there are requests.
func TestBounds_Invariants(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 500 {
		n, models, k := r.IntN(200), 1+r.IntN(8), 1+r.IntN(5)
		var names []string
		distinct := map[string]bool{}
		for range n {
			m := string(rune('a' + r.IntN(models)))
			names = append(names, m)
			distinct[m] = true
		}
		b := Bounds(seq(names...), k, nil)
		if b.Belady > b.LRU || b.Belady < len(distinct) || b.LRU > n {
			t.Fatalf("%v with %d slots: %+v", names, k, b)
		}
	}
}

// Scale divides the arrivals by the rate; a rate that is not positive and
// finite, or one that stretches the trace past MaxTraceSpan, is an error
// and changes nothing.
func TestScale(t *testing.T) {
	reqs := []Request{{Arrival: 10, Model: "a"}, {Arrival: 30, Model: "a"}}
	if err := Scale(reqs, 2); err != nil || reqs[0].Arrival != 5 || reqs[1].Arrival != 15 {
		t.Fatalf("rate 2: %v, %+v", err, reqs)
	}
	for _, rate := range []float64{0, -1, math.Inf(1), math.NaN(), 1e-9} {
		if err := Scale(reqs, rate); err == nil || reqs[1].Arrival != 15 {
			t.Errorf("rate %v: %v, arrivals %+v", rate, err, reqs)
		}
	}
}
