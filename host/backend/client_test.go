package backend

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/plugins"
)

// testPlugin is the path of the backends/internal/testplugin binary, built
// once by TestMain for every test of this package. The protocol's own tests
// (plugins.Launch and plugins.Client against real plugin processes) live
// here rather than in plugins/, because plugins is a module of its own and
// the test plugin is built from this one.
var testPlugin string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "backend-test")
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

func launch(t *testing.T, mode string) (*plugins.Client, *exec.Cmd) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.Command(testPlugin, mode)
	c, err := plugins.Launch(ctx, cmd, nil)
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	t.Cleanup(c.Kill)
	return c, cmd
}

func TestLaunch_Handshake(t *testing.T) {
	for _, tc := range []struct {
		mode     string
		wantName string
		features []string
	}{
		{"cmd", "cmd", []string{plugins.FeatureSleep, plugins.FeatureSleepLevel2, plugins.FeatureResidency}},
		{"sim", "sim", []string{plugins.FeatureEstimate, plugins.FeatureMeasuredMemory, plugins.FeatureSleep, plugins.FeatureSleepLevel2, plugins.FeatureResidency}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			c, _ := launch(t, tc.mode)
			caps, err := c.Capabilities(context.Background())
			if err != nil {
				t.Fatalf("Capabilities: %v", err)
			}
			if caps.Name != tc.wantName || caps.Version == "" || strings.Join(caps.Features, ",") != strings.Join(tc.features, ",") {
				t.Errorf("Capabilities = %+v, want name %q features %v", caps, tc.wantName, tc.features)
			}
			if c.Exited() {
				t.Error("Exited() = true for a running plugin")
			}
		})
	}
}

func TestLaunch_Failures(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	// A shell wrapper that hangs before the handshake: its child holds
	// the plugin's stdout open after the wrapper is killed, and the launch
	// waited for the child (30 s here) before it failed.
	soon, cancelSoon := context.WithTimeout(context.Background(), time.Second)
	defer cancelSoon()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		cmd  *exec.Cmd
		want string
	}{
		{"not a plugin", context.Background(), exec.Command("true"), "handshake"},
		{"missing binary", context.Background(), exec.Command("/nonexistent/plugin"), "no such file"},
		{"canceled", canceled, exec.Command("sleep", "60"), "context canceled"},
		{"a wrapper's child holds stdout", soon, exec.Command("sh", "-c", "sleep 30; true"), "context deadline exceeded"},
		{"newer protocol", context.Background(), exec.Command(testPlugin, "v3"), "the plugin speaks protocol version 3, this host speaks versions 1 to 2; upgrade loadout"},
		{"stdout before the handshake", context.Background(), exec.Command(testPlugin, "stdout"), `it wrote "starting up" to stdout before the handshake`},
		{"crashes at start", context.Background(), exec.Command("false"), "exited or closed its stdout before the handshake"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			c, err := plugins.Launch(tc.ctx, tc.cmd, nil)
			if err == nil {
				c.Kill()
				t.Fatal("Launch succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Launch error = %q, want it to contain %q", err, tc.want)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("Launch took %s to fail", d)
			}
		})
	}
}

func TestClient_StartHealthStop(t *testing.T) {
	c, _ := launch(t, "cmd")
	ctx := context.Background()
	spec := plugins.ModelSpec{
		Model:              "m1",
		Cmd:                testPlugin + " sim-server --port ${PORT} --load-time 50ms",
		HealthCheckTimeout: 30 * time.Second,
	}
	st, err := c.Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if len(st.Pids) != 1 || !strings.HasPrefix(st.Upstream, "http://127.0.0.1:") {
		t.Fatalf("Started = %+v", st)
	}
	resp, err := http.Get(st.Upstream + "/health")
	if err != nil {
		t.Fatalf("GET /health: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /health = %d after Start returned", resp.StatusCode)
	}
	if h, err := c.Health(ctx, "m1"); err != nil || !h.Ready || h.State != plugins.StateReady {
		t.Errorf("Health = %+v, %v; want ready", h, err)
	}
	if _, err := c.Start(ctx, spec); !errors.Is(err, plugins.ErrAlreadyRunning) {
		t.Errorf("second Start error = %v, want ErrAlreadyRunning", err)
	}
	if err := c.Stop(ctx, "m1", 5*time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	exit, err := c.Wait(ctx, "m1")
	if err != nil || !exit.Requested || exit.Err() != nil {
		t.Errorf("Wait = %+v, %v; want a requested exit", exit, err)
	}
	if h, err := c.Health(ctx, "m1"); err != nil || h.Ready || h.State != plugins.StateExited {
		t.Errorf("Health after Stop = %+v, %v; want exited", h, err)
	}
	if _, err := c.Health(ctx, "nope"); !errors.Is(err, plugins.ErrUnknownModel) {
		t.Errorf("Health(unknown) error = %v, want ErrUnknownModel", err)
	}
}

func TestClient_PluginDeath(t *testing.T) {
	c, cmd := launch(t, "cmd")
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after the plugin was killed")
	}
	if !c.Exited() {
		t.Error("Exited() = false after Done closed")
	}
	if _, err := c.Capabilities(context.Background()); !errors.Is(err, plugins.ErrPluginExited) {
		t.Errorf("call on a dead plugin error = %v, want ErrPluginExited", err)
	}
}

// Validate crosses the plugin boundary: each problem keeps its option and
// message, and a valid spec has none.
func TestClient_Validate(t *testing.T) {
	c, _ := launch(t, "sim")
	ctx := context.Background()
	problems, err := c.Validate(ctx, plugins.ModelSpec{Model: "m", Options: []byte(`{"tokens_per_second": -1}`)})
	if err != nil || len(problems) != 1 || problems[0].Option != "tokens_per_second" || !strings.Contains(problems[0].Message, "must be 0.01 to 1e+09, got -1") {
		t.Errorf("Validate(bad) = %+v, %v; want one tokens_per_second problem", problems, err)
	}
	problems, err = c.Validate(ctx, plugins.ModelSpec{Model: "m", Options: []byte(`{"tokens_per_second": 10}`)})
	if err != nil || problems != nil {
		t.Errorf("Validate(good) = %+v, %v; want none", problems, err)
	}
	cmdc, _ := launch(t, "cmd")
	problems, err = cmdc.Validate(ctx, plugins.ModelSpec{Model: "m", Cmd: "server", Options: []byte(`{"threads": 8}`)})
	if err != nil || len(problems) != 1 || problems[0].Option != "threads" {
		t.Errorf("cmd Validate(options) = %+v, %v; want one problem naming threads", problems, err)
	}
}
