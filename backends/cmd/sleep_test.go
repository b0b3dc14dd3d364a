package cmdbackend_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	cmdbackend "github.com/loadout-dev/loadout/backends/cmd"
	"github.com/loadout-dev/loadout/plugins"
)

// standIn is a model server's sleep API where the real server cannot run
// here (vLLM's GPU sleep mode, SGLang's memory saver): an HTTP server on
// 127.0.0.1 that speaks the documented endpoints, records every call, and
// can refuse a sleep or hang a wake. vLLM's (docs/features/sleep_mode.md):
// POST /sleep?level=N, POST /wake_up[?tags=weights|kv_cache], POST
// /collective_rpc {"method": ...}, POST /reset_prefix_cache, GET
// /is_sleeping; is_sleeping is true until every slept tag is woken, and
// reload_weights fails while the weights sleep. SGLang's
// (entrypoints/http_server.py): POST /release_memory_occupation and
// /resume_memory_occupation, each with a JSON body.
type standIn struct {
	url string

	mu         sync.Mutex
	calls      []string        // "METHOD /path?query body"
	sleeping   map[string]bool // vLLM's memory tags asleep
	refuse     bool            // sleep and release answer 500
	hang       bool            // wake_up and resume never answer
	hangAsk    bool            // is_sleeping never answers
	hangCalled chan struct{}   // closed when a hung wake arrives
}

func newStandIn(t *testing.T) *standIn {
	t.Helper()
	s := &standIn{sleeping: map[string]bool{}, hangCalled: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sleep", func(w http.ResponseWriter, r *http.Request) {
		if s.refused(w) {
			return
		}
		switch r.URL.Query().Get("level") {
		case "1", "2":
		default:
			http.Error(w, `{"error": "bad level"}`, http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.sleeping["weights"], s.sleeping["kv_cache"] = true, true
		s.mu.Unlock()
	})
	mux.HandleFunc("POST /wake_up", func(w http.ResponseWriter, r *http.Request) {
		if s.hung(r) {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		tags := r.URL.Query()["tags"]
		if len(tags) == 0 {
			clear(s.sleeping)
		}
		for _, t := range tags {
			delete(s.sleeping, t)
		}
	})
	mux.HandleFunc("POST /collective_rpc", func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Method string }
		if json.NewDecoder(r.Body).Decode(&body) != nil || body.Method != "reload_weights" {
			http.Error(w, `{"error": "want {\"method\": \"reload_weights\"}"}`, http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.sleeping["weights"] {
			http.Error(w, `{"error": "weights asleep"}`, http.StatusInternalServerError)
		}
	})
	mux.HandleFunc("POST /reset_prefix_cache", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /is_sleeping", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.hangAsk {
			s.mu.Unlock()
			<-r.Context().Done()
			s.mu.Lock()
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]bool{"is_sleeping": len(s.sleeping) > 0})
	})
	mux.HandleFunc("POST /release_memory_occupation", func(w http.ResponseWriter, r *http.Request) {
		if !s.jsonBody(w, r) || s.refused(w) {
			return
		}
		s.mu.Lock()
		s.sleeping["all"] = true
		s.mu.Unlock()
	})
	mux.HandleFunc("POST /resume_memory_occupation", func(w http.ResponseWriter, r *http.Request) {
		if !s.jsonBody(w, r) || s.hung(r) {
			return
		}
		s.mu.Lock()
		clear(s.sleeping)
		s.mu.Unlock()
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		s.mu.Lock()
		s.calls = append(s.calls, strings.TrimSpace(r.Method+" "+r.URL.RequestURI()+" "+string(body)))
		s.mu.Unlock()
		mux.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	s.url = "http://" + l.Addr().String()
	return s
}

func (s *standIn) refused(w http.ResponseWriter) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refuse {
		http.Error(w, `{"error": "sleep mode is not enabled"}`, http.StatusInternalServerError)
	}
	return s.refuse
}

// hung holds a wake until its client gives up, when hang is set.
func (s *standIn) hung(r *http.Request) bool {
	s.mu.Lock()
	hang := s.hang
	s.mu.Unlock()
	if hang {
		close(s.hangCalled)
		<-r.Context().Done()
	}
	return hang
}

// jsonBody answers 422 as FastAPI would for a body that is not JSON.
func (s *standIn) jsonBody(w http.ResponseWriter, r *http.Request) bool {
	var v map[string]any
	if json.NewDecoder(r.Body).Decode(&v) != nil {
		http.Error(w, `{"detail": "body must be a JSON object"}`, http.StatusUnprocessableEntity)
		return false
	}
	return true
}

// takeCalls returns the calls recorded since the last take.
func (s *standIn) takeCalls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.calls
	s.calls = nil
	return c
}

func (s *standIn) asleep() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sleeping) > 0
}

// startStandIn starts a model whose process is a shell that writes its
// arguments and the presets' environment variables to a file and waits, and whose upstream is s:
// the command line that the preset rewrote is the real process's, the
// sleep API is the stand-in's. The check endpoint is off: the stand-in's
// listener is not the process's, which the cmd backend's readiness rule
// would refuse.
func startStandIn(t *testing.T, b *cmdbackend.Backend, s *standIn, server, options string) (plugins.Started, string) {
	t.Helper()
	argsFile := filepath.Join(t.TempDir(), "args")
	spec := plugins.ModelSpec{
		Model:         "m",
		Cmd:           fmt.Sprintf(`sh -c 'echo "$VLLM_SERVER_DEV_MODE$SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION $*" > %s; exec sleep 600' %s`, argsFile, server),
		Proxy:         s.url,
		CheckEndpoint: "none",
		Options:       json.RawMessage(options),
	}
	st, err := b.Start(context.Background(), spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	var args []byte
	eventually(t, 10*time.Second, "the server's arguments", func() bool {
		args, err = os.ReadFile(argsFile)
		return err == nil && len(args) > 0
	})
	return st, strings.TrimSpace(string(args))
}

func residency(t *testing.T, b *cmdbackend.Backend) plugins.Residency {
	t.Helper()
	r, err := b.Residency(context.Background(), "m")
	if err != nil {
		t.Fatalf("Residency: %v", err)
	}
	return r
}

func TestVLLM_StandIn_SleepWake(t *testing.T) {
	b := newBackend(t)
	s := newStandIn(t)
	ctx := context.Background()
	_, args := startStandIn(t, b, s, "vllm serve tiny", `{"preset": "vllm"}`)
	if want := "1 serve tiny --enable-sleep-mode"; args != want {
		t.Errorf("server's VLLM_SERVER_DEV_MODE and arguments = %q, want %q", args, want)
	}
	if r := residency(t, b); r.State != plugins.ResidencyRunning {
		t.Errorf("Residency before sleep = %+v, want running", r)
	}
	s.takeCalls()

	if err := b.Sleep(ctx, "m", plugins.SleepLevel1, 0); err != nil {
		t.Fatalf("Sleep(1): %v", err)
	}
	if r := residency(t, b); r.State != plugins.ResidencyAsleep || r.Level != 1 {
		t.Errorf("Residency asleep = %+v, want asleep at level 1", r)
	}
	if err := b.Sleep(ctx, "m", plugins.SleepLevel1, 0); err != nil {
		t.Errorf("Sleep(1) again = %v, want nil", err)
	}
	if err := b.Wake(ctx, "m", 0); err != nil {
		t.Fatalf("Wake: %v", err)
	}
	got := s.takeCalls()
	want := []string{"POST /sleep?level=1", "GET /is_sleeping", "GET /is_sleeping", "POST /wake_up", "GET /is_sleeping"}
	if !slices.Equal(dropRepeats(got), dropRepeats(want)) {
		t.Errorf("level 1 calls = %q, want %q", got, want)
	}

	if err := b.Sleep(ctx, "m", plugins.SleepLevel2, 0); err != nil {
		t.Fatalf("Sleep(2): %v", err)
	}
	if r := residency(t, b); r.State != plugins.ResidencyAsleep || r.Level != 2 {
		t.Errorf("Residency asleep = %+v, want asleep at level 2", r)
	}
	if err := b.Wake(ctx, "m", 0); err != nil {
		t.Fatalf("Wake from level 2: %v", err)
	}
	got = s.takeCalls()
	want = []string{
		"POST /sleep?level=2", "GET /is_sleeping", "GET /is_sleeping",
		"POST /wake_up?tags=weights", `POST /collective_rpc {"method": "reload_weights"}`,
		"POST /wake_up?tags=kv_cache", "POST /reset_prefix_cache", "GET /is_sleeping",
	}
	if !slices.Equal(dropRepeats(got), dropRepeats(want)) {
		t.Errorf("level 2 calls = %q, want %q", got, want)
	}
	if s.asleep() {
		t.Error("stand-in still asleep after Wake")
	}
	if err := b.Wake(ctx, "m", 0); err != nil {
		t.Errorf("Wake of a running server = %v, want nil", err)
	}
	if r := residency(t, b); r.State != plugins.ResidencyRunning {
		t.Errorf("Residency after wake = %+v, want running", r)
	}
}

// dropRepeats removes consecutive duplicates: how many times a poll asked
// is timing, not protocol.
func dropRepeats(s []string) []string { return slices.Compact(slices.Clone(s)) }

func TestSGLang_StandIn_ReleaseResume(t *testing.T) {
	b := newBackend(t)
	s := newStandIn(t)
	ctx := context.Background()
	_, args := startStandIn(t, b, s, "python3 -m sglang.launch_server --model-path /m", `{"preset": "sglang"}`)
	// SGLang's /health runs a one-token generation unless told not to, and
	// release_memory_occupation asserts an idle server: a liveness probe
	// must not be a generation.
	if want := "false -m sglang.launch_server --model-path /m --enable-memory-saver --enable-weights-cpu-backup"; args != want {
		t.Errorf("server's SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION and arguments = %q, want %q", args, want)
	}
	s.takeCalls()
	if err := b.Sleep(ctx, "m", plugins.SleepLevel2, 0); !errors.Is(err, plugins.ErrNotSupported) {
		t.Errorf("Sleep(2) = %v, want ErrNotSupported (the preset offers level 1)", err)
	}
	if err := b.Sleep(ctx, "m", plugins.SleepLevel1, 0); err != nil {
		t.Fatalf("Sleep(1): %v", err)
	}
	if !s.asleep() {
		t.Error("stand-in not asleep after Sleep")
	}
	if r := residency(t, b); r.State != plugins.ResidencyAsleep || r.Level != 1 {
		t.Errorf("Residency = %+v, want asleep at level 1", r)
	}
	if err := b.Wake(ctx, "m", 0); err != nil {
		t.Fatalf("Wake: %v", err)
	}
	want := []string{"POST /release_memory_occupation {}", "POST /resume_memory_occupation {}"}
	if got := s.takeCalls(); !slices.Equal(got, want) {
		t.Errorf("calls = %q, want %q", got, want)
	}
	if r := residency(t, b); r.State != plugins.ResidencyRunning {
		t.Errorf("Residency after wake = %+v, want running", r)
	}
}

// The faults, for each preset: a server that refuses to sleep (Sleep
// fails, quoting its answer, and the model stays running — the host then
// stops it), and a wake that hangs (Wake ends at its timeout with an
// error).
func TestStandIn_SleepRefusedAndWakeHangs(t *testing.T) {
	for _, tc := range []struct{ name, server, options string }{
		{"TestVLLM_StandIn", "vllm serve tiny", `{"preset": "vllm"}`},
		{"TestSGLang_StandIn", "python3 -m sglang.launch_server", `{"preset": "sglang"}`},
	} {
		t.Run(tc.name+"_SleepRefused", func(t *testing.T) {
			b := newBackend(t)
			s := newStandIn(t)
			startStandIn(t, b, s, tc.server, tc.options)
			s.mu.Lock()
			s.refuse = true
			s.mu.Unlock()
			err := b.Sleep(context.Background(), "m", plugins.SleepLevel1, 0)
			if err == nil || !strings.Contains(err.Error(), "500") || !strings.Contains(err.Error(), "sleep mode is not enabled") {
				t.Fatalf("Sleep = %v, want the refusal quoted", err)
			}
			if r := residency(t, b); r.State != plugins.ResidencyRunning {
				t.Errorf("Residency after a refused sleep = %+v, want running", r)
			}
		})
		t.Run(tc.name+"_WakeHangs", func(t *testing.T) {
			b := newBackend(t)
			s := newStandIn(t)
			startStandIn(t, b, s, tc.server, tc.options)
			if err := b.Sleep(context.Background(), "m", plugins.SleepLevel1, 0); err != nil {
				t.Fatal(err)
			}
			s.mu.Lock()
			s.hang = true
			s.mu.Unlock()
			const timeout = 300 * time.Millisecond
			start := time.Now()
			err := b.Wake(context.Background(), "m", timeout)
			took := time.Since(start)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Wake = %v, want the deadline", err)
			}
			select {
			case <-s.hangCalled:
			default:
				t.Error("the wake never reached the server")
			}
			if took > timeout+2*time.Second {
				t.Errorf("Wake took %s with a timeout of %s", took, timeout)
			}
			if r := residency(t, b); r.State != plugins.ResidencyAsleep {
				t.Errorf("Residency after a hung wake = %+v, want asleep", r)
			}
		})
	}
}

// A server that hangs does not hold Residency past its bound (the plugin
// would miss the call's deadline and be killed with every server): the
// record answers.
func TestVLLM_StandIn_ResidencyOfAHungServer(t *testing.T) {
	b := newBackend(t)
	s := newStandIn(t)
	startStandIn(t, b, s, "vllm serve tiny", `{"preset": "vllm"}`)
	if err := b.Sleep(context.Background(), "m", plugins.SleepLevel2, 0); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.hangAsk = true
	s.mu.Unlock()
	start := time.Now()
	if r := residency(t, b); r.State != plugins.ResidencyAsleep || r.Level != 2 {
		t.Errorf("Residency = %+v, want the record: asleep at level 2", r)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Residency took %s", took)
	}
}

// A server that sleeps and wakes through commands, run with the model's
// environment and ${level} substituted, and says whether it sleeps through
// a command's exit status; then dies asleep.
func TestBackend_SleepWakeCommands_DiesAsleep(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	dir := t.TempDir()
	flag := filepath.Join(dir, "asleep")
	opts, _ := json.Marshal(map[string]any{
		"sleep":        fmt.Sprintf(`sh -c 'echo "${level} $WHO" > %s'`, flag),
		"wake":         "rm " + flag,
		"is_sleeping":  "test -e " + flag,
		"sleep_levels": []int{1, 2},
	})
	st, err := b.Start(ctx, plugins.ModelSpec{Model: "m", Cmd: simCmd(""), Env: []string{"WHO=m"}, Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Sleep(ctx, "m", plugins.SleepLevel2, 0); err != nil {
		t.Fatalf("Sleep: %v", err)
	}
	if got, _ := os.ReadFile(flag); string(got) != "2 m\n" {
		t.Errorf("sleep command wrote %q, want %q", got, "2 m\n")
	}
	if r := residency(t, b); r.State != plugins.ResidencyAsleep || r.Level != 2 {
		t.Errorf("Residency = %+v, want asleep at level 2", r)
	}
	if err := b.Wake(ctx, "m", 0); err != nil {
		t.Fatalf("Wake: %v", err)
	}
	if _, err := os.Stat(flag); !os.IsNotExist(err) {
		t.Errorf("wake command did not run: %v", err)
	}
	if err := b.Sleep(ctx, "m", plugins.SleepLevel1, 0); err != nil {
		t.Fatalf("Sleep: %v", err)
	}

	// Dies asleep: Wait reports the exit as for a running server, and
	// Residency says stopped.
	if err := syscall.Kill(st.Pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	exit, err := b.Wait(ctx, "m")
	if err != nil || exit.Requested || exit.Signal == "" {
		t.Errorf("Wait = %+v, %v; want an unrequested death by signal", exit, err)
	}
	if r := residency(t, b); r.State != plugins.ResidencyStopped {
		t.Errorf("Residency of a dead sleeper = %+v, want stopped", r)
	}
	if err := b.Wake(ctx, "m", 0); !errors.Is(err, plugins.ErrNotRunning) {
		t.Errorf("Wake of a dead sleeper = %v, want ErrNotRunning", err)
	}
	if err := b.Sleep(ctx, "m", plugins.SleepLevel1, 0); !errors.Is(err, plugins.ErrNotRunning) {
		t.Errorf("Sleep of a dead server = %v, want ErrNotRunning", err)
	}
}

func TestBackend_SleepErrors(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	if err := b.Sleep(ctx, "nope", plugins.SleepLevel1, 0); !errors.Is(err, plugins.ErrUnknownModel) {
		t.Errorf("Sleep of an unknown model = %v", err)
	}
	if _, err := b.Residency(ctx, "nope"); !errors.Is(err, plugins.ErrUnknownModel) {
		t.Errorf("Residency of an unknown model = %v", err)
	}
	if _, err := b.Start(ctx, plugins.ModelSpec{Model: "plain", Cmd: simCmd("")}); err != nil {
		t.Fatal(err)
	}
	if err := b.Sleep(ctx, "plain", plugins.SleepLevel1, 0); !errors.Is(err, plugins.ErrNotSupported) {
		t.Errorf("Sleep of a model with no sleep configured = %v, want ErrNotSupported", err)
	}
	if err := b.Wake(ctx, "plain", 0); !errors.Is(err, plugins.ErrNotSupported) {
		t.Errorf("Wake of a model with no sleep configured = %v, want ErrNotSupported", err)
	}
	if r, _ := b.Residency(ctx, "plain"); r.State != plugins.ResidencyRunning {
		t.Errorf("Residency = %+v, want running", r)
	}
	caps, _ := b.Capabilities(ctx)
	for _, f := range []string{plugins.FeatureSleep, plugins.FeatureSleepLevel2, plugins.FeatureResidency} {
		if !slices.Contains(caps.Features, f) {
			t.Errorf("Capabilities %v lacks %s", caps.Features, f)
		}
	}
}

func TestBackend_Validate_SleepOptions(t *testing.T) {
	b := cmdbackend.New(nil)
	for _, tc := range []struct {
		name, cmd, options string
		want               []string // "option: message part", in order; none for a valid spec
	}{
		{"none", "srv", ``, nil},
		{"vllm preset", "vllm serve m --port ${PORT}", `{"preset": "vllm"}`, nil},
		{"vllm preset, flag already there", "docker run img --enable-sleep-mode", `{"preset": "vllm"}`, nil},
		{"vllm preset, not vllm's cmd", "docker run img", `{"preset": "vllm"}`, []string{"preset: preset vllm: cmd does not run vllm as the preset knows it, so --enable-sleep-mode cannot be added"}},
		{"sglang preset", "python -m sglang.launch_server", `{"preset": "sglang"}`, nil},
		{"unknown preset", "srv", `{"preset": "tgi"}`, []string{`preset: unknown preset "tgi" (known: sglang, vllm)`}},
		{"own steps", "srv", `{"sleep": "POST /sleep?level=${level}", "wake": ["POST /wake_up", "./reload.sh ${level}"], "is_sleeping": "GET /is_sleeping", "sleep_levels": [1, 2]}`, nil},
		{"preset overridden", "vllm serve m", `{"preset": "vllm", "wake": "POST /wake_up", "sleep_levels": 1}`, nil},
		{"sleep without wake", "srv", `{"sleep": "POST /sleep"}`, []string{"wake: required with sleep"}},
		{"wake without sleep", "srv", `{"wake": "POST /wake"}`, []string{"sleep: required with wake"}},
		{"is_sleeping and wake", "srv", `{"is_sleeping": "GET /props", "wake": "POST /tokenize {\"content\": \"\"}"}`, nil},
		{"bad levels", "srv", `{"sleep": "a", "wake": "b", "sleep_levels": [3]}`, []string{"sleep_levels: want the levels"}},
		{"bad path", "srv", `{"sleep": "POST sleep", "wake": "b"}`, []string{"sleep: \"POST sleep\": an HTTP step is METHOD /path"}},
		{"bad body", "srv", `{"sleep": "POST /s {nope", "wake": "b"}`, []string{"sleep: \"POST /s {nope\": the body after the path must be JSON"}},
		{"bad command", "srv", `{"sleep": "sh -c 'x", "wake": "b"}`, []string{"sleep: \"sh -c 'x\": unterminated quote"}},
		{"unknown and wrong type", "srv", `{"sleeep": 1, "wake": 2, "sleep": "a"}`, []string{"sleeep: unknown option", "wake: want a step or a list of steps"}},
		{"not an object", "srv", `[1]`, []string{"want a JSON object"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			problems, err := b.Validate(context.Background(), plugins.ModelSpec{Model: "m", Cmd: tc.cmd, Options: json.RawMessage(tc.options)})
			if err != nil {
				t.Fatal(err)
			}
			if len(problems) != len(tc.want) {
				t.Fatalf("problems = %q, want %d like %q", problems, len(tc.want), tc.want)
			}
			for i, p := range problems {
				if !strings.Contains(p.String(), tc.want[i]) {
					t.Errorf("problem %d = %q, want it to contain %q", i, p, tc.want[i])
				}
			}
		})
	}
}

// FuzzParseStep: any string parses or is refused without a panic, and a
// step parsed writes back to a string that parses to the same step.
func FuzzParseStep(f *testing.F) {
	for _, s := range []string{"POST /sleep?level=${level}", `POST /collective_rpc {"method": "reload_weights"}`,
		"GET /is_sleeping", "./reload.sh ${level}", "sh -c 'x y'", "POST sleep", "DELETE /", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		st, err := cmdbackend.ParseStep(s)
		if err != nil || st.Method == "" {
			return // commands are plugins.SplitCommand's to round-trip
		}
		again, err := cmdbackend.ParseStep(st.String())
		if err != nil || again.Method != st.Method || again.Path != st.Path || again.Body != st.Body {
			t.Fatalf("ParseStep(%q) = %+v, written %q, parsed again %+v, %v", s, st, st.String(), again, err)
		}
	})
}
