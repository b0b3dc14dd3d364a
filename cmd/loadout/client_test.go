package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// cliBound is how long a CLI run in these tests may take before the test
// calls it hung: every command here ends in well under a second once it
// works; the bugs they catch wait minutes (--wait) or forever (logs -f).
const cliBound = 30 * time.Second

// cliRun is one run of the loadout binary, started by startCLI.
type cliRun struct {
	t      *testing.T
	args   []string
	cmd    *exec.Cmd
	stdout *bufio.Reader
	stderr strings.Builder
	done   chan error
}

// startCLI starts the loadout binary with args, and the API key
// testdata/e2e/cli.yaml requires (the fake servers here take any).
func startCLI(t *testing.T, args ...string) *cliRun {
	t.Helper()
	r := &cliRun{t: t, args: args, cmd: exec.Command(loadoutBin, args...), done: make(chan error, 1)}
	r.cmd.Env = append(os.Environ(), "LOADOUT_API_KEY="+cliAPIKey, "LOADOUT_JOB_TOKEN=t")
	// A pipe of ours, not StdoutPipe's, so that Wait may run while the
	// output is read: it returns once the output is all read.
	pr, pw := io.Pipe()
	r.stdout = bufio.NewReader(pr)
	r.cmd.Stdout = pw
	r.cmd.Stderr = &r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := r.cmd.Wait()
		pw.Close()
		r.done <- err
	}()
	t.Cleanup(func() {
		_ = r.cmd.Process.Kill()
		pr.Close() // a test that stopped reading does not hold Wait
	})
	return r
}

// line reads one line of the run's stdout.
func (r *cliRun) line() string {
	r.t.Helper()
	l, err := r.stdout.ReadString('\n')
	if err != nil {
		r.t.Fatalf("loadout %v: reading its output: %v", r.args, err)
	}
	return l
}

// exit waits for the run to end and returns the rest of its stdout, its
// stderr and its exit code; a run still going after cliBound is killed
// and fails t.
func (r *cliRun) exit() (stdout, stderr string, code int) {
	r.t.Helper()
	var hung atomic.Bool
	kill := time.AfterFunc(cliBound, func() {
		hung.Store(true)
		_ = r.cmd.Process.Kill()
	})
	defer kill.Stop()
	rest, _ := io.ReadAll(r.stdout) // ends when the process does
	err := <-r.done
	if hung.Load() {
		r.t.Fatalf("loadout %v still ran after %s; stderr %q", r.args, cliBound, r.stderr.String())
	}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		r.t.Fatalf("loadout %v: %v", r.args, err)
	}
	return string(rest), r.stderr.String(), code
}

// runCLIWithin runs the loadout binary with args to its end, failing t
// if it takes longer than cliBound.
func runCLIWithin(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return startCLI(t, args...).exit()
}

// wantOneLineError fails t unless a run exited non-zero with one line on
// stderr containing want, and not containing notWant (when not empty).
func wantOneLineError(t *testing.T, what, stderr string, code int, want, notWant string) {
	t.Helper()
	if code == 0 || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, want) || (notWant != "" && strings.Contains(stderr, notWant)) {
		t.Errorf("%s: exit %d, stderr %q; want one line containing %q (and not %q)", what, code, stderr, want, notWant)
	}
}

func TestParseServer_Forms(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080"},
		{"http://gpu-box:8080/", "http://gpu-box:8080"},
		{"https://gpu-box/loadout/", "https://gpu-box/loadout"},
		{"HTTP://gpu-box:80", "http://gpu-box:80"},
		{"127.0.0.1:18215", "http://127.0.0.1:18215"},
		{"localhost:18201", "http://localhost:18201"},
		{":8080", "http://127.0.0.1:8080"},
		{"[::1]:8080", "http://[::1]:8080"},
		{"gpu-box:8080", "http://gpu-box:8080"},
	} {
		if got, err := parseServer(tt.in); err != nil || got != tt.want {
			t.Errorf("parseServer(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "x", "gpu-box", "ftp://gpu-box:21", "http://", "http://:8080", "127.0.0.1:99999", "127.0.0.1:0", "127.0.0.1:http", ":", "127.0.0.1:",
		"http://h:1/?q=1", "http://h:1/#top", "unix:///run/loadout.sock", "a b:80"} {
		if got, err := parseServer(bad); !errors.Is(err, errServerForm) {
			t.Errorf("parseServer(%q) = %q, %v; want errServerForm", bad, got, err)
		}
	}
}

// --server takes serve's --listen form (HOST:PORT, :PORT) as well as a
// URL, for every command that has it; any other form is refused before
// anything is sent, with one line saying what is wanted.
func TestClientCLI_ServerFlagForms(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/models":
			fmt.Fprint(w, `{"models":[{"model":"a","state":"ready"}]}`)
		case "/api/peers":
			fmt.Fprint(w, `{"peers":[]}`)
		case "/api/jobs":
			fmt.Fprint(w, `{"jobs":[]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	for _, server := range []string{srv.URL, srv.URL + "/", "127.0.0.1:" + port, "localhost:" + port, ":" + port} {
		out, stderr, code := runCLIWithin(t, "ps", "--server", server)
		if code != 0 || psRow(out, "a") == nil {
			t.Errorf("ps --server %s: exit %d\n%s%s", server, code, out, stderr)
		}
		if _, stderr, code := runCLIWithin(t, "jobs", "list", "--server", server); code != 0 {
			t.Errorf("jobs list --server %s: exit %d\n%s", server, code, stderr)
		}
	}
	for _, server := range []string{"x", "gpu-box", "ftp://127.0.0.1:" + port} {
		for _, args := range [][]string{{"ps"}, {"load", "a"}, {"unload"}, {"logs", "-f", "a"}, {"jobs", "list"}} {
			_, stderr, code := runCLIWithin(t, append(args, "--server", server)...)
			wantOneLineError(t, fmt.Sprintf("%v --server %s", args, server), stderr, code,
				fmt.Sprintf(`%q for "--server" flag: want a URL such as http://127.0.0.1:8080 (or HOST:PORT)`, server), "")
		}
	}
}

// The error of load and unload names the limit that fired: --wait when
// the server answers but the action takes longer (even a --wait shorter
// than any answer), --timeout only when the server does not answer. A
// load that takes longer than --timeout against a server that answers its
// probes is not cut short.
func TestClientCLI_WaitAndTimeoutNamed(t *testing.T) {
	var probes atomic.Int64
	probed := make(chan struct{}, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			probes.Add(1)
			select {
			case probed <- struct{}{}:
			default:
			}
			fmt.Fprint(w, "OK")
		case "/api/models/unload/fast":
			fmt.Fprint(w, "OK")
		case "/api/models/load/slow": // never ready
			<-r.Context().Done()
		case "/api/models/load/held": // ready after three probes: over two --timeouts
			for range 3 {
				select {
				case <-probed:
				case <-r.Context().Done():
					return
				}
			}
			fmt.Fprint(w, "OK")
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()

	_, stderr, code := runCLIWithin(t, "unload", "fast", "--server", srv.URL, "--wait", "1ns")
	wantOneLineError(t, "unload fast --wait 1ns", stderr, code, "POST /api/models/unload/fast: no answer within 1ns (--wait)", "--timeout")

	_, stderr, code = runCLIWithin(t, "load", "slow", "--server", srv.URL, "--wait", "500ms", "--timeout", "20s")
	wantOneLineError(t, "load slow --wait 500ms --timeout 20s", stderr, code, "POST /api/models/load/slow: no answer within 500ms (--wait)", "--timeout")

	for len(probed) > 0 { // from the runs above
		<-probed
	}
	out, stderr, code := runCLIWithin(t, "load", "held", "--server", srv.URL, "--timeout", "200ms", "--wait", "1m")
	if code != 0 || out != "held is ready\n" {
		t.Errorf("load held (three probes, over two --timeouts): exit %d, %q %q", code, out, stderr)
	}
}

// load and unload against a server that accepts connections and never
// answers say so within --timeout, naming it, instead of waiting out
// --wait.
func TestClientCLI_HungServerFoundWithinTimeout(t *testing.T) {
	hung := "http://" + silentListener(t).Addr().String()
	for _, args := range [][]string{{"load", "a"}, {"unload", "a"}, {"unload"}} {
		start := time.Now()
		_, stderr, code := runCLIWithin(t, append(args, "--server", hung, "--timeout", "300ms", "--wait", "10m")...)
		wantOneLineError(t, fmt.Sprint(args), stderr, code, "no answer within 300ms (--timeout): is Loadout at "+hung+" hung?", "--wait")
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("%v took %s against a hung server, --timeout 300ms", args, took)
		}
	}
}

// logs -f ends with one line on stderr and a non-zero exit when the
// server ends the stream, breaks it off, or stops answering: it never
// exits 0 nor stays silent forever.
func TestClientCLI_LogsFollowServerGoes(t *testing.T) {
	end := make(chan struct{})
	var hung atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			if hung.Load() {
				<-r.Context().Done()
				return
			}
			fmt.Fprint(w, "OK")
			return
		}
		fmt.Fprintln(w, "line one")
		w.(http.Flusher).Flush()
		switch r.URL.Path {
		case "/logs/stream/ends":
			select {
			case <-end:
			case <-r.Context().Done():
			}
		case "/logs/stream/breaks":
			panic(http.ErrAbortHandler) // the connection dropped mid-stream
		default:
			<-r.Context().Done()
		}
	}))
	defer srv.Close()

	for _, tc := range []struct {
		model, want string
		then        func()
	}{
		{"ends", "GET /logs/stream/ends: the stream ended: Loadout at " + srv.URL + " closed it", func() { close(end) }},
		{"breaks", "GET /logs/stream/breaks: the answer from Loadout at " + srv.URL + " broke off", func() {}},
		{"hangs", "GET /logs/stream/hangs: no answer within 300ms (--timeout): is Loadout at " + srv.URL + " hung?", func() { hung.Store(true) }},
	} {
		r := startCLI(t, "logs", "-f", tc.model, "--server", srv.URL, "--timeout", "300ms")
		if l := r.line(); l != "line one\n" {
			t.Errorf("logs -f %s: first line %q", tc.model, l)
		}
		tc.then()
		_, stderr, code := r.exit()
		wantOneLineError(t, "logs -f "+tc.model, stderr, code, tc.want, "")
	}
}

// Against a real `loadout serve`: stopped (SIGSTOP), logs -f, load and
// unload each say within --timeout that it does not answer; once it runs
// again and is sent SIGTERM, logs -f says the stream ended and exits
// non-zero.
func TestClientCLI_AgainstStoppedServer(t *testing.T) {
	s := startServer(t, "../../testdata/e2e/cli.yaml")
	pid := s.cmd.Process.Pid
	// Registered after startServer's cleanup, so run before it: a stopped
	// server would not hear its SIGTERM.
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	cliOK(t, s, "load", "a")

	follow := startCLI(t, "logs", "-f", "a", "--server", s.base, "--timeout", "500ms")
	if l := follow.line(); !strings.Contains(l, "sim") {
		t.Errorf("logs -f a: first line %q", l)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := follow.exit()
	wantOneLineError(t, "logs -f a, server stopped", stderr, code, "no answer within 500ms (--timeout)", "")
	for _, args := range [][]string{{"load", "b"}, {"unload", "a"}} {
		_, stderr, code := runCLIWithin(t, append(args, "--server", s.base, "--timeout", "500ms", "--wait", "10m")...)
		wantOneLineError(t, fmt.Sprintf("%v, server stopped", args), stderr, code, "no answer within 500ms (--timeout)", "--wait")
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}

	follow = startCLI(t, "logs", "-f", "a", "--server", s.base)
	if l := follow.line(); !strings.Contains(l, "sim") {
		t.Errorf("logs -f a: first line %q", l)
	}
	s.stop()
	_, stderr, code = follow.exit()
	wantOneLineError(t, "logs -f a, server terminated", stderr, code, "GET /logs/stream/a: the stream ended", "")
}
