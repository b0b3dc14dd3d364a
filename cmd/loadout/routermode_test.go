package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/internal/proctest"
)

// Router-mode inputs on a stalled share (a preset that is a FIFO no one
// writes) fail the configuration's loading at the bound, with an error
// saying the reading did not end, instead of hanging serve's start-up or a
// reload.
func TestRouterMode_InputsThatHang(t *testing.T) {
	rm := routerModeOptions{modelsDir: t.TempDir(), modelsPreset: proctest.StalledFile(t, "stalled.ini"),
		llamaServer: filepath.Join(t.TempDir(), "llama-server")}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond) // inputLimit's 30 s, shortened
	defer cancel()
	_, _, err := loadConfig(ctx, configSource{}, defaultListen, rm)
	if err == nil || !strings.Contains(err.Error(), "router-mode models") || !strings.Contains(err.Error(), "did not end in time") {
		t.Errorf("%v, want an error saying the reading of the router-mode models did not end", err)
	}
}
