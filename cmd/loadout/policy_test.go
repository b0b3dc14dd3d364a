package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loadout-dev/loadout/internal/wasmbuild"
	"github.com/loadout-dev/loadout/sdk"
)

// guestFile builds a test guest of host/policy to a .wasm file in dir.
func guestFile(t *testing.T, dir, name string) string {
	t.Helper()
	wasm := wasmbuild.MustBuild(t, "github.com/loadout-dev/loadout/host/policy/testdata/guests/"+name)
	path := filepath.Join(dir, name+".wasm")
	if err := os.WriteFile(path, wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// runPolicyCmd runs `loadout policy ARGS…` in-process with a private
// compilation cache.
func runPolicyCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newPolicyCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(append([]string{"--cache-dir", filepath.Join(t.TempDir(), "cache")}, args...))
	err := cmd.Execute()
	return out.String(), err
}

func TestPolicyCheck_GoGuest(t *testing.T) {
	path := guestFile(t, t.TempDir(), "echo")
	out, err := runPolicyCmd(t, "check", path)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Log("\n" + out)
	for _, want := range []string{
		"file:         " + path,
		"kind:         scheduler",
		fmt.Sprintf("ABI version:  %d", sdk.ABIVersion),
		"compile time: ",
		"  on_request ",
		"(i32) -> i64",
		"  loadout_v2.grant_serve ",
		"(i64, i32, i32) -> i32",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestPolicyCheck_Refused(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.wasm")
	if err := os.WriteFile(bad, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ file, want string }{
		{bad, "policy " + bad + ": not a WebAssembly module"},
		{filepath.Join(dir, "missing.wasm"), "reading policy: open " + filepath.Join(dir, "missing.wasm")},
	} {
		out, err := runPolicyCmd(t, "check", tc.file)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want %q\n%s", err, tc.want, out)
		}
	}
	if _, err := runPolicyCmd(t, "check"); err == nil {
		t.Error("check with no file succeeded")
	}
	help, err := runPolicyCmd(t, "bench", "--help")
	if err != nil || !strings.Contains(help, "queue-drain scenario") || !strings.Contains(help, "--swapper string") {
		t.Errorf("bench --help: %v\n%s", err, help)
	}
}

func TestPolicyBench_SchedulerWithSwapper(t *testing.T) {
	dir := t.TempDir()
	echo, swapper := guestFile(t, dir, "echo"), guestFile(t, dir, "swapper")
	out, err := runPolicyCmd(t, "bench", "--events", "64", "--models", "4", "--swapper", swapper, "--swapper-settings", `{"max_running": 4}`, echo)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Log("\n" + out)
	for _, want := range []string{
		"policy: " + echo + " (scheduler), 4 ready models, 64 events per scenario",
		"median µs",
		"on_request (ready model)",
		"on_swap_done (drains 16)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestPolicyBench_Swapper(t *testing.T) {
	swapper := guestFile(t, t.TempDir(), "swapper")
	out, err := runPolicyCmd(t, "bench", "--events", "50", swapper)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Log("\n" + out)
	if !strings.Contains(out, "plan (evicts 1)") || !strings.Contains(out, "(swapper), 8 ready models") {
		t.Errorf("output:\n%s", out)
	}
	if _, err := runPolicyCmd(t, "bench", "--swapper", swapper, swapper); err == nil || !strings.Contains(err.Error(), "--swapper is for benchmarking a scheduler") {
		t.Errorf("swapper with --swapper: %v", err)
	}
}
