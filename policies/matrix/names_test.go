package main

import (
	"fmt"
	"strings"
	"testing"
)

// TestNameCache: names resolve to their model index however they are
// allocated: the same bytes hit, equal bytes elsewhere miss and still
// resolve, and many names sharing slots evict each other correctly.
func TestNameCache(t *testing.T) {
	m, err := compileFor(t, "a b c", "s", "a & b")
	if err != nil {
		t.Fatal(err)
	}
	var c nameCache
	lookup := func(name string) int32 {
		if i, ok := c.cached(name); ok {
			return i
		}
		return c.fill(m, name)
	}
	want := map[string]int32{"a": 0, "b": 1, "c": 2, "x": unknownModel, "": unknownModel}
	for range 2 {
		for name, i := range want {
			if got := lookup(name); got != i {
				t.Errorf("lookup(%q) = %d, want %d", name, got, i)
			}
			// The same content at another address.
			if got := lookup(strings.Clone(name)); got != i {
				t.Errorf("lookup(clone of %q) = %d, want %d", name, got, i)
			}
		}
	}
	// A string that was cached as unknown, then its prefix: same address,
	// different length.
	ab := strings.Clone("ab")
	if got := lookup(ab); got != unknownModel {
		t.Errorf(`lookup("ab") = %d, want unknown`, got)
	}
	if got := lookup(ab[:1]); got != 0 {
		t.Errorf(`lookup("a", sharing "ab"'s bytes) = %d, want 0`, got)
	}
	// More names than slots.
	for i := range 3 * len(c.slots) {
		name := fmt.Sprintf("n%d", i%3)
		if i%3 == 0 {
			name = strings.Clone("a")
		}
		wantI := unknownModel
		if name == "a" {
			wantI = 0
		}
		if got := lookup(name); got != wantI {
			t.Fatalf("lookup(%q) = %d, want %d", name, got, wantI)
		}
	}
}
