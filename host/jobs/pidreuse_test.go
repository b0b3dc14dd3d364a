package jobs

import (
	"os"
	"os/exec"
	"testing"
)

// After a restart the attempt's pid may belong to another process (the
// kernel reuses pids): a pid whose start time is not the recorded one is
// not the job, and its process group is not the job's.
func TestLocal_PidReusedIsNotTheJob(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	st, ok := procStat(pid)
	if !ok {
		t.Fatalf("no /proc stat for %d", pid)
	}
	if !alive(pid, st.Starttime) || !alive(pid, 0) {
		t.Fatal("the process that started at the recorded time is not seen alive")
	}
	if alive(pid, st.Starttime+1) || !reused(pid, st.Starttime+1) {
		t.Fatal("a process that started at another time is taken for the job")
	}
	if reused(pid, 0) || reused(pid, st.Starttime) {
		t.Fatal("an unknown start time or the recorded one counts as reuse")
	}
	if alive(os.Getpid()+1<<22, 0) { // beyond pid_max: no such process
		t.Fatal("a process that does not exist is alive")
	}
}
