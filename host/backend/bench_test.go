package backend

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/plugins"
)

// BenchmarkLaunch is a plugin's start and go-plugin handshake (the cmd
// backend of the test plugin), then its end.
func BenchmarkLaunch(b *testing.B) {
	for b.Loop() {
		c, err := plugins.Launch(context.Background(), exec.Command(testPlugin, "cmd"), nil)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		c.Kill()
		b.StartTimer()
	}
}

// BenchmarkCall is the round trip of each protocol call that starts
// nothing, against a plugin (the sleepy sim backend) serving one model.
func BenchmarkCall(b *testing.B) {
	ctx := context.Background()
	c, err := plugins.Launch(ctx, exec.Command(testPlugin, "sleepy"), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Kill)
	spec := plugins.ModelSpec{Model: "m", Options: []byte(`{"vram": "1GiB"}`), HealthCheckTimeout: 30 * time.Second}
	if _, err := c.Start(ctx, spec); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		call func() error
	}{
		{"Capabilities", func() error { _, err := c.Capabilities(ctx); return err }},
		{"Validate", func() error { _, err := c.Validate(ctx, spec); return err }},
		{"Estimate", func() error { _, err := c.Estimate(ctx, spec); return err }},
		{"Health", func() error { _, err := c.Health(ctx, "m"); return err }},
		{"Stats", func() error { _, err := c.Stats(ctx, "m"); return err }},
		{"Residency", func() error { _, err := c.Residency(ctx, "m"); return err }},
		{"SleepWake", func() error {
			if err := c.Sleep(ctx, "m", plugins.SleepLevel1, 0); err != nil {
				return err
			}
			return c.Wake(ctx, "m", 0)
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if err := bc.call(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
