package proxy

import "testing"

// Names follow Ollama's tags: a name without one is NAME:latest, and
// NAME:latest is NAME, whichever the configuration spells; another tag,
// or a name the catalog has exactly, is itself. A configuration of
// llama3:latest answered "llama3" with a 404, where Ollama serves it.
func TestCatalog_LookupFollowsOllamasLatestTag(t *testing.T) {
	c, err := newCatalog([]ModelEntry{{ID: "llama3:latest"}, {ID: "qwen"}, {ID: "qwen:7b"}, {ID: "mistral", Aliases: []string{"m"}}})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"llama3:latest": "llama3:latest",
		"llama3":        "llama3:latest",
		"qwen":          "qwen",
		"qwen:latest":   "qwen",
		"qwen:7b":       "qwen:7b",
		"m:latest":      "mistral",
		"llama3:8b":     "",
		"nope":          "",
	} {
		got := ""
		if e := c.lookup(name); e != nil {
			got = e.ID
		}
		if got != want {
			t.Errorf("lookup(%q) = %q, want %q", name, got, want)
		}
	}
}
