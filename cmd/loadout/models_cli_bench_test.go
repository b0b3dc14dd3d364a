package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// BenchmarkPs_100Models is `loadout ps --all` against a real `loadout
// serve` with 100 models, after loading 4: exec runs the binary as a
// user does (process start included), inproc only the command's own work
// (the HTTP call, decoding /api/models, the table).
//
//	go test -run '^$' -bench BenchmarkPs_100Models -benchtime 50x ./cmd/loadout
func BenchmarkPs_100Models(b *testing.B) {
	var cfg strings.Builder
	cfg.WriteString("healthCheckTimeout: 30\nstartPort: ${env.LOADOUT_E2E_START_PORT}\ngpus:\n  - {name: sim0, memory: 1TiB}\nmodels:\n")
	for i := range 100 {
		fmt.Fprintf(&cfg, "  m%03d:\n    backend: sim\n    vram: 1GiB\n    ttl: 3600\n    options: {load_time: 10ms, tokens_per_second: 400}\n", i)
	}
	path := filepath.Join(b.TempDir(), "ps100.yaml")
	if err := os.WriteFile(path, []byte(cfg.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	s := startServer(b, path)
	for i := range 4 {
		if code, body := s.post(fmt.Sprintf("/api/models/load/m%03d", i), ""); code != 200 {
			b.Fatalf("load m%03d: %d %s", i, code, body)
		}
	}
	b.Run("exec", func(b *testing.B) {
		for b.Loop() {
			out, err := exec.Command(loadoutBin, "ps", "--all", "--server", s.base).Output()
			if err != nil || bytes.Count(out, []byte("\n")) != 101 {
				b.Fatalf("ps: %v\n%s", err, out)
			}
		}
	})
	b.Run("inproc", func(b *testing.B) {
		var out bytes.Buffer
		for b.Loop() {
			out.Reset()
			cmd := newPsCmd()
			cmd.SetOut(&out)
			cmd.SetArgs([]string{"--all", "--server", s.base})
			if err := cmd.ExecuteContext(context.Background()); err != nil || bytes.Count(out.Bytes(), []byte("\n")) != 101 {
				b.Fatalf("ps: %v\n%s", err, out.String())
			}
		}
	})
}
