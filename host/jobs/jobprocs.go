package jobs

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

// A local job's processes, and how they are all found, even the ones that
// left its process group (`setsid cmd &`), so that its GPU lease is held
// until none is left:
//
//  1. In a cgroup of its own. Where /sys/fs/cgroup is cgroup v2
//     (cgroup.controllers exists) and the cgroup Loadout runs in takes a
//     child (mkdir succeeds: root, or a delegated systemd unit), each
//     attempt runs in <Loadout's cgroup>/loadout-<submission id>, entered
//     at fork (clone3 CLONE_INTO_CGROUP), so nothing of the job runs
//     outside it. Its processes are cgroup.procs; a stop kills them all
//     through cgroup.kill (SIGKILL to each listed one on kernels before
//     5.14). No process can leave a cgroup without the privilege to write
//     another cgroup's cgroup.procs.
//  2. Otherwise, by an environment marker: every process whose
//     /proc/<pid>/environ holds LOADOUT_SUBMISSION_ID=<its submission id>
//     (set for the job's command and inherited by everything it starts,
//     setsid or double fork included). Limit: a process that the job
//     starts with a cleared or rewritten environment (env -i, execve with
//     its own environment) is not found, nor one Loadout may not read
//     (another user's, when Loadout is not root).

// markerVar is the environment variable that marks a job's processes.
const markerVar = "LOADOUT_SUBMISSION_ID"

// defaultCgroupRoot is where cgroup v2 is mounted on a usual Linux box.
const defaultCgroupRoot = "/sys/fs/cgroup"

// makeCgroup makes the attempt's cgroup under the one this process runs
// in, below root (cgroup v2), and returns its directory; "" and why when
// none can be made (not cgroup v2, not writable).
func makeCgroup(root, submissionID string) (string, error) {
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err != nil {
		return "", fmt.Errorf("%s is not cgroup v2: %w", root, err)
	}
	self, err := selfCgroup()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, self, "loadout-"+submissionID)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("making the job's cgroup: %w", err)
	}
	return dir, nil
}

// selfCgroup is this process's cgroup v2 path ("0::<path>" in
// /proc/self/cgroup).
func selfCgroup() (string, error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), "0::"); ok {
			return p, nil
		}
	}
	return "", errors.New("no cgroup v2 entry in /proc/self/cgroup")
}

// cgroupProcs lists the live (not zombie) processes of cgroup dir; ok is
// false when dir cannot be read (gone).
func cgroupProcs(dir string) (pids []int, ok bool) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, false
	}
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && alive(pid, 0) {
			pids = append(pids, pid)
		}
	}
	return pids, true
}

// markedProcs lists the live (not zombie) processes whose environment
// carries markerVar=submissionID.
//
// A process in the middle of an execve has an empty environ for a moment
// (its new memory has no environment yet): one whose environ reads empty
// and is neither a kernel thread nor a zombie is read again, up to
// execRetries times execRetryWait apart, so that a job's process caught
// while it execs (`sh -c '...; exec sleep 1000'`) is not taken for gone
// and its lease released.
func markedProcs(submissionID string) []int {
	procs, err := procfs.AllProcs()
	if err != nil {
		return nil
	}
	want := markerVar + "=" + submissionID
	var pids []int
	var unread []procfs.Proc
	for _, p := range procs {
		env, err := p.Environ()
		if err != nil {
			continue
		}
		if len(env) == 0 {
			if st, err := p.Stat(); err == nil && st.State != "Z" && st.Flags&pfKthread == 0 {
				unread = append(unread, p)
			}
			continue
		}
		if !slices.Contains(env, want) {
			continue
		}
		if st, err := p.Stat(); err == nil && st.State != "Z" {
			pids = append(pids, p.PID)
		}
	}
	for try := 0; try < execRetries && len(unread) > 0; try++ {
		time.Sleep(execRetryWait)
		still := unread[:0]
		for _, p := range unread {
			env, err := p.Environ()
			switch {
			case err != nil:
			case len(env) == 0:
				still = append(still, p)
			case slices.Contains(env, want):
				if st, err := p.Stat(); err == nil && st.State != "Z" {
					pids = append(pids, p.PID)
				}
			}
		}
		unread = still
	}
	slices.Sort(pids)
	return pids
}

// pfKthread is PF_KTHREAD in a process's flags (/proc/<pid>/stat field
// 9, linux/sched.h): a kernel thread, whose environ is always empty.
const pfKthread = 0x00200000

// execRetries and execRetryWait bound the second looks markedProcs takes
// at a process whose environ read empty (one mid-execve): 4 × 10 ms. A
// process started with an empty environment (env -i) costs a scan 40 ms.
const (
	execRetries   = 4
	execRetryWait = 10 * time.Millisecond
)

// jobProcs lists the live processes of the attempt with cgroup cg ("":
// none) and submissionID: its cgroup's when it has one that still exists,
// else the marked ones.
func jobProcs(cg, submissionID string) []int {
	if cg != "" {
		if pids, ok := cgroupProcs(cg); ok {
			return pids
		}
	}
	return markedProcs(submissionID)
}

// signalJob sends sig to process group pgid (when > 0) and to every
// process of the attempt (jobProcs); SIGKILL on a cgroup goes through
// cgroup.kill first.
func signalJob(pgid int, cg, submissionID string, sig syscall.Signal) {
	if pgid > 0 {
		_ = syscall.Kill(-pgid, sig)
	}
	if sig == syscall.SIGKILL && cg != "" {
		_ = os.WriteFile(filepath.Join(cg, "cgroup.kill"), []byte("1"), 0)
	}
	for _, pid := range jobProcs(cg, submissionID) {
		_ = syscall.Kill(pid, sig)
	}
}
