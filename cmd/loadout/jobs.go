package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/gofrs/flock"
	"github.com/spf13/cobra"

	"github.com/loadout-dev/loadout/host/gpu"
	"github.com/loadout-dev/loadout/host/jobs"
	"github.com/loadout-dev/loadout/host/router"
	"github.com/loadout-dev/loadout/host/statedb"
)

// jobsOptions are serve's job-queue flags.
type jobsOptions struct {
	db         string
	token      string
	maxRunning int
	// Ray executor: the dashboard address, its bearer token, and the
	// driver's entry-point resources (JSON, e.g. {"worker":1}).
	rayAddress, rayToken, rayEntrypointResources string
}

func addJobsFlags(cmd *cobra.Command, o *jobsOptions) {
	cmd.Flags().StringVar(&o.db, "db", "", "the state database (SQLite: the job queue and the activity log); default $XDG_DATA_HOME/loadout/jobs.db or ~/.local/share/loadout/jobs.db")
	cmd.Flags().StringVar(&o.token, "job-token", os.Getenv("LOADOUT_JOB_TOKEN"), "bearer token of the jobs API (/api/jobs), apart from the inference API keys; empty: the jobs API is off (default $LOADOUT_JOB_TOKEN)")
	positiveIntVar(cmd.Flags(), &o.maxRunning, "max-running-jobs", 64, "most jobs submitted or running at once")
	cmd.Flags().StringVar(&o.rayAddress, "ray-address", os.Getenv("LOADOUT_RAY_ADDRESS"), "a Ray cluster's dashboard (e.g. http://127.0.0.1:8265) for jobs with executor: ray; empty: no Ray executor (default $LOADOUT_RAY_ADDRESS)")
	cmd.Flags().StringVar(&o.rayToken, "ray-token", os.Getenv("LOADOUT_RAY_TOKEN"), "bearer token for the Ray dashboard (default $LOADOUT_RAY_TOKEN)")
	cmd.Flags().StringVar(&o.rayEntrypointResources, "ray-entrypoint-resources", "", `Ray entrypoint_resources for every job's driver, as JSON (e.g. '{"worker":1}': keeps the driver on a worker, off a head started with no GPUs)`)
}

// statePath is the state file serve uses: --db, else the default place
// (statedb.DefaultPath). The job queue and the activity log share it.
func statePath(db string) (string, error) {
	if db != "" {
		return db, nil
	}
	return statedb.DefaultPath()
}

// rayExecutor builds the Ray executor from serve's flags; nil when no
// address is given.
func rayExecutor(o jobsOptions) (*jobs.RayExecutor, error) {
	if o.rayAddress == "" {
		return nil, nil
	}
	var res map[string]float64
	if o.rayEntrypointResources != "" {
		if err := json.Unmarshal([]byte(o.rayEntrypointResources), &res); err != nil {
			return nil, fmt.Errorf("--ray-entrypoint-resources: want a JSON object of resource names to amounts: %w", err)
		}
	}
	return jobs.NewRayExecutor(jobs.RayConfig{
		Client:              &jobs.RayClient{Address: o.rayAddress, Token: o.rayToken},
		EntrypointResources: res,
	}), nil
}

// startJobs opens the job store and starts the runner with the local
// executor on the models' GPU ledger (and the router to evict idle models
// for jobs that allow it). It returns once the runner has taken back the
// leases of jobs still running from an earlier run, so no model is placed
// on their GPUs; stop ends the runner and closes the store. When the
// default database (no --db) cannot be opened, jobs are off: it logs why
// and returns a nil runner. residency says which models holding GPUs are
// pinned or persistent, for waiting jobs' reasons and submit warnings
// (jobs.LocalConfig.Residency). onTransition, when not nil, hears every
// change of a task's state (jobs.Config.OnTransition).
func startJobs(ctx context.Context, o jobsOptions, ledger *gpu.Ledger, r *router.Router, residency func(string) jobs.Residency,
	log *slog.Logger, onTransition func(jobs.Transition)) (*jobs.Runner, func(), error) {
	path, err := statePath(o.db)
	if err != nil {
		return nil, nil, err
	}
	lock, err := lockJobs(path, log)
	if err != nil && o.db == "" {
		// Another Loadout's queue runs on the default database (a second
		// serve on another address): serving models must not depend on
		// it, and two queues would each start jobs on GPUs only the
		// other's ledger knows are in use. The jobs API says it is off.
		log.Warn("job queue disabled: "+err.Error()+"; give this Loadout its own --db to run one", "db", path)
		return nil, func() {}, nil
	}
	if err != nil {
		return nil, nil, err
	}
	store, err := jobs.OpenStore(path)
	if err != nil && o.db == "" {
		// The default place is not writable (a read-only home): serving
		// models must not depend on it. The jobs API says it is off.
		lock.Unlock()
		log.Warn("job queue disabled: its default database cannot be opened; give --db", "err", err)
		return nil, func() {}, nil
	}
	if err != nil {
		lock.Unlock()
		return nil, nil, err
	}
	var runner *jobs.Runner
	lc := jobs.LocalConfig{Ledger: ledger, Dir: filepath.Join(filepath.Dir(path), "job-logs"),
		Notify: func() { runner.Wake() }, Logger: log, Residency: residency}
	if ledger != nil {
		lc.Evictor = r
	}
	fail := func(err error) (*jobs.Runner, func(), error) {
		store.Close()
		lock.Unlock()
		return nil, nil, err
	}
	local, err := jobs.NewLocalExecutor(lc)
	if err != nil {
		return fail(err)
	}
	executors := map[string]jobs.Executor{jobs.ExecutorLocal: local}
	ray, err := rayExecutor(o)
	if err != nil {
		return fail(err)
	}
	if ray != nil {
		executors[jobs.ExecutorRay] = ray
	}
	runner, err = jobs.NewRunner(jobs.Config{Store: store, Executors: executors,
		MaxRunning: o.maxRunning, Logger: log, OnTransition: onTransition})
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := runner.Run(ctx); err != nil {
			log.Error("job runner stopped", "err", err)
		}
	}()
	select {
	case <-runner.Resumed():
	case <-done:
	}
	log.Info("job queue open", "db", path, "api", o.token != "", "ray", o.rayAddress)
	return runner, func() { cancel(); <-done; store.Close(); lock.Unlock() }, nil
}

// lockJobs takes the job database's lock (an exclusive flock on the file
// beside it, path + ".lock"; takeLock), held until the returned lock is
// unlocked or the process ends: one Loadout's job queue runs on a
// database at a time, so a job is never started, resumed or polled by
// two. Where the lock cannot be taken at all the queue runs unguarded:
// the lock returned is then not held, and its Unlock does nothing.
// Errors: the lock held by another process.
func lockJobs(path string, log *slog.Logger) (*flock.Flock, error) {
	lock := flock.New(path + ".lock")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return lock, nil // opening the database fails and says why
	}
	if err := takeLock(lock, log, "job database lock not taken; a second Loadout on this database would not be refused"); err != nil {
		return nil, fmt.Errorf("the job database %s is in use by another Loadout's job queue (%s is locked)", path, lock.Path())
	}
	return lock, nil
}

func newJobsCmd() *cobra.Command {
	c := &apiClient{}
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "Submit and follow GPU jobs on a running Loadout (its /api/jobs)",
		Long: `Submit GPU jobs (training, batch work) to a running Loadout, which queues
each until its whole gang of GPUs (nnodes × gpus_per_node) is free, runs it
locally on GPUs leased beside the models or on a Ray cluster, and retries it
when it lost a race for resources. See docs/JOBS.md.`,
		PersistentPreRun: func(cmd *cobra.Command, _ []string) { c.out = cmd.OutOrStdout() },
	}
	addClientFlags(cmd.PersistentFlags(), c, "token", "LOADOUT_JOB_TOKEN", "the job token, serve's --job-token")

	submit := &cobra.Command{
		Use:   "submit FILE|-",
		Short: "Submit a job spec (YAML or JSON; - reads standard input) and print its task id",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var spec []byte
			var err error
			if args[0] == "-" {
				spec, err = io.ReadAll(cmd.InOrStdin())
			} else {
				spec, err = os.ReadFile(args[0])
			}
			if err != nil {
				return err
			}
			var t jobs.Task
			// Whether the spec was sent whole: if so and no answer
			// came, the server may have queued the job all the same.
			var sent atomic.Bool
			ctx := httptrace.WithClientTrace(cmd.Context(), &httptrace.ClientTrace{
				WroteRequest:         func(i httptrace.WroteRequestInfo) { sent.Store(i.Err == nil) },
				GotFirstResponseByte: func() { sent.Store(false) }, // an answer came: it says what happened
			})
			if err := c.do(ctx, http.MethodPost, "/api/jobs", spec, &t); err != nil {
				if sent.Load() {
					return fmt.Errorf("%w; the job may have been submitted all the same: see `loadout jobs list` before submitting it again", err)
				}
				return err
			}
			fmt.Fprintln(c.out, t.ID)
			return nil
		},
	}
	var state string
	var pollInterval time.Duration
	list := &cobra.Command{
		Use:   "list [--state S1,S2]",
		Short: "List jobs in queue order",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var out struct {
				Jobs []jobs.Task `json:"jobs"`
			}
			path := "/api/jobs"
			if state != "" {
				path += "?state=" + state
			}
			if err := c.do(cmd.Context(), http.MethodGet, path, nil, &out); err != nil {
				return err
			}
			tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tEXECUTOR\tGPUS\tATTEMPTS\tCREATED\tNOTE")
			for _, t := range out.Jobs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%dx%d\t%d\t%s\t%s\n", t.ID, t.State, t.Executor, t.Spec.NNodes, t.Spec.GPUsPerNode,
					t.Attempts, t.CreatedAt.Local().Format(time.DateTime), note(t.Error))
			}
			return tw.Flush()
		},
	}
	list.Flags().StringVar(&state, "state", "", "only these states, comma-separated (e.g. RUNNING,PENDING_RESOURCES)")
	get := &cobra.Command{
		Use:   "get ID",
		Short: "Show a job: state, attempts (submission id, start, end, failure) and events, as JSON",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var raw json.RawMessage
			if err := c.do(cmd.Context(), http.MethodGet, "/api/jobs/"+args[0], nil, &raw); err != nil {
				return err
			}
			var buf bytes.Buffer
			_ = json.Indent(&buf, raw, "", "  ")
			fmt.Fprintln(c.out, buf.String())
			return nil
		},
	}
	cancel := &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a job: a waiting one at once, a running one is stopped",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var t jobs.Task
			if err := c.do(cmd.Context(), http.MethodPost, "/api/jobs/"+args[0]+"/cancel", nil, &t); err != nil {
				return err
			}
			fmt.Fprintf(c.out, "%s %s\n", t.ID, t.State)
			return nil
		},
	}
	var follow bool
	logs := &cobra.Command{
		Use:   "logs [-f] ID",
		Short: "Print the output of a job's latest attempt; -f follows it until the job ends",
		Long: `logs prints the whole output of a job's latest attempt. With -f it then
follows it, printing new output as the job writes it, until the job ends
(succeeded, failed or canceled), like 'kubectl logs -f'; it asks the server
every --poll-interval. A new attempt's output is printed from its start.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if follow {
				return followJobLogs(cmd.Context(), c, args[0], pollInterval)
			}
			var t jobs.Task
			if err := c.do(cmd.Context(), http.MethodGet, "/api/jobs/"+args[0], nil, &t); err != nil {
				return err
			}
			if t.LatestAttempt == nil { // the server's answer says why there is none
				return c.do(cmd.Context(), http.MethodGet, "/api/jobs/"+args[0]+"/logs", nil, c.out)
			}
			_, err := copyJobLogs(cmd.Context(), c, args[0], t.LatestAttempt.SubmissionID, 0)
			return err
		},
	}
	logs.Flags().BoolVarP(&follow, "follow", "f", false, "follow the output until the job ends")
	positiveDurationVar(logs.Flags(), &pollInterval, "poll-interval", 500*time.Millisecond, "with -f, how often to ask for new output")
	cmd.AddCommand(submit, list, get, cancel, logs)
	return cmd
}

// note is a task's error as `jobs list` shows it: its first line (a Ray
// failure's message may hold a whole traceback).
func note(s string) string {
	first, _, cut := strings.Cut(strings.TrimSpace(s), "\n")
	if cut {
		return strings.TrimSpace(first) + " …"
	}
	return first
}

// copyJobLogs prints the output of job id's attempt submissionID from
// byte from of it to its end as the server has it now, asking for it a
// part at a time (GET …/logs?from=BYTE&attempt=…, each answer at most
// jobs.MaxLogChunk bytes), and returns the offset it stopped at.
func copyJobLogs(ctx context.Context, c *apiClient, id, submissionID string, from int64) (int64, error) {
	var buf bytes.Buffer
	for {
		buf.Reset()
		path := fmt.Sprintf("/api/jobs/%s/logs?from=%d&attempt=%s", id, from, url.QueryEscape(submissionID))
		if err := c.do(ctx, http.MethodGet, path, nil, &buf); err != nil {
			return from, err
		}
		if buf.Len() == 0 {
			return from, nil
		}
		if _, err := c.out.Write(buf.Bytes()); err != nil {
			return from, err
		}
		from += int64(buf.Len())
	}
}

// followJobLogs prints job id's output and then what it adds, asking the
// server every interval, until the job ends (jobs.State.Terminal), then
// prints what is left. It asks for the output from the byte it stopped at
// (offsets into the whole output, whatever its size); a new attempt's
// output is printed from its start, once the previous attempt's is all
// printed.
func followJobLogs(ctx context.Context, c *apiClient, id string, interval time.Duration) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	attempt, printed := "", int64(0)
	for {
		// The state first: output read after the job ended is all of it.
		var t jobs.Task
		if err := c.do(ctx, http.MethodGet, "/api/jobs/"+id, nil, &t); err != nil {
			return err
		}
		if t.LatestAttempt != nil && t.LatestAttempt.SubmissionID != attempt {
			if attempt != "" { // the rest of the attempt before
				if _, err := copyJobLogs(ctx, c, id, attempt, printed); err != nil {
					return err
				}
			}
			attempt, printed = t.LatestAttempt.SubmissionID, 0
		}
		if attempt != "" {
			n, err := copyJobLogs(ctx, c, id, attempt, printed)
			printed = n
			// Before it runs, an attempt may have no output yet.
			if err != nil && (t.State.Terminal() || t.State == jobs.StateRunning) {
				return err
			}
		}
		if t.State.Terminal() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
