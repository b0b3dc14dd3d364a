package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/host/policy"
	"github.com/loadout-dev/loadout/internal/proctest"
	"github.com/loadout-dev/loadout/sdk"
)

// The operator's inputs on a stalled share (a FIFO no one writes) fail
// their reading at the bound — inputLimit, shortened here by the
// context's deadline — with an error naming the file and saying the
// reading did not end, instead of hanging serve's start-up, a check or a
// reload: a configuration file, a policy module.
func TestInputs_ThatHang(t *testing.T) {
	within := func(t *testing.T) context.Context {
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		t.Cleanup(cancel)
		return ctx
	}
	hung := func(t *testing.T, err error, file string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "did not end in time") {
			t.Errorf("%v, want an error naming %s and saying its reading did not end", err, file)
		}
	}
	t.Run("config", func(t *testing.T) {
		fifo := proctest.StalledFile(t, "loadout.yaml")
		_, _, err := loadConfig(within(t), configSource{path: fifo}, defaultListen, routerModeOptions{})
		hung(t, err, fifo)
	})
	t.Run("policy", func(t *testing.T) {
		fifo := proctest.StalledFile(t, "router.wasm")
		rt, err := policy.NewRuntime(t.Context(), policy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer rt.Close(context.Background())
		_, err = loadPolicy(within(t), rt, config.Policy{Wasm: fifo}, sdk.KindSwapper)
		hung(t, err, fifo)
	})
}
