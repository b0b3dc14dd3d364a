package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loadout-dev/loadout/host/router"
)

// modelWorld is the set of model servers one test runs: real HTTP servers
// on 127.0.0.1 behind a router.Process, each a tiny OpenAI-compatible API.
// Tests steer them through the X-Test-Mode request header and coordinate
// with them through channels, never through time:
//
//	(none)  non-streaming: a JSON echo of what the server received;
//	        "stream": true: three SSE chunks and [DONE]
//	gated   SSE; each chunk after the first waits for a receive on step
//	die     SSE; one chunk, then the connection is hijacked and closed
//	cut     SSE; two chunks, then the stream ends cleanly, without a
//	        finish_reason or [DONE]
//	diejson half a JSON answer, then the connection is closed
//	upgrade 101 Switching Protocols, then one line echoed on the connection
//	hold    announces itself on holding, then waits for a receive on
//	        release before echoing (never streams)
//	status  answers X-Test-Status with an OpenAI error body
type modelWorld struct {
	t       testing.TB
	events  chan string   // "start m", "stop m"
	step    chan struct{} // lets a gated stream send its next chunk
	holding chan string   // a hold request reached model m
	release chan struct{} // ends one hold request
	quit    chan struct{} // closed at the end of the test: every handler returns

	mu    sync.Mutex
	gates map[string]chan struct{} // start gates
	fails map[string]error         // Start errors
	dead  map[string]bool          // instances whose server is gone at once
	// dies: the next starts of a model give servers whose process dies
	// at their first request, one mode per start: "rst" (the request is
	// read, then the connection reset), "eof" (read, then closed),
	// "header" (read, half a status line sent, then closed).
	dies map[string][]string
	// closeIdle: the model's servers close each connection once its
	// response is done, having offered keep-alive (llama-server after a
	// stream).
	closeIdle map[string]bool
	live      map[string]*modelInstance
	// readCloses counts the requests of mode "readclose" that reached a
	// server: read whole, then the connection closed with no answer.
	readCloses atomic.Int32
}

func newModelWorld(t testing.TB) *modelWorld {
	return &modelWorld{
		t:         t,
		events:    make(chan string, 256),
		step:      make(chan struct{}),
		holding:   make(chan string, 16),
		release:   make(chan struct{}),
		quit:      make(chan struct{}),
		gates:     map[string]chan struct{}{},
		fails:     map[string]error{},
		dead:      map[string]bool{},
		closeIdle: map[string]bool{},
		dies:      map[string][]string{},
		live:      map[string]*modelInstance{},
	}
}

func (w *modelWorld) process(name string) router.Process { return &modelProcess{name: name, w: w} }

// gate makes the next starts of model block until the returned func runs.
func (w *modelWorld) gate(model string) (open func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch := make(chan struct{})
	w.gates[model] = ch
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			delete(w.gates, model)
			w.mu.Unlock()
			close(ch)
		})
	}
}

func (w *modelWorld) emit(ev string) {
	select {
	case w.events <- ev:
	default:
		w.t.Errorf("model world: event channel full, dropped %q", ev)
	}
}

// expect waits for the next process events to be exactly want.
func (w *modelWorld) expect(t testing.TB, want ...string) {
	t.Helper()
	for _, ev := range want {
		select {
		case got := <-w.events:
			if got != ev {
				t.Fatalf("process event: got %q, want %q", got, ev)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("process event: timed out waiting for %q", ev)
		}
	}
}

// expectNone asserts that no process event is pending (callers first make
// sure the router has handled everything, e.g. with a Models query).
func (w *modelWorld) expectNone(t testing.TB) {
	t.Helper()
	select {
	case ev := <-w.events:
		t.Fatalf("unexpected process event %q", ev)
	default:
	}
}

// waitHolding waits until a hold request has reached model.
func (w *modelWorld) waitHolding(t testing.TB, model string) {
	t.Helper()
	select {
	case got := <-w.holding:
		if got != model {
			t.Fatalf("hold request reached %q, want %q", got, model)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no hold request reached %s", model)
	}
}

// releaseOne ends one hold request.
func (w *modelWorld) releaseOne(t testing.TB) {
	t.Helper()
	select {
	case w.release <- struct{}{}:
	case <-time.After(10 * time.Second):
		t.Fatal("no hold request to release")
	}
}

// stepOne lets one gated stream send its next chunk.
func (w *modelWorld) stepOne(t testing.TB) {
	t.Helper()
	select {
	case w.step <- struct{}{}:
	case <-time.After(10 * time.Second):
		t.Fatal("no gated stream waiting for a step")
	}
}

func (w *modelWorld) liveModels() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for m := range w.live {
		out = append(out, m)
	}
	return out
}

type modelProcess struct {
	name string
	w    *modelWorld
}

func (p *modelProcess) Start(ctx context.Context, spec router.StartSpec) (router.Instance, error) {
	w := p.w
	w.emit("start " + p.name)
	w.mu.Lock()
	gate, fail, dead, closeIdle := w.gates[p.name], w.fails[p.name], w.dead[p.name], w.closeIdle[p.name]
	var dies string
	if q := w.dies[p.name]; len(q) > 0 {
		dies, w.dies[p.name] = q[0], q[1:]
	}
	w.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if fail != nil {
		return nil, fail
	}
	inst := &modelInstance{name: p.name, w: w, dies: dies, exited: make(chan struct{}), stopping: make(chan struct{})}
	inst.srv = httptest.NewUnstartedServer(inst)
	if closeIdle {
		inst.srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
			if s == http.StateIdle {
				c.Close()
			}
		}
	}
	inst.srv.Start()
	u, err := url.Parse(inst.srv.URL)
	if err != nil {
		return nil, err
	}
	inst.url = u
	if dead {
		inst.srv.Close() // the port now refuses connections
	}
	w.mu.Lock()
	w.live[p.name] = inst
	w.mu.Unlock()
	return inst, nil
}

type modelInstance struct {
	name     string
	w        *modelWorld
	srv      *httptest.Server
	url      *url.URL
	dies     string // modelWorld.dies' mode for this server; "" lives
	exited   chan struct{}
	stopping chan struct{}
	once     sync.Once
}

func (m *modelInstance) Upstream() *url.URL      { return m.url }
func (m *modelInstance) Exited() <-chan struct{} { return m.exited }
func (m *modelInstance) Err() error              { return nil }

func (m *modelInstance) Stop(ctx context.Context) error {
	m.once.Do(func() {
		close(m.stopping)
		m.srv.CloseClientConnections()
		m.srv.Close()
		m.w.mu.Lock()
		delete(m.w.live, m.name)
		m.w.mu.Unlock()
		close(m.exited)
		m.w.emit("stop " + m.name)
	})
	return nil
}

// echo is what a model server answers a non-streaming request: everything
// the tests check about what the upstream saw (Path as it came, escaped).
type echo struct {
	Object      string            `json:"object"`
	Server      string            `json:"server"` // the model whose server answered
	Method      string            `json:"method"`
	Path        string            `json:"path"`
	Query       string            `json:"query"`
	ContentType string            `json:"content_type"`
	Length      int64             `json:"content_length"`
	Body        string            `json:"body"`
	Headers     map[string]string `json:"headers"`
}

// echoedHeaders are the request headers an echo reports.
var echoedHeaders = []string{"Accept-Encoding", "Authorization", "X-Api-Key", headerPriority, headerClient, requestIDHeader, "X-Forwarded-For", "Transfer-Encoding", headerForwarded, "Content-Encoding"}

func (m *modelInstance) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var fields struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	_ = json.Unmarshal(body, &fields)
	if m.dies != "" {
		m.die(w)
		return
	}
	mode := r.Header.Get("X-Test-Mode")
	switch mode {
	case "hold":
		if !m.wait(r, m.w.holding, m.name) || !m.waitRecv(r, m.w.release) {
			return
		}
	case "upgrade":
		// A protocol switch: echo one line on the raw connection.
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			m.w.t.Errorf("hijack: %v", err)
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		brw.Flush()
		line, _ := brw.ReadString('\n')
		brw.WriteString("echo " + line)
		brw.Flush()
		return
	case "readclose":
		// The whole request read, then the connection closed with no
		// answer (a server's own timeout, an aborted generation); the
		// server lives on.
		m.w.readCloses.Add(1)
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
		return
	case "diejson":
		// Half a JSON answer, then the connection dies.
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "1000")
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, `{"object":"chat.completion","choices":[`)
		_ = http.NewResponseController(w).Flush()
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
		return
	case "flood":
		// An event stream as fast as the connection takes it, until the
		// request ends.
		w.Header().Set("Content-Type", "text/event-stream")
		chunk := []byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + strings.Repeat("x", 16<<10) + "\"}}]}\n\n")
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			_ = http.NewResponseController(w).Flush()
		}
		return
	case "status":
		code, _ := strconv.Atoi(r.Header.Get("X-Test-Status"))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		fmt.Fprint(w, `{"error":{"message":"upstream says no","type":"invalid_request_error"}}`)
		return
	}
	if mode == "gated" || mode == "die" || mode == "cut" || mode == "errorevent" || fields.Stream && mode != "hold" {
		m.stream(w, r, mode, fields.Model)
		return
	}
	e := echo{Object: "chat.completion", Server: m.name, Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.RawQuery,
		ContentType: r.Header.Get("Content-Type"), Length: r.ContentLength, Body: string(body), Headers: map[string]string{}}
	for _, h := range echoedHeaders {
		if v := r.Header.Get(h); v != "" {
			e.Headers[h] = v
		}
	}
	if len(r.TransferEncoding) > 0 {
		e.Headers["Transfer-Encoding"] = r.TransferEncoding[0]
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(e)
}

func (m *modelInstance) stream(w http.ResponseWriter, r *http.Request, mode, model string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	flush := func() { _ = http.NewResponseController(w).Flush() }
	send := func(i int) {
		fmt.Fprintf(w, "data: {\"object\":\"chat.completion.chunk\",\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok%d\"}}]}\n\n", model, i)
		flush()
	}
	send(1)
	switch mode {
	case "gated":
		for i := 2; i <= 3; i++ {
			if !m.waitRecv(r, m.w.step) {
				return
			}
			send(i)
		}
	case "chunks": // X-Test-Chunks content chunks, each flushed, X-Test-Gap apart (benchmarks)
		n, _ := strconv.Atoi(r.Header.Get("X-Test-Chunks"))
		gap, _ := time.ParseDuration(r.Header.Get("X-Test-Gap"))
		for i := 2; i <= n; i++ {
			if gap > 0 {
				time.Sleep(gap)
			}
			send(i)
		}
	case "cut":
		send(2)
		return
	case "errorevent": // llama-server's mid-stream failure: an error event under the 200, then the end
		fmt.Fprint(w, `data: {"error":{"code":500,"message":"context shift is disabled","type":"server_error"}}`+"\n\n")
		flush()
		return
	case "die":
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			m.w.t.Errorf("hijack: %v", err)
			return
		}
		conn.Close()
		return
	default:
		send(2)
		send(3)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	flush()
	if mode == "linger" { // keep the response open until the client leaves
		select {
		case <-r.Context().Done():
		case <-m.stopping:
		case <-m.w.quit:
		}
	}
}

// die ends the server as a killed process ends: its port refuses
// connections, the request's connection is reset or closed (m.dies),
// and the instance exits.
func (m *modelInstance) die(w http.ResponseWriter) {
	m.srv.Listener.Close()
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		m.w.t.Errorf("hijack: %v", err)
		return
	}
	if m.dies == "header" {
		brw.WriteString("HTTP/1.1 2")
		brw.Flush()
	}
	if tc, ok := conn.(*net.TCPConn); ok && m.dies == "rst" {
		_ = tc.SetLinger(0) // close sends RST
	}
	conn.Close()
	go m.Stop(context.Background()) // Stop waits for this handler
}

// wait sends v on ch unless the request, the server or the test ends.
func (m *modelInstance) wait(r *http.Request, ch chan string, v string) bool {
	select {
	case ch <- v:
		return true
	case <-r.Context().Done():
	case <-m.stopping:
	case <-m.w.quit:
	}
	return false
}

// waitRecv receives from ch unless the request, the server or the test
// ends.
func (m *modelInstance) waitRecv(r *http.Request, ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-r.Context().Done():
	case <-m.stopping:
	case <-m.w.quit:
	}
	return false
}
