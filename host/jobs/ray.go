package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// RayClient is a typed client of a Ray cluster's dashboard: the Ray Jobs
// REST API (POST /api/jobs/, GET /api/jobs/{id}, POST
// /api/jobs/{id}/stop, GET /api/jobs/{id}/logs) and the cluster status
// (GET /api/cluster_status). Errors come back from Ray as plain text; a
// non-2xx answer is a *RayHTTPError with that text.
type RayClient struct {
	// Address is the dashboard's base URL, e.g. http://127.0.0.1:8265.
	Address string
	// Token, when set, is sent as "Authorization: Bearer <token>".
	Token string
	// HTTP is the client; nil means http.DefaultClient. Every call is
	// bounded by Timeout whatever the client's own settings.
	HTTP *http.Client
	// Timeout bounds each call, connection, request and whole answer
	// included; 0 means RayCallTimeout. A call that runs past it is a
	// *RayUnreachableError.
	Timeout time.Duration
}

// RayCallTimeout is the default bound of one call to the Ray dashboard
// (RayClient.Timeout): a dashboard that accepts connections and never
// answers is taken as unreachable after it. Every call Loadout makes is
// small (a submission, a status, a job's log tail, the cluster status),
// and none is made on the submit API's or admission's path (capacity is
// read in the background, RayExecutor), so a short bound only decides
// how soon a hung dashboard shows as unreachable.
const RayCallTimeout = 5 * time.Second

// RayHTTPError is a non-2xx answer of the dashboard.
type RayHTTPError struct {
	Status int
	Body   string // Ray's plain-text error
}

func (e *RayHTTPError) Error() string {
	return fmt.Sprintf("ray: HTTP %d: %s", e.Status, strings.TrimSpace(e.Body))
}

// RayUnreachableError wraps a failure to reach the dashboard at all
// (connection refused, timeout): the cluster is down, not the job wrong.
type RayUnreachableError struct {
	Err error
	// Sent: the request was written whole before the call failed (no
	// answer in time, a connection reset while waiting for it), so the
	// dashboard may have acted on it: a submission may have been taken.
	Sent bool
}

func (e *RayUnreachableError) Error() string { return "ray dashboard unreachable: " + e.Err.Error() }
func (e *RayUnreachableError) Unwrap() error { return e.Err }

// RaySubmitRequest is the body of POST /api/jobs/ (Ray Jobs REST API).
type RaySubmitRequest struct {
	Entrypoint           string             `json:"entrypoint"`
	SubmissionID         string             `json:"submission_id,omitempty"`
	RuntimeEnv           map[string]any     `json:"runtime_env,omitempty"`
	Metadata             map[string]string  `json:"metadata,omitempty"`
	EntrypointNumGPUs    float64            `json:"entrypoint_num_gpus,omitempty"`
	EntrypointResources  map[string]float64 `json:"entrypoint_resources,omitempty"`
	EntrypointNumCPUs    float64            `json:"entrypoint_num_cpus,omitempty"`
	EntrypointMemoryByte int64              `json:"entrypoint_memory,omitempty"`
}

// RayJob is GET /api/jobs/{id}'s JobDetails (the fields Loadout reads).
// Status is PENDING, RUNNING, STOPPED, SUCCEEDED or FAILED; times are Unix
// milliseconds.
type RayJob struct {
	SubmissionID   string `json:"submission_id"`
	JobID          string `json:"job_id"`
	Status         string `json:"status"`
	Message        string `json:"message"`
	ErrorType      string `json:"error_type"`
	StartTime      int64  `json:"start_time"`
	EndTime        int64  `json:"end_time"`
	DriverExitCode *int   `json:"driver_exit_code"`
}

// rayAnswerLimit bounds an answer of the dashboard, read whole (a job's
// status, a submission's, the cluster's), in bytes; rayLogsLimit bounds
// GET /api/jobs/{id}/logs's, which holds the driver's whole output (Ray's
// API has no range).
const (
	rayAnswerLimit = 8 << 20
	rayLogsLimit   = 256 << 20
)

// do calls the dashboard: body (when not nil) sent as JSON, the answer,
// at most limit bytes, decoded into out (when not nil). Errors:
// *RayUnreachableError, *RayHTTPError, an answer past limit or not JSON.
func (c *RayClient) do(ctx context.Context, method, path string, limit int64, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = RayCallTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var sent atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) { sent.Store(i.Err == nil) },
	})
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.Address, "/")+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			return &RayUnreachableError{Err: fmt.Errorf("%s %s: no answer within %s", method, req.URL.Redacted(), timeout), Sent: sent.Load()}
		}
		var ne net.Error
		var ue *url.Error
		if errors.As(err, &ne) || errors.As(err, &ue) {
			return &RayUnreachableError{Err: err, Sent: sent.Load()}
		}
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%s %s: the answer did not end within %s", method, req.URL.Redacted(), timeout)
		}
		return &RayUnreachableError{Err: err, Sent: true}
	}
	if int64(len(b)) > limit {
		return fmt.Errorf("ray: %s %s: the answer is over %d MiB, more than Loadout reads", method, path, limit>>20)
	}
	if resp.StatusCode/100 != 2 {
		return &RayHTTPError{Status: resp.StatusCode, Body: string(b)}
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("ray: %s %s: decoding %q: %w", method, path, truncate(string(b), 200), err)
		}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Submit is POST /api/jobs/. It returns the submission id. Errors:
// *RayHTTPError (400 for a bad request or a submission id that exists),
// *RayUnreachableError.
func (c *RayClient) Submit(ctx context.Context, req RaySubmitRequest) (string, error) {
	var out struct {
		SubmissionID string `json:"submission_id"`
	}
	if err := c.do(ctx, http.MethodPost, "/api/jobs/", rayAnswerLimit, req, &out); err != nil {
		return "", err
	}
	return out.SubmissionID, nil
}

// Job is GET /api/jobs/{id}. Errors: *RayHTTPError with Status 404 when
// Ray has no such job, *RayUnreachableError.
func (c *RayClient) Job(ctx context.Context, id string) (RayJob, error) {
	var j RayJob
	err := c.do(ctx, http.MethodGet, "/api/jobs/"+url.PathEscape(id), rayAnswerLimit, nil, &j)
	return j, err
}

// Stop is POST /api/jobs/{id}/stop; it reports whether Ray stopped a
// running job.
func (c *RayClient) Stop(ctx context.Context, id string) (bool, error) {
	var out struct {
		Stopped bool `json:"stopped"`
	}
	err := c.do(ctx, http.MethodPost, "/api/jobs/"+url.PathEscape(id)+"/stop", rayAnswerLimit, nil, &out)
	return out.Stopped, err
}

// Logs is GET /api/jobs/{id}/logs: the driver's output so far.
func (c *RayClient) Logs(ctx context.Context, id string) (string, error) {
	var out struct {
		Logs string `json:"logs"`
	}
	err := c.do(ctx, http.MethodGet, "/api/jobs/"+url.PathEscape(id)+"/logs", rayLogsLimit, nil, &out)
	return out.Logs, err
}

// RayNode is one node's logical "GPU" resource: total and available.
type RayNode struct {
	ID        string
	Total     float64
	Available float64
}

// GPUsPerNode returns every live node's GPU total and availability, by
// node id order. It reads GET /api/cluster_status's loadMetricsReport
// .usageByNode ({node: {resource: [used, total]}}), which the cluster's
// monitor computes from the same per-node available resources that
// ray._private.state.available_resources_per_node() returns, the figure
// verl checks at start-up (it raises "Total available GPUs … is less than
// total desired GPUs …"): Loadout and the job agree on "enough", up to the
// monitor's refresh (a few seconds).
func (c *RayClient) GPUsPerNode(ctx context.Context) ([]RayNode, error) {
	var out struct {
		Data struct {
			ClusterStatus *struct {
				LoadMetricsReport struct {
					UsageByNode map[string]map[string][2]float64 `json:"usageByNode"`
				} `json:"loadMetricsReport"`
			} `json:"clusterStatus"`
		} `json:"data"`
	}
	if err := c.do(ctx, http.MethodGet, "/api/cluster_status", rayAnswerLimit, nil, &out); err != nil {
		return nil, err
	}
	if out.Data.ClusterStatus == nil {
		return nil, fmt.Errorf("%w: the Ray cluster status has no resource report yet (the monitor has not reported)", ErrCapacityUnknown)
	}
	usage := out.Data.ClusterStatus.LoadMetricsReport.UsageByNode
	var nodes []RayNode
	for _, id := range slices.Sorted(maps.Keys(usage)) {
		gpu := usage[id]["GPU"]
		nodes = append(nodes, RayNode{ID: id, Total: gpu[1], Available: max(gpu[1]-gpu[0], 0)})
	}
	return nodes, nil
}

// RayConfig builds a RayExecutor.
type RayConfig struct {
	Client *RayClient
	// EntrypointResources are asked for the job's driver (Ray's
	// entrypoint_resources), so it runs on a worker and not on the head:
	// in the seed deployment the head starts with no GPUs and workers with
	// a custom resource, e.g. {"worker": 1}. Empty: the driver may run
	// anywhere, the head included.
	EntrypointResources map[string]float64
	// EntrypointNumGPUs is the driver's own GPU need (Ray's
	// entrypoint_num_gpus); usually 0: the job's workers take the gang.
	EntrypointNumGPUs float64
	// RefreshInterval is how often the cluster's GPUs per node are read
	// in the background (Capacity answers from that reading); 0 means
	// 2 s. Each reading is bounded by the client's Timeout.
	RefreshInterval time.Duration
}

// RayExecutor runs attempts on a Ray cluster through its Jobs REST API.
// Ray has no queue and no gang admission, so the runner admits a task only
// when nnodes nodes each have gpus_per_node GPUs available, counting, per
// node, the smaller of what Ray reports and what is left once the gangs of
// the attempts Loadout submitted are taken out (Ray's report lags; the
// same minimum as the GPU ledger's).
//
// The cluster's GPUs are read in the background (the runner starts the
// reading loop, refresh), every RefreshInterval, never on the submit or
// admission path: a dashboard that hangs delays neither the submit API's
// answer nor a local job. Capacity answers from the latest reading.
type RayExecutor struct {
	cfg RayConfig

	mu     sync.Mutex
	active map[string]Spec // submission id → spec, for attempts not finished
	// nodes and nodesErr are the latest reading of the cluster's GPUs;
	// read is false until the first one ended.
	nodes    []RayNode
	nodesErr error
	read     bool
}

// NewRayExecutor returns a Ray executor; its capacity is unknown (tasks
// wait) until the runner's first background reading of the cluster.
func NewRayExecutor(cfg RayConfig) *RayExecutor {
	if cfg.RefreshInterval <= 0 {
		cfg.RefreshInterval = 2 * time.Second
	}
	return &RayExecutor{cfg: cfg, active: map[string]Spec{}}
}

// background reads the cluster's GPUs per node now and then every
// RefreshInterval until ctx ends, calling wake after each reading that
// changed what Capacity answers. The runner runs it on its own goroutine.
func (e *RayExecutor) background(ctx context.Context, wake func()) {
	t := time.NewTicker(e.cfg.RefreshInterval)
	defer t.Stop()
	for {
		if e.refresh(ctx) {
			wake()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// refresh takes one reading of the cluster's GPUs (bounded by the
// client's Timeout) and reports whether it differs from the last.
func (e *RayExecutor) refresh(ctx context.Context) bool {
	nodes, err := e.cfg.Client.GPUsPerNode(ctx)
	if ctx.Err() != nil {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	changed := !e.read || !slices.Equal(nodes, e.nodes) || fmt.Sprint(err) != fmt.Sprint(e.nodesErr)
	e.nodes, e.nodesErr, e.read = nodes, err, true
	return changed
}

// ErrCapacityUnknown is Capacity's error while an executor does not know
// what its cluster has: not read yet, or no node with GPUs reporting (a
// Ray head just started, an autoscaling cluster at zero workers). A task
// then waits in PENDING_RESOURCES, saying why; it is never refused.
var ErrCapacityUnknown = errors.New("capacity not known")

// Capacity answers from the latest background reading of the cluster's
// GPUs per node (see RayExecutor); it makes no call. Errors: the reading
// failed (*RayUnreachableError, or the status has no resource report yet,
// wrapping ErrCapacityUnknown); not read yet,
// or no node with GPUs reporting while spec needs GPUs (wrapping
// ErrCapacityUnknown).
func (e *RayExecutor) Capacity(_ context.Context, spec Spec) (Capacity, error) {
	e.mu.Lock()
	nodes, err, read := e.nodes, e.nodesErr, e.read
	e.mu.Unlock()
	switch {
	case !read:
		return Capacity{}, fmt.Errorf("%w yet: the cluster's status is being read", ErrCapacityUnknown)
	case err != nil:
		return Capacity{}, err
	}
	gpus := 0.0
	for _, n := range nodes {
		gpus += n.Total
	}
	if gpus == 0 && spec.GPUsPerNode > 0 {
		return Capacity{}, fmt.Errorf("%w: no Ray node with GPUs has reported yet (%d node(s) without GPUs; a head just started, or an autoscaling cluster at zero workers): waiting for nodes", ErrCapacityUnknown, len(nodes))
	}
	var c Capacity
	var untaken []float64 // per node: total minus Loadout's gangs
	for _, n := range nodes {
		c.Total = append(c.Total, int(n.Total))
		untaken = append(untaken, n.Total)
	}
	e.mu.Lock()
	for _, s := range e.active {
		// Each active gang takes gpus_per_node on nnodes nodes: the
		// ones with the most left, as Ray's spread would.
		for range s.NNodes {
			i := 0
			for j := range untaken {
				if untaken[j] > untaken[i] {
					i = j
				}
			}
			if len(untaken) > 0 {
				untaken[i] -= float64(s.GPUsPerNode)
			}
		}
	}
	e.mu.Unlock()
	for i, n := range nodes {
		c.Free = append(c.Free, int(max(min(n.Available, untaken[i]), 0)))
	}
	return c, nil
}

// Start submits the attempt with its submission id, so a resubmission
// after a crash finds it instead of starting it twice.
func (e *RayExecutor) Start(ctx context.Context, t *Task, a *Attempt) error {
	runtimeEnv := maps.Clone(t.Spec.RuntimeEnv)
	if len(t.Spec.Env) > 0 {
		if runtimeEnv == nil {
			runtimeEnv = map[string]any{}
		}
		vars := map[string]any{}
		if old, ok := runtimeEnv["env_vars"].(map[string]any); ok {
			maps.Copy(vars, old)
		}
		for k, v := range t.Spec.Env {
			vars[k] = v
		}
		runtimeEnv["env_vars"] = vars
	}
	req := RaySubmitRequest{
		Entrypoint:          t.Spec.Entrypoint,
		SubmissionID:        a.SubmissionID,
		RuntimeEnv:          runtimeEnv,
		Metadata:            map[string]string{"loadout_task_id": t.ID, "loadout_attempt": fmt.Sprint(a.No), "workload": t.Spec.Workload, "name": t.Spec.Name},
		EntrypointNumGPUs:   e.cfg.EntrypointNumGPUs,
		EntrypointResources: e.cfg.EntrypointResources,
	}
	if _, err := e.cfg.Client.Submit(ctx, req); err != nil {
		var ue *RayUnreachableError
		var he *RayHTTPError
		switch {
		case errors.As(err, &ue) && ue.Sent:
			// The dashboard may have taken the job before the call
			// failed: the runner looks the submission id up before it
			// submits anything again.
			return &StartError{Unreachable: true, Ambiguous: true, Err: err}
		case errors.As(err, &ue):
			return &StartError{Unreachable: true, Err: err}
		case errors.As(err, &he) && he.Status == http.StatusBadRequest && strings.Contains(he.Body, "already exists"):
			// Submitted before a crash: it is ours.
		case errors.As(err, &he) && he.Status/100 == 4:
			return &StartError{Kind: FailureUserError, Err: err}
		case errors.As(err, &he) && he.Status/100 == 5:
			// The dashboard could not take the job now (its job agent
			// not yet started, an exception in its handler): no job was
			// created, so a later attempt submits it again.
			return &StartError{NotReady: true, Err: err}
		default:
			return &StartError{Kind: FailureRuntimeError, Err: err}
		}
	}
	e.mu.Lock()
	e.active[a.SubmissionID] = t.Spec
	e.mu.Unlock()
	a.Status = StatusPending
	return nil
}

// Poll is GET /api/jobs/{submission id}; a FAILED job's log tail is read
// too, to find verl's insufficient-GPUs error in it.
func (e *RayExecutor) Poll(ctx context.Context, t *Task, a *Attempt) (Status, error) {
	j, err := e.cfg.Client.Job(ctx, a.SubmissionID)
	var he *RayHTTPError
	if errors.As(err, &he) && he.Status == http.StatusNotFound {
		return Status{Found: false}, nil
	}
	if err != nil {
		return Status{}, err
	}
	st := Status{Found: true, Status: j.Status, Message: j.Message, ErrorType: j.ErrorType}
	if j.Status == StatusFailed {
		if logs, err := e.cfg.Client.Logs(ctx, a.SubmissionID); err == nil {
			st.LogTail = logs[max(len(logs)-16<<10, 0):]
		}
	}
	return st, nil
}

// Stop is POST /api/jobs/{submission id}/stop.
func (e *RayExecutor) Stop(ctx context.Context, t *Task, a *Attempt) error {
	_, err := e.cfg.Client.Stop(ctx, a.SubmissionID)
	return err
}

// Logs is GET /api/jobs/{submission id}/logs (Ray answers the whole
// output), cut as asked. Errors: ErrNoLogs when Ray has no such job
// (404), *RayUnreachableError.
func (e *RayExecutor) Logs(ctx context.Context, t *Task, a *Attempt, from, limit int64) (LogChunk, error) {
	logs, err := e.cfg.Client.Logs(ctx, a.SubmissionID)
	var he *RayHTTPError
	if errors.As(err, &he) && he.Status == http.StatusNotFound {
		return LogChunk{}, fmt.Errorf("ray has no job %s: %w", a.SubmissionID, ErrNoLogs)
	}
	if err != nil {
		return LogChunk{}, err
	}
	return chunk(logs, from, limit), nil
}

// Resume counts the attempt's gang as taken again.
func (e *RayExecutor) Resume(t *Task, a *Attempt) error {
	e.mu.Lock()
	e.active[a.SubmissionID] = t.Spec
	e.mu.Unlock()
	return nil
}

// Finish forgets the attempt's gang.
func (e *RayExecutor) Finish(t *Task, a *Attempt) {
	e.mu.Lock()
	delete(e.active, a.SubmissionID)
	e.mu.Unlock()
}
