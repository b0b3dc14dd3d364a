package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/internal/wasmbuild"
)

// The fault suite: every fault Loadout already survives, held end to end
// against the real binary (docs/RELIABILITY.md maps each fault to its
// test). Faults held closer to the code (host/policy's sandbox, the router's
// rules, the proxy's body limit) are listed there too and not repeated here.

// flakyPkg is the test scheduler that panics on every Nth event.
const flakyPkg = "github.com/loadout-dev/loadout/testdata/policies/flaky"

// flakyWasm builds the flaky test scheduler into dir and returns its path.
func flakyWasm(tb testing.TB, dir string) string {
	tb.Helper()
	out := filepath.Join(dir, "flaky.wasm")
	if err := os.WriteFile(out, wasmbuild.MustBuild(tb, flakyPkg), 0o644); err != nil {
		tb.Fatal(err)
	}
	return out
}

// writeConfig writes a configuration file into dir and returns its path.
func writeConfig(tb testing.TB, dir, yaml string) string {
	tb.Helper()
	path := filepath.Join(dir, "loadout.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		tb.Fatal(err)
	}
	return path
}

// simModels is a models: block of two sim models a and b that exclude each
// other (one group), for configurations written by the tests.
const simModels = `healthCheckTimeout: 30
startPort: ${env.LOADOUT_E2E_START_PORT}
evict: stop
models:
  a:
    backend: sim
    options: {load_time: 100ms, tokens_per_second: 50, max_batch: 4}
  b:
    backend: sim
    options: {load_time: 100ms, tokens_per_second: 200, max_batch: 4}
`

// childrenOf returns the pids of the live processes whose parent is ppid.
func childrenOf(tb testing.TB, ppid int) []int {
	tb.Helper()
	var out []int
	for _, pid := range pidsMatching(tb, func([]string) bool { return true }) {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(ppid) && alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// pluginPid returns the pid of the server's `loadout backend NAME` plugin.
func (s *server) pluginPid(name string) int {
	s.t.Helper()
	for _, pid := range childrenOf(s.t, s.cmd.Process.Pid) {
		raw, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00"); len(args) >= 3 && args[1] == "backend" && args[2] == name {
			return pid
		}
	}
	s.t.Fatalf("no %s backend plugin runs under loadout %d", name, s.cmd.Process.Pid)
	return 0
}

// stream is one streaming chat completion being read line by line.
type stream struct {
	t    *testing.T
	resp *http.Response
	r    *bufio.Reader
}

func (s *server) openStream(ctx context.Context, model string, maxTokens int) *stream {
	s.t.Helper()
	body := fmt.Sprintf(`{"model":%q,"stream":true,"max_tokens":%d,"messages":[{"role":"user","content":"go"}]}`, model, maxTokens)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("stream %s: %v", model, err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		s.t.Fatalf("stream %s: %d %s", model, resp.StatusCode, b)
	}
	st := &stream{t: s.t.(*testing.T), resp: resp, r: bufio.NewReader(resp.Body)}
	s.t.Cleanup(func() { resp.Body.Close() })
	return st
}

// until reads events until one contains want, and fails if the stream ends
// first.
func (st *stream) until(want string) {
	st.t.Helper()
	for {
		line, err := st.r.ReadString('\n')
		if strings.HasPrefix(line, "data: ") && strings.Contains(line, want) {
			return
		}
		if err != nil {
			st.t.Fatalf("stream ended (%v) before an event containing %q", err, want)
		}
	}
}

// rest reads the stream to its end and reports whether it finished
// normally ([DONE]) and whether it carried an OpenAI-shaped error event.
func (st *stream) rest() (done, errorEvent bool, tail string) {
	b, _ := io.ReadAll(st.r)
	for _, line := range strings.Split(string(b), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
		}
		var e struct {
			Error *struct{ Message string } `json:"error"`
		}
		if json.Unmarshal([]byte(data), &e) == nil && e.Error != nil && e.Error.Message != "" {
			errorEvent = true
		}
	}
	return done, errorEvent, string(b[max(0, len(b)-400):])
}

// A scheduler that panics fails the request it held with a clear 503 (the
// host survives and re-instantiates it); one that keeps panicking is
// replaced by the built-in fifo, which then serves (DESIGN.md rule 7).
func TestFault_PolicyPanicFailsHeldRequestsThenFallbackServes(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, dir, simModels+fmt.Sprintf(`routing:
  scheduler:
    wasm: %s
    settings: {panic_every: 1}
  router: {use: group}
`, flakyWasm(t, dir)))
	s := startServer(t, cfg)
	code, body := s.post("/v1/chat/completions", chat("a", false))
	if code != 503 || !strings.Contains(body, "deliberate panic") || !strings.Contains(body, "flaky.wasm") {
		t.Fatalf("request held by a panicking scheduler: %d %s, want 503 naming the policy and the panic", code, body)
	}
	// Every event panics, so the crash-loop limit is reached within a few
	// requests (ticks count too); from then on fifo serves.
	served := false
	for i := 0; i < 20 && !served; i++ {
		code, body = s.post("/v1/chat/completions", chat("a", false))
		switch code {
		case 200:
			served = true
		case 503:
			if !strings.Contains(body, "flaky.wasm") {
				t.Fatalf("failure %d does not name the policy: %s", i, body)
			}
		default:
			t.Fatalf("request %d: %d %s, want 503 or 200", i, code, body)
		}
	}
	if !served {
		t.Fatal("no request was served after the scheduler crash-looped")
	}
	if !strings.Contains(s.log(), "the fallback takes over") {
		t.Fatal("served, but the log does not say the fallback took over")
	}
	_, pol := s.get("/api/policies")
	if !strings.Contains(pol, `"healthy":false`) {
		t.Errorf("/api/policies does not show the flaky scheduler unhealthy: %s", pol)
	}
	s.stop()
}

// A configuration loadout cannot run is refused at start-up with a message
// that names what is wrong, and nothing is left running.
func TestFault_ServeRefusesBadStartup(t *testing.T) {
	dir := t.TempDir()
	good := wasmbuild.MustBuild(t, flakyPkg)
	files := map[string][]byte{
		"truncated.wasm": good[:len(good)/2],
		"foreign.wasm":   {0, 'a', 's', 'm', 1, 0, 0, 0}, // a valid, empty module: no loadout ABI
		"notwasm.wasm":   []byte("#!/bin/sh\necho not a module\n"),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ name, yaml, want string }{
		{"truncated wasm", "models: {a: {backend: sim}}\nrouting: {scheduler: {wasm: truncated.wasm}}\n", "truncated.wasm"},
		{"foreign wasm", "models: {a: {backend: sim}}\nrouting: {scheduler: {wasm: foreign.wasm}}\n", "foreign.wasm"},
		{"not wasm", "models: {a: {backend: sim}}\nrouting: {router: {wasm: notwasm.wasm}}\n", "notwasm.wasm"},
		{"missing wasm", "models: {a: {backend: sim}}\nrouting: {scheduler: {wasm: gone.wasm}}\n", "gone.wasm"},
		{"bad yaml", "models:\n  a: {backend: sim\n", "loadout.yaml:"},
		{"bad value", "models:\n  a: {backend: sim, ttl: soon}\n", "models.a.ttl"},
		{"unknown backend", "models:\n  a: {backend: nope}\n", "nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := writeConfig(t, dir, tc.yaml)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, loadoutBin, "serve", "--config", cfg, "--listen", "127.0.0.1:0")
			cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+t.TempDir()) // not the real data directory
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || ctx.Err() != nil {
				t.Fatalf("serve exited with %v (timed out: %v), want a non-zero exit\n%s", err, ctx.Err() != nil, out)
			}
			if strings.Contains(string(out), "loadout serving") || !strings.Contains(string(out), tc.want) {
				t.Fatalf("output does not name %q, or it served:\n%s", tc.want, out)
			}
		})
	}
}

// kill -9 of a model server mid-stream: the client gets an error event,
// the model is marked failed, and the next request starts it again.
func TestFault_ModelServerKill9MidStream(t *testing.T) {
	s := startServer(t, "../../testdata/e2e/sim.yaml")
	st := s.openStream(context.Background(), "a", 200) // 4 s at 50 tokens/s
	st.until(`"content"`)
	pid := onePid(t, "a")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if done, errEv, tail := st.rest(); done || !errEv {
		t.Fatalf("stream after kill -9 of its server: done=%v error event=%v\n%s", done, errEv, tail)
	}
	eventually(t, "a to be marked failed", func() bool {
		_, models := s.get("/api/models")
		return strings.Contains(models, `"failed"`)
	})
	s.mustChat("a")
	if again := onePid(t, "a"); again == pid {
		t.Fatalf("a still served by the killed pid %d", pid)
	}
}

// kill -9 of the backend plugin mid-stream: its model server dies with it
// (no orphan), the client gets an error, and the next request starts a new
// plugin and a new server.
func TestFault_BackendPluginKill9MidStream(t *testing.T) {
	s := startServer(t, "../../testdata/e2e/sim.yaml")
	st := s.openStream(context.Background(), "a", 200)
	st.until(`"content"`)
	model, plugin := onePid(t, "a"), s.pluginPid("sim")
	if err := syscall.Kill(plugin, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if done, _, tail := st.rest(); done {
		t.Fatalf("the stream finished normally although its plugin was killed:\n%s", tail)
	}
	eventually(t, "the model server to die with its plugin", func() bool { return !alive(model) })
	// A request between the server's death and the host's noticing the
	// plugin's exit meets a dead upstream (a clean 502, as after any crash);
	// once the model is marked failed, the next request starts it again.
	eventually(t, "a to be marked failed", func() bool {
		_, models := s.get("/api/models")
		return strings.Contains(models, `"failed"`)
	})
	s.mustChat("a")
	if p := s.pluginPid("sim"); p == plugin {
		t.Fatalf("the killed plugin %d is still the sim plugin", plugin)
	}
	s.stop()
	if left := modelPids(t, "a"); len(left) > 0 {
		t.Fatalf("model servers left after shutdown: %v", left)
	}
}

// A model that never becomes ready fails its request after
// healthCheckTimeout (15 s, llama-swap's minimum) with a clear error; its
// process is stopped and other models are unaffected.
func TestFault_LoadNeverReady(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the 15 s health-check timeout")
	}
	dir := t.TempDir()
	cfg := writeConfig(t, dir, strings.Replace(simModels, "healthCheckTimeout: 30", "healthCheckTimeout: 15", 1)+`
  never:
    backend: sim
    options: {load_time: 1h}
routing:
  router:
    use: group
    settings:
      groups:
        solo: {swap: false, exclusive: false, members: [a, b, never]}
`)
	s := startServer(t, cfg)
	start := time.Now()
	code, body := s.post("/v1/chat/completions", chat("never", false))
	took := time.Since(start)
	if code < 500 || !strings.Contains(body, "never") || !strings.Contains(body, `"error"`) {
		t.Fatalf("a load that never becomes ready: %d %s, want a 5xx OpenAI error naming the model", code, body)
	}
	if took < 14*time.Second {
		t.Errorf("failed after %s, before the 15 s health-check timeout", took)
	}
	eventually(t, "the never-ready server to be stopped", func() bool { return len(modelPids(t, "never")) == 0 })
	s.mustChat("a")
}

// exclusiveAB is a config of the sim models a and b in one exclusive
// group, streaming the loading state: a request for one waits, queued,
// while the other is busy.
const exclusiveAB = "sendLoadingState: true\n" + simModels + `routing:
  router:
    use: group
    settings:
      groups:
        ab: {swap: true, exclusive: true, members: [a, b]}
`

// A client that leaves while queued is forgotten: the swap it would have
// caused never happens (DESIGN.md rule 5), end to end.
func TestFault_ClientLeavesWhileQueued(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, dir, exclusiveAB)
	s := startServer(t, cfg)
	busy := s.openStream(context.Background(), "a", 100) // 2 s: a is busy, b must wait
	busy.until(`"content"`)

	ctx, leave := context.WithCancel(context.Background())
	queued := s.openStream(ctx, "b", 4)
	queued.until("queued: position 1")
	leave()
	eventually(t, "the queued client's departure to be logged", func() bool {
		for _, line := range strings.Split(s.log(), "\n") {
			if strings.Contains(line, `msg="client went away"`) && strings.Contains(line, "model=b") {
				return true
			}
		}
		return false
	})
	if done, _, tail := busy.rest(); !done {
		t.Fatalf("the busy model's stream did not finish:\n%s", tail)
	}
	s.mustChat("a") // the run loop has handled everything before it
	if strings.Contains(s.log(), `msg="model loaded" model=b `) || len(modelPids(t, "b")) > 0 {
		t.Fatal("a request whose client left while queued caused a swap")
	}
}

// SIGTERM with a stream in flight and a request queued: the stream
// finishes, the queued request gets a clear 503, loadout exits 0 and no
// model server is left.
func TestFault_SIGTERMWithStreamsInFlight(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, dir, exclusiveAB)
	s := startServer(t, cfg)
	inFlight := s.openStream(context.Background(), "a", 60) // 1.2 s
	inFlight.until(`"content"`)
	pid := onePid(t, "a")
	queued := s.openStream(context.Background(), "b", 4)
	queued.until("queued: position 1")

	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if done, errEv, tail := inFlight.rest(); !done || errEv {
		t.Errorf("the in-flight stream did not finish on SIGTERM (done=%v error=%v):\n%s", done, errEv, tail)
	}
	if done, errEv, tail := queued.rest(); done || !errEv || !strings.Contains(tail, "shutting down") {
		t.Errorf("the queued request on SIGTERM: done=%v error=%v, want a shutting-down error:\n%s", done, errEv, tail)
	}
	select {
	case err := <-s.exit:
		if err != nil {
			t.Fatalf("loadout exited with %v after SIGTERM, want 0", err)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("loadout did not exit after SIGTERM")
	}
	if alive(pid) || len(modelPids(t, "a"))+len(modelPids(t, "b")) > 0 {
		t.Fatal("a model server outlived loadout")
	}
}

// kill -9 of loadout itself: every backend plugin and model server it
// started goes too (plugins die with their parent; servers with their
// plugin).
func TestFault_Kill9LoadoutLeavesNoOrphan(t *testing.T) {
	s := startServer(t, "../../testdata/e2e/sim.yaml")
	s.mustChat("keep")
	s.mustChat("viacmd") // the cmd backend: a second plugin
	st := s.openStream(context.Background(), "keep", 400)
	st.until(`"content"`)
	var pids []int
	pids = append(pids, childrenOf(t, s.cmd.Process.Pid)...) // the plugins
	for _, m := range []string{"keep", "viacmd"} {
		pids = append(pids, onePid(t, m))
	}
	if len(pids) != 4 {
		t.Fatalf("expected two plugins and two servers, found %v", pids)
	}
	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-s.exit
	eventually(t, "every process loadout started to exit", func() bool {
		return !slices.ContainsFunc(pids, alive)
	})
	if done, _, _ := st.rest(); done {
		t.Fatal("a stream finished although loadout was killed")
	}
}

// --max-request-body sets the limit: a body over it gets 413 with an error
// naming the limit and the flag, one under it is served; a limit that is
// not a size stops serve with an error naming the flag.
func TestServe_MaxRequestBody(t *testing.T) {
	s := startServer(t, "../../testdata/e2e/sim.yaml", "--max-request-body", "2KiB")
	chat := func(n int) (int, string) {
		return s.post("/v1/chat/completions", `{"model":"a","max_tokens":1,"messages":[{"role":"user","content":"`+strings.Repeat("x", n)+`"}]}`)
	}
	if code, body := chat(3000); code != 413 || !strings.Contains(body, "2 KiB") || !strings.Contains(body, "--max-request-body") {
		t.Errorf("a 3 KB body under a 2 KiB limit: %d %s, want 413 naming the limit and the flag", code, body)
	}
	if code, body := chat(1000); code != 200 {
		t.Errorf("a 1 KB body under a 2 KiB limit: %d %s, want 200", code, body)
	}
	out, err := exec.Command(loadoutBin, "serve", "--listen", "127.0.0.1:0", "--max-request-body", "lots").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--max-request-body") {
		t.Errorf("serve --max-request-body lots: %v\n%s, want an error naming the flag", err, out)
	}
	// The other bound serve's flags set: a negative shutdown timeout is a
	// typo, not "at once".
	out, err = exec.Command(loadoutBin, "serve", "--listen", "127.0.0.1:0", "--shutdown-timeout", "-1s").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--shutdown-timeout") {
		t.Errorf("serve --shutdown-timeout -1s: %v\n%s, want an error naming the flag", err, out)
	}
}

// Bodies that are too large or malformed get an OpenAI-shaped 4xx, and the
// server goes on serving.
func TestFault_OversizedAndMalformedBodies(t *testing.T) {
	s := startServer(t, "../../testdata/e2e/sim.yaml")
	huge := `{"model":"a","messages":[{"role":"user","content":"` + strings.Repeat("x", 50<<20) + `"}]}`
	for _, tc := range []struct {
		name    string
		body    io.Reader
		length  int64 // -1: chunked
		want    int
		errCode string
	}{
		{"50 MB", strings.NewReader(huge), int64(len(huge)), 413, "request_too_large"},
		{"50 MB chunked", io.MultiReader(strings.NewReader(huge)), -1, 413, "request_too_large"},
		{"truncated JSON", strings.NewReader(`{"model":"a","messages":[{"ro`), -1, 400, ""},
		{"not an object", strings.NewReader(`["a"]`), -1, 400, ""},
		{"model not a string", strings.NewReader(`{"model":7}`), -1, 400, ""},
		{"binary", strings.NewReader("\x00\xff\xfe{\x01"), -1, 400, ""},
		{"deep nesting", strings.NewReader(`{"model":"a","x":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + "}"), -1, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, s.base+"/v1/chat/completions", tc.body)
			if err != nil {
				t.Fatal(err)
			}
			req.ContentLength = tc.length
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("POST: %v", err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var e struct {
				Error struct{ Message, Code string } `json:"error"`
			}
			jsonErr := json.Unmarshal(b, &e)
			switch {
			case tc.want == 0 && resp.StatusCode == 200: // a valid document the model may take
			case tc.want != 0 && resp.StatusCode != tc.want, resp.StatusCode < 400 && tc.want != 0,
				jsonErr != nil || e.Error.Message == "",
				tc.errCode != "" && e.Error.Code != tc.errCode:
				t.Fatalf("got %d %.300s, want %d with an OpenAI-shaped error %s", resp.StatusCode, b, tc.want, tc.errCode)
			}
		})
	}
	s.mustChat("a")
}

// With apiKeys set, a missing or wrong key gets 401 and a right one is
// served.
func TestFault_BadAPIKeys(t *testing.T) {
	dir := t.TempDir()
	s := startServer(t, writeConfig(t, dir, "apiKeys: [sk-right]\n"+simModels))
	for _, tc := range []struct {
		name, header string
		want         int
	}{
		{"none", "", 401},
		{"wrong", "Bearer sk-wrong", 401},
		{"prefix", "Bearer sk-righ", 401},
		{"right", "Bearer sk-right", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, s.base+"/v1/chat/completions", strings.NewReader(chat("a", false)))
			if tc.header != "" {
				req.Header.Set("Authorization", tc.header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want || (tc.want == 401 && !strings.Contains(string(b), "authentication_error")) {
				t.Fatalf("got %d %s, want %d", resp.StatusCode, b, tc.want)
			}
		})
	}
	if len(modelPids(t, "a")) != 1 {
		t.Fatal("the authorised request did not load a (or an unauthorised one loaded another)")
	}
}

// A forced unload cuts the requests its model serves: each is answered
// 503 model_unloaded (a stream ends with that error event), and none is
// granted again — a non-streaming request cut before its answer used to
// be taken for a server that died, granted again, and the model the
// operator had just stopped loaded back for it.
func TestServe_ForcedUnloadCutsInFlight(t *testing.T) {
	cfg := "models:\n  a:\n    backend: sim\n    options: {load_time: 10ms, tokens_per_second: 20}\n"
	s := startServer(t, writeConfig(t, t.TempDir(), cfg))
	s.mustChat("a")
	plain := s.postAsync("/v1/chat/completions", `{"model":"a","max_tokens":400,"messages":[{"role":"user","content":"go"}]}`)
	st := s.openStream(context.Background(), "a", 400)
	st.until("content")
	eventually(t, "both requests in flight", func() bool { return s.modelStatus(t, "a")["in_flight"] == float64(2) })
	if code, body := s.post("/api/models/unload/a?force=true", ""); code != 200 {
		t.Fatalf("forced unload: %d %s", code, body)
	}
	a := <-plain
	if a.err != nil || a.code != http.StatusServiceUnavailable || !strings.Contains(a.body, "model_unloaded") {
		t.Errorf("the non-streaming request: %d %s %v; want 503 model_unloaded", a.code, a.body, a.err)
	}
	// Not an invitation to retry at once (the OpenAI SDKs retried after
	// Retry-After: 1 and loaded the model back).
	if a.header.Get("Retry-After") != "" || a.header.Get("X-Should-Retry") != "false" {
		t.Errorf("the cut request's headers %v; want no Retry-After and X-Should-Retry: false", a.header)
	}
	if done, errEvent, tail := st.rest(); done || !errEvent || !strings.Contains(tail, "model_unloaded") {
		t.Errorf("the stream: done %v, error event %v: %s; want a model_unloaded error event", done, errEvent, tail)
	}
	if st := s.modelStatus(t, "a"); st["state"] != "stopped" || st["cold_loads"] != float64(1) {
		t.Errorf("a after the forced unload: %v; want stopped, loaded once", st)
	}
}

// A model server that ignores SIGTERM is killed after its unloadTimeout,
// not the backend's default 10 s: the grace was never passed to the
// backend's stop.
func TestServe_UnloadTimeoutIsTheGraceBeforeTheKill(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed")
	}
	script, err := filepath.Abs("../../testdata/e2e/deaf_server.py")
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("models:\n  deaf:\n    cmd: python3 %s ${PORT}\n    checkEndpoint: /\n    unloadTimeout: 1\n", script)
	s := startServer(t, writeConfig(t, t.TempDir(), cfg))
	if code, body := s.post("/api/models/load/deaf", ""); code != 200 {
		t.Fatalf("load: %d %s", code, body)
	}
	start := time.Now()
	if code, body := s.post("/api/models/unload/deaf", ""); code != 200 {
		t.Fatalf("unload: %d %s", code, body)
	}
	// Within the grace and the kill's moment, well short of the 10 s
	// default it waited before.
	if took := time.Since(start); took >= 5*time.Second {
		t.Errorf("the unload of a server that ignores SIGTERM took %s, want about its unloadTimeout of 1 s", took)
	}
}
