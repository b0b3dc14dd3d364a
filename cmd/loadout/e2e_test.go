package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/internal/sdksource"
	"github.com/loadout-dev/loadout/internal/wasmbuild"
	"github.com/loadout-dev/loadout/policies/builtin"
)

// The end-to-end tests run the real binary: `loadout serve` with real
// backend plugins (`loadout backend sim|cmd`) starting real simulated model
// servers, driven over HTTP on 127.0.0.1, and checked by pid.

var loadoutBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "loadout-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		if err := buildBinary(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

// buildBinary builds the built-in policies (always: a stale module would
// be embedded silently; the Go build cache makes this cheap), packs the
// policy SDK, and builds the loadout binary that embeds them.
func buildBinary(dir string) error {
	for _, name := range builtin.Names() {
		out := filepath.Join("..", "..", "policies", "builtin", "wasm", name+".wasm")
		if msg, err := wasmbuild.Command("github.com/loadout-dev/loadout/policies/"+name, out).CombinedOutput(); err != nil {
			return fmt.Errorf("building policy %s: %v\n%s", name, err, msg)
		}
	}
	// The SDK `policy new` unpacks, as `make build` embeds it.
	if err := sdksource.WriteArchive(filepath.Join("..", "..", "sdk"), filepath.Join("..", "..", "internal", "sdksource", "archive", "sdk.zip")); err != nil {
		return fmt.Errorf("packing the policy SDK: %w", err)
	}
	loadoutBin = filepath.Join(dir, "loadout")
	if msg, err := exec.Command("go", "build", "-o", loadoutBin, ".").CombinedOutput(); err != nil {
		return fmt.Errorf("building loadout: %v\n%s", err, msg)
	}
	return nil
}

// server is one running `loadout serve`.
type server struct {
	t    testing.TB
	cmd  *exec.Cmd
	base string
	mu   sync.Mutex
	logs bytes.Buffer
	exit chan error
	// exited is closed once the process has exited: what the cleanup
	// reads, so that a test may take the exit status from exit first.
	exited chan struct{}
}

var listenRE = regexp.MustCompile(`msg="loadout serving" listen=(\S+)`)

// startServer runs loadout serve on configPath (or the embedded default
// when empty), with extra flags after the defaults (a repeated flag's last
// value wins), and waits until it listens.
func startServer(t testing.TB, configPath string, extra ...string) *server {
	t.Helper()
	args := []string{"serve", "--listen", "127.0.0.1:0", "--shutdown-timeout", "20s", "--log-level", "info"}
	if configPath != "" {
		args = append(args, "--config", configPath)
	}
	args = append(args, extra...)
	s := &server{t: t, cmd: exec.Command(loadoutBin, args...), exit: make(chan error, 1), exited: make(chan struct{})}
	s.cmd.Env = append(os.Environ(),
		"LOADOUT_BIN="+loadoutBin,
		"LOADOUT_E2E_START_PORT="+strconv.Itoa(startPort()),
		"XDG_DATA_HOME="+t.TempDir()) // serve's default jobs database goes there, not under $HOME
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.logs.WriteString(line + "\n")
			s.mu.Unlock()
			if m := listenRE.FindStringSubmatch(line); m != nil {
				listening <- m[1]
			}
		}
		err := s.cmd.Wait()
		close(s.exited)
		s.exit <- err
	}()
	t.Cleanup(func() {
		s.terminate()
		if t.Failed() {
			t.Logf("loadout log:\n%s", s.log())
		}
	})
	select {
	case addr := <-listening:
		s.base = "http://" + addr
	case err := <-s.exit:
		t.Fatalf("loadout serve exited before listening: %v\n%s", err, s.log())
	case <-time.After(60 * time.Second):
		t.Fatalf("loadout serve did not start listening\n%s", s.log())
	}
	return s
}

// startPort picks the first port for a test server's models: random, so
// that servers of consecutive tests do not meet a port still in TIME_WAIT,
// and below the kernel's ephemeral range, where the client sockets of every
// test (ours and other packages') get their ports.
func startPort() int {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	base := 10000
	if low-base < 2000 { // a very wide ephemeral range: take what is left
		base = 1024
	}
	return base + rand.IntN(max(low-base-100, 100))
}

func (s *server) log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logs.String()
}

// terminate sends SIGTERM to the server if it is still running and waits
// until it exits, killing it after 30 s; one that has exited is left as
// it is.
func (s *server) terminate() {
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (s *server) stop() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		s.t.Fatal(err)
	}
	select {
	case err := <-s.exit:
		if err != nil {
			s.t.Fatalf("loadout exited with %v after SIGTERM, want 0\n%s", err, s.log())
		}
	case <-time.After(40 * time.Second):
		s.t.Fatalf("loadout did not exit after SIGTERM")
	}
}

func (s *server) post(path, body string) (int, string) {
	s.t.Helper()
	resp, err := http.Post(s.base+path, "application/json", strings.NewReader(body))
	if err != nil {
		s.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// answer is what a request sent in the background got: its status and
// body, or the error that stopped it.
type answer struct {
	code   int
	body   string
	err    error
	header http.Header
}

// postAsync POSTs body (JSON) to path in the background, for a request
// that must be in flight while the test acts; its answer comes on the
// channel. It calls no t method, so it may run past a failed test.
func (s *server) postAsync(path, body string) <-chan answer {
	out := make(chan answer, 1)
	go func() {
		resp, err := http.Post(s.base+path, "application/json", strings.NewReader(body))
		if err != nil {
			out <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		out <- answer{resp.StatusCode, string(b), err, resp.Header}
	}()
	return out
}

func (s *server) get(path string) (int, string) {
	s.t.Helper()
	resp, err := http.Get(s.base + path)
	if err != nil {
		s.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func chat(model string, stream bool) string {
	return fmt.Sprintf(`{"model":%q,"stream":%v,"max_tokens":8,"messages":[{"role":"user","content":"hello"}]}`, model, stream)
}

// mustChat sends a non-streaming chat completion and requires a 200.
func (s *server) mustChat(model string) {
	s.t.Helper()
	if code, body := s.post("/v1/chat/completions", chat(model, false)); code != 200 {
		s.t.Fatalf("chat %s: %d %s", model, code, body)
	}
}

// pidsMatching returns the pids of the processes whose command line
// (argv, from /proc) match accepts.
func pidsMatching(tb testing.TB, match func(args []string) bool) []int {
	tb.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		tb.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if match(strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// modelPids returns the pids of the simulated model servers serving model.
func modelPids(t testing.TB, model string) []int {
	t.Helper()
	return pidsMatching(t, func(args []string) bool {
		if len(args) < 2 || args[0] != loadoutBin || args[1] != "sim-server" {
			return false
		}
		for i, a := range args {
			if (a == "--model" && i+1 < len(args) && args[i+1] == model) || a == "--model="+model {
				return true
			}
		}
		return false
	})
}

func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	// A zombie is dead for our purposes.
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !strings.Contains(string(stat), ") Z ")
}

// eventually polls cond until it holds or 20 s pass: for conditions with
// no event to await (a process disappearing).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func onePid(t testing.TB, model string) int {
	t.Helper()
	pids := modelPids(t, model)
	if len(pids) != 1 {
		t.Fatalf("model %s: %d server processes (%v), want 1", model, len(pids), pids)
	}
	return pids[0]
}

func TestServe_SwapsEvictsAndShutsDownClean(t *testing.T) {
	s := startServer(t, "../../testdata/e2e/sim.yaml")

	s.mustChat("model-a") // an alias: cold-loads a
	pidA := onePid(t, "a")
	s.mustChat("keep") // persistent group: loads beside a
	pidKeep := onePid(t, "keep")
	if !alive(pidA) {
		t.Fatal("loading a persistent model evicted a")
	}

	s.mustChat("b") // same exclusive group: evicts a
	pidB := onePid(t, "b")
	eventually(t, "a's server to exit", func() bool { return !alive(pidA) })
	if !alive(pidKeep) {
		t.Fatal("the persistent model was evicted")
	}

	_, running := s.get("/running")
	if !strings.Contains(running, `"b"`) || !strings.Contains(running, `"keep"`) || strings.Contains(running, `"a"`) {
		t.Fatalf("/running = %s", running)
	}

	s.stop()
	for _, pid := range []int{pidB, pidKeep} {
		if alive(pid) {
			t.Errorf("model server %d still running after shutdown", pid)
		}
	}
	if left := modelPids(t, "b"); len(left) > 0 {
		t.Errorf("processes left: %v", left)
	}
}

func TestServe_ConcurrentRequestsShareOneLoad(t *testing.T) {
	s := startServer(t, "../../testdata/e2e/sim.yaml")
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if code, body := s.post("/v1/chat/completions", chat("a", false)); code != 200 {
				t.Errorf("chat: %d %s", code, body)
			}
		})
	}
	wg.Wait()
	if n := strings.Count(s.log(), `msg="model loaded" model=a `); n != 1 {
		t.Fatalf("a was loaded %d times for 8 concurrent requests, want 1", n)
	}
	onePid(t, "a")
}

func TestServe_StreamArrivesTokenByToken(t *testing.T) {
	s := startServer(t, "../../testdata/e2e/sim.yaml")
	s.mustChat("a") // loaded, so timing below is generation only
	body := `{"model":"a","stream":true,"max_tokens":12,"messages":[{"role":"user","content":"count"}]}`
	resp, err := http.Post(s.base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("content type %q", ct)
	}
	var arrivals []time.Time
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "data: ") && line != "data: [DONE]" {
			arrivals = append(arrivals, time.Now())
		}
	}
	// 12 tokens at 50 tokens/s take about 240 ms to generate; a buffered
	// stream would deliver them all at once.
	if len(arrivals) < 10 {
		t.Fatalf("%d chunks", len(arrivals))
	}
	spread := arrivals[len(arrivals)-1].Sub(arrivals[0])
	if spread < 120*time.Millisecond {
		t.Fatalf("chunks arrived within %v of each other: the stream was buffered", spread)
	}
}

func TestServe_UnloadAndTTL(t *testing.T) {
	s := startServer(t, "../../testdata/e2e/sim.yaml")
	s.mustChat("a")
	pidA := onePid(t, "a")
	if code, _ := s.post("/unload", ""); code != 200 {
		t.Fatalf("/unload: %d", code)
	}
	if alive(pidA) {
		t.Fatal("/unload returned before a's server exited")
	}

	s.mustChat("idle") // ttl: 1 second
	pidIdle := onePid(t, "idle")
	eventually(t, "the idle model's TTL to unload it", func() bool { return !alive(pidIdle) })
	// The process is gone a moment before the run loop hears its stop.
	eventually(t, "/running to drop the unloaded model", func() bool {
		_, running := s.get("/running")
		return !strings.Contains(running, `"idle"`)
	})
}

func TestServe_BackendCrashMidStream(t *testing.T) {
	s := startServer(t, "../../testdata/e2e/sim.yaml")
	body := `{"model":"crashy","stream":true,"max_tokens":50,"messages":[{"role":"user","content":"go"}]}`
	resp, err := http.Post(s.base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(raw), `"error"`) {
		t.Fatalf("stream of a crashing backend ended without an error event:\n%s", raw)
	}
	eventually(t, "crashy to be marked failed", func() bool {
		_, models := s.get("/api/models")
		return strings.Contains(models, `"failed"`)
	})
	// The next request starts it again.
	if code, body := s.post("/v1/chat/completions", `{"model":"crashy","max_tokens":2,"messages":[{"role":"user","content":"x"}]}`); code != 200 {
		t.Fatalf("request after the crash: %d %s", code, body)
	}
}

func TestServe_CmdBackend(t *testing.T) {
	s := startServer(t, "../../testdata/e2e/sim.yaml")
	s.mustChat("viacmd")
	pid := onePid(t, "viacmd")
	s.stop()
	if alive(pid) {
		t.Fatal("the cmd backend's server outlived loadout")
	}
}

func TestServe_BadInput(t *testing.T) {
	s := startServer(t, "../../testdata/e2e/sim.yaml")
	for _, tc := range []struct {
		name, body string
		want       int
	}{
		{"malformed JSON", `{"model": "a",`, 400},
		{"missing model", `{"messages": []}`, 400},
		{"unknown model", `{"model": "nope", "messages": []}`, 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := s.post("/v1/chat/completions", tc.body)
			var e struct {
				Error struct{ Message string } `json:"error"`
			}
			if code != tc.want || json.Unmarshal([]byte(body), &e) != nil || e.Error.Message == "" {
				t.Fatalf("got %d %s, want %d with an OpenAI-shaped error", code, body, tc.want)
			}
		})
	}
	s.mustChat("a") // and it is still serving
}

func TestServe_EmbeddedDefaultConfig(t *testing.T) {
	s := startServer(t, "")
	_, models := s.get("/v1/models")
	for _, id := range []string{"small", "medium", "embed"} {
		if !strings.Contains(models, `"`+id+`"`) {
			t.Fatalf("/v1/models lacks %s: %s", id, models)
		}
	}
	s.mustChat("small")
	s.stop()
}

// pythonClient runs a client script of testdata/e2e, which drives the
// Python package module, against a server on testdata/e2e/sim.yaml at
// its base URL plus suffix: it must exit 0 and print "ok". The test is
// skipped without the package (a failure with LOADOUT_REQUIRE_PYTHON, as
// in CI).
func pythonClient(t *testing.T, module, script, suffix string) {
	t.Helper()
	if err := exec.Command("python3", "-c", "import "+module).Run(); err != nil {
		if os.Getenv("LOADOUT_REQUIRE_PYTHON") != "" {
			t.Fatalf("the %s Python package is required (pip install -r testdata/requirements.txt)", module)
		}
		t.Skipf("the %s Python package is not installed (pip install -r testdata/requirements.txt)", module)
	}
	s := startServer(t, "../../testdata/e2e/sim.yaml")
	out, err := exec.Command("python3", "../../testdata/e2e/"+script, s.base+suffix).CombinedOutput()
	if err != nil {
		t.Fatalf("%s client: %v\n%s", module, err, out)
	}
	if !strings.Contains(string(out), "ok") {
		t.Fatalf("%s client output:\n%s", module, out)
	}
}

func TestServe_OpenAIPythonClient(t *testing.T) {
	pythonClient(t, "openai", "openai_client.py", "/v1")
}

// Ollama's own Python client, pointed at Loadout, lists, shows, chats
// (whole and streamed), generates, embeds, loads and unloads through
// Ollama's API (keep_alive included), and reads an unknown model's 404.
func TestServe_OllamaPythonClient(t *testing.T) {
	pythonClient(t, "ollama", "ollama_client.py", "")
}

func TestServe_ModelExitsDuringStartup(t *testing.T) {
	s := startServer(t, "../../testdata/e2e/sim.yaml")
	code, body := s.post("/v1/chat/completions", chat("broken", false))
	if code != 502 || !strings.Contains(body, "model file corrupt") {
		t.Fatalf("got %d %s, want 502 with the server's stderr", code, body)
	}
	s.mustChat("a") // nothing else is affected
}

// A model that keeps failing to start backs off (host/router/backoff.go):
// after its second failed start in a row the next request fails at once,
// without starting it, saying how many starts failed and when the next is
// allowed; /api/models shows the count and the time.
func TestServe_StartCrashLoopBacksOff(t *testing.T) {
	s := startServer(t, "../../testdata/e2e/sim.yaml")
	for i := 1; i <= 2; i++ {
		if code, body := s.post("/v1/chat/completions", chat("broken", false)); code != 502 || !strings.Contains(body, "model file corrupt") {
			t.Fatalf("start %d: %d %s", i, code, body)
		}
	}
	start := time.Now()
	code, body := s.post("/v1/chat/completions", chat("broken", false))
	if code != 502 || !strings.Contains(body, "backing off after 2 failed starts") || !strings.Contains(body, "model file corrupt") {
		t.Fatalf("during the backoff: %d %s", code, body)
	}
	t.Logf("answered in %s during the backoff", time.Since(start).Round(time.Millisecond))
	var v struct {
		Models []struct {
			Model         string    `json:"model"`
			StartFailures int       `json:"start_failures"`
			RetryAt       time.Time `json:"retry_at"`
		} `json:"models"`
	}
	_, list := s.get("/api/models")
	if err := json.Unmarshal([]byte(list), &v); err != nil {
		t.Fatal(err)
	}
	for _, m := range v.Models {
		if m.Model == "broken" && (m.StartFailures != 2 || !m.RetryAt.After(start)) {
			t.Fatalf("/api/models: broken has %d failed starts, retry at %v", m.StartFailures, m.RetryAt)
		}
	}
	s.mustChat("a") // nothing else is affected
}

func TestConfigCheck_ReportsFileLine(t *testing.T) {
	out, err := exec.Command(loadoutBin, "config", "check", "../../testdata/e2e/bad.yaml").CombinedOutput()
	if err == nil {
		t.Fatalf("config check of a bad file succeeded:\n%s", out)
	}
	if !strings.Contains(string(out), "bad.yaml:4:10") || !strings.Contains(string(out), "models.a.ttl") {
		t.Fatalf("error does not name file:line and key:\n%s", out)
	}
	good := exec.Command(loadoutBin, "config", "check", "../../testdata/e2e/sim.yaml")
	good.Env = append(os.Environ(), "LOADOUT_BIN="+loadoutBin, "LOADOUT_E2E_START_PORT=20000")
	out, err = good.Output()
	if err != nil {
		t.Fatalf("config check of a good file: %v\n%s", err, out)
	}
	if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); lines[len(lines)-1] != "OK" {
		t.Errorf("config check of a good file does not end with OK:\n%s", out)
	}
	// A file that parses but whose router refuses its settings: the report
	// is printed, the error names the setting's line, and nothing says OK.
	cfg := writeConfig(t, t.TempDir(), "routing: {router: {use: foresight, settings: {patience: 2}}}\nmodels:\n  a:\n    backend: sim\n")
	bad := exec.Command(loadoutBin, "config", "check", cfg)
	var stderr strings.Builder
	bad.Stderr = &stderr
	out, err = bad.Output()
	if err == nil || !strings.Contains(stderr.String(), cfg+":1:") || !strings.Contains(stderr.String(), "patience") {
		t.Fatalf("config check of a router refusing its settings: %v\n%s%s", err, out, stderr.String())
	}
	if slices.Contains(strings.Split(string(out), "\n"), "OK") {
		t.Errorf("config check of a router refusing its settings says OK:\n%s", out)
	}
}
