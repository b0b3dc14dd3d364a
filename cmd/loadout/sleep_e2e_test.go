package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// modelStatus reads one model's entry of /api/models.
func (s *server) modelStatus(t *testing.T, model string) map[string]any {
	t.Helper()
	code, body := s.get("/api/models")
	if code != 200 {
		t.Fatalf("/api/models: %d %s", code, body)
	}
	var out struct {
		Models []map[string]any `json:"models"`
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatalf("/api/models: %v: %s", err, body)
	}
	for _, m := range out.Models {
		if m["model"] == model {
			return m
		}
	}
	t.Fatalf("/api/models has no %s: %s", model, body)
	return nil
}

// An evicted model sleeps (its server process lives on), the next request
// for it wakes that same process instead of starting another, the metrics
// count a wake and no second cold load, and kill -9 of loadout takes the
// sleeping servers and their plugin with it.
func TestServe_SleepersWakeAndKill9LeavesNoOrphan(t *testing.T) {
	s := startServer(t, "../../testdata/e2e/sleep.yaml")
	s.mustChat("a")
	pidA := onePid(t, "a")
	s.mustChat("b") // the exclusive group evicts a: it sleeps
	eventually(t, "a asleep", func() bool { return s.modelStatus(t, "a")["state"] == "asleep" })
	if !alive(pidA) {
		t.Fatal("a's server exited; it should sleep")
	}
	if st := s.modelStatus(t, "a"); st["sleep_level"] != float64(1) || st["host_bytes"] != float64(1<<30) {
		t.Fatalf("a asleep: %v; want level 1 holding 1 GiB of host memory", st)
	}
	if out := cliOK(t, s, "ps"); !strings.Contains(out, "asleep (level 1, 1 GiB host)") {
		t.Fatalf("loadout ps does not show the sleeper with its level and host memory:\n%s", out)
	} else if row := strings.Fields(strings.SplitN(out[strings.Index(out, "host)"):], "\n", 2)[0]); len(row) < 2 || row[1] != "-" {
		t.Fatalf("loadout ps gives the sleeper GPU memory (want VRAM -):\n%s", out)
	}
	_, running := s.get("/running")
	if !strings.Contains(running, `"asleep"`) {
		t.Fatalf("/running does not list the sleeper: %s", running)
	}

	s.mustChat("a") // wakes a (b sleeps)
	if pid := onePid(t, "a"); pid != pidA {
		t.Fatalf("a is served by process %d, want the woken %d", pid, pidA)
	}
	st := s.modelStatus(t, "a")
	if st["state"] != "ready" || st["wakes"] != float64(1) || st["cold_loads"] != float64(1) {
		t.Fatalf("a after its wake: %v; want ready, 1 wake, 1 cold load", st)
	}
	_, metrics := s.get("/metrics")
	if got := metricValue(t, metrics, `loadout_model_wakes_total{model="a",result="ok"}`); got != 1 {
		t.Errorf(`loadout_model_wakes_total{model="a",result="ok"} = %v, want 1`, got)
	}
	if got := metricValue(t, metrics, `loadout_model_loads_total{model="a",result="ok"}`); got != 1 {
		t.Errorf(`loadout_model_loads_total{model="a",result="ok"} = %v, want 1 (the wake is not a cold load)`, got)
	}

	eventually(t, "b asleep", func() bool { return s.modelStatus(t, "b")["state"] == "asleep" })
	pids := append(childrenOf(t, s.cmd.Process.Pid), pidA, onePid(t, "b"))
	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-s.exit
	eventually(t, "every process loadout started, the sleeper's included, to exit", func() bool {
		return !slices.ContainsFunc(pids, alive)
	})
}

// A model idle past its ttl is put to sleep, not stopped: its server
// process lives on, and the next request wakes that same process.
func TestServe_TTLPutsAModelToSleep(t *testing.T) {
	raw, err := os.ReadFile("../../testdata/e2e/sleep.yaml")
	if err != nil {
		t.Fatal(err)
	}
	next := strings.Replace(string(raw), "hostMemory: 8GiB", "hostMemory: 8GiB\nglobalTTL: 1", 1)
	if next == string(raw) {
		t.Fatal("testdata/e2e/sleep.yaml no longer says hostMemory: 8GiB")
	}
	s := startServer(t, writeConfig(t, t.TempDir(), next))
	s.mustChat("a")
	pidA := onePid(t, "a")
	eventually(t, "a asleep after its ttl", func() bool { return s.modelStatus(t, "a")["state"] == "asleep" })
	if !alive(pidA) {
		t.Fatal("a's server exited at its ttl; it should sleep")
	}
	s.mustChat("a")
	if pid := onePid(t, "a"); pid != pidA {
		t.Fatalf("a is served by process %d after its ttl, want the woken %d", pid, pidA)
	}
	if st := s.modelStatus(t, "a"); st["wakes"] != float64(1) || st["cold_loads"] != float64(1) {
		t.Fatalf("a after its wake: %v; want 1 wake, 1 cold load", st)
	}
}

// A reload that sets hostMemory: 0 and a new wakeTimeout applies both at
// once (the wakeTimeout as the models' live settings) and restarts nothing
// running: the sleeper's server is stopped (no
// host memory is left for it), the running model keeps its process.
func TestServe_HotReload_HostMemoryStopsSleepers(t *testing.T) {
	raw, err := os.ReadFile("../../testdata/e2e/sleep.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := writeConfig(t, t.TempDir(), string(raw))
	s := startServer(t, cfgPath)
	s.mustChat("a")
	pidA := onePid(t, "a")
	s.mustChat("b")
	eventually(t, "a asleep", func() bool { return s.modelStatus(t, "a")["state"] == "asleep" })
	pidB := onePid(t, "b")

	next := strings.Replace(string(raw), "hostMemory: 8GiB", "hostMemory: 0\nwakeTimeout: 30", 1)
	if next == string(raw) {
		t.Fatal("testdata/e2e/sleep.yaml no longer says hostMemory: 8GiB")
	}
	if err := os.WriteFile(cfgPath, []byte(next), 0o644); err != nil {
		t.Fatal(err)
	}
	code, body := s.post("/api/policies/reload", "")
	if code != 200 || !strings.Contains(body, `"hostMemory"`) || !strings.Contains(body, `"models"`) {
		t.Fatalf("reload: %d %s; want hostMemory changed and the models' wakeTimeout handed over", code, body)
	}
	eventually(t, "a's sleeping server stopped", func() bool { return !alive(pidA) })
	if st := s.modelStatus(t, "a"); st["state"] != "stopped" {
		t.Fatalf("a after hostMemory: 0: %v; want stopped", st)
	}
	if pid := onePid(t, "b"); pid != pidB {
		t.Fatalf("b is served by %d after the reload, was %d: it restarted", pid, pidB)
	}
	s.mustChat("a") // b is stopped now, not put to sleep
	eventually(t, "b stopped", func() bool { return s.modelStatus(t, "b")["state"] == "stopped" })
	if alive(pidB) {
		t.Fatal("b's server lives on after its eviction with no host memory")
	}
}

// A model server stopped (SIGSTOP) just before its eviction puts it to
// sleep: the sleep is cut at wakeTimeout, the stopped server is killed
// (not left holding its GPU memory), the request that evicted it is
// served, and the model's next request cold-loads it.
func TestFault_ModelServerSIGSTOPBeforeItsSleep(t *testing.T) {
	raw, err := os.ReadFile("../../testdata/e2e/sleep.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, writeConfig(t, t.TempDir(), "wakeTimeout: 1\n"+string(raw)))
	s.mustChat("a")
	pid := onePid(t, "a")
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGKILL) // whatever happens, nothing stays stopped
	s.mustChat("b")
	eventually(t, "the stopped server to be killed", func() bool { return !alive(pid) })
	if st := s.modelStatus(t, "a"); st["state"] != "stopped" {
		t.Fatalf("a after its sleep hung: %v; want stopped", st)
	}
	s.mustChat("a")
	if again := onePid(t, "a"); again == pid {
		t.Fatalf("a still served by the stopped pid %d", pid)
	}
}

// A sleeping model server stopped (SIGSTOP) is found by its health checks
// while a request wakes it, long before its wake timeout: the wake is
// cut, the stopped server killed, and the request served by a cold load.
func TestFault_ModelServerSIGSTOPWhileAsleep(t *testing.T) {
	raw, err := os.ReadFile("../../testdata/e2e/sleep.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := "wakeTimeout: 600\nliveness: {probeInterval: 1, probeTimeout: 1, failures: 2}\n" + string(raw)
	s := startServer(t, writeConfig(t, t.TempDir(), cfg))
	s.mustChat("a")
	pid := onePid(t, "a")
	s.mustChat("b")
	eventually(t, "a asleep", func() bool { return s.modelStatus(t, "a")["state"] == "asleep" })
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGKILL) // whatever happens, nothing stays stopped
	// The request is given a fifth of the wake timeout: only liveness can
	// cut the wake within it.
	client := &http.Client{Timeout: 120 * time.Second}
	resp, err := client.Post(s.base+"/v1/chat/completions", "application/json", strings.NewReader(chat("a", false)))
	if err != nil {
		t.Fatalf("chat a with its sleeper stopped: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("chat a with its sleeper stopped: %s", resp.Status)
	}
	if alive(pid) {
		t.Fatalf("the stopped sleeper %d lives on", pid)
	}
	st := s.modelStatus(t, "a")
	if st["state"] != "ready" || st["wakes"] != float64(0) || st["cold_loads"] != float64(2) {
		t.Fatalf("a after its hung wake: %v; want ready, no wake, 2 cold loads", st)
	}
}

// A model whose backend sleeps others but whose own server cannot (a cmd:
// model with no sleep steps, evict: auto) is stopped when evicted, said
// once at info — not warned of as a sleep that "timed out after 1m" at
// every swap — and not asked to sleep again. It is stopped as any stop
// is, its cmdStop run (llama-swap's): the first eviction killed it at
// once, without its cmdStop (a docker run's container lived on).
func TestServe_ACmdModelThatCannotSleepIsStopped(t *testing.T) {
	dir := t.TempDir()
	mark := filepath.Join(dir, "stops")
	cfg := `hostMemory: 4GiB
models:
  c1:
    cmd: ${env.LOADOUT_BIN} sim-server --host 127.0.0.1 --port ${PORT} --model c1 --tokens-per-second 400
    cmdStop: sh -c 'echo ${PID} >> ` + mark + ` && kill ${PID}'
  s1:
    backend: sim
    options: {load_time: 10ms}
`
	s := startServer(t, writeConfig(t, dir, cfg))
	for range 2 {
		s.mustChat("c1")
		s.mustChat("s1") // evicts c1 (one exclusive group)
		eventually(t, "c1 stopped", func() bool { return s.modelStatus(t, "c1")["state"] == "stopped" })
	}
	s.mu.Lock()
	logs := s.logs.String()
	s.mu.Unlock()
	if strings.Contains(logs, "timed out") || strings.Contains(logs, "did not sleep") || strings.Contains(logs, "could not sleep") {
		t.Errorf("a server that cannot sleep was warned of as a failed sleep:\n%s", logs)
	}
	if n := strings.Count(logs, "cannot sleep; it is stopped when evicted"); n != 1 {
		t.Errorf("said %d times that c1 cannot sleep, want once (then not asked again):\n%s", n, logs)
	}
	if b, _ := os.ReadFile(mark); strings.Count(string(b), "\n") != 2 {
		t.Errorf("c1's cmdStop ran for %q of its two evictions, want both:\n%s", b, logs)
	}
}
