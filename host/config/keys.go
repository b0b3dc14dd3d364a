package config

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// notHonoured lists llama-swap keys Loadout accepts, so that a llama-swap
// configuration loads unchanged, but does not act on yet. Each use gets one
// warning naming the key. When a package starts honouring one, give it a typed
// field and delete it from here.
var notHonoured = map[string]string{
	// top level
	"logRequests": "an old llama-swap key; Loadout does not log request bodies",
	"performance": "Loadout polls nothing on a timer: GPU and system figures are read when /metrics is scraped, so the scrape interval is the polling interval",
	"store":       "Loadout always keeps the activity log on disk, in serve's --db file (what store.path chooses in llama-swap)",
}

// modelNotHonoured is notHonoured for keys inside a model: none today,
// every llama-swap model key is acted on.
var modelNotHonoured = map[string]string{}

// unknownKey reports a key that neither Loadout nor llama-swap defines, with a
// "did you mean" when one known key is close.
func (d *decoder) unknownKey(k *yaml.Node, path string, known []string) {
	msg := fmt.Sprintf("unknown key %q", k.Value)
	if s := suggest(k.Value, known); s != "" {
		msg += fmt.Sprintf("; did you mean %q?", s)
	}
	d.errorf(k, path, "%s", msg)
}

// suggest returns the known key closest to key, or "" when none is close: the
// same key in another case or spelling (check_endpoint for checkEndpoint), or
// at most a third of its letters away by edit distance.
func suggest(key string, known []string) string {
	norm := func(s string) string {
		return strings.ToLower(strings.NewReplacer("_", "", "-", "").Replace(s))
	}
	best, bestDist := "", -1
	for _, k := range known {
		if norm(k) == norm(key) {
			return k
		}
		dist := levenshtein(strings.ToLower(key), strings.ToLower(k))
		limit := max(1, len(k)/3)
		if dist <= limit && (bestDist < 0 || dist < bestDist) {
			best, bestDist = k, dist
		}
	}
	return best
}

func levenshtein(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}
