package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/sdk"
	"github.com/loadout-dev/loadout/sdk/policytest"
)

// The cases are written once, against policytest.Swapper, and run natively
// here and as WebAssembly in wasm_test.go.

var nativeSwapper = policytest.NativeSwapperOf(New)

// example is llama-swap's documented matrix (config.example.yaml at
// 9b3a33d7, routing.router.settings.matrix), as Loadout's config layer
// hands it over: evict_costs keyed by model id, sets as an ordered list.
//
//	vars: {g: gemma-model, q: qwen-model, m: mistral-model, v: voxtral-model,
//	       e: reranker-model, L: llama-70B, sd: stable-diffusion}
//	evict_costs: {v: 50, L: 30}
//	sets:
//	  standard: "(g | q | m) & v"
//	  with_rerank: "(g | q) & v & e"
//	  creative: "(g | q) & sd"
//	  full: "L"
const example = `{"matrix": {
	"vars": {"g": "gemma-model", "q": "qwen-model", "m": "mistral-model", "v": "voxtral-model",
	         "e": "reranker-model", "L": "llama-70B", "sd": "stable-diffusion"},
	"evict_costs": {"voxtral-model": 50, "llama-70B": 30},
	"sets": [
		{"name": "standard", "expr": "(g | q | m) & v"},
		{"name": "with_rerank", "expr": "(g | q) & v & e"},
		{"name": "creative", "expr": "(g | q) & sd"},
		{"name": "full", "expr": "L"}
	]}}`

// docExample is the example in doc.go.
const docExample = `{"matrix": {
	  "vars": {"g": "gemma-27b", "q": "qwen-32b", "v": "voxtral", "x": "llama-70b"},
	  "evict_costs": {"voxtral": 50},
	  "sets": [
	    {"name": "standard", "expr": "(g | q) & v"},
	    {"name": "big", "expr": "+standard | x"}
	  ]}}`

// brief is the settings shape from the design brief, with the var x the
// brief leaves out.
const brief = `{"matrix":{"vars":{"g":"gemma-27b","q":"qwen-32b","v":"voxtral","x":"xl"},"evict_costs":{"gemma-27b":50},"sets":[{"name":"standard","expr":"(g | q) & v"},{"name":"big","expr":"+standard | x"}]}}`

var planCases = []struct {
	name     string
	settings string
	target   string
	running  []string
	want     []string
}{
	// llama-swap's documented example.
	{"example: switching LLM keeps the TTS", example, "qwen-model", []string{"gemma-model", "voxtral-model"}, []string{"gemma-model"}},
	{"example: the reranker joins the LLM and TTS", example, "reranker-model", []string{"gemma-model", "voxtral-model"}, nil},
	{"example: image generation evicts the costly TTS rather than the LLM", example, "stable-diffusion", []string{"gemma-model", "voxtral-model"}, []string{"voxtral-model"}},
	{"example: the 70B runs alone", example, "llama-70B", []string{"gemma-model", "voxtral-model"}, []string{"gemma-model", "voxtral-model"}},
	{"example: anything evicts the 70B", example, "gemma-model", []string{"llama-70B"}, []string{"llama-70B"}},
	{"example: keeping the TTS beats keeping image generation", example, "qwen-model", []string{"stable-diffusion", "voxtral-model"}, []string{"stable-diffusion"}},
	{"example: mistral is only in standard", example, "mistral-model", []string{"reranker-model", "voxtral-model"}, []string{"reranker-model"}},
	{"example: nothing running", example, "voxtral-model", nil, nil},
	{"example: a tie goes to the earlier combination", example, "voxtral-model", []string{"gemma-model", "qwen-model"}, []string{"qwen-model"}},
	{"example: a model in no set runs alone", example, "phi", []string{"gemma-model", "voxtral-model"}, []string{"gemma-model", "voxtral-model"}},
	{"example: an unknown running model is evicted", example, "qwen-model", []string{"voxtral-model", "whisper"}, []string{"whisper"}},
	{"example: the target itself is never evicted", example, "qwen-model", []string{"qwen-model", "voxtral-model"}, nil},
	// The brief's shape.
	{"brief: a reference keeps its combinations", brief, "qwen-32b", []string{"gemma-27b", "voxtral"}, []string{"gemma-27b"}},
	{"brief: x alone", brief, "xl", []string{"gemma-27b", "voxtral"}, []string{"gemma-27b", "voxtral"}},
	{"brief: the costly gemma stays over voxtral", brief, "gemma-27b", []string{"xl"}, []string{"xl"}},
	// doc.go's example.
	{"doc: switching LLM", docExample, "qwen-32b", []string{"gemma-27b", "voxtral"}, []string{"gemma-27b"}},
	{"doc: the 70B runs alone", docExample, "llama-70b", []string{"gemma-27b", "voxtral"}, []string{"gemma-27b", "voxtral"}},
	{"doc: the costly TTS is kept", docExample, "gemma-27b", []string{"qwen-32b", "voxtral"}, []string{"qwen-32b"}},
	// No sets: every model runs alone.
	{"no settings: one model at a time", `{}`, "a", []string{"b", "c"}, []string{"b", "c"}},
	{"no sets: one model at a time", `{"matrix": {"vars": {"a": "a"}}}`, "a", []string{"b"}, []string{"b"}},
	// Costs decide, order breaks ties.
	{"costs: keep the costly one", `{"matrix": {"vars": {"a": "a", "b": "b", "c": "c"}, "evict_costs": {"b": 10},
		"sets": [{"name": "ac", "expr": "a & c"}, {"name": "ab", "expr": "a & b"}]}}`, "a", []string{"b", "c"}, []string{"c"}},
	{"costs: equal, the earlier set wins", `{"matrix": {"vars": {"a": "a", "b": "b", "c": "c"},
		"sets": [{"name": "ac", "expr": "a & c"}, {"name": "ab", "expr": "a & b"}]}}`, "a", []string{"b", "c"}, []string{"b"}},
	{"a subset of a combination is allowed", `{"matrix": {"vars": {"a": "a", "b": "b", "c": "c", "d": "d"},
		"sets": [{"name": "all", "expr": "a & b & c"}]}}`, "a", []string{"c", "d"}, []string{"d"}},
	{"pool of three: evict one, the first tie", `{"matrix": {"vars": {"t": "t", "a": "a", "b": "b", "c": "c"},
		"sets": [{"name": "pool", "expr": "t | a | b | c"}, {"name": "all", "expr": "+pool & +pool & +pool"}]}}`, "t", []string{"a", "b", "c"}, []string{"c"}},
	{"pool of three: a costly model is kept", `{"matrix": {"vars": {"t": "t", "a": "a", "b": "b", "c": "c"}, "evict_costs": {"c": 10},
		"sets": [{"name": "pool", "expr": "t | a | b | c"}, {"name": "all", "expr": "+pool & +pool & +pool"}]}}`, "t", []string{"a", "b", "c"}, []string{"b"}},
	{"two vars for one model", `{"matrix": {"vars": {"a": "m", "b": "m", "c": "c"},
		"sets": [{"name": "s", "expr": "a & c"}]}}`, "m", []string{"c"}, nil},
}

func TestMatrix_Plan(t *testing.T) { runPlanCases(t, nativeSwapper) }

func runPlanCases(t *testing.T, mk policytest.MakeSwapper) {
	for _, tc := range planCases {
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

// TestMatrix_SwapStart: a real swap is logged once, naming the set, its
// expression, the combination and the cost; a plan logs nothing.
func TestMatrix_SwapStart(t *testing.T) { runSwapStart(t, nativeSwapper) }

func runSwapStart(t *testing.T, mk policytest.MakeSwapper) {
	for _, tc := range []struct {
		settings string
		target   string
		running  []string
		want     []string
	}{
		{docExample, "qwen-32b", []string{"gemma-27b", "voxtral"}, []string{ // the line in doc.go, whole
			`matrix swap: model=qwen-32b set=standard dsl="(g | q) & v" combination=[qwen-32b,voxtral] cost=1 evict=[gemma-27b]`}},
		{example, "qwen-model", []string{"gemma-model", "voxtral-model"}, []string{
			"model=qwen-model", "set=standard", `dsl="(g | q | m) & v"`, "combination=[qwen-model,voxtral-model]", "cost=1", "evict=[gemma-model]"}},
		{example, "stable-diffusion", []string{"gemma-model", "voxtral-model"}, []string{
			"model=stable-diffusion", "set=creative", "combination=[gemma-model,stable-diffusion]", "cost=50", "evict=[voxtral-model]"}},
		{example, "phi", []string{"llama-70B"}, []string{"model=phi", "set=(none)", "combination=[phi]", "cost=30", "evict=[llama-70B]"}},
	} {
		models := []sdk.ModelInfo{{Name: tc.target}}
		for _, r := range tc.running {
			models = append(models, sdk.ModelInfo{Name: r, State: sdk.StateReady})
		}
		for _, m := range varModels(t, tc.settings) { // the host lists every model
			if !slices.ContainsFunc(models, func(mi sdk.ModelInfo) bool { return mi.Name == m }) {
				models = append(models, sdk.ModelInfo{Name: m})
			}
		}
		h := policytest.NewHost(t, models...)
		s, err := mk(t, h, tc.settings)
		if err != nil {
			t.Fatal(err)
		}
		h.Swapper = s
		plan, err := h.Plan(tc.target)
		if err != nil {
			t.Fatal(err)
		}
		if len(h.Calls) != 0 {
			t.Fatalf("Plan must not log; got:\n%s", h.Calls)
		}
		if err := h.StartSwap(sdk.SwapRequest{Model: tc.target, Evict: plan.Evict}); err != nil {
			t.Fatal(err)
		}
		logs := h.Calls.Of(policytest.OpLog)
		if len(logs) != 1 || logs[0].Level != sdk.LevelInfo || !strings.HasPrefix(logs[0].Msg, "matrix swap: ") {
			t.Fatalf("%s: want one info line; got:\n%s", tc.target, logs)
		}
		for _, w := range tc.want {
			if !strings.Contains(logs[0].Msg, w) {
				t.Errorf("%s: log line %q lacks %s", tc.target, logs[0].Msg, w)
			}
		}
	}
}

// TestMatrix_PurePlan: the swapper claims sdk.PurePlanner.
func TestMatrix_PurePlan(t *testing.T) {
	s, err := New(policytest.NewHost(t), []byte(example))
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := s.(sdk.PurePlanner); !ok || !p.PurePlan() {
		t.Error("the matrix swapper must claim sdk.PurePlanner")
	}
}

// big is a set whose expansion (32 × 32 = 1,024 combinations, squared)
// passes the limit at once, before any work.
const big = `{"matrix": {"vars": {` +
	`"a0":"a0","a1":"a1","a2":"a2","a3":"a3","a4":"a4","a5":"a5","a6":"a6","a7":"a7",` +
	`"a8":"a8","a9":"a9","a10":"a10","a11":"a11","a12":"a12","a13":"a13","a14":"a14","a15":"a15",` +
	`"a16":"a16","a17":"a17","a18":"a18","a19":"a19","a20":"a20","a21":"a21","a22":"a22","a23":"a23",` +
	`"a24":"a24","a25":"a25","a26":"a26","a27":"a27","a28":"a28","a29":"a29","a30":"a30","a31":"a31",` +
	`"b0":"b0","b1":"b1","b2":"b2","b3":"b3","b4":"b4","b5":"b5","b6":"b6","b7":"b7",` +
	`"b8":"b8","b9":"b9","b10":"b10","b11":"b11","b12":"b12","b13":"b13","b14":"b14","b15":"b15",` +
	`"b16":"b16","b17":"b17","b18":"b18","b19":"b19","b20":"b20","b21":"b21","b22":"b22","b23":"b23",` +
	`"b24":"b24","b25":"b25","b26":"b26","b27":"b27","b28":"b28","b29":"b29","b30":"b30","b31":"b31"},` +
	`"sets": [{"name": "p", "expr": "(a0|a1|a2|a3|a4|a5|a6|a7|a8|a9|a10|a11|a12|a13|a14|a15|a16|a17|a18|a19|a20|a21|a22|a23|a24|a25|a26|a27|a28|a29|a30|a31) &` +
	` (b0|b1|b2|b3|b4|b5|b6|b7|b8|b9|b10|b11|b12|b13|b14|b15|b16|b17|b18|b19|b20|b21|b22|b23|b24|b25|b26|b27|b28|b29|b30|b31)"},` +
	`{"name": "pp", "expr": "+p & +p"}]}}`

func withSets(sets string) string {
	return `{"matrix": {"vars": {"g": "gemma", "q": "qwen", "v": "voxtral"}, "sets": [` + sets + `]}}`
}

var badSettings = []struct{ settings, want string }{
	{withSets(`{"name": "standard", "expr": "(g | q) & )"}`), `settings: matrix.sets[0].expr: column 11: expected identifier, got ")"`},
	{withSets(`{"name": "standard", "expr": "(g |  )"}`), `column 7: expected identifier, got ")"`},
	{withSets(`{"name": "s", "expr": "(g | q"}`), `column 7: expected ")" to close "(" at column 1, got end of expression`},
	{withSets(`{"name": "s", "expr": "g q"}`), `column 3: expected "&", "|" or end of expression, got "q"`},
	{withSets(`{"name": "s", "expr": "g & x"}`), `settings: matrix.sets[0].expr: column 5: "x" is neither a var nor a model id (vars: g, q, v)`},
	{withSets(`{"name": "s", "expr": "g @ q"}`), `column 3: unexpected character '@'`},
	{withSets(`{"name": "s", "expr": "  "}`), `settings: matrix.sets[0].expr: empty expression`},
	{withSets(`{"name": "s", "expr": "+nope | g"}`), `column 1: unknown set "+nope"`},
	{withSets(`{"name": "a", "expr": "+b"}, {"name": "b", "expr": "g & +c"}, {"name": "c", "expr": "q | +a"}`),
		`settings: matrix.sets: sets reference each other in a cycle: "a" -> "b" -> "c" -> "a"`},
	{withSets(`{"name": "a", "expr": "g | +a"}`), `sets reference each other in a cycle: "a" -> "a"`},
	{withSets(`{"name": "s", "expr": "g"}, {"name": "s", "expr": "q"}`), `settings: matrix.sets[1].name: set "s" is defined twice`},
	{withSets(`{"name": "my set", "expr": "g"}`), `settings: matrix.sets[0].name: set name "my set"`},
	{withSets(`{"name": "s"}`), `settings: matrix.sets[0].expr: want a string, got null`},
	{withSets(`{"name": "s", "expr": "g", "exp": "q"}`), `settings: matrix.sets[0].exp: unknown setting "exp" (known: name, expr)`},
	{withSets(`"g & q"`), `settings: matrix.sets[0]: want an object`},
	{`{"matrix": {"sets": {"s": "g & "}}}`, `settings: matrix.sets.s: column 5: expected identifier`},
	{`{"matrix": {"sets": 3}}`, `settings: matrix.sets: want an object of set names to expressions`},
	{`{"matrix": {"vars": {"gemma 27b": "gemma"}}}`, `settings: matrix.vars["gemma 27b"]: var ids are 1 to 32 ASCII letters, digits, '-' or '.'`},
	{`{"matrix": {"vars": {"toolongtoolongtoolongtoolongtoolong": "gemma"}}}`, `var ids are 1 to 32`},
	{`{"matrix": {"vars": {"g": ""}}}`, `settings: matrix.vars.g: empty model id`},
	{`{"matrix": {"vars": {"g": "nope"}}}`, `settings: matrix.vars.g: model "nope" is not defined`},
	{`{"matrix": {"vars": ["g"]}}`, `settings: matrix.vars: want an object`},
	{`{"matrix": {"vars": {"g": "gemma"}, "evict_costs": {"gemma": 0}}}`, `settings: matrix.evict_costs.gemma: want a whole number from 1 to 1000000000, got 0`},
	{`{"matrix": {"vars": {"g": "gemma"}, "evict_costs": {"gemma": 1.5}}}`, `got 1.5`},
	{`{"matrix": {"vars": {"g": "gemma"}, "evict_costs": {"gemma": "50"}}}`, `got "50"`},
	{`{"matrix": {"vars": {"g": "gemma"}, "evict_costs": {"g": 50, "gemma": 3}}}`, `settings: matrix.evict_costs.gemma: "g" and "gemma" both name model gemma`},
	{`{"matrix": {"vars": {"g": "gemma"}, "evict_costs": {"zz": 3}}}`, `settings: matrix.evict_costs.zz: "zz" is neither a var nor a model id (vars: g)`},
	{`{"matrix": {"vars": {}, "evictcosts": {}}}`, `settings: matrix.evictcosts: unknown setting "evictcosts" (known: vars, evict_costs, sets)`},
	{`{"groups": {}}`, `settings: groups: unknown setting "groups" (known: matrix)`},
	{`[]`, `settings: $: want an object, got []`},
	{`{"matrix": `, `settings: $: invalid JSON`},
	{brief[:len(brief)-3] + `,{"name":"bad","expr":"+standard | y"}]}}`, `settings: matrix.sets[2].expr: column 13: "y" is neither a var nor a model id (vars: g, q, v, x)`},
	{big, `settings: matrix.sets[1].expr: expands to more than 100000 combinations`},
}

// varModels lists the models the vars of settings name.
func varModels(t *testing.T, settings string) []string {
	var s struct {
		Matrix struct{ Vars map[string]string }
	}
	if err := json.Unmarshal([]byte(settings), &s); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range s.Matrix.Vars {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

// badSettingsModels are the models the host of runBadSettings lists.
var badSettingsModels = strings.Fields("gemma qwen voxtral gemma-27b qwen-32b llama-70b xl")

// vars64 names the models of big.
var vars64 = func() string {
	var b strings.Builder
	for i := range 32 {
		fmt.Fprintf(&b, "a%d b%d ", i, i)
	}
	return b.String()
}()

// TestMatrix_BadSettings: invalid settings are init errors that say what
// is wrong and where.
func TestMatrix_BadSettings(t *testing.T) { runBadSettings(t, nativeSwapper) }

func runBadSettings(t *testing.T, mk policytest.MakeSwapper) {
	var models []sdk.ModelInfo
	for _, name := range append(badSettingsModels, strings.Fields(vars64)...) {
		models = append(models, sdk.ModelInfo{Name: name})
	}
	for _, tc := range badSettings {
		_, err := mk(t, policytest.NewHost(t, models...), tc.settings)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("settings %s:\nerror %v\nwant one containing %s", tc.settings, err, tc.want)
		}
	}
}
