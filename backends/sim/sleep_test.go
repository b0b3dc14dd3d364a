package sim_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/plugins"
)

// The sim backend's sleep and wake through a real plugin process and real
// sim-server processes: device memory released and host memory reported,
// inference refused while asleep, each level's wake time.
func TestBackend_SleepWake(t *testing.T) {
	c := launchSim(t)
	ctx := context.Background()
	st, err := c.Start(ctx, plugins.ModelSpec{Model: "m", Options: json.RawMessage(
		`{"vram": "2GiB", "host_bytes": "64MiB", "wake_time": "100ms", "wake_time_level_2": "300ms", "tokens_per_second": 1000}`)})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	chat := func() int {
		t.Helper()
		resp, err := http.Post(st.Upstream+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	res := func() plugins.Residency {
		t.Helper()
		r, err := c.Residency(ctx, "m")
		if err != nil {
			t.Fatalf("Residency: %v", err)
		}
		return r
	}
	if r := res(); r != (plugins.Residency{State: plugins.ResidencyRunning, DeviceBytes: 2 << 30}) {
		t.Errorf("Residency running = %+v", r)
	}

	for _, tc := range []struct {
		level    plugins.SleepLevel
		host     uint64
		wakeTime time.Duration
	}{
		{plugins.SleepLevel1, 2<<30 + 64<<20, 100 * time.Millisecond},
		{plugins.SleepLevel2, 64 << 20, 300 * time.Millisecond},
	} {
		if err := c.Sleep(ctx, "m", tc.level, 0); err != nil {
			t.Fatalf("Sleep(%d): %v", tc.level, err)
		}
		want := plugins.Residency{State: plugins.ResidencyAsleep, Level: tc.level, HostBytes: tc.host}
		if r := res(); r != want {
			t.Errorf("Residency asleep = %+v, want %+v", r, want)
		}
		if s, err := c.Stats(ctx, "m"); err != nil || s.MemoryBytes != 0 || len(s.Pids) == 0 {
			t.Errorf("Stats asleep = %+v, %v; want no device memory, the pids", s, err)
		}
		if code := chat(); code != http.StatusServiceUnavailable {
			t.Errorf("chat while asleep = %d, want 503", code)
		}
		start := time.Now()
		if err := c.Wake(ctx, "m", 0); err != nil {
			t.Fatalf("Wake: %v", err)
		}
		if took := time.Since(start); took < tc.wakeTime {
			t.Errorf("Wake from level %d took %s, want at least wake time %s", tc.level, took, tc.wakeTime)
		}
		if code := chat(); code != http.StatusOK {
			t.Errorf("chat after wake = %d, want 200", code)
		}
		if r := res(); r.State != plugins.ResidencyRunning || r.DeviceBytes != 2<<30 {
			t.Errorf("Residency after wake = %+v", r)
		}
	}
}

// The faults the host must survive, with real processes: a sleep refused
// (the model stays running; the host stops it), a wake that hangs (Wake
// ends at its timeout), and a server that dies asleep (Wait reports the
// exit, Residency says stopped).
func TestBackend_SleepFaults(t *testing.T) {
	c := launchSim(t)
	ctx := context.Background()
	t.Run("sleep refused", func(t *testing.T) {
		if _, err := c.Start(ctx, plugins.ModelSpec{Model: "refuses", Options: json.RawMessage(`{"sleep_fails": true}`)}); err != nil {
			t.Fatal(err)
		}
		err := c.Sleep(ctx, "refuses", plugins.SleepLevel1, 0)
		if err == nil || !strings.Contains(err.Error(), "sleep refused") {
			t.Fatalf("Sleep = %v, want the refusal", err)
		}
		if r, _ := c.Residency(ctx, "refuses"); r.State != plugins.ResidencyRunning {
			t.Errorf("Residency = %+v, want running", r)
		}
	})
	t.Run("wake hangs", func(t *testing.T) {
		if _, err := c.Start(ctx, plugins.ModelSpec{Model: "hangs", Options: json.RawMessage(`{"wake_hangs": true}`)}); err != nil {
			t.Fatal(err)
		}
		if err := c.Sleep(ctx, "hangs", plugins.SleepLevel2, 0); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		err := c.Wake(ctx, "hangs", 300*time.Millisecond)
		if !errors.Is(err, context.DeadlineExceeded) && (err == nil || !strings.Contains(err.Error(), "deadline exceeded")) {
			t.Fatalf("Wake = %v, want the deadline", err)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("Wake took %s with a timeout of 300ms", took)
		}
		if r, _ := c.Residency(ctx, "hangs"); r.State != plugins.ResidencyAsleep {
			t.Errorf("Residency = %+v, want asleep", r)
		}
	})
	t.Run("dies asleep", func(t *testing.T) {
		st, err := c.Start(ctx, plugins.ModelSpec{Model: "dies"})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Sleep(ctx, "dies", plugins.SleepLevel1, 0); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(st.Pids[0], syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		exit, err := c.Wait(ctx, "dies")
		if err != nil || exit.Requested || exit.Err() == nil {
			t.Errorf("Wait = %+v, %v; want an unrequested death", exit, err)
		}
		if r, _ := c.Residency(ctx, "dies"); r.State != plugins.ResidencyStopped {
			t.Errorf("Residency = %+v, want stopped", r)
		}
		if err := c.Wake(ctx, "dies", 0); !errors.Is(err, plugins.ErrNotRunning) {
			t.Errorf("Wake = %v, want ErrNotRunning", err)
		}
	})
}
