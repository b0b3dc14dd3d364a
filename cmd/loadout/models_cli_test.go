package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/config"
)

const cliAPIKey = "sk-cli-test"

// runCLI runs the loadout binary with args and the environment env added
// (LOADOUT_API_KEY and LOADOUT_JOB_TOKEN cleared first), and returns its
// combined output and exit code.
func runCLI(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	// A bound only so that a CLI that hangs fails the test instead of
	// hanging it; every command here ends in well under a second.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, loadoutBin, args...)
	cmd.Env = append(os.Environ(), append([]string{"LOADOUT_API_KEY=", "LOADOUT_JOB_TOKEN="}, env...)...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("loadout %v: %v", args, err)
	}
	return string(out), 0
}

// cliOK runs the CLI with the test's API key and fails t unless it exits 0.
func cliOK(t *testing.T, s *server, args ...string) string {
	t.Helper()
	out, code := runCLI(t, []string{"LOADOUT_API_KEY=" + cliAPIKey}, append(args, "--server", s.base)...)
	if code != 0 {
		t.Fatalf("loadout %s: exit %d\n%s", strings.Join(args, " "), code, out)
	}
	return out
}

// psRow is the row of model in ps's output, as its fields; nil if absent.
func psRow(out, model string) []string {
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == model {
			return f
		}
	}
	return nil
}

// The Ollama-style CLI against a real `loadout serve` that requires an
// API key: ps lists what is loaded (VRAM, GPUs, in flight, queued, TTL
// left), load and unload wait for the model, logs prints and follows the
// model server's output (and says when there is none), and config default
// prints the embedded config.
func TestModelsCLI_AgainstServer(t *testing.T) {
	s := startServer(t, "../../testdata/e2e/cli.yaml")

	if out := cliOK(t, s, "ps"); psRow(out, "a") != nil || !strings.HasPrefix(out, "NAME") {
		t.Errorf("ps before any load:\n%s", out)
	}
	if out := cliOK(t, s, "ps", "--all"); psRow(out, "a") == nil || psRow(out, "a")[1] != "stopped" {
		t.Errorf("ps --all lists no stopped a:\n%s", out)
	}
	if out := cliOK(t, s, "logs", "a"); !strings.Contains(out, "has written nothing") {
		t.Errorf("logs a before it ever ran: %q, want it said that nothing was written", out)
	}
	if out := cliOK(t, s, "load", "a"); out != "a is ready\n" {
		t.Errorf("load a: %q", out)
	}
	out := cliOK(t, s, "ps")
	// NAME STATE VRAM(2 fields) GPUS IN-FLIGHT QUEUED UNTIL...
	if row := psRow(out, "a"); row == nil || row[1] != "ready" || row[2]+" "+row[3] != "2 GiB" || row[4] != "0" || row[5] != "0" || row[6] != "0" || !strings.HasSuffix(out, "from now\n") {
		t.Errorf("ps after load a:\n%s", out)
	}
	if out := cliOK(t, s, "logs", "a"); !strings.Contains(out, "sim server listening") {
		t.Errorf("logs a:\n%s", out)
	}

	// logs -f: the kept output first, then it follows until interrupted.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	follow := exec.CommandContext(ctx, loadoutBin, "logs", "-f", "a", "--server", s.base)
	follow.Env = append(os.Environ(), "LOADOUT_API_KEY="+cliAPIKey)
	stdout, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.Contains(line, "sim") {
		t.Errorf("logs -f a: first line %q, %v", line, err)
	}
	cancel()
	_ = follow.Wait()

	if out := cliOK(t, s, "unload", "a"); out != "a unloaded\n" {
		t.Errorf("unload a: %q", out)
	}
	if out := cliOK(t, s, "ps"); psRow(out, "a") != nil {
		t.Errorf("ps after unload a:\n%s", out)
	}
	cliOK(t, s, "load", "b")
	if out := cliOK(t, s, "unload"); out != "every model unloaded\n" {
		t.Errorf("unload: %q", out)
	}
	if out := cliOK(t, s, "ps", "--all"); psRow(out, "b") == nil || psRow(out, "b")[1] != "stopped" {
		t.Errorf("ps --all after unload:\n%s", out)
	}
	// A model the server does not know: its error, on one line.
	if out, code := runCLI(t, []string{"LOADOUT_API_KEY=" + cliAPIKey}, "load", "nosuch", "--server", s.base); code == 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, "nosuch") {
		t.Errorf("load nosuch: exit %d, %q", code, out)
	}

	// Without the key, or with a wrong one: one line naming where the key goes.
	for _, env := range [][]string{nil, {"LOADOUT_API_KEY=wrong"}} {
		for _, args := range [][]string{{"ps"}, {"load", "a"}, {"unload"}, {"logs", "a"}} {
			out, code := runCLI(t, env, append(args, "--server", s.base)...)
			if code == 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, "(HTTP 401): pass --api-key or set $LOADOUT_API_KEY") {
				t.Errorf("%v %v: exit %d, %q; want one line naming --api-key and $LOADOUT_API_KEY", env, args, code, out)
			}
		}
	}
	if out, _ := runCLI(t, nil, "jobs", "list", "--server", s.base); !strings.Contains(out, "pass --token or set $LOADOUT_JOB_TOKEN") && !strings.Contains(out, "jobs API is off") {
		t.Errorf("jobs list without a token: %q", out)
	}
}

// ps on a box with a peer lists the peer's models after its own, by their
// full names, on "peer b", with the states the peer reports (a stopped one
// only with --all), and "peer down" once the peer stops answering.
func TestModelsCLI_PsListsPeersModels(t *testing.T) {
	b := startServer(t, peerConfig(t, []string{"mb", "idle"}))
	a := startServer(t, peerConfig(t, []string{"la"}, "b="+b.base+":mb,idle"))
	a.mustChat("la")
	a.mustChat("b/mb")
	ps := func(args ...string) string {
		out, code := runCLI(t, nil, append([]string{"ps", "--server", a.base}, args...)...)
		if code != 0 {
			t.Fatalf("ps %v: exit %d\n%s", args, code, out)
		}
		return out
	}
	eventually(t, "a's check of b to see mb ready and idle", func() bool { return a.readyIdle("b", "mb") })
	out := ps()
	// NAME STATE VRAM GPUS(2 fields) IN-FLIGHT QUEUED UNTIL
	if row := psRow(out, "b/mb"); row == nil || row[1] != "ready" || row[2] != "-" || row[3]+" "+row[4] != "peer b" || row[5] != "0" || row[6] != "0" || row[7] != "-" {
		t.Errorf("ps: b/mb's row:\n%s", out)
	}
	if psRow(out, "la") == nil || psRow(out, "b/idle") != nil {
		t.Errorf("ps: want la, b/mb, and not the stopped b/idle:\n%s", out)
	}
	if row := psRow(ps("--all"), "b/idle"); row == nil || row[1] != "stopped" {
		t.Errorf("ps --all: b/idle's row %v", row)
	}
	if err := b.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a to see b down", func() bool { return a.peers().Peers[0].State == "down" })
	out = ps()
	for _, m := range []string{"b/mb", "b/idle"} {
		if row := psRow(out, m); row == nil || row[1]+" "+row[2] != "peer down" {
			t.Errorf("ps with b down: %s's row %v\n%s", m, row, out)
		}
	}
}

// Against a server that is down, one that accepts connections and never
// answers, and one that answers something that is not Loadout: every
// command prints one line saying which, and exits non-zero.
func TestModelsCLI_DownHungGarbage(t *testing.T) {
	down, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	downURL := "http://" + down.Addr().String()
	down.Close()

	hung := silentListener(t)

	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stall := make(chan struct{})
	garbage := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/jobs" { // headers, then a body that never ends
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"jobs": [`)
			w.(http.Flusher).Flush()
			select {
			case <-stall:
			case <-r.Context().Done():
			}
			return
		}
		fmt.Fprint(w, "<html><body>a router's login page</body></html>")
	})}
	go func() { _ = garbage.Serve(gln) }()
	t.Cleanup(func() { close(stall); garbage.Close() })

	commands := [][]string{{"ps"}, {"load", "a"}, {"unload", "a"}, {"logs", "a"}, {"jobs", "get", "x"}}
	stalled := [][]string{{"jobs", "list"}}
	for _, tc := range []struct {
		name, url, want string
		skip            func(args []string) bool
		commands        [][]string // default: commands
	}{
		{"down", downURL, "connection refused (is `loadout serve` running there? see --server)", nil, nil},
		{"hung", "http://" + hung.Addr().String(), "no answer within 300ms", nil, nil},
		// A text body (logs) cannot be told from a Loadout's.
		{"garbage", "http://" + gln.Addr().String(), "is not Loadout's", func(args []string) bool { return args[0] == "logs" }, nil},
		{"stalled body", "http://" + gln.Addr().String(), "the answer did not finish within 300ms (--timeout)", nil, stalled},
	} {
		if tc.commands == nil {
			tc.commands = commands
		}
		for _, args := range tc.commands {
			if tc.skip != nil && tc.skip(args) {
				continue
			}
			full := append(append([]string{}, args...), "--server", tc.url, "--timeout", "300ms")
			if args[0] == "load" || args[0] == "unload" {
				full = append(full, "--wait", "300ms")
			}
			out, code := runCLI(t, []string{"LOADOUT_API_KEY=k"}, full...)
			if code == 0 || strings.Count(out, "\n") != 1 || !strings.Contains(out, tc.want) {
				t.Errorf("%s: loadout %v: exit %d, %q; want one line containing %q", tc.name, args, code, out, tc.want)
			}
		}
	}
}

// `loadout jobs logs -f` prints a running job's output as it comes and
// returns when the job ends.
func TestJobsCLI_LogsFollow(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, "../../testdata/e2e/jobs.yaml", "--db", filepath.Join(dir, "jobs.db"), "--job-token", e2eJobToken)
	gate := filepath.Join(dir, "gate")
	job := s.submitJob(fmt.Sprintf("command: 'echo first; while [ ! -e %[1]s ] && [ -d %[2]s ]; do sleep 0.05; done; echo second'\ngpus_per_node: 1\n", gate, dir))
	follow := exec.Command(loadoutBin, "jobs", "logs", "-f", job.ID, "--server", s.base, "--poll-interval", "50ms")
	follow.Env = append(os.Environ(), "LOADOUT_JOB_TOKEN="+e2eJobToken)
	stdout, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	follow.Stderr = &stderr
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- follow.Wait() }()
	r := bufio.NewReader(stdout)
	if line, err := r.ReadString('\n'); err != nil || line != "first\n" {
		t.Fatalf("first line %q, %v (%s)", line, err, stderr.String())
	}
	select {
	case err := <-done:
		t.Fatalf("logs -f returned while the job ran: %v", err)
	default:
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil { // the job goes on, and ends
		t.Fatal(err)
	}
	if line, err := r.ReadString('\n'); err != nil || line != "second\n" {
		t.Fatalf("second line %q, %v (%s)", line, err, stderr.String())
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("logs -f: %v\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		_ = follow.Process.Kill()
		t.Fatal("logs -f did not return when the job ended")
	}
}

func TestConfigDefault_PrintsEmbeddedConfig(t *testing.T) {
	out, code := runCLI(t, nil, "config", "default")
	if code != 0 || out != string(config.DefaultYAML()) {
		t.Errorf("config default: exit %d, output differs from host/config/default.yaml:\n%s", code, out)
	}
	if !strings.HasPrefix(out, "# ") {
		t.Errorf("config default is not commented:\n%.200s", out)
	}
}
