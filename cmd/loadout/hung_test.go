package main

import (
	"context"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// quickLiveness finds a hung server within about two seconds.
const quickLiveness = `liveness: {probeInterval: 1, probeTimeout: 1, failures: 2}
`

// A model server stopped (SIGSTOP) mid-stream is found hung by its
// health probes: the stream ends with an error event instead of hanging,
// the model shows failed with the reason, the stopped process is killed,
// and the next request starts a new server.
func TestFault_ModelServerSIGSTOPMidStream(t *testing.T) {
	s := startServer(t, writeConfig(t, t.TempDir(), simModels+quickLiveness))
	st := s.openStream(context.Background(), "a", 400) // 8 s at 50 tokens/s
	st.until(`"content"`)
	pid := onePid(t, "a")
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGKILL) // whatever happens, nothing stays stopped
	if done, errEv, tail := st.rest(); done || !errEv {
		t.Fatalf("stream after SIGSTOP of its server: done=%v error event=%v\n%s", done, errEv, tail)
	} else if !strings.Contains(tail, "hung") {
		// Told why the server went (its probes found it hung and it was
		// killed, or the stream stalled), not only "unexpected EOF".
		t.Errorf("the stream's error event does not say the server hung:\n%s", tail)
	}
	eventually(t, "a to be marked failed as hung", func() bool {
		_, models := s.get("/api/models")
		return strings.Contains(models, `"failed"`) && strings.Contains(models, "hung: its health check failed")
	})
	eventually(t, "the stopped server to be killed", func() bool { return !alive(pid) })
	s.mustChat("a")
	if again := onePid(t, "a"); again == pid {
		t.Fatalf("a still served by the stopped pid %d", pid)
	}
}

// A backend plugin stopped (SIGSTOP) while a model loads does not hold an
// unload: the load is aborted at once; and the next call into the plugin
// that has a deadline kills it (with its servers), so the model's next
// request starts a new plugin and serves.
func TestFault_BackendPluginSIGSTOPDuringLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a plugin call's deadline (10 s)")
	}
	// a loads for 3 s and evicts nothing: the unload's wait is the load's.
	cfg := strings.Replace(simModels, "load_time: 100ms, tokens_per_second: 50", "load_time: 3s, tokens_per_second: 50", 1) + `
routing:
  router:
    use: group
    settings:
      groups:
        solo: {swap: false, exclusive: false, members: [a, b]}
`
	s := startServer(t, writeConfig(t, t.TempDir(), cfg))
	s.mustChat("b") // the plugin runs
	plugin := s.pluginPid("sim")
	first := s.postAsync("/v1/chat/completions", chat("a", false))
	eventually(t, "a to be loading", func() bool {
		_, models := s.get("/api/models")
		return strings.Contains(models, `"starting"`)
	})
	if err := syscall.Kill(plugin, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(plugin, syscall.SIGKILL)
	start := time.Now()
	if code, body := s.post("/api/models/unload/a", ""); code != 200 {
		t.Fatalf("unload of a model loading under a stopped plugin: %d %s", code, body)
	}
	// Waiting for the stopped plugin would take its call's deadline
	// (10 s) or forever; 5 s leaves a loaded machine room.
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the unload took %s: it waited for the stopped plugin", took)
	}
	if a := <-first; a.code < 500 {
		t.Fatalf("the request whose load was unloaded: %d %s %v, want an error", a.code, a.body, a.err)
	}
	// The next call into the stopped plugin with a deadline — the memory
	// measurement of b, every 5 s, bounded by 10 s — kills it.
	deadline := time.Now().Add(60 * time.Second)
	for alive(plugin) {
		if time.Now().After(deadline) {
			t.Fatal("the stopped plugin was never killed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.mustChat("a")
	if p := s.pluginPid("sim"); p == plugin {
		t.Fatalf("the stopped plugin %d is still the sim plugin", plugin)
	}
}

// A pause shorter than the liveness bound (SIGSTOP, then SIGCONT) is not
// a hang: the stream finishes, and the same server goes on serving.
func TestFault_ModelServerBriefPauseIsNotAHang(t *testing.T) {
	s := startServer(t, writeConfig(t, t.TempDir(), simModels+quickLiveness))
	st := s.openStream(context.Background(), "a", 100) // 2 s at 50 tokens/s
	st.until(`"content"`)
	pid := onePid(t, "a")
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the pause itself: shorter than one probe's timeout
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if done, errEv, tail := st.rest(); !done || errEv {
		t.Fatalf("stream after a 300 ms pause: done=%v error event=%v\n%s", done, errEv, tail)
	}
	s.mustChat("a")
	if again := onePid(t, "a"); again != pid {
		t.Fatalf("a is served by pid %d after a brief pause of %d: it was restarted", again, pid)
	}
}

// A non-streaming request whose server is stopped (SIGSTOP) before it
// answers a byte ends with an error saying the server hung and was
// killed: it is not sent again to the restarted server (it may be what
// hung it, and its client never heard of the hang).
func TestFault_ModelServerSIGSTOPBeforeItAnswers(t *testing.T) {
	s := startServer(t, writeConfig(t, t.TempDir(), simModels+quickLiveness))
	s.mustChat("a")
	pid := onePid(t, "a")
	answer := s.postAsync("/v1/chat/completions", `{"model":"a","max_tokens":400,"messages":[{"role":"user","content":"go"}]}`)
	eventually(t, "the request in flight", func() bool { return s.modelStatus(t, "a")["in_flight"] == float64(1) })
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGKILL)
	a := <-answer
	if a.err != nil || a.code != http.StatusBadGateway || !strings.Contains(a.body, "hung") {
		t.Errorf("the request whose server hung: %d %s %v; want a 502 saying it hung", a.code, a.body, a.err)
	}
}
