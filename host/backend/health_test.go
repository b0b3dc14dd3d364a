package backend

import (
	"context"
	"log/slog"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/router"
	"github.com/loadout-dev/loadout/internal/proctest"
	"github.com/loadout-dev/loadout/plugins"
)

// A health check tells a server that does not answer from a backend
// plugin that does not (both SIGSTOPped, real processes): the plugin
// answers for its server within the call, so only its own silence is
// the call's deadline. A stopped plugin was reported as a hung server,
// and its clients were told their server hung.
func TestPluginInstance_HealthyTellsAStoppedPluginFromAStoppedServer(t *testing.T) {
	for _, stop := range []string{"server", "plugin"} {
		t.Run(stop, func(t *testing.T) {
			var plugin *exec.Cmd
			l := NewPluginLauncher("cmd", func() *exec.Cmd { plugin = exec.Command(testPlugin, "cmd"); return plugin }, slog.New(slog.DiscardHandler))
			t.Cleanup(l.Close)
			inst, err := NewPluginProcess(plugins.ModelSpec{Model: "m", Cmd: testPlugin + " sim-server --port ${PORT} --load-time 10ms",
				HealthCheckTimeout: 30 * time.Second}, l).Start(context.Background(), router.StartSpec{})
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			pids, _, err := inst.(*pluginInstance).Memory(context.Background())
			if err != nil || len(pids) == 0 {
				t.Fatalf("the server's pids: %v %v", pids, err)
			}
			pid := pids[0]
			if stop == "plugin" {
				pid = plugin.Process.Pid
			}
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
			proctest.AwaitStopped(t, pid)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			err = inst.(router.HealthChecker).Healthy(ctx)
			blamesPlugin := err != nil && strings.Contains(err.Error(), "backend plugin did not answer")
			if err == nil || blamesPlugin != (stop == "plugin") {
				t.Fatalf("Healthy with the %s stopped: %v", stop, err)
			}
		})
	}
}
