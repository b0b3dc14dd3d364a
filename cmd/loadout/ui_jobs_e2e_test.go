package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/chromedp/chromedp"
)

// jobStateIs waits until the Jobs list shows job id in state.
func jobStateIs(id, state string) chromedp.Action {
	return chromedp.WaitVisible(fmt.Sprintf(`#jobs-list tr[data-job=%q] [data-state=%q]`, id, state), chromedp.ByQuery)
}

// The Jobs view against a real loadout serve with a job database and a job
// token, in real headless Chromium: it asks for the job token; with it, a
// job submitted through the API appears and reaches SUCCEEDED live (from
// job events, no polling), its detail shows the attempt and its output,
// loadout_jobs counts it, a finished job has no Cancel button, and a long
// job's output is followed while it runs and it is canceled with the
// button; a job that waits for GPUs says why in its row.
func TestUI_JobsListDetailLogsCancel(t *testing.T) {
	ctx := browser(t)
	s, dir := jobsServer(t)
	fifo := filepath.Join(dir, "go")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}

	if err := chromedp.Run(ctx,
		chromedp.Navigate(s.base+"/ui/"),
		chromedp.WaitVisible(`#conn[data-conn="live"]`, chromedp.ByQuery),
		tab("jobs"),
		chromedp.WaitVisible(`//p[@id="jobs-error" and contains(., "job token")]`, chromedp.BySearch),
		chromedp.SendKeys(`#job-token`, e2eJobToken, chromedp.ByQuery),
		chromedp.Click(`#job-token-save`, chromedp.ByQuery),
		chromedp.WaitVisible(`//section[@id="jobs"]/p[contains(., "No jobs.")]`, chromedp.BySearch),
	); err != nil {
		t.Fatalf("token: %v\n%s", err, s.log())
	}

	// A short job on one simulated device: listed, then SUCCEEDED, live.
	ok := s.submitJob("workload: hello\ncommand: echo hello-from-job\ngpus_per_node: 1\n")
	if err := chromedp.Run(ctx,
		jobStateIs(ok.ID, "SUCCEEDED"),
		chromedp.Click(fmt.Sprintf(`button[data-action="open"][data-job=%q]`, ok.ID), chromedp.ByQuery),
		chromedp.WaitVisible(fmt.Sprintf(`//div[@id="job-detail" and @data-job=%q]//tr[@data-attempt="1" and contains(., "%s--a01")]`, ok.ID, ok.ID), chromedp.BySearch),
		chromedp.WaitVisible(`//pre[@id="job-logs" and contains(., "hello-from-job")]`, chromedp.BySearch),
	); err != nil {
		t.Fatalf("short job: %v\n%s", err, s.log())
	}
	// A finished job cannot be canceled: no Cancel button, in its detail
	// or its row.
	var cancels int
	if err := chromedp.Run(ctx, chromedp.Evaluate(`document.querySelectorAll('#job-cancel, #jobs-list button[data-action="cancel"]').length`, &cancels)); err != nil || cancels != 0 {
		t.Fatalf("Cancel buttons on a finished job: %d (%v), want none", cancels, err)
	}
	if _, m := s.get("/metrics"); !strings.Contains(m, `loadout_jobs{state="SUCCEEDED"} 1`) || !strings.Contains(m, `loadout_jobs{state="RUNNING"} 0`) {
		t.Fatalf("metrics: want loadout_jobs by state with one SUCCEEDED:\n%s", grepLines(m, "loadout_jobs"))
	}

	// A long job, canceled with the button in its detail. Its output is
	// followed while it runs: a line printed after the detail opened
	// appears with no job event and no click.
	long := s.submitJob("workload: long\ncommand: echo started; read line < " + fifo + "; echo later-line; sleep 30\ngpus_per_node: 1\n")
	if err := chromedp.Run(ctx,
		jobStateIs(long.ID, "RUNNING"),
		chromedp.WaitVisible(fmt.Sprintf(`#jobs-list tr[data-job=%q] button[data-action="cancel"]`, long.ID), chromedp.ByQuery),
		chromedp.Click(fmt.Sprintf(`button[data-action="open"][data-job=%q]`, long.ID), chromedp.ByQuery),
		chromedp.WaitVisible(fmt.Sprintf(`#job-detail[data-job=%q] [data-state="RUNNING"]`, long.ID), chromedp.ByQuery),
		chromedp.WaitVisible(`//pre[@id="job-logs" and contains(., "started")]`, chromedp.BySearch),
	); err != nil {
		t.Fatalf("long job: %v\n%s", err, s.log())
	}
	release(t, fifo)
	if err := chromedp.Run(ctx,
		chromedp.WaitVisible(`//pre[@id="job-logs" and @data-following="yes" and contains(., "later-line")]`, chromedp.BySearch),
	); err != nil {
		t.Fatalf("long job: %v\n%s", err, s.log())
	}
	// A job that cannot fit while the long one holds a GPU waits and says
	// why in its row, as text; its row's Cancel button cancels it.
	waiter := s.submitJob("workload: waiter\ncommand: echo never\ngpus_per_node: 2\n")
	if err := chromedp.Run(ctx,
		jobStateIs(waiter.ID, "PENDING_RESOURCES"),
		chromedp.WaitVisible(fmt.Sprintf(`//tr[@data-job=%q]/td[@data-reason and contains(., "free GPUs per node")]`, waiter.ID), chromedp.BySearch),
	); err != nil {
		t.Fatalf("waiting job: %v\n%s", err, s.log())
	}
	shot(t, ctx, "ui-jobs.jpg")
	if err := chromedp.Run(ctx,
		chromedp.Click(fmt.Sprintf(`#jobs-list tr[data-job=%q] button[data-action="cancel"]`, waiter.ID), chromedp.ByQuery),
		jobStateIs(waiter.ID, "CANCELED"),
	); err != nil {
		t.Fatalf("cancel the waiting job: %v\n%s", err, s.log())
	}
	if err := chromedp.Run(ctx,
		chromedp.Click(`#job-cancel`, chromedp.ByQuery),
		chromedp.WaitVisible(fmt.Sprintf(`#job-detail[data-job=%q] [data-state="CANCELED"]`, long.ID), chromedp.ByQuery),
		jobStateIs(long.ID, "CANCELED"),
	); err != nil {
		t.Fatalf("cancel: %v\n%s", err, s.log())
	}
	if j := s.job(long.ID); j.State != "CANCELED" {
		t.Fatalf("the API says %s after the button, want CANCELED", j.State)
	}

	// A narrow screen still shows the list.
	if err := chromedp.Run(ctx, chromedp.EmulateViewport(390, 844), jobStateIs(ok.ID, "SUCCEEDED")); err != nil {
		t.Fatalf("narrow: %v", err)
	}
}

// release writes a line into the named pipe a job waits on (read), so
// the job goes on at a moment the test chooses.
func release(t *testing.T, fifo string) {
	t.Helper()
	f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("go\n"); err != nil {
		t.Fatal(err)
	}
}

// grepLines is the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
