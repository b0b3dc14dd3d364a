package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const e2eJobToken = "job-secret"

// jobsServer starts loadout serve on testdata/e2e/jobs.yaml with its own
// jobs database and a job token.
func jobsServer(t *testing.T) (*server, string) {
	dir := t.TempDir()
	s := startServer(t, "../../testdata/e2e/jobs.yaml", "--db", filepath.Join(dir, "jobs.db"), "--job-token", e2eJobToken)
	return s, dir
}

// jobReq sends a jobs API request with the job token.
func (s *server) jobReq(method, path, body string) (int, string) {
	s.t.Helper()
	req, _ := http.NewRequest(method, s.base+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+e2eJobToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

type e2eJob struct {
	ID            string `json:"id"`
	State         string `json:"state"`
	Error         string `json:"error"`
	Attempts      int    `json:"attempts"`
	LatestAttempt *struct {
		SubmissionID string `json:"submission_id"`
		Devices      []int  `json:"devices"`
		FailureKind  string `json:"failure_kind"`
	} `json:"latest_attempt"`
}

func (s *server) submitJob(spec string) e2eJob {
	s.t.Helper()
	code, body := s.jobReq(http.MethodPost, "/api/jobs", spec)
	if code != http.StatusCreated {
		s.t.Fatalf("submit: %d %s", code, body)
	}
	var j e2eJob
	if err := json.Unmarshal([]byte(body), &j); err != nil {
		s.t.Fatal(err)
	}
	return j
}

func (s *server) job(id string) e2eJob {
	s.t.Helper()
	code, body := s.jobReq(http.MethodGet, "/api/jobs/"+id, "")
	if code != 200 {
		s.t.Fatalf("get %s: %d %s", id, code, body)
	}
	var j e2eJob
	if err := json.Unmarshal([]byte(body), &j); err != nil {
		s.t.Fatal(err)
	}
	return j
}

// awaitJob polls the API until the job is in state: the job runs in
// another process, so its state is the event to await.
func (s *server) awaitJob(t *testing.T, id, state string) e2eJob {
	t.Helper()
	var j e2eJob
	eventually(t, id+" to be "+state, func() bool { j = s.job(id); return j.State == state })
	return j
}

func (v gpuView) holderKinds() map[string]int {
	out := map[string]int{}
	for _, d := range v.Devices {
		for _, h := range d.Holders {
			out[h.Owner] = d.Index
		}
	}
	return out
}

// The jobs API: its own token, clear 400s naming the field, 422 for a gang
// that can never fit, and the CLI against the running server.
func TestServeJobs_APIAndCLI(t *testing.T) {
	s, dir := jobsServer(t)
	for _, tok := range []string{"", "wrong"} {
		req, _ := http.NewRequest(http.MethodGet, s.base+"/api/jobs", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("token %q: %d, want 401", tok, resp.StatusCode)
		}
	}
	if code, body := s.jobReq(http.MethodPost, "/api/jobs", "command: x\ngpus_per_node: lots\n"); code != 400 || !strings.Contains(body, "gpus_per_node") {
		t.Fatalf("bad field: %d %s", code, body)
	}
	if code, body := s.jobReq(http.MethodPost, "/api/jobs", "command: x\ngpus_per_node: 3\n"); code != 422 || !strings.Contains(body, "never") {
		t.Fatalf("a gang larger than the box: %d %s", code, body)
	}
	if code, body := s.jobReq(http.MethodGet, "/api/jobs?state=DONE", ""); code != 400 || !strings.Contains(body, "state") {
		t.Fatalf("bad state filter: %d %s", code, body)
	}

	spec := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(spec, []byte("workload: sft\ncommand: echo trained on $CUDA_VISIBLE_DEVICES\ngpus_per_node: 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(loadoutBin, append([]string{"jobs", "--server", s.base, "--token", e2eJobToken}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("loadout jobs %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	id := strings.TrimSpace(cli("submit", spec))
	if !strings.HasPrefix(id, "sft-") {
		t.Fatalf("submit printed %q, want a task id", id)
	}
	s.awaitJob(t, id, "SUCCEEDED")
	if out := cli("list", "--state", "SUCCEEDED"); !strings.Contains(out, id) || !strings.Contains(out, "1x2") {
		t.Fatalf("list: %s", out)
	}
	if out := cli("get", id); !strings.Contains(out, id+"--a01") || !strings.Contains(out, `"events"`) {
		t.Fatalf("get: %s", out)
	}
	if out := cli("logs", id); !strings.Contains(out, "trained on 0,1") {
		t.Fatalf("logs: %q", out)
	}
}

// A job and models share the simulated GPUs through one ledger: the job's
// device is never given to a model, a job that may not evict waits, and
// one that may evicts idle models only, never a busy one.
func TestServeJobs_SharesGPUsWithModels(t *testing.T) {
	s, dir := jobsServer(t)
	s.mustChat("m8")
	m8 := onePid(t, "m8")
	t.Cleanup(func() { // jobs outlive a stopped Loadout: end them
		for _, f := range []string{"one", "two", "three"} {
			_ = os.WriteFile(filepath.Join(dir, f), nil, 0o644)
		}
	})
	gate := func(name string) string {
		return fmt.Sprintf("command: 'while [ ! -e %s ] && [ -d %s ]; do sleep 0.05; done'\n", filepath.Join(dir, name), dir)
	}
	job := s.submitJob(gate("one") + "gpus_per_node: 1\n")
	job = s.awaitJob(t, job.ID, "RUNNING")
	kinds := s.gpus().holderKinds()
	jobDev, modelDev := kinds[job.ID], kinds["m8"]
	if jobDev == modelDev || !slices.Equal(job.LatestAttempt.Devices, []int{jobDev}) {
		t.Fatalf("job on GPU %d (%v), m8 on GPU %d: want different devices", jobDev, job.LatestAttempt.Devices, modelDev)
	}
	_, raw := s.get("/api/gpus")
	if !strings.Contains(raw, `"kind":"job"`) || !strings.Contains(raw, `"kind":"model"`) {
		t.Fatalf("/api/gpus does not show job leases beside model leases: %s", raw)
	}
	// A model request while the job holds a GPU goes where VRAM allows.
	s.mustChat("m10")
	if got := s.gpus().holderKinds()["m10"]; got != modelDev {
		t.Fatalf("m10 placed on GPU %d, the job's is %d", got, jobDev)
	}

	// No free GPU, no eviction allowed: the job waits and says why.
	waiter := s.submitJob(gate("two") + "gpus_per_node: 1\n")
	w := s.awaitJob(t, waiter.ID, "PENDING_RESOURCES")
	if !strings.Contains(w.Error, "free GPUs per node: [0]") {
		t.Fatalf("pending reason %q", w.Error)
	}
	if code, body := s.jobReq(http.MethodPost, "/api/jobs/"+waiter.ID+"/cancel", ""); code != 200 || !strings.Contains(body, "CANCELED") {
		t.Fatalf("cancel: %d %s", code, body)
	}

	// Eviction allowed, but m8 is busy: nothing is evicted.
	resp, err := http.Post(s.base+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m8","stream":true,"max_tokens":400,"messages":[{"role":"user","content":"slow"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if _, err := resp.Body.Read(buf); err != nil { // the stream has begun: m8 is busy
		t.Fatal(err)
	}
	evictor := s.submitJob(gate("three") + "gpus_per_node: 1\nevict_idle_models: true\n")
	if w := s.awaitJob(t, evictor.ID, "PENDING_RESOURCES"); !strings.Contains(w.Error, "evicting idle models for the job") {
		t.Fatalf("pending reason %q: want the swapper's refusal", w.Error)
	}
	if !alive(m8) {
		t.Fatal("a job evicted a model with a request in flight")
	}
	resp.Body.Close() // m8 is idle now: the job may evict it and m10
	ev := s.awaitJob(t, evictor.ID, "RUNNING")
	if !slices.Equal(ev.LatestAttempt.Devices, []int{modelDev}) {
		t.Fatalf("evicting job on %v, want GPU %d", ev.LatestAttempt.Devices, modelDev)
	}
	eventually(t, "m8 to stop", func() bool { return !alive(m8) })
	if h, want := s.gpus().holders(), []string{evictor.ID, job.ID}; !slices.Equal(h, slices.Sorted(slices.Values(want))) {
		t.Fatalf("holders %v, want only the two jobs", h)
	}
	for _, f := range []string{"one", "three"} {
		_ = os.WriteFile(filepath.Join(dir, f), nil, 0o644)
	}
	s.awaitJob(t, job.ID, "SUCCEEDED")
	s.awaitJob(t, evictor.ID, "SUCCEEDED")
	if h := s.gpus().holders(); len(h) != 0 {
		t.Fatalf("leases left after the jobs: %v", h)
	}
}

// queued returns how many requests /api/models shows queued for model.
func (s *server) queued(model string) int {
	s.t.Helper()
	_, body := s.get("/api/models")
	var v struct {
		Models []struct {
			Model  string `json:"model"`
			Queued int    `json:"queued"`
		} `json:"models"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		s.t.Fatalf("/api/models: %v: %s", err, body)
	}
	for _, m := range v.Models {
		if m.Model == model {
			return m.Queued
		}
	}
	return 0
}

// A model request that arrives while a job holds every GPU waits in the
// queue (prioritylru's plan fails only because of the job), and is served
// as soon as the job ends and its lease is released — not a 503.
func TestServeJobs_ModelRequestWaitsForTheJobsGPUs(t *testing.T) {
	s, dir := jobsServer(t)
	t.Cleanup(func() { _ = os.WriteFile(filepath.Join(dir, "hold"), nil, 0o644) })
	job := s.submitJob(fmt.Sprintf("command: 'while [ ! -e %[1]s ] && [ -d %[2]s ]; do sleep 0.05; done'\ngpus_per_node: 2\n",
		filepath.Join(dir, "hold"), dir))
	s.awaitJob(t, job.ID, "RUNNING")

	served := s.postAsync("/v1/chat/completions", chat("m8", false))
	eventually(t, "the m8 request to be queued", func() bool {
		select {
		case a := <-served:
			t.Fatalf("m8 answered %d %s while the job held both GPUs, want it queued", a.code, a.body)
		default:
		}
		return s.queued("m8") == 1
	})
	if err := os.WriteFile(filepath.Join(dir, "hold"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-served:
		if a.code != 200 {
			t.Fatalf("m8 after the job: %d %s", a.code, a.body)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("m8 was not served after the job ended")
	}
	s.awaitJob(t, job.ID, "SUCCEEDED")
	if h := s.gpus().holders(); !slices.Equal(h, []string{"m8"}) {
		t.Fatalf("holders %v, want m8 alone", h)
	}
}

// Which idle model a job evicts is the eviction policy's: prioritylru
// evicts the least recently used model (m10, on GPU 1), where the host's
// own rule would have taken the lowest GPU (m8's).
func TestServeJobs_JobEvictsTheLeastRecentlyUsedModel(t *testing.T) {
	s, dir := jobsServer(t)
	t.Cleanup(func() { _ = os.WriteFile(filepath.Join(dir, "go"), nil, 0o644) })
	for _, m := range []string{"m8", "m10", "m8"} {
		s.mustChat(m)
	}
	kinds := s.gpus().holderKinds()
	m8Dev, m10Dev := kinds["m8"], kinds["m10"]
	if m8Dev >= m10Dev {
		t.Fatalf("m8 on GPU %d, m10 on GPU %d: the test wants m8 on the lower GPU", m8Dev, m10Dev)
	}
	m8, m10 := onePid(t, "m8"), onePid(t, "m10")
	job := s.submitJob(fmt.Sprintf("command: 'while [ ! -e %[1]s ] && [ -d %[2]s ]; do sleep 0.05; done'\ngpus_per_node: 1\nevict_idle_models: true\n",
		filepath.Join(dir, "go"), dir))
	j := s.awaitJob(t, job.ID, "RUNNING")
	if !slices.Equal(j.LatestAttempt.Devices, []int{m10Dev}) {
		t.Fatalf("job on %v, want m10's GPU %d", j.LatestAttempt.Devices, m10Dev)
	}
	eventually(t, "m10 to stop", func() bool { return !alive(m10) })
	if !alive(m8) {
		t.Fatal("the job evicted m8, the most recently used model")
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s.awaitJob(t, job.ID, "SUCCEEDED")
}

// GET /api/jobs pages the queue with limit and after: the pages, joined,
// are the whole list in queue order, "next" says where the next one
// starts, and a bad limit or an unknown after is a 400 naming it.
func TestServeJobs_ListPages(t *testing.T) {
	s, _ := jobsServer(t)
	for range 5 {
		s.submitJob("command: exit 0\ngpus_per_node: 0\n")
	}
	type page struct {
		Jobs []e2eJob `json:"jobs"`
		Next string   `json:"next"`
	}
	list := func(query string) page {
		t.Helper()
		code, body := s.jobReq(http.MethodGet, "/api/jobs"+query, "")
		var p page
		if err := json.Unmarshal([]byte(body), &p); code != 200 || err != nil {
			t.Fatalf("GET /api/jobs%s: %d %s (%v)", query, code, body, err)
		}
		return p
	}
	all := list("")
	var paged []string
	pages, query := 0, "?limit=2"
	for {
		p := list(query)
		pages++
		for _, j := range p.Jobs {
			paged = append(paged, j.ID)
		}
		if p.Next == "" {
			break
		}
		if p.Next != p.Jobs[len(p.Jobs)-1].ID {
			t.Fatalf("next %q, want the page's last task", p.Next)
		}
		query = "?limit=2&after=" + p.Next
	}
	var want []string
	for _, j := range all.Jobs {
		want = append(want, j.ID)
	}
	if all.Next != "" || len(want) != 5 || !slices.Equal(paged, want) || pages != 3 {
		t.Fatalf("pages of 2 gave %v in %d pages, want %v in 3 (unpaged next %q)", paged, pages, want, all.Next)
	}
	for query, field := range map[string]string{"?limit=0": "limit", "?limit=x": "limit", "?after=nope-20260101-000000-0000": "after"} {
		if code, body := s.jobReq(http.MethodGet, "/api/jobs"+query, ""); code != 400 || !strings.Contains(body, field) {
			t.Fatalf("GET /api/jobs%s: %d %s, want a 400 naming %s", query, code, body, field)
		}
	}
}

// Through the API (issue 25): a job that a pinned model makes unplaceable
// is queued with a warning in the submit answer and the log; its waiting
// reason names the pinned model; a job that needs no GPU runs meanwhile.
func TestServeJobs_PinnedModelNamedInWarningAndReason(t *testing.T) {
	dir := t.TempDir()
	path := writeConfig(t, dir, `startPort: ${env.LOADOUT_E2E_START_PORT}
gpus:
  - {name: sim0, memory: 24GiB}
  - {name: sim1, memory: 24GiB}
models:
  p:
    backend: sim
    vram: 20GiB
    pinned: true
    options: {load_time: 20ms, tokens_per_second: 400}
routing:
  scheduler: {use: fifo}
  router: {use: prioritylru}
`)
	s := startServer(t, path, "--db", filepath.Join(dir, "jobs.db"), "--job-token", e2eJobToken)
	s.mustChat("p")
	code, body := s.jobReq(http.MethodPost, "/api/jobs", "command: exit 0\ngpus_per_node: 2\n")
	if code != http.StatusCreated || !strings.Contains(body, `"warnings":["the job cannot be placed now:`) ||
		!strings.Contains(body, "model p (pinned)") {
		t.Fatalf("submit: %d %s; want 201 with a warning naming the pinned model", code, body)
	}
	var big e2eJob
	if err := json.Unmarshal([]byte(body), &big); err != nil {
		t.Fatal(err)
	}
	if w := s.awaitJob(t, big.ID, "PENDING_RESOURCES"); !strings.Contains(w.Error, ": model p (pinned)") {
		t.Errorf("waiting reason %q does not name the pinned model", w.Error)
	}
	if !strings.Contains(s.log(), "job submitted but unplaceable") {
		t.Errorf("the log does not warn of the unplaceable job")
	}
	cpu := s.submitJob("command: exit 0\ngpus_per_node: 0\n")
	s.awaitJob(t, cpu.ID, "SUCCEEDED")
	_, _ = s.jobReq(http.MethodPost, "/api/jobs/"+big.ID+"/cancel", "")
}

// A job's output over the server's 4 MiB answer: `loadout jobs logs -f`
// follows all of it, byte for byte, asking from where it stopped, and so
// does `loadout jobs logs`.
func TestServeJobs_LogsPast4MiBWhole(t *testing.T) {
	s, _ := jobsServer(t)
	// 6 MiB of numbered lines, "%07d\n": 8 bytes each, written over a
	// few polls of -f.
	const lines = 6 << 20 / 8
	j := s.submitJob(fmt.Sprintf("command: 'i=0; while [ $i -lt %d ]; do printf \"%%07d\\n\" $i; i=$((i+1)); done'\ngpus_per_node: 0\n", lines))
	var want strings.Builder
	for i := range lines {
		fmt.Fprintf(&want, "%07d\n", i)
	}
	for _, args := range [][]string{{"logs", "-f", "--poll-interval", "50ms", j.ID}, {"logs", j.ID}} {
		cmd := exec.Command(loadoutBin, append([]string{"jobs", "--server", s.base, "--token", e2eJobToken}, args...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("jobs %v: %v\n%s", args, err, stderr.String())
		}
		if string(out) != want.String() {
			i := 0
			for i < len(out) && i < want.Len() && out[i] == want.String()[i] {
				i++
			}
			t.Fatalf("jobs %v: %d bytes, want %d; they differ from byte %d", args, len(out), want.Len(), i)
		}
	}
}
