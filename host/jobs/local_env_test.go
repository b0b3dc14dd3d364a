package jobs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A spec's env that sets PATH (a virtual environment's bin, without the
// system's) is the job's: the wrapper's own steps do not depend on it, so
// a job that exits 0 SUCCEEDS.
func TestLocal_SpecPATHDoesNotBreakTheWrapper(t *testing.T) {
	g := newRig(t, 1, nil)
	venv := filepath.Join(g.dir, "venv", "bin")
	if err := os.MkdirAll(venv, 0o755); err != nil {
		t.Fatal(err)
	}
	task := g.submit(t, fmt.Sprintf("command: echo 42 $PATH\ngpus_per_node: 0\nenv: {PATH: %s}\n", venv))
	done := wait(t, g.runner, task.ID, StateSucceeded, StateFailed)
	logs, _ := g.runner.Logs(context.Background(), task.ID)
	if done.State != StateSucceeded || !strings.Contains(logs, "42 "+venv) {
		t.Fatalf("task %s (%s), output %q: want SUCCEEDED, the job seeing its PATH", done.State, done.Error, logs)
	}
}

// Loadout's secrets (LoadoutSecrets) are not in a local job's
// environment; a spec's env may still set one.
func TestLocal_JobDoesNotInheritLoadoutSecrets(t *testing.T) {
	for _, k := range LoadoutSecrets {
		t.Setenv(k, "secret-of-"+k)
	}
	t.Setenv("LOADOUT_TEST_INHERITED", "kept")
	g := newRig(t, 1, nil)
	task := g.submit(t, "command: env\ngpus_per_node: 0\nenv: {LOADOUT_API_KEY: given-by-the-spec}\n")
	done := wait(t, g.runner, task.ID, StateSucceeded, StateFailed)
	logs, _ := g.runner.Logs(context.Background(), task.ID)
	if done.State != StateSucceeded || !strings.Contains(logs, "LOADOUT_TEST_INHERITED=kept") {
		t.Fatalf("task %s (%s): want SUCCEEDED with the inherited environment:\n%s", done.State, done.Error, logs)
	}
	if strings.Contains(logs, "secret-of-") {
		t.Fatalf("the job sees a secret of Loadout's:\n%s", logs)
	}
	if !strings.Contains(logs, "LOADOUT_API_KEY=given-by-the-spec") {
		t.Fatalf("the spec's own LOADOUT_API_KEY is missing:\n%s", logs)
	}
}

// A command over Linux's 128 KiB bound on one argument or variable runs:
// it is passed in a file.
func TestLocal_CommandOver128KiBRuns(t *testing.T) {
	g := newRig(t, 1, nil)
	cmd := ": " + strings.Repeat("x", 200<<10) + "; echo long command ran"
	task := g.submit(t, fmt.Sprintf("command: %q\ngpus_per_node: 0\n", cmd))
	done := wait(t, g.runner, task.ID, StateSucceeded, StateFailed)
	logs, _ := g.runner.Logs(context.Background(), task.ID)
	if done.State != StateSucceeded || !strings.Contains(logs, "long command ran") {
		t.Fatalf("task %s (%s), output %q", done.State, done.Error, logs)
	}
}
