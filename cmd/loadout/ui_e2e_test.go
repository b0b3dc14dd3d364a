package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/loadout-dev/loadout/internal/proctest"
)

// chromium finds Debian's headless Chromium. Without it the browser test
// is skipped, unless LOADOUT_REQUIRE_CHROMIUM=1 (CI) makes that a failure.
func chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("LOADOUT_REQUIRE_CHROMIUM") == "1" {
		t.Fatal("chromium not found and LOADOUT_REQUIRE_CHROMIUM=1 (apt-get install chromium)")
	}
	t.Skip("chromium not found; set LOADOUT_REQUIRE_CHROMIUM=1 to fail instead")
	return ""
}

// browser starts headless Chromium and returns a context driving one tab.
func browser(t testing.TB) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.Flag("headless", "new"),
		chromedp.NoSandbox, // CI runs as root
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 1000),
	)
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	ctx, cancel3 := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(cancel3)
	return ctx
}

// shot saves a screenshot of the page under docs/img/ when
// LOADOUT_SCREENSHOTS=1 (how the README's images are made).
func shot(t testing.TB, ctx context.Context, name string) {
	t.Helper()
	if os.Getenv("LOADOUT_SCREENSHOTS") != "1" {
		return
	}
	var png []byte
	if err := chromedp.Run(ctx, chromedp.FullScreenshot(&png, 90)); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "..", "docs", "img", name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// tab opens one of the UI's tabs (models, activity, logs, jobs, policies).
func tab(name string) chromedp.Action {
	return chromedp.Click(fmt.Sprintf(`nav.tabs a[data-tab=%q]`, name), chromedp.ByQuery)
}

// stateIs waits until the UI shows model in state.
func stateIs(model, state string) chromedp.Action {
	return chromedp.WaitVisible(fmt.Sprintf(`#models tr[data-model=%q] [data-state=%q]`, model, state), chromedp.ByQuery)
}

// The web UI against a real loadout serve, in real headless Chromium:
// behind an API key it asks for the key; with it, a model loads from its
// button and the state changes live, a request appears in the activity
// table, a swap and an eviction appear in the timeline, and an unload
// from its button stops the model.
func TestUI_LoadServeSwapUnloadInBrowser(t *testing.T) {
	ctx := browser(t)
	dir := t.TempDir()
	s := startServer(t, writeConfig(t, dir, "apiKeys: [sekrit]\n"+simModels))
	key := "sekrit"

	// / redirects to the UI, which is served without a key; its API calls
	// need one, and the page says so until the key is entered.
	if err := chromedp.Run(ctx,
		chromedp.Navigate(s.base+"/"),
		chromedp.WaitVisible(`#conn[data-conn^="unauthorized"]`, chromedp.ByQuery),
		chromedp.SendKeys(`#api-key`, key, chromedp.ByQuery),
		chromedp.Click(`#api-key-save`, chromedp.ByQuery),
		chromedp.WaitVisible(`#conn[data-conn="live"]`, chromedp.ByQuery),
		stateIs("a", "stopped"),
		// Served with no job token: the Jobs view says the jobs API is off.
		tab("jobs"),
		chromedp.WaitVisible(`//p[@id="jobs-error" and contains(., "the jobs API is off")]`, chromedp.BySearch),
		tab("models"),
	); err != nil {
		t.Fatalf("key: %v\n%s", err, s.log())
	}
	var loc string
	_ = chromedp.Run(ctx, chromedp.Location(&loc))
	if page, _, _ := strings.Cut(loc, "#"); !strings.HasSuffix(page, "/ui/") { // the tab is the fragment
		t.Errorf("/ went to %s, want /ui/", loc)
	}

	// Load a with its button: starting, then ready, live.
	if err := chromedp.Run(ctx,
		chromedp.Click(`button[data-action="load"][data-model="a"]`, chromedp.ByQuery),
		stateIs("a", "ready"),
	); err != nil {
		t.Fatalf("load: %v", err)
	}

	// A request (with the key, as a client would) shows in the activity table.
	req := fmt.Sprintf(`curl -s -H 'Authorization: Bearer %s' -d '%s' %s/v1/chat/completions`, key, chat("b", false), s.base)
	if out, err := exec.Command("sh", "-c", req).CombinedOutput(); err != nil || !strings.Contains(string(out), "choices") {
		t.Fatalf("request: %v %s", err, out)
	}
	if err := chromedp.Run(ctx,
		tab("activity"),
		chromedp.WaitVisible(`#activity tr[data-request] td:nth-child(2)`, chromedp.ByQuery),
		chromedp.WaitVisible(`//section[@id="activity"]//td[text()="b"]`, chromedp.BySearch),
		tab("models"),
		// b's request swapped a out: the timeline says so, with the reason.
		chromedp.WaitVisible(`//ul[contains(@class,"timeline")]/li[@data-kind="eviction" and contains(., "a stopped: swap (for b)")]`, chromedp.BySearch),
		chromedp.WaitVisible(`//ul[contains(@class,"timeline")]/li[@data-kind="swap" and contains(., "swap → b, evicting a")]`, chromedp.BySearch),
		stateIs("b", "ready"),
		stateIs("a", "stopped"),
	); err != nil {
		t.Fatalf("activity and timeline: %v", err)
	}

	// The activity filter hides rows of other models.
	var rows int
	if err := chromedp.Run(ctx,
		tab("activity"),
		chromedp.SendKeys(`#activity-filter`, "nomatch", chromedp.ByQuery),
		chromedp.WaitNotPresent(`#activity tr[data-request]`, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll('#activity tr[data-request]').length`, &rows),
	); err != nil || rows != 0 {
		t.Fatalf("filter: %v (%d rows)", err, rows)
	}

	// Unload b with its button.
	if err := chromedp.Run(ctx,
		tab("models"),
		chromedp.Click(`button[data-action="unload"][data-model="b"]`, chromedp.ByQuery),
		stateIs("b", "stopped"),
		chromedp.WaitVisible(`//ul[contains(@class,"timeline")]/li[@data-kind="eviction" and contains(., "b stopped: unload")]`, chromedp.BySearch),
	); err != nil {
		t.Fatalf("unload: %v", err)
	}

	// The model logs view streams a's server output.
	if err := chromedp.Run(ctx,
		tab("logs"),
		chromedp.SetValue(`#logs-model`, "a", chromedp.ByQuery),
		chromedp.Evaluate(`document.getElementById('logs-model').dispatchEvent(new Event('change'))`, nil),
		chromedp.WaitVisible(`//pre[contains(@class,"logs") and contains(., "sim server listening")]`, chromedp.BySearch),
		// Loadout's own log (llama-swap's /logs/stream/proxy).
		chromedp.SetValue(`#logs-model`, "proxy", chromedp.ByQuery),
		chromedp.Evaluate(`document.getElementById('logs-model').dispatchEvent(new Event('change'))`, nil),
		chromedp.WaitVisible(`//pre[contains(@class,"logs") and contains(., "loadout serving")]`, chromedp.BySearch),
	); err != nil {
		t.Fatalf("logs: %v", err)
	}

	// A narrow screen still shows the models.
	if err := chromedp.Run(ctx, tab("models"), chromedp.EmulateViewport(390, 844), stateIs("a", "stopped")); err != nil {
		t.Fatalf("narrow: %v", err)
	}
	shot(t, ctx, "ui-narrow.jpg")
}

// A model that keeps failing to start shows its backoff: after two failed
// starts the models table marks it with when the next start is allowed,
// and the mark goes when that time passes.
func TestUI_ShowsStartBackoff(t *testing.T) {
	ctx := browser(t)
	s := startServer(t, "../../testdata/e2e/sim.yaml")
	for range 2 {
		if code, body := s.post("/v1/chat/completions", chat("broken", false)); code != 502 {
			t.Fatalf("a start of broken: %d %s", code, body)
		}
	}
	if err := chromedp.Run(ctx,
		chromedp.Navigate(s.base+"/ui/"),
		chromedp.WaitVisible(`#conn[data-conn="live"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#models tr[data-model="broken"] [data-state="failed"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`//tr[@data-model="broken"]//span[@data-backoff="2" and starts-with(., "retry ")]`, chromedp.BySearch),
		// The backoff (5 s from the second failure) ends with no event
		// about the model: the mark goes by itself.
		chromedp.WaitNotPresent(`#models tr[data-model="broken"] .backoff`, chromedp.ByQuery),
	); err != nil {
		shot(t, ctx, "ui-backoff-failure")
		t.Fatal(err)
	}
}

// A box with peers shows them under its models, live, in real Chromium:
// the peer up with its model's state as the peer reports it (stopped,
// then ready once a request through this box loaded it), then down and
// hung while its process is stopped (SIGSTOP), then up again once it
// answers — each change from a peer event, not a reload of the page or
// of /api/peers.
func TestUI_ShowsPeers(t *testing.T) {
	ctx := browser(t)
	b := startServer(t, peerConfig(t, []string{"mb"}))
	gw := startServer(t, peerConfig(t, []string{"la"}, "b="+b.base+":mb"))
	peerState := func(state string) chromedp.Action {
		return chromedp.WaitVisible(fmt.Sprintf(`#peers tr[data-peer="b"] [data-peer-state=%q]`, state), chromedp.ByQuery)
	}
	modelState := func(state string) chromedp.Action {
		return chromedp.WaitVisible(fmt.Sprintf(`#peers tr[data-peer="b"] [data-peer-model="mb"][data-state=%q]`, state), chromedp.ByQuery)
	}
	hung := `#peers tr[data-peer="b"] [data-hung]`
	// see runs the actions in ctx, failing the test (with a screenshot)
	// as what says.
	see := func(ctx context.Context, what string, actions ...chromedp.Action) {
		t.Helper()
		if err := chromedp.Run(ctx, actions...); err != nil {
			shot(t, ctx, "ui-peers-failure")
			t.Fatalf("%s: %v", what, err)
		}
	}
	see(ctx, "the peer up, its model stopped", chromedp.Navigate(gw.base+"/ui/"),
		chromedp.WaitVisible(`#conn[data-conn="live"]`, chromedp.ByQuery), peerState("up"), modelState("stopped"))
	gw.mustChat("b/mb")
	// Within less than the page's 10 s re-read of /api/peers: only the
	// peer event can have brought it.
	ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	see(ectx, "the peer's model ready (no peer event?)", modelState("ready"))

	proctest.Stop(t, b.cmd.Process.Pid)
	see(ctx, "the stopped peer down and hung", peerState("down"), chromedp.WaitVisible(hung, chromedp.ByQuery))
	if err := syscall.Kill(b.cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	see(ctx, "the peer up again, not hung", peerState("up"), chromedp.WaitNotPresent(hung, chromedp.ByQuery))
}

// A model with replicas is one row, marked with how many are ready, and
// no replica shows as a model of its own.
func TestUI_ShowsReplicas(t *testing.T) {
	ctx := browser(t)
	s := startServer(t, "../../testdata/e2e/replicas.yaml")
	s.mustChat("big")
	eventually(t, "both replicas of big to be ready", func() bool { return s.replicas("big").ReadyReplicas == 2 })
	var replicaRows int
	if err := chromedp.Run(ctx,
		chromedp.Navigate(s.base+"/ui/"),
		chromedp.WaitVisible(`#conn[data-conn="live"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`//tr[@data-model="big"]//span[@data-replicas="2" and .="2/2 replicas"]`, chromedp.BySearch),
		chromedp.Evaluate(`document.querySelectorAll('#models tr[data-model="big@2"]').length`, &replicaRows),
	); err != nil {
		shot(t, ctx, "ui-replicas-failure")
		t.Fatal(err)
	}
	if replicaRows != 0 {
		t.Fatal("the models table has a row for replica big@2")
	}
}

// text reads the text of the first node sel matches.
func text(sel string, out *string) chromedp.Action {
	return chromedp.Text(sel, out, chromedp.ByQuery, chromedp.NodeVisible)
}

// A model row is replaced by each event, not merged into: once a loaded
// model stops, its row no longer shows the GPUs and the bar no longer
// shows its lease (the router's stopped status omits them). The summary
// strip follows the requests made while the page is open (2 in 300 s).
func TestUI_ModelRowReplacedAfterStop(t *testing.T) {
	ctx := browser(t)
	s := startServer(t, "../../testdata/e2e/gpu.yaml")
	if err := chromedp.Run(ctx,
		chromedp.Navigate(s.base+"/ui/"),
		chromedp.WaitVisible(`#conn[data-conn="live"]`, chromedp.ByQuery),
		stateIs("m6", "stopped"),
	); err != nil {
		t.Fatal(err)
	}
	s.mustChat("m8") // a neighbour on the GPU: 8 + 6 GiB of 24 fit together
	s.mustChat("m6")
	var devices string
	if err := chromedp.Run(ctx,
		stateIs("m6", "ready"),
		chromedp.WaitVisible(`//tr[@data-model="m6"]/td[@data-devices and .="0"]`, chromedp.BySearch),
		chromedp.WaitVisible(`#gpus .bar span[data-holder="m6"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#gpus .bar span[data-holder="m8"]`, chromedp.ByQuery),
		// The summary strip counts the requests made since the page opened.
		chromedp.WaitVisible(`//div[@data-fig="rps"]/b[.="0.007"]`, chromedp.BySearch),
	); err != nil {
		t.Fatalf("loaded: %v", err)
	}
	shot(t, ctx, "ui.jpg")
	if code, body := s.post("/api/models/unload/m6", ""); code != 200 {
		t.Fatalf("unload: %d %s", code, body)
	}
	if err := chromedp.Run(ctx,
		stateIs("m6", "stopped"),
		chromedp.WaitNotPresent(`#gpus .bar span[data-holder="m6"]`, chromedp.ByQuery),
		text(`#models tr[data-model="m6"] td[data-devices]`, &devices),
	); err != nil {
		t.Fatalf("stopped: %v", err)
	}
	if devices != "–" {
		t.Fatalf("a stopped m6 shows GPUs %q, want –", devices)
	}
}

// The page is full at first paint on a box that has been swapping: the
// timeline and the activity come from the history, not only from events
// after the page opened, and the summary strip counts the requests.
func TestUI_TimelineFullAtFirstPaint(t *testing.T) {
	ctx := browser(t)
	s := startServer(t, writeConfig(t, t.TempDir(), simModels), "--db", filepath.Join(t.TempDir(), "state.db"))
	for _, m := range []string{"a", "b", "a"} {
		s.mustChat(m)
	}
	eventually(t, "three requests in /api/activity", func() bool { return len(s.activity(t, "")) == 3 })
	var empty bool
	var rps, loaded string
	var rows int
	if err := chromedp.Run(ctx,
		chromedp.Navigate(s.base+"/ui/"),
		chromedp.WaitVisible(`#conn[data-conn="live"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`//ul[contains(@class,"timeline")]/li[@data-kind="swap" and contains(., "swap → b, evicting a")]`, chromedp.BySearch),
		chromedp.WaitVisible(`//ul[contains(@class,"timeline")]/li[@data-kind="eviction" and contains(., "b stopped: swap (for a)")]`, chromedp.BySearch),
		// Times are ISO 8601, 24-hour.
		chromedp.WaitVisible(`//ul[contains(@class,"timeline")]/li/time[string-length(.)=8 and substring(.,3,1)=":"]`, chromedp.BySearch),
		chromedp.Evaluate(`document.body.innerText.includes('No swaps')`, &empty),
		chromedp.WaitVisible(`#summary [data-fig="rps"] b`, chromedp.ByQuery),
		text(`#summary [data-fig="rps"] b`, &rps),
		text(`#summary [data-fig="loaded"] b`, &loaded),
		tab("activity"),
		chromedp.WaitVisible(`#activity tr[data-request]`, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll('#activity tr[data-request]').length`, &rows),
	); err != nil {
		t.Fatalf("%v\n%s", err, s.log())
	}
	if empty {
		t.Error("the page says there were no swaps")
	}
	if rps != "0.01" || loaded != "1" { // 3 requests over 300 s; a is loaded
		t.Errorf("summary: %s requests/s and %s loaded, want 0.01 and 1", rps, loaded)
	}
	if rows != 3 {
		t.Errorf("%d activity rows at first paint, want 3", rows)
	}
	shot(t, ctx, "ui-activity.jpg")
}

// The buttons follow the state: Load for a stopped or failed model,
// Unload for a ready one, never both. A failed model's error and a
// model's aliases are text on its row.
func TestUI_ActionsFollowState(t *testing.T) {
	ctx := browser(t)
	s := startServer(t, "../../testdata/e2e/sim.yaml")
	if code, body := s.post("/v1/chat/completions", chat("broken", false)); code != 502 {
		t.Fatalf("broken: %d %s", code, body)
	}
	buttons := func(model string) []string {
		t.Helper()
		var out []string
		if err := chromedp.Run(ctx, chromedp.Evaluate(fmt.Sprintf(
			`[...document.querySelectorAll('#models tr[data-model=%q] button[data-action]')].map(b => b.dataset.action)`, model), &out)); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if err := chromedp.Run(ctx,
		chromedp.Navigate(s.base+"/ui/"),
		chromedp.WaitVisible(`#conn[data-conn="live"]`, chromedp.ByQuery),
		stateIs("a", "stopped"),
		stateIs("broken", "failed"),
		// Aliases are shown.
		chromedp.WaitVisible(`//tr[@data-model="a"]//div[@data-aliases="model-a" and .="aka model-a"]`, chromedp.BySearch),
		// The failed model's error is text on the page, not a tooltip.
		chromedp.WaitVisible(`//tr[@data-model="broken"]//div[@data-error and contains(., "model file corrupt")]`, chromedp.BySearch),
	); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(buttons("a"), buttons("broken")); got != "[load] [load]" {
		t.Fatalf("stopped and failed: %s, want [load] [load]", got)
	}
	if err := chromedp.Run(ctx,
		chromedp.Click(`button[data-action="load"][data-model="a"]`, chromedp.ByQuery),
		stateIs("a", "ready"),
		chromedp.WaitVisible(`button[data-action="unload"][data-model="a"]`, chromedp.ByQuery),
	); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(buttons("a")); got != "[unload]" {
		t.Fatalf("ready: %s, want [unload]", got)
	}
}

// Behind an API key the page asks for it once (and, behind the prompt,
// says it is loading rather than that there is nothing): a wrong key is refused
// (401 on the API, the event stream and the log stream) and asked for
// again; the right one is kept, so a reload asks nothing. The icon is
// served without a key.
func TestUI_KeyPrompt_AsksOnceThenRemembers(t *testing.T) {
	ctx := browser(t)
	s := startServer(t, writeConfig(t, t.TempDir(), "apiKeys: [sekrit]\n"+simModels))
	for _, path := range []string{"/api/events", "/logs/stream", "/api/models"} {
		req, _ := http.NewRequest(http.MethodGet, s.base+path, nil)
		req.Header.Set("Authorization", "Bearer wrong")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Fatalf("%s with a wrong key: %d, want 401", path, resp.StatusCode)
		}
	}
	var why string
	var icon, falseEmpty int
	if err := chromedp.Run(ctx,
		chromedp.Navigate(s.base+"/ui/"),
		chromedp.WaitVisible(`#key-prompt`, chromedp.ByQuery),
		// Until data arrives the page says it is loading, never "none".
		chromedp.WaitVisible(`[data-loading="GPUs"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`[data-loading="models"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`[data-loading="timeline"]`, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll('[data-gpus="none"]').length + (document.body.innerText.includes('No swaps') ? 1 : 0)`, &falseEmpty),
		chromedp.SendKeys(`#api-key`, "wrong", chromedp.ByQuery),
		chromedp.Click(`#api-key-save`, chromedp.ByQuery),
		chromedp.WaitVisible(`//p[@id="key-prompt-why" and contains(., "refused")]`, chromedp.BySearch),
		text(`#key-prompt-why`, &why),
		chromedp.SendKeys(`#api-key`, "sekrit", chromedp.ByQuery),
		chromedp.Click(`#api-key-save`, chromedp.ByQuery),
		chromedp.WaitVisible(`#conn[data-conn="live"]`, chromedp.ByQuery),
		chromedp.WaitNotPresent(`#key-prompt`, chromedp.ByQuery),
		stateIs("a", "stopped"),
		chromedp.Reload(),
		chromedp.WaitVisible(`#conn[data-conn="live"]`, chromedp.ByQuery),
		stateIs("a", "stopped"),
		chromedp.Evaluate(`fetch('/favicon.ico', {credentials: 'omit'}).then(r => r.status)`, &icon, func(p *runtime.EvaluateParams) *runtime.EvaluateParams {
			return p.WithAwaitPromise(true)
		}),
	); err != nil {
		t.Fatalf("%v (prompt said %q)\n%s", err, why, s.log())
	}
	var prompts int
	if err := chromedp.Run(ctx, chromedp.Evaluate(`document.querySelectorAll('#key-prompt').length`, &prompts)); err != nil || prompts != 0 {
		t.Fatalf("after a reload the page asks for the key again (%d prompts, %v)", prompts, err)
	}
	if icon != 200 {
		t.Fatalf("/favicon.ico: %d, want 200", icon)
	}
	if falseEmpty != 0 {
		t.Fatal("before its data arrived the page said there were no GPUs or no swaps")
	}
}
