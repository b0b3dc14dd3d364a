package builtin

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestLookup_Unknown(t *testing.T) {
	_, err := Lookup("lifo")
	if err == nil || !strings.Contains(err.Error(), `"lifo"`) || !strings.Contains(err.Error(), "fifo, foresight, gdsf, group") {
		t.Errorf("Lookup(lifo) error %v, want one naming it and listing the built-ins", err)
	}
}

// TestLookup_Builtins passes both before and after `make policies`: an
// embedded module must be WebAssembly, a missing one must say how to build it.
func TestLookup_Builtins(t *testing.T) {
	for _, name := range Names() {
		b, err := Lookup(name)
		switch {
		case err == nil:
			if !bytes.HasPrefix(b, []byte("\x00asm")) {
				t.Errorf("Lookup(%s): %d bytes that are not a WebAssembly module", name, len(b))
			}
		case !strings.Contains(err.Error(), "make policies"):
			t.Errorf("Lookup(%s): %v, want it to say to run `make policies`", name, err)
		}
	}
}

func TestNames(t *testing.T) {
	names := Names()
	if !slices.IsSorted(names) || !slices.Contains(names, "fifo") || !slices.Contains(names, "group") {
		t.Errorf("Names() = %v", names)
	}
	names[0] = "changed"
	if Names()[0] == "changed" {
		t.Error("Names returns the package's own slice")
	}
}

// The list is what `make policies` builds: every policies/NAME/main.go.
func TestNames_AreThePolicyDirectories(t *testing.T) {
	mains, err := filepath.Glob("../*/main.go")
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, m := range mains {
		dirs = append(dirs, filepath.Base(filepath.Dir(m)))
	}
	slices.Sort(dirs)
	if !slices.Equal(dirs, Names()) {
		t.Fatalf("policy directories %v, built-ins %v: add the new policy to builtin.go's list", dirs, Names())
	}
}

// A built-in guest links neither fmt nor encoding/json: each costs every
// host that compiles the module (start-up, compiled code in memory) about
// a tenth of a Go guest (docs/RATIONALE.md, "Smaller guests"). The SDK
// builds its messages with strconv and reads settings with jsontext, and
// the built-ins do the same; this holds them to it.
func TestBuiltins_LinkNoFmtOrEncodingJSON(t *testing.T) {
	for _, name := range Names() {
		cmd := exec.Command("go", "list", "-deps", "../"+name)
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", name, err)
		}
		for dep := range strings.Lines(string(out)) {
			if dep := strings.TrimSpace(dep); dep == "fmt" || dep == "encoding/json" {
				t.Errorf("the %s guest links %s: build its messages with strconv (settings.NewError, wire.Malformed, placement.FormatDevices)", name, dep)
			}
		}
	}
}
