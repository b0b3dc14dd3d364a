package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/host/policy"
	"github.com/loadout-dev/loadout/policies/builtin"
	"github.com/loadout-dev/loadout/sdk"
)

// TestLoadPolicy_BuiltinsGetTheirDeadline: a built-in policy's calls get
// policy.BuiltinCallTimeout (a busy machine must not fail our own code);
// the same module loaded from a file keeps the runtime's deadline.
func TestLoadPolicy_BuiltinsGetTheirDeadline(t *testing.T) {
	ctx := context.Background()
	rt, err := policy.NewRuntime(ctx, policy.Options{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	mod, err := loadPolicy(ctx, rt, config.Policy{Use: config.SchedulerFIFO}, sdk.KindScheduler)
	if err != nil {
		t.Fatal(err)
	}
	if mod.CallTimeout != policy.BuiltinCallTimeout {
		t.Errorf("builtin:fifo's deadline %s, want %s", mod.CallTimeout, policy.BuiltinCallTimeout)
	}
	wasm, err := builtin.Lookup(config.SchedulerFIFO)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "fifo.wasm")
	if err := os.WriteFile(path, wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	if mod, err = loadPolicy(ctx, rt, config.Policy{Wasm: path}, sdk.KindScheduler); err != nil {
		t.Fatal(err)
	}
	if mod.CallTimeout != 0 {
		t.Errorf("%s's deadline %s, want the runtime's (0)", path, mod.CallTimeout)
	}
}
