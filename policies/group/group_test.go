package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/policytest"
)

// The cases are written once, against policytest.Swapper, and run natively
// here and as WebAssembly in wasm_test.go.

var nativeSwapper = policytest.NativeSwapperOf(New)

// mixed has one group of each kind, besides the implicit default group.
const mixed = `{"groups": {
	"chat":  {"members": ["llama", "qwen"]},
	"share": {"swap": false, "members": ["s1", "s2"]},
	"side":  {"exclusive": false, "members": ["x1", "x2"]},
	"free":  {"swap": false, "exclusive": false, "members": ["f1", "f2"]},
	"embed": {"swap": false, "exclusive": false, "persistent": true, "members": ["bge"]},
	"keep":  {"persistent": true, "members": ["k1", "k2"]}
}}`

var groupCases = []struct {
	name     string
	settings string
	target   string
	running  []string
	want     []string
}{
	{"no groups: one model at a time", `{}`, "a", []string{"b", "c"}, []string{"b", "c"}},
	{"no groups, nothing running", `{}`, "a", nil, nil},
	{"the target itself is never evicted", `{}`, "a", []string{"a", "b"}, []string{"b"}},
	{"defaults: swap and exclusive on", `{"groups": {"g": {"members": ["a", "b"]}}}`, "a", []string{"b", "z"}, []string{"b", "z"}},
	{"swap: same-group siblings stop", mixed, "llama", []string{"qwen"}, []string{"qwen"}},
	{"swap false: siblings stay", mixed, "s1", []string{"s2"}, nil},
	{"exclusive: other groups stop", mixed, "llama", []string{"f1", "s1", "x1", "z"}, []string{"f1", "s1", "x1", "z"}},
	{"exclusive spares persistent groups", mixed, "llama", []string{"bge", "k1", "qwen"}, []string{"qwen"}},
	{"non-exclusive leaves other groups alone", mixed, "x1", []string{"llama", "s1", "z", "x2"}, []string{"x2"}},
	{"non-exclusive, no swap: nothing stops", mixed, "f1", []string{"f2", "llama", "z"}, nil},
	{"a persistent group still swaps its own members", mixed, "k1", []string{"k2", "bge"}, []string{"k2"}},
	{"a persistent, exclusive group evicts non-persistent groups", mixed, "k1", []string{"llama", "z", "bge"}, []string{"llama", "z"}},
	{"implicit default group: swaps within, exclusive", mixed, "z", []string{"y", "llama", "bge", "x1"}, []string{"y", "llama", "x1"}},
	{"a grouped exclusive target evicts the default group", mixed, "s1", []string{"z"}, []string{"z"}},
	{"a non-exclusive target leaves the default group", mixed, "x1", []string{"z"}, nil},
}

func TestGroup_Scenario(t *testing.T) { runGroupCases(t, nativeSwapper) }

func runGroupCases(t *testing.T, mk policytest.MakeSwapper) {
	for _, tc := range groupCases {
		t.Run(tc.name, func(t *testing.T) {
			h := policytest.NewHost(t)
			s, err := mk(t, h, tc.settings)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			p, err := s.Plan(sdk.PlanRequest{Now: h.Now, Target: tc.target, Running: tc.running})
			if err != nil {
				t.Fatalf("Plan: %v", err)
			}
			if !slices.Equal(p.Evict, tc.want) || p.Devices != nil {
				t.Errorf("Plan(%q, %q) = evict %q devices %v, want evict %q and no devices", tc.target, tc.running, p.Evict, p.Devices, tc.want)
			}
			if len(h.Calls) != 0 {
				t.Errorf("Plan must not log or act; got:\n%s", h.Calls)
			}
		})
	}
}

// TestGroup_SwapStart: a real swap is logged once, naming the group.
func TestGroup_SwapStart(t *testing.T) { runSwapStart(t, nativeSwapper) }

func runSwapStart(t *testing.T, mk policytest.MakeSwapper) {
	h := policytest.NewHost(t, sdk.ModelInfo{Name: "llama", State: sdk.StateReady}, sdk.ModelInfo{Name: "qwen"})
	s, err := mk(t, h, mixed)
	if err != nil {
		t.Fatal(err)
	}
	h.Swapper = s
	plan, err := h.Plan("qwen")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.StartSwap(sdk.SwapRequest{Model: "qwen", Evict: plan.Evict}); err != nil {
		t.Fatal(err)
	}
	logs := h.Calls.Of(policytest.OpLog)
	if len(logs) != 1 || logs[0].Level != sdk.LevelInfo ||
		!strings.Contains(logs[0].Msg, "model=qwen") || !strings.Contains(logs[0].Msg, "group=chat") || !strings.Contains(logs[0].Msg, "evict=[llama]") {
		t.Errorf("want one info line naming the model, group and evictions; got:\n%s", logs)
	}
}

var badGroupSettings = []struct{ settings, want string }{
	{`{"groups": {"g1": {"members": ["a", "b"]}, "g2": {"members": ["c", "a"]}}}`,
		`settings: groups.g2.members[1]: model "a" is in two groups: "g1" (groups.g1.members[0]) and "g2"`},
	{`{"groups": {"g": {"members": ["a", "b", "a"]}}}`, `settings: groups.g.members[2]: model "a" is listed twice in group "g" (groups.g.members[0])`},
	{`{"group": {}}`, `settings: group: unknown setting "group" (known: groups)`},
	{`{"groups": {"g": {"members": ["a"], "exclusiv": true}}}`, `settings: groups.g.exclusiv: unknown setting "exclusiv" (known: swap, exclusive, persistent, members)`},
	{`{"groups": {"g": {"members": ["a"], "swap": "yes"}}}`, `settings: groups.g.swap: want true or false, got "yes"`},
	{`{"groups": {"g": {"swap": true}}}`, `settings: groups.g: members is required`},
	{`{"groups": {"g": {"members": [""]}}}`, `settings: groups.g.members[0]: empty member name`},
	{`{"groups": {"(default)": {"members": ["a"]}}}`, `settings: groups["(default)"]: (default) is the name of the implicit group`},
	{`{"groups": []}`, `settings: groups: want an object`},
	{`[]`, `settings: $: want an object`},
}

// TestGroup_BadSettings: invalid settings are init errors that say what is
// wrong.
func TestGroup_BadSettings(t *testing.T) { runBadGroupSettings(t, nativeSwapper) }

func runBadGroupSettings(t *testing.T, mk policytest.MakeSwapper) {
	for _, tc := range badGroupSettings {
		_, err := mk(t, policytest.NewHost(t), tc.settings)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("settings %s: error %v, want one containing %s", tc.settings, err, tc.want)
		}
	}
}
