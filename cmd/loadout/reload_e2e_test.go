package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/internal/wasmbuild"
)

// reloadConfig is two sim models in one exclusive group, with the
// scheduler from a module file and the given router and scheduler
// settings.
func reloadConfig(schedWasm, router, schedSettings string) string {
	return fmt.Sprintf(`models:
  a:
    backend: sim
    options: {load_time: 50ms, tokens_per_second: 400}
  b:
    backend: sim
    options: {load_time: 50ms, tokens_per_second: 400}
routing:
  scheduler:
    wasm: %s
    settings: %s
  router:
    use: %s
`, schedWasm, schedSettings, router)
}

// awaitWatch waits until the server's --watch watches: a change made
// before that has no event.
func (s *server) awaitWatch(t *testing.T) {
	t.Helper()
	eventually(t, "the watch to start", func() bool { return strings.Contains(s.log(), `msg="watching for changes"`) })
}

// policyNames reads /api/policies: the active policy of each role, and
// the reload error shown.
func (s *server) policyNames(t *testing.T) (names map[string]string, reloadErr string) {
	t.Helper()
	code, body := s.get("/api/policies")
	if code != 200 {
		t.Fatalf("/api/policies: %d %s", code, body)
	}
	var out struct {
		Policies []struct {
			Role, Name  string
			Active      bool
			ReloadError string `json:"reload_error"`
		}
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatal(err)
	}
	names = map[string]string{}
	for _, p := range out.Policies {
		if p.Active {
			names[p.Role] = p.Name
			reloadErr = p.ReloadError
		}
	}
	return names, reloadErr
}

// The promise: a policy deployed with --watch while traffic flows
// loses no request; a broken module is refused and the old one keeps
// serving; SIGHUP and POST /api/policies/reload reload too.
func TestServe_HotReload_ZeroFailedRequests(t *testing.T) {
	dir := t.TempDir()
	sched := filepath.Join(dir, "sched.wasm")
	fifo := wasmbuild.MustBuild(t, "github.com/loadout-dev/loadout/policies/fifo")
	if err := os.WriteFile(sched, fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	cfgPath := writeConfig(t, dir, reloadConfig(sched, "group", "{}"))
	s := startServer(t, cfgPath, "--watch")
	s.awaitWatch(t)

	// Traffic that alternates between the two models, so requests are
	// queued and loads are running whenever a reload lands.
	tr := startTraffic(t, s, "a", "b")
	sent := &tr.sent
	reloads := func() int { return strings.Count(s.log(), `msg=reloaded`) }
	refusals := func() int { return strings.Count(s.log(), `msg="reload refused`) }
	waitSent := func(n int64) {
		target := sent.Load() + n
		eventually(t, fmt.Sprintf("%d more requests", n), func() bool { return sent.Load() >= target })
	}
	waitSent(20)

	// 1. --watch: the configuration changes its router and the
	// scheduler's settings.
	if err := os.WriteFile(cfgPath, []byte(reloadConfig(sched, "prioritylru", "{max_wait: 30s}")), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the watched reload", func() bool { return reloads() >= 1 })
	if names, rerr := s.policyNames(t); names["swapper"] != "builtin:prioritylru" || rerr != "" {
		t.Fatalf("after the reload: %v, reload error %q", names, rerr)
	}
	waitSent(20)

	// 2. A broken module is refused; the running one keeps serving.
	if err := os.WriteFile(sched, []byte("\x00asm\x01\x00\x00\x00garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the refusal", func() bool { return refusals() >= 1 })
	if _, rerr := s.policyNames(t); rerr == "" {
		t.Fatal("/api/policies does not show the refused reload")
	}
	if code, body := s.post("/api/policies/reload", ""); code != http.StatusUnprocessableEntity || !strings.Contains(body, "reload refused") {
		t.Fatalf("POST /api/policies/reload with a broken module: %d %s", code, body)
	}
	waitSent(20)

	// 3. The module is mended and the router changed back; SIGHUP.
	if err := os.WriteFile(sched, fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the mended module's reload (nothing changed)", func() bool {
		return strings.Count(s.log(), `msg="reload: nothing changed"`) >= 1
	})
	if err := os.WriteFile(cfgPath+".new", []byte(reloadConfig(sched, "group", "{}")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(cfgPath+".new", cfgPath); err != nil { // as editors save
		t.Fatal(err)
	}
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the SIGHUP reload", func() bool { return strings.Contains(s.log(), `trigger=SIGHUP changed`) || reloads() >= 2 })
	if names, rerr := s.policyNames(t); names["swapper"] != "builtin:group" || rerr != "" {
		t.Fatalf("after SIGHUP: %v, reload error %q", names, rerr)
	}
	waitSent(20)
	failed, failures := tr.stop()

	var pauses []string
	for _, m := range regexp.MustCompile(`msg=reloaded .*scheduling_pause=(\S+)`).FindAllStringSubmatch(s.log(), -1) {
		pauses = append(pauses, m[1])
	}
	t.Logf("%d requests across %d reloads (scheduling paused %v), %d refused; %d failed", sent.Load(), reloads(), pauses, refusals(), failed)
	if failed > 0 {
		t.Fatalf("%d of %d requests failed across hot reloads: %v", failed, sent.Load(), failures)
	}
}

// traffic is clients sending chat completions in a loop, counting what
// fails (a transport error, a status other than 200, an error event).
type traffic struct {
	sent, failed atomic.Int64
	mu           sync.Mutex
	failures     []string
	done         chan struct{}
	wg           sync.WaitGroup
}

// startTraffic starts 4 clients cycling over models, a third of their
// requests streamed.
func startTraffic(t *testing.T, s *server, models ...string) *traffic {
	tr := &traffic{done: make(chan struct{})}
	for w := range 4 {
		tr.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-tr.done:
					return
				default:
				}
				model := models[(w+i)%len(models)]
				tr.sent.Add(1)
				resp, err := http.Post(s.base+"/v1/chat/completions", "application/json", strings.NewReader(chat(model, i%3 == 0)))
				if err != nil {
					tr.fail(err.Error())
					continue
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 || strings.Contains(string(b), `"error"`) {
					tr.fail(fmt.Sprintf("%s: %d %v %s", model, resp.StatusCode, err, b))
				}
			}
		})
	}
	return tr
}

func (tr *traffic) fail(what string) {
	tr.failed.Add(1)
	tr.mu.Lock()
	if len(tr.failures) < 10 {
		tr.failures = append(tr.failures, what)
	}
	tr.mu.Unlock()
}

// stop ends the clients and returns how many requests failed and the
// first failures.
func (tr *traffic) stop() (int64, []string) {
	close(tr.done)
	tr.wg.Wait()
	return tr.failed.Load(), tr.failures
}

// The simulate issue's "done when", end to end: a newcomer makes a
// policy with `policy new`, builds it, compares it with `simulate
// --compare`, and deploys it with `serve --watch` while traffic flows —
// zero failed requests.
func TestNewcomer_PolicyNewSimulateDeploy(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a policy module")
	}
	sdkDir, err := filepath.Abs(filepath.Join("..", "..", "sdk"))
	if err != nil {
		t.Fatal(err)
	}
	parent := t.TempDir()
	if out, err := runPolicyCmd(t, "new", "lru", "--kind", "swapper", "--dir", parent, "--sdk-path", sdkDir); err != nil {
		t.Fatalf("policy new: %v\n%s", err, out)
	}
	dir := filepath.Join(parent, "lru")
	goIn(t, dir, nil, "test", "./...")
	wasm := filepath.Join(dir, "lru.wasm")
	goIn(t, dir, []string{"GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0"}, "build", "-buildmode=c-shared", "-o", wasm, ".")

	// Three 10 GiB models on 24 GiB: two fit at once, so the router's
	// choice matters; loads are quick so that traffic flows.
	box := func(router string) string {
		var b strings.Builder
		b.WriteString("gpus:\n  - {name: g0, memory: 24GiB}\nmodels:\n")
		for _, m := range []string{"a", "b", "c"} {
			fmt.Fprintf(&b, "  %s:\n    backend: sim\n    options: {load_time: 100ms, vram: 10GiB, tokens_per_second: 200}\n", m)
		}
		return b.String() + "routing:\n  router:\n    " + router + "\n"
	}
	out, err := simulateIn(t, box("use: group"), simTrace(90, 0.8, "a", "b", "a", "c"), simulateOptions{rate: 1, compare: []string{"router=group," + wasm}})
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`lru\.wasm\s+90\s+0\s`).MatchString(out) {
		t.Fatalf("simulate --compare did not replay every request under the new policy:\n%s", out)
	}

	cfgPath := writeConfig(t, t.TempDir(), box("use: group"))
	s := startServer(t, cfgPath, "--watch")
	s.awaitWatch(t)
	tr := startTraffic(t, s, "a", "b", "c")
	target := tr.sent.Load() + 20
	eventually(t, "traffic", func() bool { return tr.sent.Load() >= target })
	if err := os.WriteFile(cfgPath, []byte(box("wasm: "+wasm)), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the new router in charge", func() bool {
		names, _ := s.policyNames(t)
		return names["swapper"] == wasm
	})
	target = tr.sent.Load() + 30
	eventually(t, "traffic under the new router", func() bool { return tr.sent.Load() >= target })
	failed, failures := tr.stop()
	t.Logf("%d requests, the new router deployed while they flowed; %d failed", tr.sent.Load(), failed)
	if failed > 0 {
		t.Fatalf("%d requests failed: %v", failed, failures)
	}
}

// A configuration reload that removes a model while it streams, adds one
// and changes another: the stream finishes, the removed model is gone from
// /v1/models and 404s, the added one serves, and the changed one is
// restarted with its new options once idle.
func TestServe_HotReload_Models(t *testing.T) {
	dir := t.TempDir()
	cfg := func(models string) string { return "models:\n" + models }
	a := "  a:\n    backend: sim\n    options: {load_time: 50ms, tokens_per_second: 400}\n"
	a2 := "  a:\n    backend: sim\n    options: {load_time: 50ms, tokens_per_second: 300}\n"
	b := "  b:\n    backend: sim\n    options: {load_time: 50ms, tokens_per_second: 20}\n"
	c := "  c:\n    backend: sim\n    options: {load_time: 50ms, tokens_per_second: 400}\n"
	groups := "groups:\n  all:\n    swap: false\n    exclusive: false\n    members: [a, b, c]\n"
	cfgPath := writeConfig(t, dir, cfg(a+b)+strings.Replace(groups, ", c", "", 1))
	s := startServer(t, cfgPath)
	s.mustChat("a")
	pidA := onePid(t, "a")
	st := s.openStream(context.Background(), "b", 40) // two seconds of tokens
	st.until("content")

	if err := os.WriteFile(cfgPath, []byte(cfg(a2+c)+strings.Replace(groups, "a, b, c", "a, c", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	code, body := s.post("/api/policies/reload", "")
	if code != 200 || !strings.Contains(body, `"models"`) {
		t.Fatalf("reload: %d %s", code, body)
	}
	if done, errEvent, tail := st.rest(); !done || errEvent {
		t.Fatalf("the removed model's stream did not finish cleanly: %s", tail)
	}
	_, list := s.get("/v1/models")
	if strings.Contains(list, `"b"`) || !strings.Contains(list, `"c"`) {
		t.Fatalf("/v1/models after the reload: %s", list)
	}
	if code, body := s.post("/v1/chat/completions", chat("b", false)); code != 404 {
		t.Fatalf("the removed model: %d %s", code, body)
	}
	s.mustChat("c")
	eventually(t, "a restarted with its new options", func() bool {
		s.mustChat("a")
		pids := modelPids(t, "a")
		return len(pids) == 1 && pids[0] != pidA
	})
	eventually(t, "b's server gone", func() bool { return len(modelPids(t, "b")) == 0 })
	if args := procArgs(t, onePid(t, "a")); !slices.Contains(args, "--tokens-per-second=300") {
		t.Fatalf("a restarted with %v, want its new options", args)
	}
}

// A reload whose policies would refuse the new configuration (the group
// router: a model in two groups, which serve refuses at start) is refused
// whole: no model is added, removed or restarted.
func TestServe_HotReload_RefusedWhole(t *testing.T) {
	good := "models:\n  a:\n    backend: sim\n    options: {load_time: 10ms}\n"
	bad := good + "  d:\n    backend: sim\n    options: {load_time: 10ms}\ngroups:\n  g1: {members: [a]}\n  g2: {members: [a, d]}\n"
	cfg := writeConfig(t, t.TempDir(), good)
	s := startServer(t, cfg)
	s.mustChat("a")
	pidA := onePid(t, "a")
	if err := os.WriteFile(cfg, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, body := s.post("/api/policies/reload", ""); code != http.StatusUnprocessableEntity || !strings.Contains(body, "two groups") || strings.Contains(body, "were applied") {
		t.Fatalf("reload with a model in two groups: %d %s", code, body)
	}
	if _, list := s.get("/v1/models"); strings.Contains(list, `"d"`) {
		t.Errorf("the refused reload added d: %s", list)
	}
	s.mustChat("a")
	if pids := modelPids(t, "a"); len(pids) != 1 || pids[0] != pidA {
		t.Errorf("a's server is %v after the refused reload, want %d untouched", pids, pidA)
	}
}

// A reload that changes only what a model's server does not read (an
// alias, its description, its TTL, how long its load may take) hands it
// over as the model runs: the
// alias serves at once and the server is not restarted (a cold load for
// nothing, minutes for a large model).
func TestServe_HotReload_LiveSettingsRestartNothing(t *testing.T) {
	was := "models:\n  a:\n    backend: sim\n    options: {load_time: 10ms}\n"
	now := "healthCheckTimeout: 45\nmodels:\n  a:\n    backend: sim\n    options: {load_time: 10ms}\n    aliases: [quick]\n    description: the fast one\n    ttl: 900\n"
	cfg := writeConfig(t, t.TempDir(), was)
	s := startServer(t, cfg)
	s.mustChat("a")
	pidA := onePid(t, "a")
	if err := os.WriteFile(cfg, []byte(now), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, body := s.post("/api/policies/reload", ""); code != 200 || !strings.Contains(body, `"models"`) {
		t.Fatalf("reload: %d %s", code, body)
	}
	s.mustChat("quick")
	if pids := modelPids(t, "a"); len(pids) != 1 || pids[0] != pidA {
		t.Errorf("a's server is %v after a reload of its alias, description and ttl, want %d untouched", pids, pidA)
	}
	if _, list := s.get("/v1/models"); !strings.Contains(list, "the fast one") {
		t.Errorf("/v1/models after the reload lacks the new description: %s", list)
	}
}

// A reload rotates API keys at once (the removed key is refused on the
// next request), and says which changed settings wait for a restart
// rather than "nothing changed".
func TestServe_HotReload_APIKeysAndRestartOnlySettings(t *testing.T) {
	was := "apiKeys: [sk-old]\nmodels:\n  a:\n    backend: sim\n    options: {load_time: 10ms}\n"
	cfg := writeConfig(t, t.TempDir(), was)
	s := startServer(t, cfg)
	call := func(method, path, key string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, s.base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := call("GET", "/v1/models", "sk-old"); code != 200 {
		t.Fatalf("the configured key: %d", code)
	}
	now := strings.Replace(was, "sk-old", "sk-new", 1) + "logLevel: debug\nstartPort: 6100\n"
	if err := os.WriteFile(cfg, []byte(now), 0o644); err != nil {
		t.Fatal(err)
	}
	code, body := call("POST", "/api/policies/reload", "sk-old")
	if code != 200 || !strings.Contains(body, `"apiKeys"`) || !strings.Contains(body, `"restart":["logLevel","startPort"]`) {
		t.Fatalf("reload: %d %s; want apiKeys applied and logLevel, startPort waiting for a restart", code, body)
	}
	if code, _ := call("GET", "/v1/models", "sk-old"); code != http.StatusUnauthorized {
		t.Errorf("the removed key after the reload: %d, want 401", code)
	}
	if code, _ := call("GET", "/v1/models", "sk-new"); code != 200 {
		t.Errorf("the new key after the reload: %d, want 200", code)
	}
	s.mu.Lock()
	logs := s.logs.String()
	s.mu.Unlock()
	if !strings.Contains(logs, "take effect when loadout serve restarts") {
		t.Errorf("no warning of the settings that wait for a restart:\n%s", logs)
	}
	// They still wait after another reload (the list was taken against
	// the last file read, not what runs), and the file set back to what
	// runs waits for nothing.
	if code, body := call("POST", "/api/policies/reload", "sk-new"); code != 200 || !strings.Contains(body, `"restart":["logLevel","startPort"]`) {
		t.Errorf("a second reload: %d %s; want logLevel and startPort still waiting", code, body)
	}
	if err := os.WriteFile(cfg, []byte(strings.Replace(was, "sk-old", "sk-new", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, body := call("POST", "/api/policies/reload", "sk-new"); code != 200 || strings.Contains(body, `"restart"`) {
		t.Errorf("the file set back to the running settings: %d %s; want nothing waiting", code, body)
	}
}

// A model added by a reload whose port skipped one in use keeps that port
// at the next reload: an unrelated edit does not restart it (the digest
// read the file again without the port check and saw it move).
func TestServe_HotReload_AnAddedModelsPortHolds(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	start := l.Addr().(*net.TCPAddr).Port
	l.Close()
	busy, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", start+1))
	if err != nil {
		t.Skipf("port %d: %v", start+1, err)
	}
	defer busy.Close()
	model := func(id, extra string) string {
		return "  " + id + ":\n    backend: sim\n    options: {load_time: 10ms}\n" + extra
	}
	head := fmt.Sprintf("startPort: %d\nmodels:\n", start)
	path := writeConfig(t, t.TempDir(), head+model("a", ""))
	s := startServer(t, path)
	if err := os.WriteFile(path, []byte(head+model("a", "")+model("c", "")), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, body := s.post("/api/policies/reload", ""); code != 200 {
		t.Fatalf("reload adding c: %d %s", code, body)
	}
	s.mustChat("c")
	pid := onePid(t, "c")
	if err := os.WriteFile(path, []byte(head+model("a", "    aliases: [aa]\n")+model("c", "")), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, body := s.post("/api/policies/reload", ""); code != 200 {
		t.Fatalf("reload of a's alias: %d %s", code, body)
	}
	s.mustChat("c")
	if pids := modelPids(t, "c"); len(pids) != 1 || pids[0] != pid {
		t.Errorf("c's server is %v after a reload of a's alias, want %d untouched", pids, pid)
	}
}

// A model a reload removed, still finishing a stream, can be unloaded by
// name (with force, cutting the stream), as `loadout ps` still lists it;
// it was a 404, "not found".
func TestServe_HotReload_ARemovedModelDrainingCanBeUnloaded(t *testing.T) {
	a := "  a:\n    backend: sim\n    options: {load_time: 10ms}\n"
	b := "  b:\n    backend: sim\n    options: {load_time: 10ms, tokens_per_second: 20}\n"
	groups := "groups:\n  all: {swap: false, exclusive: false, members: [a, b]}\n"
	cfg := writeConfig(t, t.TempDir(), "models:\n"+a+b+groups)
	s := startServer(t, cfg)
	st := s.openStream(context.Background(), "b", 400)
	st.until("content")
	if err := os.WriteFile(cfg, []byte("models:\n"+a), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, body := s.post("/api/policies/reload", ""); code != 200 {
		t.Fatalf("reload: %d %s", code, body)
	}
	if code, body := s.post("/api/models/unload/b?force=true", ""); code != 200 {
		t.Fatalf("forced unload of the draining b: %d %s", code, body)
	}
	if done, errEvent, tail := st.rest(); done || !errEvent || !strings.Contains(tail, "model_unloaded") {
		t.Errorf("b's stream: done %v, error event %v: %s; want it cut by the unload", done, errEvent, tail)
	}
	eventually(t, "b's server gone", func() bool { return len(modelPids(t, "b")) == 0 })
	if code, _ := s.post("/api/models/unload/nope", ""); code != 404 {
		t.Errorf("unload of a model never configured: %d, want 404", code)
	}
}

// procArgs is a process's command line.
func procArgs(t *testing.T, pid int) []string {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
}

// A reload refused for a broken configuration shows its error on
// /api/policies until a reload succeeds: fixing the file back to the
// configuration that runs (nothing to change) clears it (issue 27).
func TestServe_HotReload_FixedConfigClearsReloadError(t *testing.T) {
	good := `models:
  a:
    backend: sim
    options: {load_time: 10ms}
routing: {scheduler: {use: fifo}, router: {use: group}}
`
	cfg := writeConfig(t, t.TempDir(), good)
	s := startServer(t, cfg)
	if err := os.WriteFile(cfg, []byte(good+"  what: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, body := s.post("/api/policies/reload", ""); code != http.StatusUnprocessableEntity {
		t.Fatalf("reload of a broken config: %d %s", code, body)
	}
	if _, reloadErr := s.policyNames(t); reloadErr == "" {
		t.Fatal("/api/policies shows no reload error after a refused reload")
	}
	if err := os.WriteFile(cfg, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, body := s.post("/api/policies/reload", ""); code != http.StatusOK {
		t.Fatalf("reload of the fixed config: %d %s", code, body)
	}
	if _, reloadErr := s.policyNames(t); reloadErr != "" {
		t.Errorf("/api/policies still shows the reload error %q after the config was fixed", reloadErr)
	}
}

// A Kubernetes ConfigMap volume updates its files by swapping a symlink
// (..data) to a new directory: the configuration file's own name sees no
// event, and --watch still reloads.
// A file beside the configuration written all the time (a log) does not
// put a reload off: the edit is read within the watch's longest settle,
// not once the other file falls quiet.
func TestServe_WatchNotStarvedByAFileWrittenBeside(t *testing.T) {
	dir := t.TempDir()
	model := func(id string) string {
		return "  " + id + ":\n    backend: sim\n    options: {load_time: 20ms}\n"
	}
	cfgPath := writeConfig(t, dir, "models:\n"+model("a"))
	s := startServer(t, cfgPath, "--watch")
	s.awaitWatch(t)
	stop := make(chan struct{})
	written := make(chan struct{})
	go func() {
		defer close(written)
		f, err := os.Create(filepath.Join(dir, "noise.log"))
		if err != nil {
			return
		}
		defer f.Close()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				_, _ = f.WriteString("a line of log\n")
			}
		}
	}()
	defer func() { close(stop); <-written }()
	if err := os.WriteFile(cfgPath, []byte("models:\n"+model("a")+model("b")), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "model b while noise.log is written", func() bool {
		_, body := s.get("/v1/models")
		return strings.Contains(body, `"id":"b"`)
	})
}

func TestServe_WatchSeesAConfigMapUpdate(t *testing.T) {
	dir := t.TempDir()
	model := func(id string) string {
		return "  " + id + ":\n    backend: sim\n    options: {load_time: 20ms, tokens_per_second: 400}\n"
	}
	// version writes one generation of the volume: ..NAME/config.yaml,
	// then points ..data at it the way the kubelet does (a new link,
	// renamed over the old one).
	version := func(name, text string) {
		t.Helper()
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "config.yaml"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(name, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("..v1", "models:\n"+model("a"))
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.Symlink(filepath.Join("..data", "config.yaml"), cfgPath); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, cfgPath, "--watch")
	s.awaitWatch(t)
	listed := func(id string) bool {
		_, body := s.get("/v1/models")
		return strings.Contains(body, `"id":"`+id+`"`)
	}
	if !listed("a") || listed("b") {
		t.Fatal("the first generation is not what is served")
	}
	version("..v2", "models:\n"+model("a")+model("b"))
	eventually(t, "model b after the volume's update", func() bool { return listed("b") })
	s.mustChat("b")
}

// A configuration file that is a symbolic link is edited where its
// target lies, in another directory: --watch sees that too.
func TestServe_WatchFollowsASymlinkedConfig(t *testing.T) {
	real, linked := t.TempDir(), t.TempDir()
	model := func(id string) string {
		return "  " + id + ":\n    backend: sim\n    options: {load_time: 20ms, tokens_per_second: 400}\n"
	}
	target := filepath.Join(real, "config.yaml")
	if err := os.WriteFile(target, []byte("models:\n"+model("a")), 0o644); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(linked, "config.yaml")
	if err := os.Symlink(target, cfgPath); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, cfgPath, "--watch")
	s.awaitWatch(t)
	if err := os.WriteFile(target, []byte("models:\n"+model("a")+model("b")), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "model b after the link's target was edited", func() bool {
		_, body := s.get("/v1/models")
		return strings.Contains(body, `"id":"b"`)
	})
}

// sendLoadingState is each model's (a model's own over the global one),
// and a reload that changes it applies at once: the proxy read only the
// global value, set at start.
func TestServe_SendLoadingStatePerModelAndReloaded(t *testing.T) {
	cfg := func(global string) string {
		return "sendLoadingState: " + global + "\nmodels:\n  a:\n    backend: sim\n    options: {load_time: 300ms}\n  b:\n    backend: sim\n    sendLoadingState: false\n    options: {load_time: 300ms}\n"
	}
	path := writeConfig(t, t.TempDir(), cfg("true"))
	s := startServer(t, path)
	loading := func(model string) bool {
		t.Helper()
		if code, body := s.post("/api/models/unload/"+model, ""); code != 200 {
			t.Fatalf("unload %s: %d %s", model, code, body)
		}
		st := s.openStream(context.Background(), model, 3)
		all, _ := io.ReadAll(st.r)
		return strings.Contains(string(all), "reasoning_content")
	}
	if !loading("a") || loading("b") {
		t.Fatalf("a cold stream of a (global true) and of b (its own false): want loading state for a only")
	}
	if err := os.WriteFile(path, []byte(cfg("false")), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, body := s.post("/api/policies/reload", ""); code != 200 {
		t.Fatalf("reload: %d %s", code, body)
	}
	if loading("a") {
		t.Errorf("a still sends its loading state after sendLoadingState: false was reloaded")
	}
}
