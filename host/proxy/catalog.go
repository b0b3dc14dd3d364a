package proxy

import (
	"fmt"
	"slices"
	"strings"
)

// catalog resolves the names clients use (ids and aliases) to models. It
// is built once by New and only read afterwards.
type catalog struct {
	entries []ModelEntry           // sorted by id
	byName  map[string]*ModelEntry // ids and aliases
	listed  []string               // listed ids, sorted, for "known models" hints
}

// newCatalog builds the catalog; it may be empty (a box that only forwards
// to peers). Errors: an empty or duplicate id or alias.
func newCatalog(models []ModelEntry) (*catalog, error) {
	c := &catalog{entries: slices.Clone(models), byName: map[string]*ModelEntry{}}
	slices.SortFunc(c.entries, func(a, b ModelEntry) int { return strings.Compare(a.ID, b.ID) })
	owner := map[string]string{} // name → what claimed it, for errors
	claim := func(name, what string) error {
		if name == "" {
			return fmt.Errorf("%s is empty", what)
		}
		if prev, dup := owner[name]; dup {
			return fmt.Errorf("%s %q is also %s", what, name, prev)
		}
		owner[name] = what
		return nil
	}
	for i := range c.entries {
		e := &c.entries[i]
		if err := claim(e.ID, "model id"); err != nil {
			return nil, err
		}
		c.byName[e.ID] = e
		if !e.Unlisted {
			c.listed = append(c.listed, e.ID)
		}
	}
	for i := range c.entries {
		e := &c.entries[i]
		for _, a := range e.Aliases {
			if err := claim(a, fmt.Sprintf("an alias of model %q", e.ID)); err != nil {
				return nil, err
			}
			c.byName[a] = e
		}
	}
	return c, nil
}

// lookup resolves a model id or alias; nil if unknown. Names follow
// Ollama's tags as well: a name without one is also NAME:latest, and
// NAME:latest is also NAME (a configuration of llama3:latest answers
// llama3, one of llama3 answers llama3:latest).
func (c *catalog) lookup(name string) *ModelEntry {
	if e := c.byName[name]; e != nil {
		return e
	}
	if base, ok := strings.CutSuffix(name, ":latest"); ok {
		return c.byName[base]
	}
	if !strings.Contains(name, ":") {
		return c.byName[name+":latest"]
	}
	return nil
}

func (c *catalog) ids() []string {
	out := make([]string, len(c.entries))
	for i, e := range c.entries {
		out[i] = e.ID
	}
	return out
}

// unknown is the 404 for a name the catalog does not know; it names a few
// models the client could use instead.
func (c *catalog) unknown(name string) *apiError {
	const hint = 5
	known := c.listed
	more := ""
	if len(known) > hint {
		more = fmt.Sprintf(" and %d more (GET /v1/models)", len(known)-hint)
		known = known[:hint]
	}
	msg := fmt.Sprintf("model %s not found; known models: %s%s", echoed(name), strings.Join(known, ", "), more)
	if len(known) == 0 {
		msg = fmt.Sprintf("model %s not found", echoed(name))
	}
	return &apiError{status: 404, code: "model_not_found", msg: msg}
}
