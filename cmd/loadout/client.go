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
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
)

// apiClient is how every CLI command that talks to a running Loadout
// (jobs, ps, load, unload, logs) reaches it: the one place its HTTP client,
// credentials and error lines are made.
type apiClient struct {
	server string // base URL, e.g. http://127.0.0.1:8080
	token  string // sent as "Authorization: Bearer <token>" when not empty
	// tokenFlag and tokenEnv name where the token comes from, for the
	// hint of a 401 ("--api-key or $LOADOUT_API_KEY").
	tokenFlag, tokenEnv string
	// timeout bounds connecting and waiting for an answer's headers
	// (--timeout), and reading a JSON answer; a text body (logs) is read
	// without a bound.
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
	fs.StringVar(&c.server, "server", "http://"+defaultListen, "the Loadout to talk to (serve's --listen)")
	fs.StringVar(&c.token, tokenFlag, os.Getenv(tokenEnv), what+" (default $"+tokenEnv+")")
	positiveDurationVar(fs, &c.timeout, "timeout", defaultClientTimeout, "how long to wait to connect to the server, and for its answer to begin")
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

// do sends one request whose answer comes within c.timeout; into is a
// JSON target, an io.Writer for a text body, or nil.
func (c *apiClient) do(ctx context.Context, method, path string, body []byte, into any) error {
	return c.call(ctx, method, path, body, into, c.timeout, "--timeout")
}

// call sends one request, its answer's headers bounded by headers (named
// by flag in the error). Every error is one line: the server cannot be
// reached, is silent, refuses the credentials (naming c.tokenFlag and
// c.tokenEnv), answers an OpenAI-shaped error (its message), or answers
// something that is not Loadout's.
func (c *apiClient) call(ctx context.Context, method, path string, body []byte, into any, headers time.Duration, flag string) error {
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
		return c.transportError(method, path, err, headers, flag)
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

// transportError says in one line why no answer came.
func (c *apiClient) transportError(method, path string, err error, headers time.Duration, flag string) error {
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return err
	case errors.As(err, &ne) && ne.Timeout():
		d := headers
		if errors.Is(err, context.DeadlineExceeded) || d == 0 {
			d, flag = c.timeout, "--timeout"
		}
		return fmt.Errorf("%s %s: no answer within %s (%s): is Loadout at %s hung?", method, path, d, flag, c.server)
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
