package config

import (
	"regexp"

	"gopkg.in/yaml.v3"
)

// DefaultIgnorePaths is upstream.ignorePaths when the key is absent or
// empty (llama-swap's DefaultUpstreamIgnorePathsPattern): static assets,
// which a browser fetches for a page it already has.
var DefaultIgnorePaths = []string{`.*\.(js|json|css|png|gif|jpg|jpeg|ico|txt)$`}

// upstream decodes `upstream:` (llama-swap's): ignorePaths, a list of RE2
// regular expressions, into Config.IgnorePaths. Errors, at the entry: one
// that does not compile, an unknown key.
func (d *decoder) upstream(cfg *Config, n *yaml.Node) {
	for _, p := range d.pairs(n, "upstream") {
		kp := join("upstream", p.name)
		if p.name != "ignorePaths" {
			d.unknownKey(p.key, kp, []string{"ignorePaths"})
			continue
		}
		items, _ := d.items(p.val, kp)
		for i, it := range items {
			s, ok := d.str(it, index(kp, i))
			if !ok {
				continue
			}
			re, err := regexp.Compile(s)
			if err != nil {
				d.errorf(it, index(kp, i), "not a regular expression (RE2): %v", err)
				continue
			}
			cfg.IgnorePaths = append(cfg.IgnorePaths, re)
		}
	}
}

// defaultIgnorePaths compiles DefaultIgnorePaths.
func defaultIgnorePaths() []*regexp.Regexp {
	out := make([]*regexp.Regexp, len(DefaultIgnorePaths))
	for i, p := range DefaultIgnorePaths {
		out[i] = regexp.MustCompile(p)
	}
	return out
}
