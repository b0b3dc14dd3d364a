package proxy

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/host/events"
	"github.com/loadout-dev/loadout/host/logs"
	"github.com/loadout-dev/loadout/host/observe"
	"github.com/loadout-dev/loadout/host/peers"
	"github.com/loadout-dev/loadout/host/policy"
	"github.com/loadout-dev/loadout/host/router"
	"github.com/loadout-dev/loadout/internal/policywasm"
	"github.com/loadout-dev/loadout/sdk"
)

// The proxy's tests run the real router with the real built-in policies
// (fifo + group) through the real Wasm runtime: one runtime and one
// compilation per test binary.
// policies returns the runtime and the built-in fifo and group policies,
// built to Wasm once per test binary.
func policies(t testing.TB) (*policy.Runtime, *policy.Module, *policy.Module) {
	t.Helper()
	rt, fifo := policywasm.Module(t, "github.com/loadout-dev/loadout/policies/fifo")
	_, group := policywasm.Module(t, "github.com/loadout-dev/loadout/policies/group")
	return rt, fifo, group
}

func quietLogger() *slog.Logger {
	if os.Getenv("LOADOUT_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// testCatalog is the catalog most tests use. a and b swap in one exclusive
// group; the others sit in persistent groups of their own.
var testCatalog = []ModelEntry{
	{ID: "a", Name: "Model A", Description: "the first model", Aliases: []string{"alpha", "first"}, Backend: "sim"},
	{ID: "b", UseModelName: "b-upstream", Backend: "sim"},
	{ID: "org/c", Unlisted: true, Aliases: []string{"c"}, Backend: "cmd"},
	{ID: "d", Backend: "sim"},      // concurrencyLimit 1
	{ID: "broken", Backend: "sim"}, // its start fails
	{ID: "dead", Backend: "sim"},   // its upstream refuses connections
}

const testGroups = `{"groups": {
	"g": {"swap": true, "exclusive": true, "members": ["a", "b"]},
	"c": {"swap": true, "exclusive": false, "persistent": true, "members": ["org/c"]},
	"d": {"swap": true, "exclusive": false, "persistent": true, "members": ["d"]},
	"x": {"swap": false, "exclusive": false, "persistent": true, "members": ["broken", "dead"]}}}`

type envOpts struct {
	apiKeys       []string
	maxBody       int64
	bodyIdle      time.Duration // Config.BodyIdleTimeout
	bodyRate      int64         // Config.BodyMinRate
	loadingState  bool
	aliasesInList bool
	policyStatus  func() []PolicyInfo
	// errors, when set, replaces the policies with a native scheduler that
	// fails every request for model m with errors[m].
	errors map[string]sdk.ErrorCode
	limits map[string]uint32 // concurrencyLimit per model (d: 1 unless set)
	// native replaces the Wasm policies with a minimal Go scheduler (grant
	// when ready, else load and grant when loaded): benchmarks use it to
	// tell the proxy's and the run loop's costs from the policies'.
	native bool
	logger *slog.Logger // replaces the log sink (benchmarks)
	// Config.OnRequestStart and Config.OnRequest.
	onStart    func(RequestStart)
	onRequest  func(RequestSummary)
	peers      *peers.Set    // Config.Peers
	streamIdle time.Duration // Config.StreamIdle
	// edit, when set, changes each catalog entry before the server is
	// built (filters, timeouts, metadata, capabilities).
	edit func(*ModelEntry)
	// Config.IgnorePaths and Config.SessionHeaders.
	ignorePaths    []*regexp.Regexp
	sessionHeaders []string
	// extra models, added to the catalog in one persistent, non-exclusive
	// group: all of them stay loaded (the scale report).
	extra []string
	// Config.Profiles, Config.Selectors and Config.CaptureBuffer.
	profiles      map[string]*config.Profile
	selectors     map[string]*config.Selector
	captureBuffer int64
	// events gives the server an event bus fed by the run loop's
	// observer (Config.Events), kept in env.bus.
	events bool
	// keepLogs gives the server a log store (Config.Logs) for /logs.
	keepLogs bool
}

// env is one test's Loadout: model servers, a router, the proxy on a real
// listener.
type env struct {
	t      testing.TB
	world  *modelWorld
	router *router.Router
	rec    *recordingRouter
	srv    *Server
	ts     *httptest.Server
	logs   *logSink
	client *http.Client
	ids    atomic.Int64
	bus    *events.Bus // envOpts.events (or LOADOUT_BENCH_EVENTS)
}

func newEnv(t testing.TB, o envOpts) *env {
	t.Helper()
	e := &env{t: t, world: newModelWorld(t), logs: newLogSink()}
	ctx := context.Background()
	cfg := router.Config{
		Models:        map[string]router.ModelConfig{},
		SchedulerName: "builtin:fifo",
		SwapperName:   "builtin:group",
		TickInterval:  time.Hour, // ticks only when something changes
		Logger:        quietLogger(),
	}
	bus := benchEvents(t, &cfg)
	if bus == nil && o.events {
		bus = events.New(0)
		var ids []string
		for _, m := range testCatalog {
			ids = append(ids, m.ID)
		}
		cfg.Observer = observe.New(ids, bus)
	}
	e.bus = bus
	catalog := testCatalog
	groups := testGroups
	if len(o.extra) > 0 {
		catalog = slices.Clone(testCatalog)
		for _, m := range o.extra {
			catalog = append(catalog, ModelEntry{ID: m, Backend: "sim"})
		}
		members, _ := json.Marshal(o.extra)
		groups = strings.TrimSuffix(testGroups, "}}") + `,
	"extra": {"swap": false, "exclusive": false, "persistent": true, "members": ` + string(members) + `}}}`
	}
	if o.edit != nil {
		catalog = slices.Clone(catalog)
		for i := range catalog {
			o.edit(&catalog[i])
		}
	}
	if o.loadingState {
		// Each model's sendLoadingState, as serve gives its catalog the
		// configuration's (the global one where a model sets none).
		catalog = slices.Clone(catalog)
		for i := range catalog {
			catalog[i].SendLoadingState = true
		}
	}
	if o.errors != nil {
		catalog = nil
		for m := range o.errors {
			catalog = append(catalog, ModelEntry{ID: m})
		}
		cfg.NewScheduler = func(fx sdk.Effects) (router.SchedulerPolicy, error) {
			return &errorScheduler{fx: fx, codes: o.errors}, nil
		}
		cfg.NewSwapper = func(sdk.Host) (router.SwapperPolicy, error) { return noSwapper{}, nil }
		cfg.SchedulerName, cfg.SwapperName = "test:errors", "test:none"
	} else if o.native {
		cfg.NewScheduler = func(fx sdk.Effects) (router.SchedulerPolicy, error) {
			return &grantScheduler{fx: fx, waiting: map[string][]sdk.RequestID{}}, nil
		}
		cfg.NewSwapper = func(sdk.Host) (router.SwapperPolicy, error) { return noSwapper{}, nil }
		cfg.SchedulerName, cfg.SwapperName = "test:grant", "test:none"
	} else {
		rt, fifo, group := policies(t)
		cfg.NewScheduler = func(fx sdk.Effects) (router.SchedulerPolicy, error) {
			return rt.NewScheduler(ctx, fifo, []byte("{}"), fx)
		}
		cfg.NewSwapper = func(h sdk.Host) (router.SwapperPolicy, error) {
			return rt.NewSwapper(ctx, group, []byte(groups), h)
		}
	}
	for _, m := range catalog {
		mc := router.ModelConfig{Process: e.world.process(m.ID)}
		if m.ID == "d" {
			mc.ConcurrencyLimit = 1
		}
		if n, ok := o.limits[m.ID]; ok {
			mc.ConcurrencyLimit = n
		}
		cfg.Models[m.ID] = mc
	}
	e.world.fails["broken"] = fmt.Errorf("model server exited: CUDA out of memory")
	e.world.dead["dead"] = true
	r, err := router.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.router = r
	e.rec = &recordingRouter{Router: r, requests: make(chan router.Request, 256)}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.Shutdown(ctx); err != nil {
			t.Errorf("router shutdown: %v", err)
		}
		if live := e.world.liveModels(); len(live) > 0 {
			t.Errorf("model servers left running after shutdown: %v", live)
		}
	})
	var logStore *logs.Store
	if o.keepLogs {
		logStore = logs.New(64 << 10)
	}
	e.srv, err = New(Config{
		Router:               e.rec,
		Models:               catalog,
		APIKeys:              o.apiKeys,
		MaxBodyBytes:         o.maxBody,
		StreamIdle:           o.streamIdle,
		BodyIdleTimeout:      o.bodyIdle,
		BodyMinRate:          o.bodyRate,
		IncludeAliasesInList: o.aliasesInList,
		SendLoadingState:     o.loadingState,
		PolicyStatus:         o.policyStatus,
		Events:               bus,
		OnRequestStart:       o.onStart,
		OnRequest:            o.onRequest,
		Peers:                o.peers,
		IgnorePaths:          o.ignorePaths,
		SessionHeaders:       o.sessionHeaders,
		Profiles:             o.profiles,
		Selectors:            o.selectors,
		CaptureBuffer:        o.captureBuffer,
		Logs:                 logStore,
		Logger:               cmp.Or(o.logger, slog.New(e.logs)),
	})
	if err != nil {
		t.Fatal(err)
	}
	e.ts = httptest.NewServer(e.srv)
	t.Cleanup(func() {
		e.ts.CloseClientConnections() // ends requests still waiting in Acquire
		e.ts.Close()
	})
	t.Cleanup(func() { close(e.world.quit) }) // runs first: frees held handlers
	e.client = &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true},
		// Redirects are what some tests check.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	t.Cleanup(e.client.CloseIdleConnections)
	return e
}

// status returns the router's view of one model.
func (e *env) status(model string) router.ModelStatus {
	e.t.Helper()
	for _, s := range e.router.Models() {
		if s.Model == model {
			return s
		}
	}
	e.t.Fatalf("router has no model %q", model)
	return router.ModelStatus{}
}

// request is one HTTP request a test sends.
type request struct {
	method  string
	path    string
	body    string
	ctype   string // Content-Type; "application/json" when body is set and this is empty
	headers map[string]string
	ctx     context.Context
}

func (e *env) send(rq request) *http.Response {
	e.t.Helper()
	if rq.method == "" {
		rq.method = http.MethodPost
	}
	if rq.ctx == nil {
		rq.ctx = context.Background()
	}
	var body io.Reader
	if rq.body != "" {
		body = strings.NewReader(rq.body)
	}
	req, err := http.NewRequestWithContext(rq.ctx, rq.method, e.ts.URL+rq.path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	switch {
	case rq.ctype != "":
		req.Header.Set("Content-Type", rq.ctype)
	case rq.body != "":
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set(requestIDHeader, fmt.Sprintf("t%d", e.ids.Add(1)))
	for k, v := range rq.headers {
		req.Header.Set(k, v)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", rq.method, rq.path, err)
	}
	return resp
}

// do sends rq, reads the whole response, and waits for the request's log
// line: the proxy's handler has then returned and released its grant, so
// the router's view is settled.
func (e *env) do(rq request) (*http.Response, []byte) {
	e.t.Helper()
	resp := e.send(rq)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: reading the body: %v", rq.method, rq.path, err)
	}
	e.logs.requestLine(e.t, resp.Header.Get(requestIDHeader))
	return resp, b
}

// echoOf sends rq, expects 200 and decodes the model server's echo.
func (e *env) echoOf(rq request) echo {
	e.t.Helper()
	resp, b := e.do(rq)
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("%s %s: status %d, body %s", rq.method, rq.path, resp.StatusCode, b)
	}
	var ec echo
	if err := json.Unmarshal(b, &ec); err != nil {
		e.t.Fatalf("%s %s: not an echo: %v: %s", rq.method, rq.path, err, b)
	}
	return ec
}

// openAIError checks that b is an OpenAI-shaped error and returns it.
func openAIError(t testing.TB, b []byte) errorObject {
	t.Helper()
	var eb struct {
		Error *errorObject `json:"error"`
	}
	if err := json.Unmarshal(b, &eb); err != nil || eb.Error == nil {
		t.Fatalf("not an OpenAI error body: %s", b)
	}
	if eb.Error.Message == "" || eb.Error.Type == "" || eb.Error.Code == "" {
		t.Fatalf("OpenAI error with an empty field: %s", b)
	}
	return *eb.Error
}

// sseReader reads a response's SSE events one at a time.
type sseReader struct {
	t  testing.TB
	br *bufio.Reader
}

func newSSEReader(t testing.TB, resp *http.Response) *sseReader {
	return &sseReader{t: t, br: bufio.NewReader(resp.Body)}
}

// next returns the next event's data ("" and false at the end of the
// stream); comments are skipped.
func (s *sseReader) next() (string, bool) {
	s.t.Helper()
	var data []string
	for {
		line, err := s.br.ReadString('\n')
		if err != nil {
			if err != io.EOF {
				s.t.Fatalf("reading the SSE stream: %v (partial %q)", err, line)
			}
			if len(data) > 0 {
				return strings.Join(data, "\n"), true
			}
			return "", false
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if len(data) > 0 {
				return strings.Join(data, "\n"), true
			}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
}

// expectEvent reads the next event and checks it contains want.
func (s *sseReader) expectEvent(want string) string {
	s.t.Helper()
	ev, ok := s.next()
	if !ok {
		s.t.Fatalf("SSE stream ended; want an event containing %q", want)
	}
	if !strings.Contains(ev, want) {
		s.t.Fatalf("SSE event %q does not contain %q", ev, want)
	}
	return ev
}

func (s *sseReader) expectEnd() {
	s.t.Helper()
	if ev, ok := s.next(); ok {
		s.t.Fatalf("SSE stream goes on with %q; want its end", ev)
	}
}

// recordingRouter is the real router behind the Router interface, with
// every request the proxy makes recorded, and, for tests that need to know
// a caller is waiting, its queue positions reported.
type recordingRouter struct {
	*router.Router
	requests chan router.Request

	mu       sync.Mutex
	progress chan router.Progress // when set, receives the positions of callers without a Progress channel
}

// reportProgress makes later callers without a Progress channel report
// their positions on ch.
func (rr *recordingRouter) reportProgress(ch chan router.Progress) {
	rr.mu.Lock()
	rr.progress = ch
	rr.mu.Unlock()
}

func (rr *recordingRouter) Acquire(ctx context.Context, req router.Request) (*router.Grant, error) {
	select {
	case rr.requests <- req:
	default:
	}
	rr.mu.Lock()
	report := rr.progress
	rr.mu.Unlock()
	if report != nil && req.Progress == nil {
		ch := make(chan router.Progress, 1)
		req.Progress = ch
		done := make(chan struct{})
		defer close(done)
		go func() {
			for {
				select {
				case p := <-ch:
					report <- p
				case <-done:
					return
				}
			}
		}()
	}
	return rr.Router.Acquire(ctx, req)
}

// lastRequest returns the most recent router request the proxy made.
func (rr *recordingRouter) lastRequest(t testing.TB) router.Request {
	t.Helper()
	var last router.Request
	found := false
	for {
		select {
		case last = <-rr.requests:
			found = true
		default:
			if !found {
				t.Fatal("the proxy made no router request")
			}
			return last
		}
	}
}

// logSink is a slog.Handler that keeps every record, so tests can wait for
// the line a request ends with instead of waiting for time.
type logSink struct {
	mu      sync.Mutex
	records []logRecord
	changed chan struct{} // closed and replaced on every record
	attrs   []slog.Attr
	echo    slog.Handler
}

type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func newLogSink() *logSink {
	ls := &logSink{changed: make(chan struct{})}
	if os.Getenv("LOADOUT_TEST_LOG") != "" {
		ls.echo = slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})
	}
	return ls
}

func (ls *logSink) Enabled(context.Context, slog.Level) bool { return true }

func (ls *logSink) Handle(ctx context.Context, r slog.Record) error {
	rec := logRecord{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	for _, a := range ls.attrs {
		rec.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	ls.mu.Lock()
	ls.records = append(ls.records, rec)
	close(ls.changed)
	ls.changed = make(chan struct{})
	ls.mu.Unlock()
	if ls.echo != nil {
		return ls.echo.Handle(ctx, r)
	}
	return nil
}

func (ls *logSink) WithAttrs(attrs []slog.Attr) slog.Handler {
	// Only the proxy's own logger uses the sink, without With; keep it
	// simple but correct.
	return &logSinkWith{ls: ls, attrs: attrs}
}

func (ls *logSink) WithGroup(string) slog.Handler { return ls }

type logSinkWith struct {
	ls    *logSink
	attrs []slog.Attr
}

func (l *logSinkWith) Enabled(ctx context.Context, lv slog.Level) bool { return true }
func (l *logSinkWith) Handle(ctx context.Context, r slog.Record) error {
	r.AddAttrs(l.attrs...)
	return l.ls.Handle(ctx, r)
}
func (l *logSinkWith) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &logSinkWith{ls: l.ls, attrs: append(append([]slog.Attr{}, l.attrs...), attrs...)}
}
func (l *logSinkWith) WithGroup(string) slog.Handler { return l }

// wait returns the first record, old or new, that match accepts.
func (ls *logSink) wait(t testing.TB, what string, match func(logRecord) bool) logRecord {
	t.Helper()
	timeout := time.After(10 * time.Second)
	seen := 0
	for {
		ls.mu.Lock()
		recs, changed := ls.records[seen:], ls.changed
		seen = len(ls.records)
		ls.mu.Unlock()
		for _, r := range recs {
			if match(r) {
				return r
			}
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("no log line: %s", what)
		}
	}
}

// requestLine waits for the line request id ends with.
func (ls *logSink) requestLine(t testing.TB, id string) logRecord {
	t.Helper()
	return ls.wait(t, "request "+id, func(r logRecord) bool { return r.attrs["request_id"] == id })
}

// errorScheduler is a native scheduler that fails every request with the
// code configured for its model: it drives the error paths a real policy
// reaches only in rare situations (timeouts, models too large for the
// GPUs), through the real router.
type errorScheduler struct {
	fx    sdk.Effects
	codes map[string]sdk.ErrorCode
}

func (s *errorScheduler) OnRequest(ev sdk.RequestEvent) error {
	s.fx.GrantError(ev.ID, s.codes[ev.Model], fmt.Sprintf("test policy refuses %s", ev.Model))
	return nil
}
func (s *errorScheduler) OnSwapDone(sdk.SwapDoneEvent) error   { return nil }
func (s *errorScheduler) OnServeDone(sdk.ServeDoneEvent) error { return nil }
func (s *errorScheduler) OnCancel(sdk.CancelEvent) error       { return nil }
func (s *errorScheduler) OnUnload(sdk.UnloadEvent) error       { return nil }
func (s *errorScheduler) OnTick(sdk.TickEvent) error           { return nil }
func (s *errorScheduler) OnShutdown(sdk.ShutdownEvent) error   { return nil }

// grantScheduler is the least a scheduler can do: serve a ready model at
// once, otherwise load it (evicting nothing) and serve its callers when it
// is ready.
type grantScheduler struct {
	fx      sdk.Effects
	waiting map[string][]sdk.RequestID
}

func (s *grantScheduler) OnRequest(ev sdk.RequestEvent) error {
	if info, ok := s.fx.ModelState(ev.Model); ok && info.State == sdk.StateReady {
		s.fx.GrantServe(ev.ID, ev.Model)
		return nil
	}
	if len(s.waiting[ev.Model]) == 0 {
		if err := s.fx.StartSwap(sdk.SwapRequest{Model: ev.Model}); err != nil {
			s.fx.GrantError(ev.ID, sdk.CodeInternal, err.Error())
			return nil
		}
	}
	s.waiting[ev.Model] = append(s.waiting[ev.Model], ev.ID)
	s.fx.SetQueuePosition(ev.ID, 0)
	return nil
}

func (s *grantScheduler) OnSwapDone(ev sdk.SwapDoneEvent) error {
	for _, id := range s.waiting[ev.Model] {
		if ev.Err != "" {
			s.fx.GrantError(id, sdk.CodeSwapFailed, ev.Err)
		} else {
			s.fx.GrantServe(id, ev.Model)
		}
	}
	delete(s.waiting, ev.Model)
	return nil
}

func (s *grantScheduler) OnCancel(ev sdk.CancelEvent) error {
	s.waiting[ev.Model] = slices.DeleteFunc(s.waiting[ev.Model], func(id sdk.RequestID) bool { return id == ev.ID })
	return nil
}
func (s *grantScheduler) OnServeDone(sdk.ServeDoneEvent) error { return nil }
func (s *grantScheduler) OnUnload(ev sdk.UnloadEvent) error {
	return s.fx.StopProcesses(ev.Models)
}
func (s *grantScheduler) OnTick(sdk.TickEvent) error { return nil }
func (s *grantScheduler) OnShutdown(sdk.ShutdownEvent) error {
	for model, ids := range s.waiting {
		for _, id := range ids {
			s.fx.GrantError(id, sdk.CodeUnavailable, "shutting down")
		}
		delete(s.waiting, model)
	}
	return nil
}

type noSwapper struct{}

func (noSwapper) Plan(sdk.PlanRequest) (sdk.Plan, error) { return sdk.Plan{}, nil }
func (noSwapper) OnSwapStart(sdk.SwapStartEvent) error   { return nil }
