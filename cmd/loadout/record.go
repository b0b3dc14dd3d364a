package main

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/gofrs/flock"

	"github.com/loadout-dev/loadout/host/config"
	"github.com/loadout-dev/loadout/host/proxy"
	"github.com/loadout-dev/loadout/host/sim"
)

// recordHelp is serve's help on --record-trace: what a row holds, where
// each field comes from, and when it is written.
const recordHelp = `With --record-trace FILE, every chat/completions, completions,
responses, Anthropic messages and embeddings request (by any of their
routes: OpenAI's, llama-swap's versionless ones, llama-server's with its
/completion, /infill and /embedding, Ollama's /api/chat, generate, embed
and embeddings) is written to FILE (overwritten; a second Loadout given the
same file is refused) as a trace that 'loadout simulate --trace FILE'
replays: arrival_s (seconds from the first request), model (its id,
aliases resolved; a llama-swap selector's pick), prompt_tokens and
output_tokens, priority and client (x_priority, x_client_id or their
headers). Token counts are the model
server's usage; without one, output is a stream's content chunks, or
max_tokens when nothing was counted, and the prompt is the request's text
in bytes / 4 (token ids count one each).
Rows are in arrival order: a row is written once its request and every
earlier one have ended, or with its estimates once its request has run
10 minutes or 10000 requests wait behind it. Shutdown writes the rest.`

// recordedPaths are the endpoints --record-trace records: those whose
// requests `loadout simulate` knows how to replay (prompt in, tokens out),
// by every route that serves them: OpenAI's, llama-swap's versionless
// ones, llama-server's own and Ollama's.
var recordedPaths = map[string]bool{
	"/v1/chat/completions": true, "/v/chat/completions": true, "/chat/completions": true, "/api/chat": true, "/api/generate": true,
	"/v1/completions": true, "/v/completions": true, "/completions": true, "/completion": true, "/infill": true,
	"/v1/responses": true, "/v/responses": true, "/responses": true, "/v1/messages": true, "/v/messages": true,
	"/v1/embeddings": true, "/v/embeddings": true, "/embeddings": true, "/embedding": true, "/api/embed": true, "/api/embeddings": true,
}

// traceRecorder is serve's --record-trace: the proxy's request hooks
// feeding a sim.Recorder. Its zero value records nothing.
type traceRecorder struct {
	path string
	f    *os.File
	rec  *sim.Recorder
	// lock is the file's advisory lock (flock), held while it records
	// where the file is a regular one and could be locked.
	lock *flock.Flock
	// selectors are the proxy configuration's llama-swap selectors
	// (model), by id.
	selectors map[string]*config.Selector
}

// openTraceRecorder creates (or truncates) the trace file and writes its
// header. A regular file is locked first (flock on the file itself), so a
// second Loadout given the same file, on another address, is refused
// before it truncates what the first is recording; where the lock cannot
// be taken (a file system without flock) it warns and records unguarded.
// Errors: another process holds the lock, or the file cannot be created
// or written; serve refuses to start then, rather than run for hours
// recording nothing.
func openTraceRecorder(path string, log *slog.Logger) (traceRecorder, error) {
	if path == "" {
		return traceRecorder{}, nil
	}
	lock, err := lockTrace(path, log)
	if err != nil {
		return traceRecorder{}, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		lock.Unlock()
		return traceRecorder{}, fmt.Errorf("--record-trace: %w", err)
	}
	rec, err := sim.NewRecorder(f, sim.RecorderOptions{OnError: func(err error) {
		log.Error("trace recording failed; later requests are not recorded", "file", path, "err", err)
	}})
	if err != nil {
		f.Close()
		lock.Unlock()
		return traceRecorder{}, fmt.Errorf("--record-trace %s: %w", path, err)
	}
	log.Info("recording a trace", "file", path)
	return traceRecorder{path: path, f: f, rec: rec, lock: lock}, nil
}

// lockTrace takes the trace file's lock (flock on the file itself;
// takeLock). A path that exists and is not a regular file (a FIFO,
// /dev/stdout: opening one to lock it could block, and two writers there
// truncate nothing) is not locked. The lock returned may be unheld (its
// Unlock then does nothing). Errors: another process holds it.
func lockTrace(path string, log *slog.Logger) (*flock.Flock, error) {
	lock := flock.New(path, flock.SetPermissions(0o644))
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return lock, nil
	}
	if err := takeLock(lock, log, "trace file lock not taken; a second Loadout recording to this file would not be refused"); err != nil {
		return nil, fmt.Errorf("--record-trace %s: another Loadout is recording to this file (it is locked); give each its own file", path)
	}
	return lock, nil
}

// config adds the recorder to the proxy's hooks, after the ones already
// there (the activity log).
func (t traceRecorder) config(c *proxy.Config) {
	if t.rec == nil {
		return
	}
	t.selectors = c.Selectors
	c.OnRequestStart = chain(c.OnRequestStart, t.start)
	c.OnRequest = chain(c.OnRequest, t.end)
}

// model is the model a trace row names for a request that asked for
// name: name, or for a llama-swap selector (which a replay cannot load)
// its first target, until the request's summary says which it picked.
func (t traceRecorder) model(name string) string {
	if sel := t.selectors[name]; sel != nil && len(sel.Models) > 0 {
		return sel.Models[0]
	}
	return name
}

// chain calls first (when set), then then.
func chain[T any](first, then func(T)) func(T) {
	if first == nil {
		return then
	}
	return func(v T) {
		first(v)
		then(v)
	}
}

// start queues a request's row with what its body said: the prompt's
// estimate, and max_tokens as the output's.
func (t traceRecorder) start(s proxy.RequestStart) {
	if !recordedPaths[s.Path] {
		return
	}
	t.rec.Start(s.Seq, s.Time, sim.Request{
		Model: t.model(s.Model), Priority: s.Priority, Client: s.Client,
		PromptTokens: int(s.PromptEstimate), OutputTokens: int(s.MaxTokens),
	})
}

// end settles a request's token counts. A count of 0 is taken as not
// counted (no prompt is empty), except an output of 0 beside a counted
// prompt: an embedding, or an answer that said nothing. What was not
// counted keeps its estimate from start.
func (t traceRecorder) end(s proxy.RequestSummary) {
	prompt, output := -1, -1
	if s.PromptTokens > 0 {
		prompt, output = int(s.PromptTokens), 0
	}
	if s.CompletionTokens > 0 {
		output = int(s.CompletionTokens)
	}
	if t.selectors[s.Model] == nil {
		t.rec.Served(s.Seq, s.Model) // a selector's pick, where it picked
	}
	t.rec.End(s.Seq, s.Time.Add(time.Duration(s.Duration*float64(time.Second))), prompt, output)
}

// close writes the rows still waiting and closes the file; serve calls it
// once the HTTP server has shut down, so nothing served is lost.
func (t traceRecorder) close(log *slog.Logger) {
	if t.rec == nil {
		return
	}
	err := t.rec.Close()
	if cerr := t.f.Close(); err == nil {
		err = cerr
	}
	t.lock.Unlock()
	st := t.rec.Stats()
	if err != nil {
		log.Error("trace recording incomplete", "file", t.path, "rows", st.Rows, "err", err)
		return
	}
	log.Info("trace recorded", "file", t.path, "rows", st.Rows, "estimated", st.Early)
}
