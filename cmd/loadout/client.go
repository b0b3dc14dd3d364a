package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
)

// apiClient is how every CLI command that talks to a running Loadout
// (jobs, ps, load, unload, logs) reaches it: the one place its HTTP client,
// credentials and error lines are made.
type apiClient struct {
	server string // base URL, e.g. http://127.0.0.1:8080, as parseServer gives it
	token  string // sent as "Authorization: Bearer <token>" when not empty
	// tokenFlag and tokenEnv name where the token comes from, for the
	// hint of a 401 ("--api-key or $LOADOUT_API_KEY").
	tokenFlag, tokenEnv string
	// timeout bounds connecting, waiting for an answer's headers and
	// reading a JSON answer (--timeout); an answer held back by design (a
	// load's, a log stream's) is bounded instead by probes of the server
	// that must each answer within it (watch).
	timeout time.Duration
	out     io.Writer
}

// defaultClientTimeout is the CLI's default bound on connecting to the
// Loadout and on waiting for its answer's headers: the calls it bounds
// answer at once (a job submission never waits on an executor; a model's
// load and unload have --wait), so a server silent this long is hung, not
// busy.
const defaultClientTimeout = 30 * time.Second

// addClientFlags adds --server, the token flag (named tokenFlag, default
// $tokenEnv, described as what) and --timeout to fs, filling c.
func addClientFlags(fs *pflag.FlagSet, c *apiClient, tokenFlag, tokenEnv, what string) {
	c.tokenFlag, c.tokenEnv = tokenFlag, tokenEnv
	c.server = "http://" + defaultListen
	fs.Var((*serverValue)(&c.server), "server", "the Loadout to talk to: its URL, or serve's --listen (HOST:PORT)")
	fs.StringVar(&c.token, tokenFlag, os.Getenv(tokenEnv), what+" (default $"+tokenEnv+")")
	positiveDurationVar(fs, &c.timeout, "timeout", defaultClientTimeout, "how long to wait to connect to the server, and for it to answer")
}

// serverValue is --server's flag value: what parseServer makes of it, so
// that a form it refuses is a flag error before anything is sent.
type serverValue string

func (s *serverValue) String() string { return string(*s) }
func (s *serverValue) Type() string   { return "url" }
func (s *serverValue) Set(v string) error {
	u, err := parseServer(v)
	if err != nil {
		return err
	}
	*s = serverValue(u)
	return nil
}

// errServerForm is parseServer's refusal; pflag prefixes the flag and
// the value given.
var errServerForm = errors.New("want a URL such as http://127.0.0.1:8080 (or HOST:PORT)")

// parseServer is the one rule for --server: an http or https URL (a path
// is kept, for a Loadout behind a prefix; a trailing slash is dropped),
// or HOST:PORT, the form serve's --listen takes, read as http://HOST:PORT
// (":PORT", a listener on every address, as http://127.0.0.1:PORT, where
// the start-up line's UI address sends a browser too). A query or
// fragment is refused: the API's paths are appended to the URL.
func parseServer(v string) (string, error) {
	s := v
	if !strings.Contains(v, "://") {
		// Without a scheme, url.Parse reads "localhost:8080" as scheme
		// "localhost": HOST:PORT is split first.
		host, port, err := net.SplitHostPort(v)
		if err != nil || port == "" {
			return "", errServerForm
		}
		if host == "" {
			host = "127.0.0.1"
		}
		s = "http://" + net.JoinHostPort(host, port)
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", errServerForm
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "", errServerForm
		}
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// limitError is why a call was cut short by one of the CLI's limits: the
// flag that set it and its value, so that the error names the limit that
// fired (--timeout: the server does not answer; --wait: it answers, but
// the action took longer).
type limitError struct {
	flag string
	d    time.Duration
}

func (e *limitError) Error() string { return fmt.Sprintf("no answer within %s (%s)", e.d, e.flag) }

// do sends one request whose answer comes within c.timeout; into is a
// JSON target, an io.Writer for a text body, or nil.
func (c *apiClient) do(ctx context.Context, method, path string, body []byte, into any) error {
	return c.call(ctx, method, path, body, into, c.timeout)
}

// await sends a request whose answer the server holds until an action
// ends (a model's load or unload), waiting up to wait (--wait) for it.
// Meanwhile the server is probed (watch): one that stops answering is
// found within about --timeout, not at the end of --wait. The error names
// the limit that fired.
func (c *apiClient) await(ctx context.Context, method, path string, into any, wait time.Duration) error {
	ctx, cancel := context.WithTimeoutCause(ctx, wait, &limitError{flag: "--wait", d: wait})
	defer cancel()
	ctx, stop := c.watch(ctx)
	defer stop()
	return c.call(ctx, method, path, nil, into, 0)
}

// follow copies the answer to GET path, a stream the server ends only
// when it goes (a log stream), to w until ctx ends. The stream has no
// keep-alives (a model with nothing to say sends nothing), so silence
// alone cannot tell a hung server: the server is probed meanwhile
// (watch). An end of the stream is an error: following stops only when
// asked.
func (c *apiClient) follow(ctx context.Context, path string, w io.Writer) error {
	wctx, stop := c.watch(ctx)
	defer stop()
	if err := c.call(wctx, http.MethodGet, path, nil, w, c.timeout); err != nil || ctx.Err() != nil {
		return err
	}
	return fmt.Errorf("GET %s: the stream ended: Loadout at %s closed it (it stopped or restarted, or dropped this reader as too slow)", path, c.server)
}

// watch returns ctx, canceled with a --timeout limitError once the
// server stops answering: it sends GET /health at once and then every
// --timeout after each answer, each given --timeout to answer. Any answer
// counts (an error status too): the probe asks whether the server's
// process answers, not whether it is well. A server that is down is left
// to the call to find: its connection fails. The CancelFunc ends the
// probing; call it when the call is done.
func (c *apiClient) watch(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	hc := c.httpClient(c.timeout) // one client: the probes share a connection
	done := make(chan struct{})
	go func() {
		defer close(done)
		next := time.NewTimer(0)
		defer next.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-next.C:
			}
			if !c.answers(ctx, hc) {
				cancel(&limitError{flag: "--timeout", d: c.timeout})
				return
			}
			next.Reset(c.timeout)
		}
	}()
	return ctx, func() {
		cancel(nil)
		<-done
		hc.CloseIdleConnections()
	}
}

// answers probes the server with GET /health: false only when no answer
// began within c.timeout while ctx was live.
func (c *apiClient) answers(ctx context.Context, hc *http.Client) bool {
	pctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(pctx, http.MethodGet, c.server+"/health", nil)
	if err != nil {
		return true // c.server is parseServer's: cannot happen
	}
	resp, err := hc.Do(req)
	if err != nil {
		var ne net.Error
		return ctx.Err() != nil || !(errors.As(err, &ne) && ne.Timeout())
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	resp.Body.Close()
	return true
}

// httpClient returns the client for one call: connecting bounded by
// c.timeout, and the answer's headers by headers (0: none).
func (c *apiClient) httpClient(headers time.Duration) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: c.timeout}).DialContext
	t.ResponseHeaderTimeout = headers
	t.TLSHandshakeTimeout = c.timeout
	return &http.Client{Transport: t}
}

// call sends one request, its answer's headers bounded by headers: 0 or
// c.timeout, so that a timeout of the transport is always --timeout's,
// and every other limit comes as ctx's cause (a limitError). Every error
// is one line: the server cannot be reached, is silent (naming the limit
// that fired), refuses the credentials (naming c.tokenFlag and
// c.tokenEnv), answers an OpenAI-shaped error (its message), or answers
// something that is not Loadout's.
func (c *apiClient) call(ctx context.Context, method, path string, body []byte, into any, headers time.Duration) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.server, "/")+path, rd)
	if err != nil {
		return fmt.Errorf("--server %q: %w", c.server, err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.httpClient(headers).Do(req)
	if err != nil {
		return c.transportError(ctx, method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var e struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		msg := ""
		if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
			msg = fmt.Sprintf("%s (HTTP %d)", e.Error.Message, resp.StatusCode)
		} else {
			msg = fmt.Sprintf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, oneLine(b))
		}
		if resp.StatusCode == http.StatusUnauthorized {
			msg += fmt.Sprintf(": pass --%s or set $%s", c.tokenFlag, c.tokenEnv)
		}
		return errors.New(msg)
	}
	switch into := into.(type) {
	case nil:
		return nil
	case io.Writer:
		if _, err := io.Copy(into, resp.Body); err != nil {
			if lerr := c.limitFired(ctx, method, path); lerr != nil {
				return lerr
			}
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
				return fmt.Errorf("%s %s: the answer from Loadout at %s broke off (%v): did it stop?", method, path, c.server, err)
			}
			return fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
		}
		return nil
	default:
		// A JSON answer comes whole at once: one whose body stalls
		// past --timeout is from a hung server.
		stalled := time.AfterFunc(c.timeout, cancel)
		b, err := io.ReadAll(resp.Body)
		if !stalled.Stop() {
			return fmt.Errorf("%s %s: the answer did not finish within %s (--timeout): is Loadout at %s hung?", method, path, c.timeout, c.server)
		}
		if err != nil {
			return fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
		}
		if err := json.Unmarshal(b, into); err != nil {
			return fmt.Errorf("%s %s: the answer from %s is not Loadout's JSON (is it a Loadout?): %s", method, path, c.server, oneLine(b))
		}
		return nil
	}
}

// limitFired is the error of a call that ctx's limit cut short (a
// limitError as its cause), or nil.
func (c *apiClient) limitFired(ctx context.Context, method, path string) error {
	var limit *limitError
	if !errors.As(context.Cause(ctx), &limit) {
		return nil
	}
	if limit.flag == "--wait" {
		return fmt.Errorf("%s %s: %v", method, path, limit)
	}
	return fmt.Errorf("%s %s: %v: is Loadout at %s hung?", method, path, limit, c.server)
}

// transportError says in one line why no answer came.
func (c *apiClient) transportError(ctx context.Context, method, path string, err error) error {
	if lerr := c.limitFired(ctx, method, path); lerr != nil {
		return lerr
	}
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return err
	case errors.As(err, &ne) && ne.Timeout():
		// Connecting, TLS and the headers are all bounded by --timeout
		// (httpClient); --wait is a limitError.
		return fmt.Errorf("%s %s: no answer within %s (--timeout): is Loadout at %s hung?", method, path, c.timeout, c.server)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("cannot reach Loadout at %s: connection refused (is `loadout serve` running there? see --server)", c.server)
	}
	return fmt.Errorf("%s %s at %s: %w", method, path, c.server, err)
}

// oneLine is an answer's start, on one line, for an error.
func oneLine(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	if s == "" {
		s = "(empty)"
	}
	return s
}
