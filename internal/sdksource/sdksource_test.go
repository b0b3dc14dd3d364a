package sdksource

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestArchive_RoundTrip: the SDK packed from this tree unpacks to its
// sources (tests left out) and the modules of its graph, each with a
// go.mod, and never over a file that is there.
func TestArchive_RoundTrip(t *testing.T) {
	zip := filepath.Join(t.TempDir(), "sdk.zip")
	if err := WriteArchive(filepath.Join("..", "..", "sdk"), zip); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(zip)
	if err != nil {
		t.Fatal(err)
	}
	a, err := Read(b)
	if err != nil {
		t.Fatal(err)
	}
	if a.Modules[0] != (Module{Path: SDKModule}) || len(a.Modules) < 2 {
		t.Fatalf("modules %v, want the SDK first and its dependencies", a.Modules)
	}
	dir := t.TempDir()
	if err := a.Unpack(dir); err != nil {
		t.Fatal(err)
	}
	for _, m := range a.Modules {
		if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(m.Path), "go.mod")); err != nil {
			t.Errorf("module %s: %v", m.Path, err)
		}
	}
	src, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(SDKModule), "policy.go"))
	want, _ := os.ReadFile(filepath.Join("..", "..", "sdk", "policy.go"))
	if err != nil || string(src) != string(want) {
		t.Errorf("sdk/policy.go did not come back as it is (%v)", err)
	}
	tests, _ := filepath.Glob(filepath.Join(dir, filepath.FromSlash(SDKModule), "*_test.go"))
	if len(tests) != 0 {
		t.Errorf("tests were packed: %v", tests)
	}
	if err := a.Unpack(dir); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("a second Unpack over the first: %v, want a refusal", err)
	}
}
