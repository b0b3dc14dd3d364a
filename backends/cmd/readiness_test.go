package cmdbackend_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cmdbackend "github.com/loadout-dev/loadout/backends/cmd"
	"github.com/loadout-dev/loadout/internal/proctest"
	"github.com/loadout-dev/loadout/plugins"
)

// foreignServer is another HTTP server on a loopback port, answering 200 to
// everything, as a server started outside Loadout would; it counts the
// requests it gets.
func foreignServer(t *testing.T) (port int, hits *atomic.Int64) {
	t.Helper()
	hits = new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	}))
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	port, err = strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return port, hits
}

// A port the host hands over that something already listens on (a second
// Loadout's model took it while this one was stopped) is never fought
// over: with the port as cmd's ${PORT}, the server starts on a free one,
// the upstream names it, and the other listener gets nothing.
func TestBackend_Readiness_TakenPortMovesToAFreeOne(t *testing.T) {
	port, hits := foreignServer(t)
	b := newBackend(t)
	st, err := b.Start(context.Background(), plugins.ModelSpec{
		Model: "m", Cmd: simCmd("--model m"), Port: port, HealthCheckTimeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatalf("Start with the port taken: %v", err)
	}
	u, err := url.Parse(st.Upstream)
	if err != nil {
		t.Fatal(err)
	}
	if u.Port() == "" || u.Port() == strconv.Itoa(port) {
		t.Fatalf("upstream %s, want a port other than the taken %d", st.Upstream, port)
	}
	resp, err := http.Get(st.Upstream + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"m"`) {
		t.Errorf("the moved server answered %d %s, want its model list", resp.StatusCode, body)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the other server on the taken port got %d requests, want 0", n)
	}
}

// A taken port written into cmd (no ${PORT} to move) fails the start
// before anything runs: the foreign server is never taken for the model.
func TestBackend_Readiness_TakenLiteralPortFailsBeforeLaunch(t *testing.T) {
	port, hits := foreignServer(t)
	b := newBackend(t)
	_, err := b.Start(context.Background(), plugins.ModelSpec{
		Model: "m", Cmd: strings.ReplaceAll(simCmd(""), "${PORT}", strconv.Itoa(port)), Port: port,
		HealthCheckTimeout: 10 * time.Second,
	})
	if err == nil {
		t.Fatal("Start succeeded with another server on the model's port")
	}
	for _, w := range []string{`model "m"`, "port " + strconv.Itoa(port) + " is taken", "address already in use"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Start error = %q, want it to contain %q", err, w)
		}
	}
	if _, err := b.Health(context.Background(), "m"); !errors.Is(err, plugins.ErrUnknownModel) {
		t.Errorf("Health after the refused start = %v, want ErrUnknownModel (nothing launched)", err)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the foreign server got %d requests, want 0", n)
	}
}

// A server that exits while starting fails the start with its own exit
// error, even though another (older) server answers its check endpoint.
func TestBackend_Readiness_ExitedServerFailsWhateverAnswers(t *testing.T) {
	port, hits := foreignServer(t)
	b := newBackend(t)
	_, err := b.Start(context.Background(), plugins.ModelSpec{
		Model:              "m",
		Cmd:                `sh -c 'echo "listen: bind: address already in use" >&2; exit 3'`,
		Proxy:              "http://127.0.0.1:" + strconv.Itoa(port),
		HealthCheckTimeout: 10 * time.Second,
	})
	if err == nil {
		t.Fatalf("Start succeeded: the foreign server (%d checks answered) was taken for the model", hits.Load())
	}
	for _, w := range []string{`model "m" exited while starting`, "exit status 3", "address already in use"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Start error = %q, want it to contain %q", err, w)
		}
	}
}

// A server that never exits and never listens, while an older server
// answers on its upstream, times out naming the holder of the port.
func TestBackend_Readiness_ForeignHolderNamedOnTimeout(t *testing.T) {
	port, _ := foreignServer(t)
	b := newBackend(t)
	_, err := b.Start(context.Background(), plugins.ModelSpec{
		Model:              "m",
		Cmd:                `sleep 60`,
		Proxy:              "http://127.0.0.1:" + strconv.Itoa(port),
		HealthCheckTimeout: 300 * time.Millisecond,
	})
	if err == nil {
		t.Fatal("Start succeeded: the foreign server was taken for the model")
	}
	for _, w := range []string{"not ready after 300ms", "port " + strconv.Itoa(port) + " is held by pid", "another server answers there"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Start error = %q, want it to contain %q", err, w)
		}
	}
}

// A server that takes long to start is logged as it goes: how long, the
// last check's answer and the server's last output line.
func TestBackend_Readiness_LongStartIsLoggedAsItGoes(t *testing.T) {
	defer cmdbackend.SetStartProgressEvery(50 * time.Millisecond)()
	var logs proctest.LockedBuffer
	b := cmdbackend.New(slog.New(slog.NewTextHandler(&logs, nil)))
	t.Cleanup(func() { _ = b.Close() })
	_, err := b.Start(context.Background(), plugins.ModelSpec{
		Model:              "m",
		Cmd:                `sh -c 'echo "load_tensors: loading model tensors" >&2; exec sleep 60' --port ${PORT}`,
		HealthCheckTimeout: 1500 * time.Millisecond, // room for a slow machine's sh to say its line
	})
	if err == nil {
		t.Fatal("Start succeeded: nothing listens")
	}
	out := logs.String()
	for _, w := range []string{`msg="model server still starting"`, `last_output="load_tensors: loading model tensors"`, "last_check=", "timeout=1.5s"} {
		if !strings.Contains(out, w) {
			t.Errorf("log lacks %q:\n%s", w, out)
		}
	}
}
