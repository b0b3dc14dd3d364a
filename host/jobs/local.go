package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/loadout-dev/loadout/plugins"
	"github.com/prometheus/procfs"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/loadout-dev/loadout/host/gpu"
)

// Evictor makes room on the GPUs for a local job that may evict idle
// models (evict_idle_models). The router implements it
// (host/router/jobs.go): its swapper policy decides which models go, as for
// a model, and the router checks the plan — never a model with requests in
// flight, never a pinned one — and carries it out.
type Evictor interface {
	// PlanJob says, changing nothing, which devices a job that needs gpus
	// whole GPUs, with priority, would get now by evicting idle models:
	// the admission check. The error says why it would get none.
	PlanJob(gpus, priority int) ([]int, error)
	// EvictForJob plans for job id as PlanJob does, leases the devices to
	// id in the ledger (the evicted models' leases end in the same step),
	// stops the models and waits until they have stopped. It returns the
	// devices leased and the models stopped; the lease is then the
	// caller's. Errors: no room (nothing leased or stopped), ctx ends (the
	// lease is released once the models have stopped), the router is
	// shutting down.
	EvictForJob(ctx context.Context, id string, gpus, priority int) (devices []int, stopped []string, err error)
}

// LocalConfig builds a LocalExecutor.
type LocalConfig struct {
	// Ledger is the GPU ledger the models use; nil: no GPUs, only jobs
	// with gpus_per_node 0 run.
	Ledger *gpu.Ledger
	// Evictor, when set, lets jobs with evict_idle_models stop idle models.
	Evictor Evictor
	// Dir holds each attempt's log, pid and exit files.
	Dir string
	// StopGrace is how long a stopped job has between SIGTERM and SIGKILL.
	// Default 10 s.
	StopGrace time.Duration
	// Notify is called (from another goroutine) when a job's process
	// exits, so the runner polls at once.
	Notify func()
	Logger *slog.Logger
	// CgroupRoot is where cgroup v2 is mounted; empty means
	// /sys/fs/cgroup. Each attempt runs in a cgroup of its own below the
	// one Loadout runs in, where one can be made (jobprocs.go).
	CgroupRoot string
	// NoCgroup runs jobs without a cgroup of their own: their processes
	// are found by their environment marker (jobprocs.go).
	NoCgroup bool
	// Residency, when set, says of a model holding GPUs whether it stays
	// there (pinned, persistent), for a waiting job's reason and Submit's
	// warning; nil: every model is described by its id alone.
	Residency func(model string) Residency
}

// Residency is what the host's configuration says of a model that may
// never leave its GPUs on its own.
type Residency struct {
	// Pinned: never evicted (Loadout's pinned:), not even for a job.
	Pinned bool
	// Persistent: in a persistent group (llama-swap's persistent: other
	// groups' swaps never unload it).
	Persistent bool
	// TTL is its idle unload time (llama-swap's ttl); 0: never unloaded
	// for being idle.
	TTL time.Duration
}

// String is how a waiting job's reason describes it: "pinned",
// "persistent", "persistent, ttl 5m0s", or "".
func (r Residency) String() string {
	var parts []string
	if r.Pinned {
		parts = append(parts, "pinned")
	}
	if r.Persistent {
		parts = append(parts, "persistent")
	}
	if len(parts) > 0 && r.TTL > 0 {
		parts = append(parts, "ttl "+r.TTL.String())
	}
	return strings.Join(parts, ", ")
}

// LocalExecutor runs a job's command with /bin/sh -c as a process group,
// with CUDA_VISIBLE_DEVICES (and CUDA_DEVICE_ORDER=PCI_BUS_ID) set to the
// devices it leased. A small shell wrapper writes the command's exit status
// to a file, so a restarted Loadout still learns how a job it started
// ended. An attempt is over, and its GPU lease released, only when no
// process of it is left, the ones that left its process group included:
// each runs in a cgroup of its own where one can be made, else its
// processes are found by an environment marker (jobprocs.go).
type LocalExecutor struct {
	cfg    LocalConfig
	cgOnce sync.Once // logs once why jobs run without a cgroup
	// wrapper is the wrapper script (wrapperScript), with the absolute
	// path of mv found on Loadout's PATH.
	wrapper string
}

// NewLocalExecutor returns a local executor; it makes cfg.Dir.
func NewLocalExecutor(cfg LocalConfig) (*LocalExecutor, error) {
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Notify == nil {
		cfg.Notify = func() {}
	}
	if cfg.CgroupRoot == "" {
		cfg.CgroupRoot = defaultCgroupRoot
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("local jobs: %w", err)
	}
	mv, err := exec.LookPath("mv")
	if err != nil {
		mv = "/bin/mv"
	}
	if mv, err = filepath.Abs(mv); err != nil {
		return nil, fmt.Errorf("local jobs: %w", err)
	}
	return &LocalExecutor{cfg: cfg, wrapper: fmt.Sprintf(wrapperScript, shellQuote(mv))}, nil
}

// shellQuote quotes s as one word of /bin/sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// localHandle is a local attempt's Handle: the wrapper's pid and its start
// time (clock ticks since boot, /proc's starttime), so that after a restart
// a pid the kernel has since given to another process is not taken for
// the job.
type localHandle struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start,omitempty"`
	// Cgroup is the attempt's cgroup directory; empty: none (its
	// processes are found by their environment marker).
	Cgroup string `json:"cgroup,omitempty"`
}

func (e *LocalExecutor) path(a *Attempt, ext string) string {
	return filepath.Join(e.cfg.Dir, a.SubmissionID+ext)
}

// Capacity: one node; Total is every device, Free the unheld ones or, for
// a job that may evict idle models and needs more than those, as many as
// the Evictor's plan would give it.
func (e *LocalExecutor) Capacity(ctx context.Context, spec Spec) (Capacity, error) {
	if e.cfg.Ledger == nil {
		return Capacity{Total: []int{0}, Free: []int{0}}, nil
	}
	devs, err := e.cfg.Ledger.Inventory().Devices()
	if err != nil {
		return Capacity{}, err
	}
	free, err := e.cfg.Ledger.UnheldDevices()
	if err != nil {
		return Capacity{}, err
	}
	c := Capacity{Total: []int{len(devs)}, Free: []int{len(free)}}
	evicts := e.evicts(spec, len(free))
	if evicts {
		planned, err := e.cfg.Evictor.PlanJob(spec.GPUsPerNode, spec.Priority)
		if err != nil {
			c.Why = err.Error()
		}
		c.Free[0] = max(c.Free[0], len(planned))
	}
	if c.Free[0] < spec.GPUsPerNode {
		c.Held, c.Stuck = e.holders(spec, len(devs), spec.EvictIdleModels && e.cfg.Evictor != nil)
	}
	return c, nil
}

// holders describes what holds the box's GPUs (Capacity.Held) and, when
// models that never leave for this job hold so many that it cannot be
// placed, says so (Capacity.Stuck). A model stays for the job when it is
// pinned (the router never evicts one for a job), or persistent without
// a TTL and the job may not evict idle models (evicts false): nothing but
// an unload frees its GPUs then.
func (e *LocalExecutor) holders(spec Spec, total int, evicts bool) (held, stuck string) {
	leases, err := e.cfg.Ledger.Leases()
	if err != nil {
		return "", ""
	}
	var per []string
	var staying []string
	stuckDevs := 0
	for _, d := range leases {
		if len(d.Holders) == 0 {
			continue
		}
		var names []string
		devStuck := false
		for _, h := range d.Holders {
			if h.Kind == gpu.HolderJob {
				names = append(names, "job "+h.Owner)
				continue
			}
			name := "model " + h.Owner
			if e.cfg.Residency != nil {
				r := e.cfg.Residency(h.Owner)
				if s := r.String(); s != "" {
					name += " (" + s + ")"
				}
				if r.Pinned || r.Persistent && r.TTL == 0 && !evicts {
					devStuck = true
					if !slices.Contains(staying, name) {
						staying = append(staying, name)
					}
				}
			}
			names = append(names, name)
		}
		if devStuck {
			stuckDevs++
		}
		per = append(per, fmt.Sprintf("GPU %d: %s", d.Index, strings.Join(names, ", ")))
	}
	held = strings.Join(per, "; ")
	if total-stuckDevs < spec.GPUsPerNode {
		stuck = fmt.Sprintf("it needs %d GPU(s), but %d of the box's %d are held by models that are not unloaded for it: %s; it waits until they are unloaded (POST /api/models/unload/{model})",
			spec.GPUsPerNode, stuckDevs, total, strings.Join(staying, ", "))
	}
	return held, stuck
}

// evicts reports whether a job of spec, with free devices unheld, gets its
// devices from the Evictor: it may evict idle models and needs more than
// the free ones.
func (e *LocalExecutor) evicts(spec Spec, free int) bool {
	return spec.EvictIdleModels && e.cfg.Evictor != nil && spec.GPUsPerNode > free
}

// wrapperScript runs the command and records its pid and exit status;
// %s is mv's absolute path. It runs in the job's environment (a spec's env
// may set PATH), so it names every program it runs itself by its absolute
// path and uses shell builtins otherwise. The command is read from a file
// in the job's directory (<submission id>.sh), not passed in a variable or
// an argument: Linux caps each of those at 128 KiB (MAX_ARG_STRLEN).
const wrapperScript = `echo $$ > "$LOADOUT_JOB_PIDFILE"
/bin/sh "$LOADOUT_JOB_SCRIPT"
s=$?
echo "$s" > "$LOADOUT_JOB_EXITFILE.tmp" && %s "$LOADOUT_JOB_EXITFILE.tmp" "$LOADOUT_JOB_EXITFILE"
exit $s`

// LoadoutSecrets are the variables of Loadout's own environment that hold
// its secrets (the jobs API's token, the Ray dashboard's, the inference API
// key): a local job does not inherit them. A spec's env may still set them.
var LoadoutSecrets = []string{"LOADOUT_JOB_TOKEN", "LOADOUT_RAY_TOKEN", "LOADOUT_API_KEY"}

// jobEnviron is Loadout's environment less LoadoutSecrets: what a local
// job inherits.
func jobEnviron() []string {
	env := os.Environ()
	return slices.DeleteFunc(env, func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains(LoadoutSecrets, k)
	})
}

// Start leases the job's devices, then starts the process: unheld devices,
// lowest index first, or, when too few are unheld and the spec allows
// evicting idle models, the devices the Evictor frees (its swapper
// decides which models go). A lease it cannot get is a StartError of kind
// INSUFFICIENT_RESOURCES.
func (e *LocalExecutor) Start(ctx context.Context, t *Task, a *Attempt) error {
	need := t.Spec.GPUsPerNode
	var devices []int
	if need > 0 {
		if e.cfg.Ledger == nil {
			return &StartError{Kind: FailureInsufficientResources, Err: errors.New("no GPUs on this box")}
		}
		free, err := e.cfg.Ledger.UnheldDevices()
		if err != nil {
			return &StartError{Kind: FailureInsufficientResources, Err: err}
		}
		switch {
		case e.evicts(t.Spec, len(free)):
			var stopped []string
			devices, stopped, err = e.cfg.Evictor.EvictForJob(ctx, t.ID, need, t.Spec.Priority)
			if err != nil {
				return &StartError{Kind: FailureInsufficientResources, Err: fmt.Errorf("evicting idle models: %w", err)}
			}
			if len(stopped) > 0 {
				e.cfg.Logger.Info("job evicted idle models", "task", t.ID, "gpus", devices, "models", stopped)
			}
		case len(free) < need:
			return &StartError{Kind: FailureInsufficientResources, Err: fmt.Errorf("needs %d GPUs, %d available", need, len(free))}
		default:
			devices = free[:need]
			if _, err := e.cfg.Ledger.AcquireDevices(t.ID, devices); err != nil {
				return &StartError{Kind: FailureInsufficientResources, Err: err}
			}
		}
	}
	pid, cg, err := e.spawn(t, a, devices)
	if err != nil {
		if e.cfg.Ledger != nil {
			e.cfg.Ledger.Release(t.ID)
		}
		return &StartError{Kind: FailureRuntimeError, Err: err}
	}
	var start uint64
	if st, ok := procStat(pid); ok {
		start = st.Starttime
	}
	h, _ := json.Marshal(localHandle{PID: pid, Start: start, Cgroup: cg})
	a.Handle, a.Devices, a.Status = string(h), devices, StatusRunning
	e.cfg.Logger.Info("job started", "task", t.ID, "submission_id", a.SubmissionID, "pid", pid, "gpus", devices)
	return nil
}

// spawn starts the attempt's wrapper, in a cgroup of its own where one can
// be made; it returns the wrapper's pid and the cgroup ("": none).
func (e *LocalExecutor) spawn(t *Task, a *Attempt, devices []int) (int, string, error) {
	logf, err := os.OpenFile(e.path(a, ".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, "", err
	}
	defer logf.Close()
	for _, ext := range []string{".exit", ".pid"} {
		_ = os.Remove(e.path(a, ext))
	}
	if err := os.WriteFile(e.path(a, ".sh"), []byte(t.Spec.Entrypoint+"\n"), 0o600); err != nil {
		return 0, "", fmt.Errorf("writing the job's command: %w", err)
	}
	cmd := exec.Command("/bin/sh", "-c", e.wrapper)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	env := jobEnviron()
	for _, k := range slices.Sorted(maps.Keys(t.Spec.Env)) {
		env = append(env, k+"="+t.Spec.Env[k])
	}
	env = append(env, plugins.CUDAEnv(devices)...) // the one rule, as for model servers
	if len(devices) == 0 {
		// A job that leased no GPU must not use one: a model may hold it.
		env = append(env, "CUDA_VISIBLE_DEVICES=")
	}
	env = append(env,
		"LOADOUT_JOB_ID="+t.ID,
		"LOADOUT_SUBMISSION_ID="+a.SubmissionID,
		"LOADOUT_JOB_SCRIPT="+e.path(a, ".sh"),
		"LOADOUT_JOB_PIDFILE="+e.path(a, ".pid"),
		"LOADOUT_JOB_EXITFILE="+e.path(a, ".exit"),
	)
	cmd.Env = env
	cg := e.cgroup(a)
	if cg != "" {
		if f, err := os.Open(cg); err == nil {
			defer f.Close()
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(f.Fd())
		} else {
			_ = os.Remove(cg)
			cg = ""
		}
	}
	err = cmd.Start()
	if err != nil && cg != "" { // a kernel without clone3 into a cgroup
		e.cfg.Logger.Warn("job started without its cgroup", "task", t.ID, "cgroup", cg, "err", err)
		_ = os.Remove(cg)
		cg = ""
		cmd = rebuild(cmd)
		err = cmd.Start()
	}
	if err != nil {
		return 0, "", fmt.Errorf("starting the job: %w", err)
	}
	go func() {
		_ = cmd.Wait()
		e.cfg.Notify()
	}()
	return cmd.Process.Pid, cg, nil
}

// rebuild is cmd, not started, again without a cgroup.
func rebuild(cmd *exec.Cmd) *exec.Cmd {
	c := exec.Command(cmd.Path, cmd.Args[1:]...)
	c.Stdout, c.Stderr, c.Env = cmd.Stdout, cmd.Stderr, cmd.Env
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return c
}

// cgroup makes attempt a's cgroup and returns it; "" (logged once) where
// none can be made.
func (e *LocalExecutor) cgroup(a *Attempt) string {
	if e.cfg.NoCgroup {
		return ""
	}
	cg, err := makeCgroup(e.cfg.CgroupRoot, a.SubmissionID)
	if err != nil {
		e.cgOnce.Do(func() {
			e.cfg.Logger.Info("local jobs run without a cgroup of their own; their processes are found by their environment ("+markerVar+")", "why", err)
		})
		return ""
	}
	return cg
}

// pid returns the attempt's process id and start time: from its handle,
// else (a start lost in a crash) from the pid file the wrapper wrote, with
// no start time; 0 if neither.
func (e *LocalExecutor) pid(a *Attempt) (int, uint64) {
	var h localHandle
	if a.Handle != "" && json.Unmarshal([]byte(a.Handle), &h) == nil && h.PID > 0 {
		return h.PID, h.Start
	}
	b, err := os.ReadFile(e.path(a, ".pid"))
	if err != nil {
		return 0, 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid, 0
}

// cgroupOf returns the attempt's cgroup from its handle; "": none.
func cgroupOf(a *Attempt) string {
	var h localHandle
	if a.Handle != "" && json.Unmarshal([]byte(a.Handle), &h) == nil {
		return h.Cgroup
	}
	return ""
}

// exitStatus reads the wrapper's exit file.
func (e *LocalExecutor) exitStatus(a *Attempt) (int, bool) {
	b, err := os.ReadFile(e.path(a, ".exit"))
	if err != nil {
		return 0, false
	}
	code, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return code, err == nil
}

// procStat reads process pid's /proc stat (procfs); false when there is
// no such process.
func procStat(pid int) (procfs.ProcStat, bool) {
	if pid <= 0 {
		return procfs.ProcStat{}, false
	}
	p, err := procfs.NewProc(pid)
	if err != nil {
		return procfs.ProcStat{}, false
	}
	st, err := p.Stat()
	return st, err == nil
}

// alive reports whether process pid exists, is not a zombie and, when
// start is known (not 0), is the process that started then — not another
// that got the pid after the job's ended.
func alive(pid int, start uint64) bool {
	st, ok := procStat(pid)
	return ok && st.State != "Z" && (start == 0 || st.Starttime == start)
}

// reused reports whether pid now belongs to a process that started at
// another time than start (0: unknown, never reused). Then the job's
// process group is gone too: the kernel does not give out a pid that a
// live process group still carries as its id.
func reused(pid int, start uint64) bool {
	st, ok := procStat(pid)
	return ok && start != 0 && st.Starttime != start
}

// groupAlive reports whether any process of process group pgid lives (a
// zombie does not count: a reparented one may never be reaped).
func groupAlive(pgid int) bool {
	procs, err := procfs.AllProcs()
	if err != nil {
		return syscall.Kill(-pgid, 0) == nil
	}
	for _, p := range procs {
		if st, err := p.Stat(); err == nil && st.PGRP == pgid && st.State != "Z" {
			return true
		}
	}
	return false
}

// Poll reads the exit file, else whether the process lives.
func (e *LocalExecutor) Poll(ctx context.Context, t *Task, a *Attempt) (Status, error) {
	pid, start := e.pid(a)
	if pid == 0 {
		if _, ok := e.exitStatus(a); !ok {
			return Status{Found: false}, nil
		}
	}
	check := func() (Status, bool) {
		code, ok := e.exitStatus(a)
		if !ok {
			return Status{}, false
		}
		if code == 0 {
			return Status{Found: true, Status: StatusSucceeded, Message: "exit status 0"}, true
		}
		return Status{Found: true, Status: StatusFailed, Message: fmt.Sprintf("exit status %d", code), LogTail: e.tail(a, 16<<10)}, true
	}
	cg := cgroupOf(a)
	if st, ok := check(); ok {
		if left := jobProcs(cg, a.SubmissionID); len(left) > 0 {
			// The command ended, but processes it started (some outside
			// its process group: setsid) still run, and may use the GPUs.
			return Status{Found: true, Status: StatusRunning, Message: fmt.Sprintf("%s; %d process(es) of the job still run (pids %v): its GPUs stay leased until they end",
				st.Message, len(left), left)}, nil
		}
		return st, nil
	}
	if alive(pid, start) || !reused(pid, start) && groupAlive(pid) || len(jobProcs(cg, a.SubmissionID)) > 0 {
		// The wrapper, or (after a SIGTERM that ended the wrapper) the
		// rest of the job's process group, or a process of the job that
		// left its group, still runs.
		return Status{Found: true, Status: StatusRunning}, nil
	}
	if st, ok := check(); ok { // it exited between the two looks
		return st, nil
	}
	return Status{Found: true, Status: StatusStopped, Message: "process lost: it ended without an exit status (killed by a signal)"}, nil
}

// Stop sends SIGTERM to the job's process group and to every process of
// the job outside it (jobprocs.go), and SIGKILL (the cgroup's
// cgroup.kill) after StopGrace to what is still there.
func (e *LocalExecutor) Stop(ctx context.Context, t *Task, a *Attempt) error {
	pid, _ := e.pid(a)
	cg := cgroupOf(a)
	if pid <= 0 && cg == "" {
		return nil
	}
	if pid > 0 {
		if err := syscall.Kill(-pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("stopping job %s: %w", t.ID, err)
		}
	}
	signalJob(0, cg, a.SubmissionID, syscall.SIGTERM)
	gone := func() bool { return (pid <= 0 || !groupAlive(pid)) && len(jobProcs(cg, a.SubmissionID)) == 0 }
	go func() {
		deadline := time.Now().Add(e.cfg.StopGrace)
		for time.Now().Before(deadline) {
			if gone() {
				e.cfg.Notify()
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		signalJob(pid, cg, a.SubmissionID, syscall.SIGKILL)
		e.cfg.Notify()
	}()
	return nil
}

// Logs reads the attempt's log file: limit bytes from from (negative: its
// last limit bytes). Errors: ErrNoLogs when there is no log file.
func (e *LocalExecutor) Logs(ctx context.Context, t *Task, a *Attempt, from, limit int64) (LogChunk, error) {
	f, err := os.Open(e.path(a, ".log"))
	if errors.Is(err, os.ErrNotExist) {
		return LogChunk{}, fmt.Errorf("no log for %s: %w", a.SubmissionID, ErrNoLogs)
	}
	if err != nil {
		return LogChunk{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return LogChunk{}, err
	}
	size := fi.Size()
	start := from
	if from < 0 {
		start = max(size-limit, 0)
	}
	start = min(start, size)
	b, err := io.ReadAll(io.NewSectionReader(f, start, limit))
	if err != nil {
		return LogChunk{}, err
	}
	return LogChunk{Text: string(b), Start: start, Size: max(size, start+int64(len(b)))}, nil
}

func (e *LocalExecutor) tail(a *Attempt, n int64) string {
	f, err := os.Open(e.path(a, ".log"))
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > n {
		_, _ = f.Seek(-n, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// watch has wake called whenever a lease in the ledger ends (a model's
// server exited, a job's attempt finished): the devices a waiting job
// needs may be free (gpu.Ledger.OnRelease).
func (e *LocalExecutor) watch(wake func()) {
	if e.cfg.Ledger != nil {
		e.cfg.Ledger.OnRelease(wake)
	}
}

// Resume leases the devices a running attempt was started on again. A
// device that no longer exists (Loadout restarted with fewer GPUs) is
// left out, with a warning: the job keeps the lease on the ones that
// still exist, so none of them is given to a model or another job.
func (e *LocalExecutor) Resume(t *Task, a *Attempt) error {
	if e.cfg.Ledger == nil || len(a.Devices) == 0 {
		return nil
	}
	if _, ok := e.cfg.Ledger.Lease(t.ID); ok {
		return nil
	}
	devs, err := e.cfg.Ledger.Inventory().Devices()
	if err != nil {
		return err
	}
	var keep, gone []int
	for _, d := range a.Devices {
		if slices.ContainsFunc(devs, func(dev gpu.Device) bool { return dev.Index == d }) {
			keep = append(keep, d)
		} else {
			gone = append(gone, d)
		}
	}
	if len(gone) > 0 {
		e.cfg.Logger.Warn("job resumed without GPUs that no longer exist", "task", t.ID, "submission_id", a.SubmissionID,
			"gpus", keep, "missing", gone)
	}
	if len(keep) == 0 {
		return nil
	}
	_, err = e.cfg.Ledger.AcquireDevices(t.ID, keep)
	return err
}

// Finish releases the attempt's GPU lease and removes its cgroup (the
// runner calls it once Poll said the attempt ended: no process of it is
// left).
func (e *LocalExecutor) Finish(t *Task, a *Attempt) {
	if e.cfg.Ledger != nil {
		e.cfg.Ledger.Release(t.ID)
	}
	if cg := cgroupOf(a); cg != "" {
		_ = os.Remove(cg)
	}
}
