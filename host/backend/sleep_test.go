package backend

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/router"
	"github.com/loadout-dev/loadout/plugins"
)

// sleepInstance is the router's SleepInstance, as pluginInstance
// implements it.
type sleepInstance = router.SleepInstance

// startSleeper starts model through a launcher of mode's testplugin and
// returns its instance as a sleepInstance.
func startSleeper(t *testing.T, mode string, spec plugins.ModelSpec) sleepInstance {
	t.Helper()
	l := NewPluginLauncher(mode, func() *exec.Cmd { return exec.Command(testPlugin, mode) }, slog.New(slog.DiscardHandler))
	t.Cleanup(l.Close)
	if spec.HealthCheckTimeout == 0 {
		spec.HealthCheckTimeout = 30 * time.Second
	}
	inst, err := NewPluginProcess(spec, l).Start(context.Background(), router.StartSpec{})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = inst.Stop(context.Background()) })
	si, ok := inst.(sleepInstance)
	if !ok {
		t.Fatalf("%T does not implement the router's SleepInstance", inst)
	}
	return si
}

func TestSleepLevels(t *testing.T) {
	caps := func(f ...string) plugins.Capabilities { return plugins.Capabilities{Features: f} }
	for _, tc := range []struct {
		version int
		caps    plugins.Capabilities
		want    uint8
	}{
		{1, caps(plugins.FeatureSleep, plugins.FeatureSleepLevel2), 0},
		{2, caps(), 0},
		{2, caps(plugins.FeatureSleepLevel2), 0},
		{2, caps(plugins.FeatureSleep), 1},
		{2, caps(plugins.FeatureSleep, plugins.FeatureSleepLevel2), 3},
		{2, caps(plugins.FeatureSleep, plugins.FeatureSleepLevel2, plugins.FeatureSleepLevel2Only), 2},
	} {
		if got := SleepLevels(tc.version, tc.caps); got != tc.want {
			t.Errorf("SleepLevels(%d, %v) = %b, want %b", tc.version, tc.caps.Features, got, tc.want)
		}
	}
}

// The adapter against the real sim backend plugin and sim servers: levels
// from the features, host memory from Residency (level 1) or, where the
// backend reports none, the server's RSS (level 2 with no host_bytes).
func TestPluginInstance_SleepWake(t *testing.T) {
	ctx := context.Background()
	inst := startSleeper(t, "sim", plugins.ModelSpec{Model: "m", Options: json.RawMessage(`{"vram": "1GiB", "wake_time": "50ms"}`)})
	if got := inst.SleepLevels(); got != 3 {
		t.Errorf("SleepLevels = %b, want 11", got)
	}
	if err := inst.Sleep(ctx, 1); err != nil {
		t.Fatalf("Sleep(1): %v", err)
	}
	if got, err := inst.HostBytes(ctx); err != nil || got != 1<<30 {
		t.Errorf("HostBytes at level 1 = %d, %v; want the backend's 1 GiB", got, err)
	}
	if err := inst.Wake(ctx); err != nil {
		t.Fatalf("Wake: %v", err)
	}
	if err := inst.Sleep(ctx, 2); err != nil {
		t.Fatalf("Sleep(2): %v", err)
	}
	got, err := inst.HostBytes(ctx)
	if err != nil || got < 1<<20 || got > 1<<30 {
		t.Errorf("HostBytes at level 2 = %d, %v; want the sim server's RSS (MiBs)", got, err)
	}
	if err := inst.Wake(ctx); err != nil {
		t.Fatalf("Wake: %v", err)
	}
}

func TestPluginInstance_SleepFaults(t *testing.T) {
	ctx := context.Background()
	t.Run("refused", func(t *testing.T) {
		inst := startSleeper(t, "sim", plugins.ModelSpec{Model: "m", Options: json.RawMessage(`{"sleep_fails": true}`)})
		if err := inst.Sleep(ctx, 1); err == nil || !strings.Contains(err.Error(), "sleep refused") {
			t.Errorf("Sleep = %v, want the refusal", err)
		}
	})
	t.Run("wake hangs: bounded by ctx's deadline, the plugin kept", func(t *testing.T) {
		inst := startSleeper(t, "sim", plugins.ModelSpec{Model: "m", Options: json.RawMessage(`{"wake_hangs": true}`)})
		if err := inst.Sleep(ctx, 2); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		start := time.Now()
		if err := inst.Wake(wctx); err == nil {
			t.Fatal("Wake of a hung server succeeded")
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("Wake took %s", took)
		}
		select {
		case <-inst.Exited():
			t.Errorf("the instance exited (%v): a hung server must not take its plugin down", inst.Err())
		default:
		}
	})
	t.Run("dies asleep", func(t *testing.T) {
		inst := startSleeper(t, "sim", plugins.ModelSpec{Model: "m"})
		if err := inst.Sleep(ctx, 1); err != nil {
			t.Fatal(err)
		}
		pids, _, err := inst.(router.MemoryReporter).Memory(ctx)
		if err != nil || len(pids) == 0 {
			t.Fatalf("Memory = %v, %v", pids, err)
		}
		_ = syscall.Kill(pids[0], syscall.SIGKILL)
		select {
		case <-inst.Exited():
		case <-time.After(10 * time.Second):
			t.Fatal("the death of a sleeping server was not observed")
		}
		if inst.Err() == nil {
			t.Error("Err = nil, want the unrequested exit")
		}
		if err := inst.Wake(ctx); !errors.Is(err, plugins.ErrNotRunning) {
			t.Errorf("Wake = %v, want ErrNotRunning", err)
		}
	})
	t.Run("v1 plugin cannot sleep", func(t *testing.T) {
		inst := startSleeper(t, "cmd-v1", plugins.ModelSpec{Model: "m", Cmd: testPlugin + " sim-server --port ${PORT}"})
		if got := inst.SleepLevels(); got != 0 {
			t.Errorf("SleepLevels = %b, want 0", got)
		}
		if err := inst.Sleep(ctx, 1); !errors.Is(err, plugins.ErrNotSupported) {
			t.Errorf("Sleep = %v, want ErrNotSupported", err)
		}
		if got, err := inst.HostBytes(ctx); err != nil || got == 0 {
			t.Errorf("HostBytes = %d, %v; want the server's RSS", got, err)
		}
	})
}
