package backend

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/loadout-dev/loadout/host/router"
	"log/slog"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/plugins"
)

// TestPluginProcess_Lifecycle drives PluginProcess against the real sim
// backend plugin (backends/internal/testplugin, built once by TestMain).
func TestPluginProcess_Lifecycle(t *testing.T) {
	bin := testPlugin
	spec := func(model, options string) plugins.ModelSpec {
		return plugins.ModelSpec{Model: model, Options: json.RawMessage(options), HealthCheckTimeout: 30 * time.Second}
	}
	var lastCmd *exec.Cmd // the plugin process last launched
	waitExited := func(t *testing.T, inst router.Instance) {
		t.Helper()
		select {
		case <-inst.Exited():
		case <-time.After(10 * time.Second):
			t.Fatal("Exited not closed")
		}
	}

	for _, tc := range []struct {
		name string
		run  func(t *testing.T, l *PluginLauncher)
	}{
		{"start, serve, stop", func(t *testing.T, l *PluginLauncher) {
			inst, err := NewPluginProcess(spec("m", `{"tokens_per_second": 500}`), l).Start(context.Background(), router.StartSpec{Devices: []int{0}})
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			resp, err := http.Get(inst.Upstream().JoinPath("health").String())
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("upstream /health = %d", resp.StatusCode)
			}
			if err := inst.Stop(context.Background()); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			waitExited(t, inst)
			if err := inst.Err(); err != nil {
				t.Errorf("Err after Stop = %v, want nil", err)
			}
			if err := inst.Stop(context.Background()); err != nil {
				t.Errorf("Stop of an exited instance = %v, want nil", err)
			}
		}},
		{"two models share one plugin", func(t *testing.T, l *PluginLauncher) {
			ctx := context.Background()
			a, err := NewPluginProcess(spec("a", `{}`), l).Start(ctx, router.StartSpec{})
			if err != nil {
				t.Fatal(err)
			}
			c1, _ := l.Client(ctx)
			b, err := NewPluginProcess(spec("b", `{}`), l).Start(ctx, router.StartSpec{})
			if err != nil {
				t.Fatal(err)
			}
			if c2, _ := l.Client(ctx); c1 != c2 {
				t.Error("second model launched a second plugin")
			}
			_ = a.Stop(ctx)
			_ = b.Stop(ctx)
		}},
		{"server crash", func(t *testing.T, l *PluginLauncher) {
			inst, err := NewPluginProcess(spec("m", `{"crash_after_tokens": 2, "tokens_per_second": 500}`), l).Start(context.Background(), router.StartSpec{})
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			body := `{"messages":[{"role":"user","content":"hi"}],"max_tokens":10}`
			if resp, err := http.Post(inst.Upstream().JoinPath("v1/chat/completions").String(), "application/json", strings.NewReader(body)); err == nil {
				resp.Body.Close()
			}
			waitExited(t, inst)
			if err := inst.Err(); err == nil || !strings.Contains(err.Error(), "crash_after_tokens") {
				t.Errorf("Err = %v, want the crash with its stderr tail", err)
			}
		}},
		{"plugin killed, next start relaunches", func(t *testing.T, l *PluginLauncher) {
			ctx := context.Background()
			p := NewPluginProcess(spec("m", `{}`), l)
			inst, err := p.Start(ctx, router.StartSpec{})
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			c, _ := l.Client(ctx)
			_ = lastCmd.Process.Kill() // the plugin crashes
			waitExited(t, inst)
			if err := inst.Err(); !errors.Is(err, plugins.ErrPluginExited) || err.Error() != "backend plugin sim exited" {
				t.Errorf("Err = %v, want %q", err, "backend plugin sim exited")
			}
			again, err := p.Start(ctx, router.StartSpec{})
			if err != nil {
				t.Fatalf("Start after the plugin died: %v", err)
			}
			if c2, _ := l.Client(ctx); c2 == c {
				t.Error("the dead plugin was reused")
			}
			_ = again.Stop(ctx)
		}},
		{"launcher closed under a running model", func(t *testing.T, l *PluginLauncher) {
			inst, err := NewPluginProcess(spec("m", `{}`), l).Start(context.Background(), router.StartSpec{})
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			l.Close()
			waitExited(t, inst)
			if err := inst.Err(); !errors.Is(err, plugins.ErrPluginExited) {
				t.Errorf("Err = %v, want ErrPluginExited", err)
			}
			if _, err := http.Get(inst.Upstream().JoinPath("health").String()); err == nil {
				t.Error("model server still answers after its plugin was closed")
			}
		}},
		{"start error", func(t *testing.T, l *PluginLauncher) {
			_, err := NewPluginProcess(spec("m", `{"vram": "lots"}`), l).Start(context.Background(), router.StartSpec{})
			if err == nil || !strings.Contains(err.Error(), "start model m") {
				t.Errorf("Start error = %v", err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewPluginLauncher("sim", func() *exec.Cmd {
				lastCmd = exec.Command(bin, "sim")
				return lastCmd
			}, slog.New(slog.DiscardHandler))
			t.Cleanup(l.Close)
			tc.run(t, l)
		})
	}
}
