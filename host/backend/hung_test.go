package backend

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/internal/proctest"
	"github.com/loadout-dev/loadout/plugins"
)

// A plugin that stops answering (SIGSTOP) misses its call's deadline: the
// call fails with ErrPluginHung, the plugin is killed — stopped as it is,
// so go-plugin's own shutdown request would wait for it forever — and
// its model server dies with it.
func TestClient_StoppedPluginIsKilledAtItsDeadline(t *testing.T) {
	c, cmd := launch(t, "cmd")
	c.SetCallLimits(plugins.CallLimits{Quick: 300 * time.Millisecond, Grace: 300 * time.Millisecond})
	ctx := context.Background()
	st, err := c.Start(ctx, plugins.ModelSpec{
		Model:              "m1",
		Cmd:                testPlugin + " sim-server --port ${PORT} --load-time 10ms",
		HealthCheckTimeout: 30 * time.Second,
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := syscall.Kill(cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	proctest.AwaitStopped(t, cmd.Process.Pid) // kill returns before every thread has stopped
	_, err = c.Health(ctx, "m1")
	if !errors.Is(err, plugins.ErrPluginHung) || !errors.Is(err, plugins.ErrPluginExited) || !strings.Contains(err.Error(), "Health") {
		t.Fatalf("Health on a stopped plugin: %v; want ErrPluginHung naming the call", err)
	}
	if !c.Condemned() {
		t.Fatal("a plugin being killed for a missed deadline is not Condemned: new calls would still go to it")
	}
	select {
	case <-c.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the stopped plugin was not killed")
	}
	// Its model server dies with it (Pdeathsig): its pid stops existing.
	pid := st.Pids[0]
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("model server %d outlived its killed plugin", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The caller's own deadline passing first is not the plugin's miss: the
// plugin is left alone.
func TestClient_CallersDeadlineDoesNotKill(t *testing.T) {
	c, cmd := launch(t, "cmd")
	if err := syscall.Kill(cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	proctest.AwaitStopped(t, cmd.Process.Pid)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := c.Capabilities(ctx); errors.Is(err, plugins.ErrPluginHung) || err == nil {
		t.Fatalf("Capabilities under the caller's deadline: %v; want the deadline's error", err)
	}
	if err := syscall.Kill(cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Capabilities(context.Background()); err != nil || c.Exited() {
		t.Fatalf("the plugin after SIGCONT: %v (exited %v); want it alive", err, c.Exited())
	}
}
