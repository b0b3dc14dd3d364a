package cmdbackend_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	cmdbackend "github.com/loadout-dev/loadout/backends/cmd"
	"github.com/loadout-dev/loadout/plugins"
)

// testPlugin is the path of the built backends/internal/testplugin binary:
// its sim-server mode is the model server these tests run.
var testPlugin string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "cmdbackend-test")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		testPlugin = filepath.Join(dir, "testplugin")
		build := exec.Command("go", "build", "-o", testPlugin, "github.com/loadout-dev/loadout/backends/internal/testplugin")
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build testplugin: %v\n%s", err, out)
			return 1
		}
		return m.Run()
	}())
}

// newBackend returns a Backend whose servers are all stopped when t ends.
func newBackend(t *testing.T) *cmdbackend.Backend {
	t.Helper()
	b := cmdbackend.New(nil)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func simCmd(flags string) string { return testPlugin + " sim-server --port ${PORT} " + flags }

// alive reports whether pid is a live (not zombie) process.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(stat)
	return !strings.HasPrefix(strings.TrimSpace(s[strings.LastIndexByte(s, ')')+1:]), "Z")
}

// eventually polls cond until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestBackend_StartReadyStop(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	st, err := b.Start(ctx, plugins.ModelSpec{Model: "m", Cmd: simCmd("--load-time 100ms"), HealthCheckTimeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	resp, err := http.Get(st.Upstream + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /health right after Start = %d, want 200", resp.StatusCode)
	}
	stats, err := b.Stats(ctx, "m")
	if err != nil || !slices.Contains(stats.Pids, st.Pids[0]) {
		t.Errorf("Stats = %+v, %v; want pids to include %d", stats, err, st.Pids[0])
	}
	if err := b.Stop(ctx, "m", 5*time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	exit, err := b.Wait(ctx, "m")
	if err != nil || !exit.Requested || exit.Signal != "" {
		t.Errorf("Wait = %+v, %v; want a requested, clean exit after SIGTERM", exit, err)
	}
	if alive(st.Pids[0]) {
		t.Errorf("server pid %d still alive after Stop", st.Pids[0])
	}
	if err := b.Stop(ctx, "m", 0); err != nil {
		t.Errorf("second Stop = %v, want nil", err)
	}
}

func TestBackend_StartFailures(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec plugins.ModelSpec
		want []string
	}{
		{
			name: "exit during start-up carries stderr tail",
			spec: plugins.ModelSpec{Cmd: `sh -c 'echo starting; echo boom >&2; exit 3'`},
			want: []string{"exited while starting", "exit status 3", "boom"},
		},
		{
			name: "env and devices reach the server",
			spec: plugins.ModelSpec{
				Cmd:     `sh -c 'echo "devices=$CUDA_VISIBLE_DEVICES foo=$FOO" >&2; exit 1'`,
				Env:     []string{"FOO=bar"},
				Devices: []int{1, 3},
			},
			want: []string{"devices=1,3 foo=bar"},
		},
		{
			name: "stderr tail keeps the last lines only",
			spec: plugins.ModelSpec{Cmd: `sh -c 'for i in $(seq 1 100); do echo line$i >&2; done; exit 2'`},
			want: []string{"line100", "line81\n"},
		},
		{
			name: "health-check timeout",
			spec: plugins.ModelSpec{Cmd: simCmd("--load-time 1h"), HealthCheckTimeout: 300 * time.Millisecond},
			want: []string{"not ready after 300ms", "503"},
		},
		{
			name: "missing binary",
			spec: plugins.ModelSpec{Cmd: "/nonexistent/server --port ${PORT}"},
			want: []string{"no such file"},
		},
		{
			name: "unbalanced quote",
			spec: plugins.ModelSpec{Cmd: `server "--port`},
			want: []string{"parse cmd"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBackend(t)
			tc.spec.Model = "m"
			_, err := b.Start(context.Background(), tc.spec)
			if err == nil {
				t.Fatal("Start succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Start error = %q, want it to contain %q", err, w)
				}
			}
			if strings.Contains(tc.name, "last lines") && strings.Contains(err.Error(), "line80\n") {
				t.Errorf("Start error kept more than %d lines: %q", 20, err)
			}
		})
	}
}

func TestBackend_StartCanceled(t *testing.T) {
	b := newBackend(t)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer cancel()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if h, err := b.Health(context.Background(), "m"); err == nil && h.State == plugins.StateStarting {
				return
			}
		}
	}()
	_, err := b.Start(ctx, plugins.ModelSpec{Model: "m", Cmd: simCmd("--load-time 1h")})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Start error = %v, want context.Canceled", err)
	}
	if h, _ := b.Health(context.Background(), "m"); h.State != plugins.StateExited {
		t.Errorf("state after a canceled Start = %q, want exited", h.State)
	}
}

func TestBackend_StopEscalation(t *testing.T) {
	for _, tc := range []struct {
		name       string
		spec       plugins.ModelSpec
		timeout    time.Duration
		wantSignal string
	}{
		{
			name:       "SIGTERM ignored, SIGKILL after timeout",
			spec:       plugins.ModelSpec{Cmd: simCmd(""), Env: []string{"TESTPLUGIN_IGNORE_SIGTERM=1"}},
			timeout:    300 * time.Millisecond,
			wantSignal: "killed",
		},
		{
			name:       "cmdStop with ${PID}",
			spec:       plugins.ModelSpec{Cmd: simCmd(""), CmdStop: "kill -INT ${PID}"},
			timeout:    10 * time.Second,
			wantSignal: "",
		},
		{
			// llama-swap runs cmdStop in the server's environment.
			name:       "cmdStop reads the model's env",
			spec:       plugins.ModelSpec{Cmd: simCmd(""), CmdStop: "sh -c 'kill -$STOP_SIGNAL ${PID}'", Env: []string{"STOP_SIGNAL=INT"}},
			timeout:    5 * time.Second,
			wantSignal: "",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBackend(t)
			tc.spec.Model = "m"
			st, err := b.Start(context.Background(), tc.spec)
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			start := time.Now()
			if err := b.Stop(context.Background(), "m", tc.timeout); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			if d := time.Since(start); d < tc.timeout && tc.wantSignal == "killed" {
				t.Errorf("Stop returned after %s, before the %s grace", d, tc.timeout)
			}
			exit, _ := b.Wait(context.Background(), "m")
			if exit.Signal != tc.wantSignal || !exit.Requested {
				t.Errorf("exit = %+v, want signal %q, requested", exit, tc.wantSignal)
			}
			if alive(st.Pids[0]) {
				t.Errorf("pid %d alive after Stop", st.Pids[0])
			}
		})
	}
}

func TestBackend_Errors(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	if _, err := b.Start(ctx, plugins.ModelSpec{Model: "m", Cmd: simCmd("")}); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if _, err := b.Start(ctx, plugins.ModelSpec{Model: "m", Cmd: simCmd("")}); !errors.Is(err, plugins.ErrAlreadyRunning) {
		t.Errorf("Start of a running model = %v, want ErrAlreadyRunning", err)
	}
	for name, call := range map[string]func() error{
		"Stop":   func() error { return b.Stop(ctx, "x", 0) },
		"Health": func() error { _, err := b.Health(ctx, "x"); return err },
		"Stats":  func() error { _, err := b.Stats(ctx, "x"); return err },
		"Wait":   func() error { _, err := b.Wait(ctx, "x"); return err },
	} {
		if err := call(); !errors.Is(err, plugins.ErrUnknownModel) {
			t.Errorf("%s(unknown) = %v, want ErrUnknownModel", name, err)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Start(ctx, plugins.ModelSpec{Model: "n", Cmd: simCmd("")}); err == nil {
		t.Error("Start after Close succeeded")
	}
}

// TestBackend_NoOrphanWhenPluginDies runs the backend in a real plugin
// process, kills the plugin and checks its model servers die too: by
// Pdeathsig on SIGKILL, by the plugin's own shutdown on SIGTERM.
func TestBackend_NoOrphanWhenPluginDies(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.Command(testPlugin, "cmd")
			c, err := plugins.Launch(ctx, cmd, nil)
			if err != nil {
				t.Fatalf("Launch: %v", err)
			}
			defer c.Kill()
			var pids []int
			for _, m := range []string{"a", "b"} {
				st, err := c.Start(ctx, plugins.ModelSpec{Model: m, Cmd: simCmd("")})
				if err != nil {
					t.Fatalf("Start %s: %v", m, err)
				}
				pids = append(pids, st.Pids...)
			}
			t.Cleanup(func() { // should there be orphans after all
				for _, pid := range pids {
					if alive(pid) {
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
			})
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			<-c.Done()
			for _, pid := range pids {
				eventually(t, 10*time.Second, fmt.Sprintf("server pid %d to die with its plugin", pid), func() bool { return !alive(pid) })
			}
		})
	}
}

// TestBackend_NoOrphanWhenPluginShutsDown checks Kill's graceful path: the
// plugin stops its servers before it exits.
func TestBackend_NoOrphanWhenPluginShutsDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := plugins.Launch(ctx, exec.Command(testPlugin, "cmd"), nil)
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	st, err := c.Start(ctx, plugins.ModelSpec{Model: "a", Cmd: simCmd("")})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	c.Kill()
	if alive(st.Pids[0]) {
		t.Errorf("server pid %d alive after the plugin shut down", st.Pids[0])
	}
}
