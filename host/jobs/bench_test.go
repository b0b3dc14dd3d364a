package jobs

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
)

// queued1000 opens a store in a fresh SQLite file holding n queued tasks
// of the shape a platform team submits (a few lines of YAML each), as
// Runner.Submit leaves them.
func queuedStore(b *testing.B, n int) (*Store, []string) {
	b.Helper()
	store, err := OpenStore(filepath.Join(b.TempDir(), "jobs.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	ctx := context.Background()
	ids := make([]string, n)
	for i := range n {
		raw := fmt.Sprintf("name: grpo-%d\nworkload: grpo\ncommand: python -m verl.trainer.main_ppo trainer.n_gpus_per_node=4 data.seed=%d\ngpus_per_node: 4\nenv: {WANDB_MODE: offline}\npriority: %d\n", i, i, i%3)
		spec, err := ParseSpec([]byte(raw))
		if err != nil {
			b.Fatal(err)
		}
		t := &Task{ID: fmt.Sprintf("grpo-20260301-142501-%04x", i), Spec: spec, SpecRaw: raw, State: StateQueued}
		if err := store.Insert(ctx, t); err != nil {
			b.Fatal(err)
		}
		ids[i] = t.ID
	}
	return store, ids
}

// BenchmarkStore_List1000Queued lists every task of a queue of 1,000 (what
// GET /api/jobs reads).
func BenchmarkStore_List1000Queued(b *testing.B) {
	store, _ := queuedStore(b, 1000)
	ctx := context.Background()
	for b.Loop() {
		ts, err := store.List(ctx)
		if err != nil || len(ts) != 1000 {
			b.Fatalf("%d tasks, %v", len(ts), err)
		}
	}
}

// BenchmarkStore_Get1000Queued reads one task of a queue of 1,000 (what
// GET /api/jobs/{id} reads, attempts and events aside).
func BenchmarkStore_Get1000Queued(b *testing.B) {
	store, ids := queuedStore(b, 1000)
	ctx := context.Background()
	i := 0
	for b.Loop() {
		if _, err := store.Get(ctx, ids[i%len(ids)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
