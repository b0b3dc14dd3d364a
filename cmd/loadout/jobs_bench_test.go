package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestJobsReport measures the GPU job queue through a real `loadout serve`
// (testdata/e2e/jobs.yaml: two simulated GPUs, local executor, a real
// SQLite file), for docs/BENCHMARKS.md, over HTTP on 127.0.0.1 and its
// event stream: the time from POST /api/jobs to the job's RUNNING event
// with a GPU free; the time from GPUs freeing to the next queued 2-GPU
// job's RUNNING event, freed by a job's process ending or by a model
// unloaded (from POST /unload); and, with 1,000 tasks queued behind a job
// that holds both GPUs, the latency and throughput of GET /api/jobs (all,
// a page, one state), GET /api/jobs/{id} and POST /api/jobs. Skipped
// unless LOADOUT_BENCH=1.
//
//	LOADOUT_BENCH=1 go test ./cmd/loadout -run TestJobsReport -v
func TestJobsReport(t *testing.T) {
	if os.Getenv("LOADOUT_BENCH") == "" {
		t.Skip("a benchmark: set LOADOUT_BENCH=1")
	}
	s, dir := jobsServer(t)
	evs := readSSE(t, t.Context(), s.base+"/api/events", "")
	awaitJobEvent := func(id, state string) time.Time {
		t.Helper()
		ev := awaitEvent(t, evs, "job", func(d string) bool {
			var tr struct{ ID, State string }
			return json.Unmarshal([]byte(d), &tr) == nil && tr.ID == id && tr.State == state
		})
		return ev.at
	}
	submit := func(spec string) (string, time.Duration) {
		t.Helper()
		t0 := time.Now()
		j := s.submitJob(spec)
		return j.ID, time.Since(t0)
	}

	// Submit to RUNNING, a GPU free.
	const runs = 20
	var toRunning []time.Duration
	for range runs {
		t0 := time.Now()
		id, _ := submit("command: exit 0\ngpus_per_node: 1\n")
		toRunning = append(toRunning, awaitJobEvent(id, "RUNNING").Sub(t0))
		awaitJobEvent(id, "SUCCEEDED")
	}
	t.Logf("POST /api/jobs to the RUNNING event, a GPU free (%d runs): %s", runs, stats(toRunning))

	// GPUs freed by a job's process ending, then by a model unloaded.
	var byJob, byModel []time.Duration
	for i := range runs / 2 {
		cmd, release := fifoJob(t, dir, fmt.Sprintf("gate-%d", i))
		first, _ := submit(cmd + "gpus_per_node: 2\n")
		awaitJobEvent(first, "RUNNING")
		next, _ := submit("command: exit 0\ngpus_per_node: 2\n")
		awaitJobEvent(next, "PENDING_RESOURCES")
		let := release()
		byJob = append(byJob, awaitJobEvent(next, "RUNNING").Sub(let))
		awaitJobEvent(next, "SUCCEEDED")

		s.mustChat("m8")
		next, _ = submit("command: exit 0\ngpus_per_node: 2\n")
		awaitJobEvent(next, "PENDING_RESOURCES")
		// From the request: the model's stopped event comes after the run
		// loop's turn in which its lease ends, so the job may be RUNNING
		// before it; the server's stop is in the figure.
		t0 := time.Now()
		if code, body := s.post("/unload", ""); code != 200 {
			t.Fatalf("/unload: %d %s", code, body)
		}
		byModel = append(byModel, awaitJobEvent(next, "RUNNING").Sub(t0))
		awaitJobEvent(next, "SUCCEEDED")
	}
	t.Logf("a job's process let go to the next 2-GPU job's RUNNING event (%d runs): %s", len(byJob), stats(byJob))
	t.Logf("POST /unload of the model on a GPU to the next 2-GPU job's RUNNING event (%d runs): %s", len(byModel), stats(byModel))

	// 1,000 tasks queued behind a job holding both GPUs.
	holdCmd, releaseHold := fifoJob(t, dir, "hold")
	hold, _ := submit(holdCmd + "gpus_per_node: 2\n")
	awaitJobEvent(hold, "RUNNING")
	const queued = 1000
	ids := make([]string, 0, queued)
	var posts []time.Duration
	for i := range queued {
		id, d := submit(fmt.Sprintf("name: grpo-%d\nworkload: grpo\ncommand: python -m verl.trainer.main_ppo trainer.n_gpus_per_node=2 data.seed=%d\ngpus_per_node: 2\nenv: {WANDB_MODE: offline}\n", i, i))
		ids = append(ids, id)
		posts = append(posts, d)
	}
	t.Logf("POST /api/jobs, one client, queue growing to %d: %s", queued, stats(posts))
	var listed struct {
		Jobs []json.RawMessage `json:"jobs"`
	}
	code, body := s.jobReq(http.MethodGet, "/api/jobs", "")
	if err := json.Unmarshal([]byte(body), &listed); code != 200 || err != nil || len(listed.Jobs) < queued {
		t.Fatalf("GET /api/jobs: %d, %d jobs (%v)", code, len(listed.Jobs), err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		what    string
		n       int
		path    func() string
		clients []int
	}{
		{fmt.Sprintf("GET /api/jobs (%d tasks, %d KiB)", len(listed.Jobs), len(body)>>10), 40, func() string { return "/api/jobs" }, []int{1, 4}},
		{"GET /api/jobs?limit=100 (the first page)", 200, func() string { return "/api/jobs?limit=100" }, []int{1, 4}},
		{"GET /api/jobs?state=RUNNING", 200, func() string { return "/api/jobs?state=RUNNING" }, []int{1, 4}},
		{"GET /api/jobs/{id}", 400, func() string { return "/api/jobs/" + ids[rng.IntN(len(ids))] }, []int{1, 4}},
	} {
		for _, clients := range c.clients {
			lat, rate := loadJobsAPI(t, s, c.n, clients, c.path)
			t.Logf("%s, %d client(s): %s, %.0f req/s", c.what, clients, stats(lat), rate)
		}
	}

	// The job holding the GPUs is let go once the server has stopped, so
	// none of the queued tasks runs; it has ended when its exit file is
	// there (another process's: no event to await).
	s.stop()
	releaseHold()
	exit := filepath.Join(dir, "job-logs", hold+"--a01.exit")
	eventually(t, "the holding job to end", func() bool { _, err := os.Stat(exit); return err == nil })
}

// fifoJob makes a named pipe in dir and returns a job spec's command that
// runs until a line is written to it, and release, which writes the line
// once the job has opened the pipe and returns when it did. The cleanup
// lets go a job still reading.
func fifoJob(t *testing.T, dir, name string) (string, func() time.Time) {
	path := filepath.Join(dir, name)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_, _ = f.WriteString("go\n")
			f.Close()
		}
	})
	return fmt.Sprintf("command: 'read line < %s'\n", path), func() time.Time {
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		at := time.Now()
		if _, err := f.WriteString("go\n"); err != nil {
			t.Fatal(err)
		}
		return at
	}
}

// loadJobsAPI sends n GETs of path() with the job token from clients
// goroutines at once, each waiting for its answer before the next, and
// returns each request's latency and the requests per second.
func loadJobsAPI(t *testing.T, s *server, n, clients int, path func() string) ([]time.Duration, float64) {
	t.Helper()
	var mu sync.Mutex
	var lat []time.Duration
	paths := make(chan string, n)
	for range n {
		paths <- path()
	}
	close(paths)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	var wg sync.WaitGroup
	start := time.Now()
	for range clients {
		wg.Go(func() {
			for p := range paths {
				req, _ := http.NewRequest(http.MethodGet, s.base+p, nil)
				req.Header.Set("Authorization", "Bearer "+e2eJobToken)
				t0 := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				d := time.Since(t0)
				if resp.StatusCode != 200 {
					t.Errorf("GET %s: %d", p, resp.StatusCode)
					return
				}
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return lat, float64(len(lat)) / time.Since(start).Seconds()
}

// stats formats the median, 99th percentile and maximum of d.
func stats(d []time.Duration) string {
	d = slices.Clone(d)
	slices.Sort(d)
	if len(d) == 0 {
		return "no samples"
	}
	ms := func(x time.Duration) string { return fmt.Sprintf("%.1f ms", float64(x)/1e6) }
	return fmt.Sprintf("p50 %s, p99 %s, max %s", ms(d[len(d)/2]), ms(d[(len(d)-1)*99/100]), ms(d[len(d)-1]))
}
