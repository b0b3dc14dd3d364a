// Command matrix is Loadout's matrix swapper (eviction) policy: llama-swap's
// matrix router (routing.router.use: matrix). It is built to a WebAssembly
// module (GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared) like every
// built-in policy.
//
// The matrix lists the combinations of models that may run together. When a
// model must load, the swapper keeps the allowed combination that is
// cheapest to reach and evicts the running models outside it:
//
//  1. If the target is in no set, it runs alone: everything running is
//     evicted.
//  2. Otherwise, of the combinations that contain the target, it chooses
//     the one for which the running models outside it have the lowest total
//     evict cost, and evicts those. Running models inside it stay: a
//     combination allows any subset of itself.
//  3. A tie goes to the earlier combination: sets in the order given, and
//     within a set the order its expression expands in.
//
// Only the target is started, never the rest of its combination. A running
// model that no var names is outside every combination, so it is always
// evicted. Evict costs are positive integers, 1 unless given: a costly model
// (slow to load) is kept at the price of evicting several cheap ones. The
// swapper never places models on devices (the host does) and never evicts a
// model that is serving: the scheduler waits for it to go idle. Its plans
// depend only on the settings, the target and the running set, so the host
// may reuse them (sdk.PurePlanner).
//
// For a GPU job that may evict idle models (sdk.JobPlanner), which has no
// place in the combinations, the evict costs decide: the job takes free
// GPUs first, then GPUs whose every model is ready, idle and unpinned, the
// cheapest to evict first (the sum of their costs), ties to the lowest
// index.
//
// # Expressions
//
// Each set is an expression over vars:
//
//	a          the model of var a
//	a & b      a and b together
//	a | b      a, or b
//	(a | b)    grouping; & binds tighter than |
//	+name      the combinations of the set called name
//
// An expression stands for a list of combinations:
//
//	"L"                  [L]
//	"a & b"              [a b]
//	"a | b & c"          [a], [b c]
//	"(a | b) & (c | d)"  [a c], [a d], [b c], [b d]
//	"+llms & v"          each combination of llms, with v
//
// A combination listed twice counts once, where it first appears (so
// "a & a" is [a], and a combination that a later set repeats belongs to the
// earlier set). Sets may reference sets defined before or after them, but not
// in a cycle.
//
// # Settings
//
// The settings are llama-swap's `matrix:` as written (routing.router.settings
// with use: matrix; the config layer moves a legacy top-level `matrix:`
// there unchanged):
//
//	{"matrix": {
//	  "vars": {"g": "gemma-27b", "q": "qwen-32b", "v": "voxtral", "x": "llama-70b"},
//	  "evict_costs": {"v": 50},
//	  "sets": {"standard": "(g | q) & v", "big": "+standard | x"}}}
//
// sets may also be a list, [{"name": "standard", "expr": "(g | q) & v"}, …];
// either way their order breaks ties. vars maps ids (1 to 32 ASCII letters,
// digits, '-' or '.': llama-swap's rule) to model ids. Expressions and
// evict_costs keys may mix vars and model ids; a var wins when its name is
// also a model id. Costs run from 1 to 1,000,000,000. When the host lists its
// models at init (serve and `loadout config check` do), a var's model and
// an identifier that is not a var must be one of them. Here loading qwen-32b
// while gemma-27b and voxtral run evicts gemma-27b (set standard,
// combination [qwen-32b voxtral], cost 1), and loading llama-70b evicts
// both.
//
// With no sets, every model runs alone. Anything wrong is an error at load,
// an sdk/settings error naming the setting's path: an unknown key, a bad var
// id, an undefined model, a cost out of range, two costs for one model, a
// set name used twice, an unknown identifier or set, a reference cycle
// ("a" -> "b" -> "a"), or a syntax error with its column:
//
//	settings: matrix.sets.standard: column 7: expected identifier, got ")"
//
// A matrix too large to expand or index at load is refused too: all the
// sets together may expand to at most 100,000 combinations (fewer with more
// than 64 models), and their index to 16 MiB and 4,000,000 model pairs.
//
// # Logs
//
// A plan logs nothing. A swap that really starts logs one line:
//
//	matrix swap: model=qwen-32b set=standard dsl="(g | q) & v" combination=[qwen-32b,voxtral] cost=1 evict=[gemma-27b]
//
// set=(none) says the target is in no set and runs alone.
//
// # How it is fast
//
// Every set is expanded once, at load, to bitsets over the models; for each
// model, the combinations that contain it are indexed as bit columns, one
// per model they share it with (solver.go). A plan then costs a pass over
// 64 combinations per machine word, with no allocation: about 1 µs natively
// and a few µs of guest time in Wasm for 10,000 combinations.
package main
