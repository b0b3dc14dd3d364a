package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCPolicy_TwinScenarios builds examples/lru-c, a swapper written in C
// against sdk/c/loadout_v3.h with Debian's clang and wasi-libc, and holds it
// to the scenario files of its Go twin (the swapper `loadout policy new`
// writes): the ABI is language-neutral. It builds it again against
// loadout_v2.h (-DLOADOUT_V2), a version 2 module, which must load, say so,
// and pass the same scenarios: version 2 modules behave unchanged. Without a clang that targets
// wasm32-wasi the test skips, unless LOADOUT_REQUIRE_CLANG=1 (CI) makes it
// fail.
func TestCPolicy_TwinScenarios(t *testing.T) {
	dir := t.TempDir()
	clang := func(args ...string) (string, error) {
		out, err := exec.Command("clang", append([]string{"--target=wasm32-wasi", "-mexec-model=reactor", "-O2", "-Wall", "-Wextra", "-Werror"}, args...)...).CombinedOutput()
		return string(out), err
	}
	// The toolchain first, on a program that needs only wasi-libc.
	probe := filepath.Join(dir, "probe.c")
	if err := os.WriteFile(probe, []byte("#include <stdint.h>\n#include <stdlib.h>\nint32_t probe(void) { return (int32_t)(uintptr_t)malloc(1); }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := clang("-o", filepath.Join(dir, "probe.wasm"), probe); err != nil {
		msg := fmt.Sprintf("no clang with wasi-libc (apt-get install clang lld wasi-libc libclang-rt-14-dev-wasm32): %v\n%s", err, out)
		if os.Getenv("LOADOUT_REQUIRE_CLANG") != "1" {
			t.Skip(msg + "\n(LOADOUT_REQUIRE_CLANG=1 makes this a failure)")
		}
		t.Fatal(msg)
	}
	scenarios, err := filepath.Glob(filepath.Join("scaffold", "swapper", "testdata", "scenarios", "*.yaml"))
	if err != nil || len(scenarios) < 3 {
		t.Fatalf("the Go twin's scenarios: %v, %d files", err, len(scenarios))
	}
	for _, v := range []struct {
		name    string
		flags   []string
		version string
	}{{"v3", nil, "ABI version:  3"}, {"v2", []string{"-DLOADOUT_V2"}, "ABI version:  2"}} {
		t.Run(v.name, func(t *testing.T) {
			wasm := filepath.Join(dir, "lru-"+v.name+".wasm")
			args := append(append([]string(nil), v.flags...), "-I", filepath.Join("..", "..", "sdk", "c"), "-o", wasm, filepath.Join("..", "..", "examples", "lru-c", "lru.c"))
			if out, err := clang(args...); err != nil {
				t.Fatalf("building examples/lru-c: %v\n%s", err, out)
			}
			out, err := runPolicyCmd(t, "check", wasm)
			if err != nil {
				t.Fatalf("policy check: %v\n%s", err, out)
			}
			for _, want := range []string{"kind:         swapper", v.version, "loadout_v2.running_models"} {
				if !strings.Contains(out, want) {
					t.Errorf("policy check lacks %q:\n%s", want, out)
				}
			}
			out, err = runPolicyCmd(t, append([]string{"--timeout", "10s", "test", wasm}, scenarios...)...)
			if err != nil {
				t.Fatalf("the C policy fails its Go twin's scenarios: %v\n%s", err, out)
			}
			t.Log("\n" + out)
		})
	}
}
