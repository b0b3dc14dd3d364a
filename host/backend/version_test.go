package backend

import (
	"context"
	"errors"
	"log/slog"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/router"
	"github.com/loadout-dev/loadout/plugins"
)

// The host offers protocol versions 1 and 2 and go-plugin settles on the
// newest the plugin speaks too.
func TestLaunch_NegotiatesProtocolVersion(t *testing.T) {
	for _, tc := range []struct {
		mode string
		want int
	}{{"cmd", plugins.ProtocolVersion}, {"cmd-v1", 1}} {
		t.Run(tc.mode, func(t *testing.T) {
			c, _ := launch(t, tc.mode)
			if got := c.ProtocolVersion(); got != tc.want {
				t.Errorf("ProtocolVersion() = %d, want %d", got, tc.want)
			}
		})
	}
}

// A plugin built against protocol version 1 keeps working with this host:
// every call of version 1 works, the calls of version 2 fail with
// ErrNotSupported naming the versions without reaching the plugin, and the
// host says what it cannot do.
func TestClient_V1PluginKeepsWorking(t *testing.T) {
	c, _ := launch(t, "cmd-v1")
	ctx := context.Background()
	spec := plugins.ModelSpec{
		Model:              "m1",
		Cmd:                testPlugin + " sim-server --port ${PORT} --load-time 10ms",
		HealthCheckTimeout: 30 * time.Second,
	}
	if problems, err := c.Validate(ctx, spec); err != nil || problems != nil {
		t.Fatalf("Validate = %v, %v", problems, err)
	}
	if _, err := c.Start(ctx, spec); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if h, err := c.Health(ctx, "m1"); err != nil || !h.Ready {
		t.Errorf("Health = %+v, %v; want ready", h, err)
	}
	if _, err := c.Stats(ctx, "m1"); err != nil {
		t.Errorf("Stats: %v", err)
	}
	for name, call := range map[string]func() error{
		"Sleep": func() error { return c.Sleep(ctx, "m1", plugins.SleepLevel1, 0) },
		"Wake":  func() error { return c.Wake(ctx, "m1", 0) },
		"Residency": func() error {
			_, err := c.Residency(ctx, "m1")
			return err
		},
	} {
		err := call()
		if !errors.Is(err, plugins.ErrNotSupported) || !strings.Contains(err.Error(), "protocol version 1") {
			t.Errorf("%s on a version 1 plugin: %v; want ErrNotSupported naming version 1", name, err)
		}
	}
	if err := c.Stop(ctx, "m1", 5*time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	caps, err := c.Capabilities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lim := strings.Join(Limitations(c.ProtocolVersion(), caps), "\n")
	if !strings.Contains(lim, "protocol version 1") || !strings.Contains(lim, "cannot sleep") {
		t.Errorf("Limitations = %q; want the version and that it cannot sleep", lim)
	}
}

// The launch logs the negotiated version, and warns with the limitations
// of a plugin of an older version.
func TestPluginLauncher_LogsOldProtocol(t *testing.T) {
	var log strings.Builder
	l := NewPluginLauncher("old", func() *exec.Cmd { return exec.Command(testPlugin, "cmd-v1") },
		slog.New(slog.NewTextHandler(&log, nil)))
	t.Cleanup(l.Close)
	if _, err := l.Client(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := log.String()
	if !strings.Contains(out, `msg="backend plugin speaks an older protocol" backend=old protocol_version=1`) || !strings.Contains(out, "cannot sleep") {
		t.Errorf("log lacks the old-protocol warning:\n%s", out)
	}
}

// Protocol version 2's calls cross the plugin boundary: a backend that
// implements Sleeper and ResidencyReporter is reached, one that does not
// answers ErrNotSupported, and the sentinels survive.
func TestClient_SleepWakeResidency(t *testing.T) {
	c, _ := launch(t, "sleepy")
	ctx := context.Background()
	if _, err := c.Start(ctx, plugins.ModelSpec{Model: "m", Options: []byte(`{"vram": "1GiB"}`), HealthCheckTimeout: 30 * time.Second}); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background(), "m", time.Second) })
	if r, err := c.Residency(ctx, "m"); err != nil || r.State != plugins.ResidencyRunning || r.DeviceBytes == 0 {
		t.Errorf("Residency = %+v, %v; want running with its memory", r, err)
	}
	if err := c.Sleep(ctx, "m", plugins.SleepLevel1, 0); err != nil {
		t.Fatalf("Sleep: %v", err)
	}
	if r, err := c.Residency(ctx, "m"); err != nil || r.State != plugins.ResidencyAsleep || r.Level != plugins.SleepLevel1 {
		t.Errorf("Residency after Sleep = %+v, %v; want asleep at level 1", r, err)
	}
	if err := c.Sleep(ctx, "m", plugins.SleepLevel2, 0); !errors.Is(err, plugins.ErrNotSupported) {
		t.Errorf("Sleep at level 2 = %v; want ErrNotSupported", err)
	}
	if err := c.Wake(ctx, "m", 0); err != nil {
		t.Fatalf("Wake: %v", err)
	}
	if r, err := c.Residency(ctx, "m"); err != nil || r.State != plugins.ResidencyRunning {
		t.Errorf("Residency after Wake = %+v, %v; want running", r, err)
	}
	if err := c.Sleep(ctx, "nope", plugins.SleepLevel1, 0); !errors.Is(err, plugins.ErrUnknownModel) {
		t.Errorf("Sleep(unknown) = %v; want ErrUnknownModel", err)
	}

	plain, _ := launch(t, "no-sleep") // version 2, no Sleeper
	if plain.ProtocolVersion() != 2 {
		t.Fatalf("no-sleep plugin negotiated version %d", plain.ProtocolVersion())
	}
	if err := plain.Sleep(ctx, "m", plugins.SleepLevel1, 0); !errors.Is(err, plugins.ErrNotSupported) {
		t.Errorf("Sleep on a backend without Sleeper = %v; want ErrNotSupported", err)
	}
}

// A plugin that hangs in Start is killed at the call's deadline and the
// start fails with ErrPluginHung; meanwhile the plugin's other calls are
// answered: nothing else waits on the hung one.
func TestClient_HangInStartIsKilledAtItsDeadline(t *testing.T) {
	c, _ := launch(t, "hang-start")
	c.SetCallLimits(plugins.CallLimits{Grace: 500 * time.Millisecond})
	ctx := context.Background()
	errc := make(chan error, 1)
	go func() {
		_, err := c.Start(ctx, plugins.ModelSpec{Model: "m", Cmd: "server", HealthCheckTimeout: 100 * time.Millisecond})
		errc <- err
	}()
	if _, err := c.Capabilities(ctx); err != nil {
		t.Errorf("Capabilities while a Start hangs: %v", err)
	}
	err := <-errc
	if !errors.Is(err, plugins.ErrPluginHung) || !strings.Contains(err.Error(), "Start") {
		t.Fatalf("Start on a hung plugin: %v; want ErrPluginHung naming Start", err)
	}
	<-c.Done() // killed
}

// A plugin that answers Start with a port nothing listens on fails the
// start with an error naming the upstream, and the model is stopped.
func TestPluginProcess_StartReportsDeadPort(t *testing.T) {
	l := NewPluginLauncher("liar", func() *exec.Cmd { return exec.Command(testPlugin, "bad-port") }, slog.New(slog.DiscardHandler))
	t.Cleanup(l.Close)
	_, err := NewPluginProcess(plugins.ModelSpec{Model: "m", CheckEndpoint: "/health"}, l).Start(context.Background(), router.StartSpec{})
	if err == nil || !strings.Contains(err.Error(), `backend plugin liar reported upstream "http://127.0.0.1:`) || !strings.Contains(err.Error(), "nothing accepts connections") {
		t.Fatalf("Start = %v; want an error naming the dead upstream", err)
	}
	c, err := l.Client(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if exit, err := c.Wait(context.Background(), "m"); err != nil || !exit.Requested {
		t.Errorf("Wait = %+v, %v; want the model stopped", exit, err)
	}
}
