package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// freeLoopbackPort returns a port nothing listens on now (the kernel's
// choice), for a test's own use.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// loadout runs the binary to completion (bounded by a minute) and returns
// its combined output and error.
func loadout(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, loadoutBin, args...)
	cmd.Env = append(os.Environ(), "LOADOUT_BIN="+loadoutBin,
		"XDG_DATA_HOME="+t.TempDir()) // serve's default jobs database goes there, not under $HOME
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("loadout %v did not finish within a minute:\n%s", args, out)
	}
	return string(out), err
}

// With a foreign HTTP server already on startPort, Loadout never proxies to
// it: the model gets the next free port and answers itself.
func TestE2E_Port_ForeignListenerOnStartPort(t *testing.T) {
	var hits atomic.Int64
	foreign := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte(`{"status":"ok","foreign":true}`))
	}))
	defer foreign.Close()
	taken := foreign.Listener.Addr().(*net.TCPAddr).Port
	path := writeConfig(t, t.TempDir(), fmt.Sprintf(`startPort: %d
models:
  a:
    backend: sim
    options: {load_time: 20ms, tokens_per_second: 400}
  viacmd:
    cmd: ${env.LOADOUT_BIN} sim-server --port ${PORT} --model viacmd --tokens-per-second 400
`, taken))
	s := startServer(t, path)
	for _, model := range []string{"a", "viacmd"} {
		code, body := s.post("/v1/chat/completions", chat(model, false))
		if code != 200 || !strings.Contains(body, `"chat.completion"`) || strings.Contains(body, "foreign") {
			t.Fatalf("chat %s: %d %s; want the model's own completion", model, code, body)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the foreign server on startPort %d got %d requests, want 0", taken, n)
	}
	if want := fmt.Sprintf("port %d skipped for ${PORT}", taken); !strings.Contains(s.log(), want) {
		t.Errorf("log does not say %q", want)
	}
}

// Loadout's own listen port is never handed to a model (config check
// reports the port serve would use, and why the first was skipped), and a
// cmd model whose proxy points at Loadout itself is a config error.
func TestE2E_Port_ListenPortNeverHandedOut(t *testing.T) {
	listen := freeLoopbackPort(t)
	path := writeConfig(t, t.TempDir(), fmt.Sprintf("startPort: %d\nmodels:\n  a:\n    backend: sim\n", listen))
	out, err := loadout(t, "config", "check", "--listen", "127.0.0.1:"+strconv.Itoa(listen), path)
	if err != nil {
		t.Fatalf("config check: %v\n%s", err, out)
	}
	if want := fmt.Sprintf("port %d is Loadout's own listen port", listen); !strings.Contains(out, want) {
		t.Errorf("config check output lacks %q:\n%s", want, out)
	}
	// Model a gets the first port above the listen port that is free; a
	// port between them may be taken by another process (tests run in
	// parallel), and then config check says why it was skipped.
	m := regexp.MustCompile(`\n\s+a\s+sim\s+(\d+)\s`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("config check output has no port for model a:\n%s", out)
	}
	got, _ := strconv.Atoi(m[1])
	if got <= listen {
		t.Errorf("model a got port %d, want one above the listen port %d:\n%s", got, listen, out)
	}
	for p := listen + 1; p < got; p++ {
		if want := fmt.Sprintf("port %d skipped for ${PORT}: port %d is taken", p, p); !strings.Contains(out, want) {
			t.Errorf("model a got port %d, but nothing says why port %d was skipped:\n%s", got, p, out)
		}
	}

	path = writeConfig(t, t.TempDir(), fmt.Sprintf("models:\n  self:\n    cmd: server\n    proxy: http://localhost:%d\n", listen))
	out, err = loadout(t, "config", "check", "--listen", "127.0.0.1:"+strconv.Itoa(listen), path)
	if err == nil || !strings.Contains(out, "loadout.yaml:4:12: models.self.proxy:") || !strings.Contains(out, "Loadout's own listen address") {
		t.Fatalf("config check of a proxy at Loadout itself = %v, want a file:line error:\n%s", err, out)
	}
	out, err = loadout(t, "serve", "--listen", "127.0.0.1:"+strconv.Itoa(listen), "--config", path)
	if err == nil || !strings.Contains(out, "Loadout's own listen address") {
		t.Fatalf("serve with a proxy at Loadout itself = %v, want it refused:\n%s", err, out)
	}
}

// A bad backend option is a config error naming the model, the option and
// its line, at config check and at serve start, not a 502 on first use.
func TestE2E_Options_BadSimOptionRefused(t *testing.T) {
	path := writeConfig(t, t.TempDir(), `models:
  fast:
    backend: sim
    options:
      load_time: 10ms
      tokens_per_second: -5
`)
	want := "loadout.yaml:6:7: models.fast.options.tokens_per_second: tokens per second must be 0.01 to 1e+09, got -5"
	out, err := loadout(t, "config", "check", path)
	if err == nil || !strings.Contains(out, want) {
		t.Fatalf("config check = %v, want an error containing %q:\n%s", err, want, out)
	}
	out, err = loadout(t, "serve", "--listen", "127.0.0.1:0", "--config", path)
	if err == nil || !strings.Contains(out, want) {
		t.Fatalf("serve = %v, want it refused with %q:\n%s", err, want, out)
	}
}

// Two Loadouts on one box, the same startPort (issue 25): the first one's
// model is stopped when the second starts, so the second hands its own
// model the same port and loads it there. The first then loads its model
// on a free port instead of failing (or proxying to the other's), logs
// the move, and both models answer, each from its own server — through
// the sim backend and through a cmd model.
func TestE2E_Port_TakenByASecondLoadoutAtLoadTime(t *testing.T) {
	for _, tc := range []struct{ name, model string }{
		{"sim backend", "backend: sim\n    options: {load_time: 20ms, tokens_per_second: 400}"},
		{"cmd", "cmd: ${env.LOADOUT_BIN} sim-server --port ${PORT} --model MODEL --tokens-per-second 400"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port := freeLoopbackPort(t)
			cfg := func(id string) string {
				return writeConfig(t, t.TempDir(), fmt.Sprintf("startPort: %d\nmodels:\n  %s:\n    %s\n",
					port, id, strings.ReplaceAll(tc.model, "MODEL", id)))
			}
			first := startServer(t, cfg("first"))
			second := startServer(t, cfg("second"))
			second.mustChat("second") // second's model now listens on port
			if _, body := second.get("/running"); !strings.Contains(body, fmt.Sprintf(":%d", port)) {
				t.Fatalf("second's model is not on port %d: /running %s", port, body)
			}
			code, body := first.post("/v1/chat/completions", chat("first", false))
			if code != 200 || !strings.Contains(body, `"model":"first"`) {
				t.Fatalf("first's chat: %d %s; want its own model's completion", code, body)
			}
			if _, running := first.get("/running"); strings.Contains(running, fmt.Sprintf(":%d", port)) {
				t.Errorf("first's model still names the taken port %d: /running %s", port, running)
			}
			// One line says so, naming the old port and the new one (the
			// plugin's log keeps no fixed attribute order).
			moved := false
			for _, line := range strings.Split(first.log(), "\n") {
				if strings.Contains(line, "model port taken") && strings.Contains(line, fmt.Sprintf(" port=%d", port)) && strings.Contains(line, " new_port=") {
					moved = true
				}
			}
			if !moved {
				t.Errorf("first's log has no line saying port %d moved to a new_port", port)
			}
			second.mustChat("second")
		})
	}
}
