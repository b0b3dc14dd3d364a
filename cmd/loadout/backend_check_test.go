package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// testBinaries are the test plugin (backends/internal/testplugin) and the
// example backend (examples/llamacpp-python), built once for the tests that
// launch them.
var testBinaries struct {
	once                sync.Once
	testplugin, example string
	err                 error
}

func buildTestBinaries(t *testing.T) (testplugin, example string) {
	t.Helper()
	b := &testBinaries
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "loadout-backend-check-")
		if err != nil {
			b.err = err
			return
		}
		b.testplugin, b.example = filepath.Join(dir, "testplugin"), filepath.Join(dir, "llamacpp-python")
		if out, err := exec.Command("go", "build", "-o", b.testplugin, "github.com/loadout-dev/loadout/backends/internal/testplugin").CombinedOutput(); err != nil {
			b.err = err
			t.Logf("%s", out)
			return
		}
		cmd := exec.Command("go", "build", "-o", b.example, ".")
		cmd.Dir = filepath.Join("..", "..", "examples", "llamacpp-python")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = err
			t.Logf("%s", out)
		}
	})
	if b.err != nil {
		t.Fatalf("building the test plugins: %v", b.err)
	}
	return b.testplugin, b.example
}

// script writes an executable shell script running body and returns its
// path: a plugin binary `backend check` can name (it passes no arguments).
func script(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// runBackendCheck runs `loadout backend check ARGS…` as a subprocess (a
// built-in backend runs this binary) and returns its output and error.
func runBackendCheck(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(loadoutBin, append([]string{"backend", "check"}, args...)...).CombinedOutput()
	return string(out), err
}

// The built-ins and the example backend pass: the handshake settles on
// protocol version 2, the capabilities and limitations are reported, and
// Validate's problems with the sample options are printed by option.
func TestBackendCheck_Plugins(t *testing.T) {
	testplugin, example := buildTestBinaries(t)
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"cmd", []string{"cmd"}, []string{"protocol version 2 (this host speaks 1 to 2)", "name             cmd", "can sleep        yes, levels 1 and 2", "estimates VRAM   yes"}}, // llama-server's command lines
		{"llamaserver", []string{"llamaserver"}, []string{"protocol version 2", "name             llamaserver"}},
		{"sim", []string{"sim", "--options", `{"tokens_per_second": -1}`}, []string{"estimates VRAM   yes", "measures memory  yes", "tokens_per_second: tokens per second must be 0.01 to 1e+09, got -1"}},
		{"example", []string{example, "--options", `{"model": "/m.gguf", "bogus": 1}`}, []string{"name             llamacpp-python 0.1.0", "estimates VRAM   yes", "1 problem(s)", "bogus: unknown option"}},
		{"sleepy", []string{script(t, "sleepy", "exec "+testplugin+" sleepy")}, []string{"can sleep        yes, level 1", "residency        yes"}},
		{"version 1 plugin", []string{script(t, "old", "exec "+testplugin+" cmd-v1")}, []string{"protocol version 1 (this host speaks 1 to 2)", "can sleep        no (protocol version 1)", "speaks protocol version 1 (this host speaks 1 to 2): it cannot sleep or wake models"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runBackendCheck(t, tc.args...)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// Each way a binary can fail to be a working plugin fails the check with a
// message that says which, and no check waits longer than its bound.
func TestBackendCheck_Failures(t *testing.T) {
	testplugin, _ := buildTestBinaries(t)
	notExec := filepath.Join(t.TempDir(), "plugin.go")
	if err := os.WriteFile(notExec, []byte("package main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"missing", []string{"./no/such/plugin"}, "backend plugin ./no/such/plugin: no such file"},
		{"not executable", []string{notExec}, "is not executable"},
		{"not a plugin", []string{script(t, "notplugin", "exit 0")}, "not a loadout backend plugin (its main must call plugins.Serve)"},
		{"hangs in the handshake", []string{script(t, "hang", "exec sleep 60"), "--timeout", "500ms"}, "no handshake within 500ms"},
		{"newer protocol", []string{script(t, "v3", "exec "+testplugin+" v3")}, "the plugin speaks protocol version 3, this host speaks versions 1 to 2"},
		{"stdout before the handshake", []string{script(t, "noisy", "exec "+testplugin+" stdout")}, `it wrote "starting up" to stdout before the handshake`},
		{"crashes in Validate", []string{script(t, "crash", "exec "+testplugin+" crash-validate")}, "Validate({}): backend plugin exited"},
		{"a name that is no built-in", []string{"llama"}, `"llama" is neither a built-in backend (cmd, llamaserver, sim) nor a path`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runBackendCheck(t, tc.args...)
			if err == nil {
				t.Fatalf("check passed:\n%s", out)
			}
			if !strings.Contains(out, tc.want) {
				t.Errorf("output lacks %q:\n%s", tc.want, out)
			}
		})
	}
}
