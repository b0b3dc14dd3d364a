package jobs

import (
	"cmp"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// escapeRig is a rig whose local executor finds a job's processes by
// their environment marker (cgroup: false) or in a cgroup of their own
// below root (cgroup: true).
func escapeRig(t *testing.T, cgroupRoot string) *rig {
	dir := t.TempDir()
	l := newLedger(2)
	r := newRunner(t, dir, l, nil, func(c *Config) {
		local := c.Executors[ExecutorLocal].(*LocalExecutor)
		local.cfg.NoCgroup = cgroupRoot == ""
		local.cfg.CgroupRoot = cgroupRoot
	})
	return &rig{dir: dir, ledger: l, runner: r, stop: start(t, r)}
}

// escapedPid waits for the pid file of the process the job started with
// setsid, and has the test's cleanup kill it.
func escapedPid(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if b, err := os.ReadFile(path); err == nil && strings.HasSuffix(string(b), "\n") {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job never wrote %s", path)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// escapeSpec is a job that starts `sleep 1000` in a session of its own
// (setsid: out of the job's process group), writes its pid to pidFile,
// and exits 0 at once.
func escapeSpec(pidFile string) string {
	return "gpus_per_node: 1\ncommand: " + strconv.Quote(`setsid sh -c 'echo $$ > `+pidFile+`.tmp && mv `+pidFile+`.tmp `+pidFile+`; exec sleep 1000' > /dev/null 2>&1 &`) + "\n"
}

func testEscapedProcessHoldsTheLease(t *testing.T, g *rig, inCgroup bool) {
	pidFile := filepath.Join(g.dir, "escaped.pid")
	task := g.submit(t, escapeSpec(pidFile))
	pid := escapedPid(t, pidFile)
	w := waitUntil(t, g.runner, task.ID, "said a process of it still runs", func(w *Task) bool {
		return w.State.Terminal() || w.LatestAttempt != nil && strings.Contains(w.LatestAttempt.Message, "still run")
	})
	if w.State != StateRunning || !strings.Contains(w.LatestAttempt.Message, "exit status 0") || !strings.Contains(w.LatestAttempt.Message, strconv.Itoa(pid)) {
		t.Fatalf("while the escaped process %d lives: task %s, attempt %q; want RUNNING, naming it", pid, w.State, w.LatestAttempt.Message)
	}
	if _, held := g.ledger.Lease(task.ID); !held {
		t.Fatal("the lease was released while a process of the job runs on its GPU")
	}
	if cg := cgroupOf(w.LatestAttempt); inCgroup {
		if pids, _ := cgroupProcs(cg); cg == "" || !slices.Contains(pids, pid) {
			t.Fatalf("the escaped process %d is not in the job's cgroup %q (%v)", pid, cg, pids)
		}
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if done := wait(t, g.runner, task.ID, StateSucceeded, StateFailed); done.State != StateSucceeded {
		t.Fatalf("once the escaped process is gone: %s (%s)", done.State, done.Error)
	}
	if _, held := g.ledger.Lease(task.ID); held {
		t.Fatal("the lease outlived the job's last process")
	}
}

// A job whose command leaves a process out of its process group (`setsid
// cmd &`) and exits keeps its GPU lease while that process lives, found by
// the environment marker; the lease ends once it is killed.
func TestLocal_EscapedProcessHoldsTheLease_EnvironMarker(t *testing.T) {
	testEscapedProcessHoldsTheLease(t, escapeRig(t, ""), false)
}

// The same with a cgroup of its own, where cgroup v2 can be written here
// (LOADOUT_TEST_CGROUP_ROOT, default /sys/fs/cgroup).
func TestLocal_EscapedProcessHoldsTheLease_Cgroup(t *testing.T) {
	root := cmp.Or(os.Getenv("LOADOUT_TEST_CGROUP_ROOT"), defaultCgroupRoot)
	cg, err := makeCgroup(root, "probe-"+strconv.Itoa(os.Getpid()))
	if err != nil {
		t.Skipf("no writable cgroup v2 here: %v", err)
	}
	_ = os.Remove(cg)
	testEscapedProcessHoldsTheLease(t, escapeRig(t, root), true)
}

// A cancel stops every process of the job, the escaped ones included,
// and the lease ends once they are gone.
func TestLocal_CancelKillsEscapedProcesses_EnvironMarker(t *testing.T) {
	g := escapeRig(t, "")
	pidFile := filepath.Join(g.dir, "escaped.pid")
	task := g.submit(t, "gpus_per_node: 1\ncommand: "+strconv.Quote(`setsid sh -c 'trap "" TERM; echo $$ > `+pidFile+`.tmp && mv `+pidFile+`.tmp `+pidFile+`; while :; do sleep 1; done' > /dev/null 2>&1 & sleep 1000`)+"\n")
	pid := escapedPid(t, pidFile)
	wait(t, g.runner, task.ID, StateRunning)
	if err := g.runner.Cancel(context.Background(), task.ID); err != nil {
		t.Fatal(err)
	}
	if done := wait(t, g.runner, task.ID, StateCanceled, StateFailed, StateSucceeded); done.State != StateCanceled {
		t.Fatalf("after cancel: %s (%s)", done.State, done.Error)
	}
	if alive(pid, 0) {
		t.Fatalf("the escaped process %d (ignoring SIGTERM) outlived the cancel", pid)
	}
	if _, held := g.ledger.Lease(task.ID); held {
		t.Fatal("the lease outlived the cancel")
	}
}
