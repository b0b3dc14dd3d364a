package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// What a newcomer meets first: a busy address, a missing executable, the
// version flag.

// serve on an address something already listens on fails at once and
// says what to do: stop the other server or pick another --listen. It
// fails before it touches what a Loadout already running there uses: the
// trace it records is not truncated, the job database (where the job
// queue would resume that Loadout's jobs) is not opened.
func TestServe_AddressInUseSaysSo(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	data := t.TempDir()
	trace := filepath.Join(t.TempDir(), "traffic.csv")
	const recorded = "arrival_s,model,prompt_tokens,output_tokens\n0,small,10,5\n"
	if err := os.WriteFile(trace, []byte(recorded), 0o644); err != nil {
		t.Fatal(err)
	}
	serve := exec.Command(loadoutBin, "serve", "--listen", ln.Addr().String(), "--record-trace", trace)
	serve.Env = append(os.Environ(), "XDG_DATA_HOME="+data)
	out, err := serve.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "another server holds "+ln.Addr().String()) || !strings.Contains(string(out), "--listen") {
		t.Fatalf("serve on a busy address: err=%v\n%s", err, out)
	}
	if b, err := os.ReadFile(trace); err != nil || string(b) != recorded {
		t.Errorf("the other server's trace after a serve on its address: %q, %v; want it untouched", b, err)
	}
	if dbs, _ := filepath.Glob(filepath.Join(data, "loadout", "*.db")); len(dbs) > 0 {
		t.Errorf("a serve on a busy address opened %v", dbs)
	}
}

// config check names each model whose executable this machine lacks, as a
// warning (llama-swap starts such a config; the check still passes), and
// only those. The llamaserver model needs a real GGUF file (the check
// reads it for its estimate): the fixture requireLlamaCpp writes, not one
// another test may or may not have written first.
func TestConfigCheck_MissingExecutableWarns(t *testing.T) {
	check := func(t *testing.T, cfg string) string {
		t.Helper()
		out, err := exec.Command(loadoutBin, "config", "check", cfg).CombinedOutput()
		if err != nil {
			t.Fatalf("config check failed: %v\n%s", err, out)
		}
		return string(out)
	}
	t.Run("cmd", func(t *testing.T) {
		cfg := writeConfig(t, t.TempDir(), "models:\n"+
			"  gone:\n    cmd: /nonexistent/llama-server --port ${PORT}\n"+
			"  there:\n    cmd: sh -c 'sleep 1' --port ${PORT}\n")
		out := check(t, cfg)
		if !strings.Contains(out, cfg+":2:3: models.gone.cmd:") || !strings.Contains(out, "/nonexistent/llama-server") {
			t.Errorf("config check does not warn of gone's missing executable:\n%s", out)
		}
		if strings.Contains(out, "models.there.cmd") {
			t.Errorf("config check warns of sh, which is on PATH:\n%s", out)
		}
	})
	t.Run("llamaserver binary", func(t *testing.T) {
		tiny := filepath.Join(requireLlamaCpp(t), "tiny.gguf")
		cfg := writeConfig(t, t.TempDir(), "models:\n"+
			"  gguf:\n    backend: llamaserver\n    options: {model: "+tiny+", binary: /nonexistent/bin/llama-server}\n")
		if out := check(t, cfg); !strings.Contains(out, cfg+":2:3: models.gguf.options.binary:") {
			t.Errorf("config check does not warn of gguf's missing llama-server:\n%s", out)
		}
	})
}

// loadout --version prints what loadout version prints (llama-server and
// llama-swap take the flag; scripts ask it).
func TestVersion_FlagAndCommandAgree(t *testing.T) {
	flag, err := exec.Command(loadoutBin, "--version").Output()
	if err != nil {
		t.Fatalf("loadout --version: %v", err)
	}
	cmd, err := exec.Command(loadoutBin, "version").Output()
	if err != nil {
		t.Fatalf("loadout version: %v", err)
	}
	if string(flag) != string(cmd) || !strings.HasPrefix(string(flag), "loadout ") || !strings.Contains(string(flag), "policy ABI v") {
		t.Errorf("--version %q, version %q: want the same line", flag, cmd)
	}
}
