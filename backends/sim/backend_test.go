package sim_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/backends/sim"
	"github.com/loadout-dev/loadout/internal/proctest"
	"github.com/loadout-dev/loadout/plugins"
)

// testPlugin is the path of the built backends/internal/testplugin binary.
var testPlugin string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "sim-test")
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

// launchSim runs the sim backend in a real plugin process until t ends.
func launchSim(t *testing.T) *plugins.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := plugins.Launch(ctx, exec.Command(testPlugin, "sim"), nil)
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	t.Cleanup(c.Kill)
	return c
}

func TestBackend_StartStatsEstimate(t *testing.T) {
	c := launchSim(t)
	ctx := context.Background()
	spec := plugins.ModelSpec{
		Model:   "m",
		Options: json.RawMessage(`{"vram": "2GiB", "load_time": "200ms", "tokens_per_second": 100, "max_batch": 4, "seed": 1}`),
	}
	begin := time.Now()
	st, err := c.Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if d := time.Since(begin); d < 200*time.Millisecond {
		t.Errorf("Start returned after %s, before the 200ms load time", d)
	}
	stats, err := c.Stats(ctx, "m")
	if err != nil || stats.MemoryBytes != 2<<30 || len(stats.Pids) == 0 || stats.Pids[0] != st.Pids[0] {
		t.Errorf("Stats = %+v, %v; want 2 GiB and pid %d", stats, err, st.Pids[0])
	}
	resp, err := http.Get(st.Upstream + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var models struct{ Data []struct{ ID string } }
	_ = json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	if len(models.Data) != 1 || models.Data[0].ID != "m" {
		t.Errorf("/v1/models = %+v, want model m", models)
	}

	for _, tc := range []struct {
		devices []int
		want    string
	}{
		{nil, "[2147483648]"},
		{[]int{0, 1}, "[1073741824 1073741824]"},
	} {
		spec.Devices = tc.devices
		e, err := c.Estimate(ctx, spec)
		if err != nil || !e.Known || fmt.Sprint(e.BytesPerDevice) != tc.want {
			t.Errorf("Estimate(devices %v) = %+v, %v; want %s", tc.devices, e, err, tc.want)
		}
	}

	if err := c.Stop(ctx, "m", 0); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if exit, err := c.Wait(ctx, "m"); err != nil || exit.Err() != nil {
		t.Errorf("Wait = %+v, %v; want a clean requested exit", exit, err)
	}
}

// A model server that stops answering (SIGSTOP) fails its own Stats in
// time, and the plugin is not killed for it: the host kills a plugin that
// misses a call's deadline, and with it every model the plugin runs (the
// default configuration's persistent embed model, a sleeper).
func TestBackend_StatsOfAStoppedServerFailsInTime(t *testing.T) {
	c := launchSim(t)
	ctx := context.Background()
	opts := json.RawMessage(`{"vram": "1GiB", "load_time": "10ms"}`)
	hung, err := c.Start(ctx, plugins.ModelSpec{Model: "hung", Options: opts})
	if err != nil {
		t.Fatalf("Start hung: %v", err)
	}
	if _, err := c.Start(ctx, plugins.ModelSpec{Model: "other", Options: opts}); err != nil {
		t.Fatalf("Start other: %v", err)
	}
	proctest.Stop(t, hung.Pids[0])

	_, err = c.Stats(ctx, "hung")
	if err == nil || errors.Is(err, plugins.ErrPluginHung) || c.Condemned() {
		t.Fatalf("Stats of a stopped server = %v (plugin condemned: %v); want the server's own error, the plugin kept", err, c.Condemned())
	}
	if st, err := c.Stats(ctx, "other"); err != nil || st.MemoryBytes != 1<<30 {
		t.Errorf("Stats of the other model after = %+v, %v; want its 1 GiB", st, err)
	}
}

func TestBackend_CrashAfterTokens(t *testing.T) {
	c := launchSim(t)
	ctx := context.Background()
	st, err := c.Start(ctx, plugins.ModelSpec{
		Model:   "m",
		Options: json.RawMessage(`{"crash_after_tokens": 5, "tokens_per_second": 100}`),
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	exited := make(chan plugins.Exit, 1)
	go func() {
		e, _ := c.Wait(ctx, "m")
		exited <- e
	}()

	body := `{"messages":[{"role":"user","content":"hi"}],"max_tokens":50,"stream":true}`
	resp, err := http.Post(st.Upstream+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var chunks int
	var done bool
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		switch line := sc.Text(); {
		case line == "data: [DONE]":
			done = true
		case strings.HasPrefix(line, "data: "):
			chunks++
		}
	}
	if done || chunks > 1+5 {
		t.Errorf("stream got %d chunks, [DONE]=%v; want it cut after 5 tokens", chunks, done)
	}

	select {
	case e := <-exited:
		if e.Requested || e.Code != 1 || !strings.Contains(e.StderrTail, "crash_after_tokens") || e.Err() == nil {
			t.Errorf("exit = %+v, want an unrequested exit 1 with the crash message", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not report the crash")
	}
	if h, err := c.Health(ctx, "m"); err != nil || h.Ready || h.State != plugins.StateExited || !strings.Contains(h.Message, "exit status 1") {
		t.Errorf("Health after crash = %+v, %v", h, err)
	}
}

func TestBackend_BadOptions(t *testing.T) {
	b := sim.New([]string{testPlugin, "sim-server"}, nil)
	t.Cleanup(func() { _ = b.Close() })
	for _, tc := range []struct {
		options string
		option  string // the option Validate's problem names
		want    string
	}{
		{`[1, 2]`, "", "JSON object"},
		{`{"vram": "8XB"}`, "vram", "unknown unit"},
		{`{"bogus": 1}`, "bogus", "unknown option"},
		{`{"port": 1}`, "port", "unknown option"},
		{`{"seed": [1]}`, "seed", "want a string, a number or a boolean"},
		{`{"seed": true}`, "seed", `invalid value "true": want a whole number`},
		{`{"sleep_fails": "maybe"}`, "sleep_fails", `invalid value "maybe": want true or false`},
		{`{"load_time": "forever"}`, "load_time", `invalid value "forever": want a duration such as 2s or 500ms`},
		{`{"wake_time": "-1s"}`, "wake_time", "wake time must not be negative"},
		{`{"max_batch": 0}`, "max_batch", "max batch"},
		{`{"tokens_per_second": -5, "seed": 1}`, "tokens_per_second", "must be 0.01 to 1e+09, got -5"},
	} {
		t.Run(tc.options, func(t *testing.T) {
			spec := plugins.ModelSpec{Model: "m", Options: json.RawMessage(tc.options)}
			problems, err := b.Validate(context.Background(), spec)
			if err != nil || len(problems) != 1 || problems[0].Option != tc.option || !strings.Contains(problems[0].Message, tc.want) {
				t.Errorf("Validate = %+v, %v; want one problem with option %q and %q", problems, err, tc.option, tc.want)
			}
			if _, err := b.Estimate(context.Background(), spec); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Estimate error = %v, want %q", err, tc.want)
			}
			if _, err := b.Start(context.Background(), spec); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Start error = %v, want %q", err, tc.want)
			}
		})
	}
	problems, err := b.Validate(context.Background(), plugins.ModelSpec{Model: "m", Options: json.RawMessage(`{"tokens_per_second": 20, "vram": "1GiB", "load_time": "10ms"}`)})
	if err != nil || problems != nil {
		t.Errorf("Validate of good options = %+v, %v; want none", problems, err)
	}
}
