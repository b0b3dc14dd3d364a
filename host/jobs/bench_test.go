package jobs

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/gpu"
)

// queuedStore opens a store in a fresh SQLite file holding n queued tasks
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

// stamped is a transition as Config.OnTransition heard it, with when.
type stamped struct {
	Transition
	at time.Time
}

// benchRunner is a runner over a real SQLite file with the local executor
// on a declared 4-GPU ledger (and the Ray executor when
// LOADOUT_RAY_ADDRESS names a head), polling every poll (0: the default,
// as serve runs it); its transitions come stamped on the channel.
func benchRunner(b *testing.B, poll time.Duration) (*Runner, *gpu.Ledger, string, <-chan stamped) {
	b.Helper()
	dir := b.TempDir()
	l := newLedger(4)
	events := make(chan stamped, 1<<14)
	r := newRunner(b, dir, l, nil, func(c *Config) {
		c.PollInterval = poll
		c.OnTransition = func(tr Transition) {
			select {
			case events <- stamped{tr, time.Now()}:
			default:
				panic("benchmark: transitions not read")
			}
		}
	})
	start(b, r)
	return r, l, dir, events
}

// await reads transitions until task id reaches state; a task that ends
// in another state, or a minute with no such transition, fails b.
func await(b *testing.B, events <-chan stamped, id string, state State) stamped {
	b.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case ev := <-events:
			if ev.TaskID != id {
				continue
			}
			if ev.State == state {
				return ev
			}
			if ev.State.Terminal() {
				b.Fatalf("%s ended %s while awaited to be %s", id, ev.State, state)
			}
		case <-timeout:
			b.Fatalf("%s never became %s", id, state)
		}
	}
}

func submitSpec(b *testing.B, r *Runner, spec string) *Task {
	b.Helper()
	t, err := r.Submit(context.Background(), []byte(spec))
	if err != nil {
		b.Fatal(err)
	}
	return t
}

// fifoGate makes a named pipe and returns a job command that runs until a
// line is written to it, and release, which writes that line: it waits
// until the job reads the pipe, then returns the moment the job is let go.
// The cleanup lets go a job still reading.
func fifoGate(b *testing.B, dir, name string) (command string, release func() time.Time) {
	b.Helper()
	path := filepath.Join(dir, name)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil { // ENXIO: no reader
			_, _ = f.WriteString("go\n")
			f.Close()
		}
	})
	release = func() time.Time {
		f, err := os.OpenFile(path, os.O_WRONLY, 0) // blocks until the job opens it
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		at := time.Now()
		if _, err := f.WriteString("go\n"); err != nil {
			b.Fatal(err)
		}
		return at
	}
	return fmt.Sprintf("command: 'read line < %s'\n", path), release
}

// latencies collects one duration per iteration and reports their median
// and maximum, in milliseconds, as the benchmark's metrics (name-p50-ms,
// name-max-ms).
type latencies map[string][]time.Duration

func (l latencies) report(b *testing.B) {
	for _, name := range slices.Sorted(maps.Keys(l)) {
		d := slices.Clone(l[name])
		slices.Sort(d)
		b.ReportMetric(float64(d[len(d)/2])/1e6, name+"-p50-ms")
		b.ReportMetric(float64(d[len(d)-1])/1e6, name+"-max-ms")
	}
}

// BenchmarkRunner_SubmitToRunning_Local is the time from Submit of a
// 1-GPU local job, with the GPUs free, to its RUNNING transition: the
// insert, the admission, the lease and the process's start.
//
//	go test ./host/jobs -run '^$' -bench SubmitToRunning_Local -benchtime 50x
func BenchmarkRunner_SubmitToRunning_Local(b *testing.B) {
	r, _, _, events := benchRunner(b, 0)
	lat := latencies{}
	for range b.N {
		t0 := time.Now()
		task := submitSpec(b, r, "command: exit 0\ngpus_per_node: 1\n")
		lat["running"] = append(lat["running"], await(b, events, task.ID, StateRunning).at.Sub(t0))
		b.StopTimer()
		await(b, events, task.ID, StateSucceeded)
		b.StartTimer()
	}
	lat.report(b)
}

// BenchmarkRunner_FreedToNextRunning_Local is the time from GPUs freeing
// to the next queued gang job's RUNNING transition, on a 4-GPU box where
// a 4-GPU job waits behind another: "job" frees them by its process
// ending (from the moment it is let go: the shell's exit, the exit file,
// the runner's look and the lease's release are all in it); "model" by a
// model's lease ending in the ledger. The runner polls every 2 s, as in
// serve: neither path waits for it.
//
//	go test ./host/jobs -run '^$' -bench FreedToNextRunning_Local -benchtime 30x
func BenchmarkRunner_FreedToNextRunning_Local(b *testing.B) {
	r, l, dir, events := benchRunner(b, 0)
	lat := latencies{}
	for i := range b.N {
		b.StopTimer()
		cmd, release := fifoGate(b, dir, fmt.Sprintf("gate-%d", i))
		first := submitSpec(b, r, cmd+"gpus_per_node: 4\n")
		await(b, events, first.ID, StateRunning)
		next := submitSpec(b, r, "command: exit 0\ngpus_per_node: 4\n")
		await(b, events, next.ID, StatePendingResources)
		b.StartTimer()
		t0 := release()
		lat["job"] = append(lat["job"], await(b, events, next.ID, StateRunning).at.Sub(t0))
		b.StopTimer()
		await(b, events, next.ID, StateSucceeded)

		all := map[int]uint64{0: 1 << 30, 1: 1 << 30, 2: 1 << 30, 3: 1 << 30}
		if err := l.Acquire("model", all); err != nil {
			b.Fatal(err)
		}
		next = submitSpec(b, r, "command: exit 0\ngpus_per_node: 4\n")
		await(b, events, next.ID, StatePendingResources)
		b.StartTimer()
		t0 = time.Now()
		l.Release("model")
		lat["model"] = append(lat["model"], await(b, events, next.ID, StateRunning).at.Sub(t0))
		b.StopTimer()
		await(b, events, next.ID, StateSucceeded)
		b.StartTimer()
	}
	lat.report(b)
}

// rayBench skips b without a Ray head (LOADOUT_RAY_ADDRESS, as the Ray
// tests) and runs f under the runner's default status sync (2 s, as serve
// runs it) and a fast one (100 ms), which leaves Ray's own part.
func rayBench(b *testing.B, f func(b *testing.B, poll time.Duration)) {
	if os.Getenv("LOADOUT_RAY_ADDRESS") == "" {
		b.Skip("no Ray head: set LOADOUT_RAY_ADDRESS (see docs/JOBS.md, Tests)")
	}
	for _, poll := range []time.Duration{2 * time.Second, 100 * time.Millisecond} {
		b.Run("sync="+poll.String(), func(b *testing.B) { f(b, poll) })
	}
}

// BenchmarkRunner_SubmitToRunning_Ray is the time from Submit of a Ray job
// (a shell command: no Python start in it), with the cluster's GPUs free,
// to Loadout handing it to Ray (submitted: the insert, the cluster's
// resource report, POST /api/jobs/) and to its RUNNING transition (Ray's
// start of the job's supervisor and driver, seen at the next status sync).
//
//	LOADOUT_RAY_ADDRESS=http://127.0.0.1:8265 go test ./host/jobs -run '^$' -bench SubmitToRunning_Ray -benchtime 5x
func BenchmarkRunner_SubmitToRunning_Ray(b *testing.B) {
	rayBench(b, func(b *testing.B, poll time.Duration) {
		r, _, dir, events := benchRunner(b, poll)
		lat := latencies{}
		for i := range b.N {
			b.StopTimer()
			cmd, release := fifoGate(b, dir, fmt.Sprintf("gate-%d", i))
			b.StartTimer()
			t0 := time.Now()
			task := submitSpec(b, r, "executor: ray\n"+cmd+"gpus_per_node: 4\n")
			lat["submitted"] = append(lat["submitted"], await(b, events, task.ID, StateSubmitted).at.Sub(t0))
			lat["running"] = append(lat["running"], await(b, events, task.ID, StateRunning).at.Sub(t0))
			b.StopTimer()
			release()
			await(b, events, task.ID, StateSucceeded)
			b.StartTimer()
		}
		lat.report(b)
	})
}

// BenchmarkRunner_FreedToNextRunning_Ray is the time from a Ray job that
// holds the cluster's 4 GPUs ending (let go through its pipe) to the next
// queued 4-GPU job being handed to Ray (submitted: Loadout hears of the
// end at its next status sync) and to that job's RUNNING transition (Ray's
// start, seen at a later sync).
//
//	LOADOUT_RAY_ADDRESS=http://127.0.0.1:8265 go test ./host/jobs -run '^$' -bench FreedToNextRunning_Ray -benchtime 5x
func BenchmarkRunner_FreedToNextRunning_Ray(b *testing.B) {
	rayBench(b, func(b *testing.B, poll time.Duration) {
		r, _, dir, events := benchRunner(b, poll)
		lat := latencies{}
		for i := range b.N {
			b.StopTimer()
			firstCmd, releaseFirst := fifoGate(b, dir, fmt.Sprintf("first-%d", i))
			nextCmd, releaseNext := fifoGate(b, dir, fmt.Sprintf("next-%d", i))
			first := submitSpec(b, r, "executor: ray\n"+firstCmd+"gpus_per_node: 4\n")
			await(b, events, first.ID, StateRunning)
			next := submitSpec(b, r, "executor: ray\n"+nextCmd+"gpus_per_node: 4\n")
			await(b, events, next.ID, StatePendingResources)
			b.StartTimer()
			t0 := releaseFirst()
			lat["submitted"] = append(lat["submitted"], await(b, events, next.ID, StateSubmitted).at.Sub(t0))
			lat["running"] = append(lat["running"], await(b, events, next.ID, StateRunning).at.Sub(t0))
			b.StopTimer()
			releaseNext()
			await(b, events, next.ID, StateSucceeded)
			b.StartTimer()
		}
		lat.report(b)
	})
}
