package sdk

import (
	"fmt"
	"slices"
	"testing"
	"unsafe"
)

// intern returns a string equal to its argument whatever the front cache
// holds, and the same string for the same bytes.
func TestIntern_FrontCache(t *testing.T) {
	internStrings, internTable = true, map[string]string{}
	defer func() { internStrings, internTable, internFront = false, nil, [len(internFront)]string{} }()
	for round := range 3 {
		for i := range 2000 {
			name := fmt.Sprintf("model-%02d", i)
			if i%3 == 0 {
				name = name[:1+i%8]
			}
			got := intern([]byte(name))
			if got != name {
				t.Fatalf("round %d: intern(%q) = %q", round, name, got)
			}
			if i < maxInterned && round > 0 && len(got) > 0 && unsafe.StringData(got) != unsafe.StringData(internTable[name]) {
				t.Fatalf("intern(%q) is not the interned string", name)
			}
		}
	}
	if intern(nil) != "" {
		t.Fatal("intern of nothing is not empty")
	}
}

// A plan request's running set decoded again is the same list, handed out
// as a copy that costs no allocation after the first; a list handed out
// never holds another running set, through any later decode.
func TestPlanRequest_RunningReused(t *testing.T) {
	internStrings, internTable = true, map[string]string{}
	defer func() { internStrings, internTable, planRunning = false, nil, tailStrs{} }()
	one := appendMessage(nil, &PlanRequest{Now: 1, Target: "t", Running: []string{"a", "b", "c"}})
	two := appendMessage(nil, &PlanRequest{Now: 2, Target: "t", Running: []string{"a", "c"}})
	var q PlanRequest
	decode := func(msg []byte) []string {
		t.Helper()
		if err := decodeMessage(msg, &q); err != nil {
			t.Fatal(err)
		}
		return q.Running
	}
	first := decode(one)
	second := decode(one)
	if !slices.Equal(first, []string{"a", "b", "c"}) || !slices.Equal(second, first) {
		t.Fatalf("decoded %v then %v", first, second)
	}
	if n := testing.AllocsPerRun(50, func() { decode(one) }); n != 0 {
		t.Fatalf("decoding the same running set again allocated %v times", n)
	}
	second[0] = "changed by the policy"
	if third := decode(one); !slices.Equal(third, []string{"a", "b", "c"}) {
		t.Fatalf("after a policy wrote to its list, decoded %v", third)
	}
	if got := decode(two); !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("a new running set decoded as %v", got)
	}
	if got := decode(one); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("the first set again decoded as %v", got)
	}
	if !slices.Equal(first, []string{"a", "b", "c"}) || !slices.Equal(second, first) {
		t.Fatalf("a list handed out was written with another set: %v, %v", first, second)
	}
	if got := decode(appendMessage(nil, &PlanRequest{Now: 3, Target: "t"})); got != nil {
		t.Fatalf("an empty running set decoded as %#v", got)
	}
	if got := decode(appendMessage(nil, &PlanRequest{Now: 4, Target: "t"})); got != nil {
		t.Fatalf("an empty running set again decoded as %#v", got)
	}
}

// A swap start's running set, the one its plan was asked with, is decoded
// as that plan's list, with the rest of the event after it; another set
// decodes as itself; neither list handed out is written with another set.
func TestSwapStartEvent_RunningOfItsPlan(t *testing.T) {
	internStrings, internTable = true, map[string]string{}
	defer func() { internStrings, internTable, planRunning = false, nil, tailStrs{} }()
	var q PlanRequest
	var ev SwapStartEvent
	plan := func(running ...string) {
		t.Helper()
		if err := decodeMessage(appendMessage(nil, &PlanRequest{Now: 1, Target: "t", Running: running}), &q); err != nil {
			t.Fatal(err)
		}
	}
	start := func(want SwapStartEvent) SwapStartEvent {
		t.Helper()
		if err := decodeMessage(appendMessage(nil, &want), &ev); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(ev) != fmt.Sprint(want) {
			t.Fatalf("decoded %+v; want %+v", ev, want)
		}
		return ev
	}
	sw := SwapStartEvent{Now: 2, Target: "t", Running: []string{"a", "bb", "c"}, Evict: []string{"bb"}, Devices: []int32{1}, Modes: []EvictMode{EvictSleep1}}
	plan("a", "bb", "c")
	first := start(sw).Running
	bare := appendMessage(nil, &SwapStartEvent{Now: 2, Target: "t", Running: []string{"a", "bb", "c"}})
	if n := testing.AllocsPerRun(50, func() { _ = decodeMessage(bare, &ev) }); n != 0 {
		t.Fatalf("decoding its plan's running set allocated %v times", n)
	}
	other := sw
	other.Running = []string{"a", "bb"} // a prefix of the plan's list, encoded with another count
	start(other)
	other.Running = []string{"a", "bb", "c", "d"}
	start(other)
	other.Running = nil
	start(other)
	plan("a", "c")
	start(SwapStartEvent{Now: 3, Target: "t", Running: []string{"a", "c"}})
	if !slices.Equal(first, []string{"a", "bb", "c"}) {
		t.Fatalf("a list handed out was written with another set: %v", first)
	}
	plan()
	start(SwapStartEvent{Now: 4, Target: "t", Evict: []string{"x"}})
}

// handOut hands out the same list while it is equal, and a new one when
// it differs, never writing one it handed out.
func TestHandOut(t *testing.T) {
	var last []int32
	a := handOut(&last, []int32{1, 2})
	if b := handOut(&last, []int32{1, 2}); &b[0] != &a[0] {
		t.Fatal("an equal list was copied again")
	}
	c := handOut(&last, []int32{1, 3})
	if !slices.Equal(a, []int32{1, 2}) || !slices.Equal(c, []int32{1, 3}) {
		t.Fatalf("handed out %v then %v", a, c)
	}
	if handOut(&last, nil) != nil {
		t.Fatal("an empty list is not nil")
	}
}
